"""Rows where a dim other than the batch varies (issue 37's benchmark): ``G1``, greedy
generation with a nanoGPT-shaped model, and ``W5T``, W5 traced at one sequence length and
called at others. The JSON and the notes count the specializations: since issue 37 a length
after the second compiles nothing (automatic dynamic shapes: one symbolic specialization).

- ``G1``: ``NanoGPT`` (karpathy's nanoGPT ``GPT`` in scriptmod's nn: token and position
  embeddings, pre-LN blocks of causal self-attention and a GELU MLP, final LayerNorm, an
  untied ``lm_head``; 4 layers, 4 heads, 128 wide, block size 128, vocab 65), prompt of
  8 tokens, 40 tokens generated greedily with the issue's loop (``generate``). Columns:
  eager (median of whole generations), fused = the whole first generation of a module
  traced once on the prompt, in this process with an empty kernel cache (trace and every
  specialization's compile included: what a user waits for); the compile cells are that
  generation cold and again with a new trace and the kernels on disk (warm). The repeat
  (every length already specialized) and the specialization count are in the JSON
  (``compile``) and the notes. Check: the traced tokens equal eager's. With
  ``--compare torch``: the same weights in PyTorch, eager and ``torch.compile`` (automatic
  dynamic shapes; its column is its first whole generation, compile included), in a child
  process (``bench.dynamic_torch``) under ``--torch-compile-timeout``.
- ``W5T``: W5 traced at T = 128, called at T = 64 and T = 200 (quick: 16, then 8 and 24);
  per length the one-trace module's median against a module traced at that length, the
  first call (an empty kernel cache: a new length's compile is cold), whether the length
  specialized anew, and the check against eager.

    >>> model, prompt = DYNAMIC["G1"].build(quick=True)
    >>> tuple(prompt.shape), model.n_layer
    ((1, 8), 2)
    >>> tuple(generate(model, prompt, 2).shape)
    (1, 10)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.bench.check import Match, compare, host64
from scriptmod.bench.timing import Timing, Variant, time_once, time_variants
from scriptmod.bench.workloads import WORKLOADS, Workload

PROMPT = 8
VOCAB = 65
NEW_TOKENS = (40, 4)               # full, quick
W5T_LENGTHS = ((128, 64, 200), (16, 8, 24))   # (traced at, called at...): full, quick


class CausalSelfAttention(nn.Module):
    """nanoGPT's: one ``c_attn`` Linear to q, k, v, heads split, causal SDPA, ``c_proj``."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.n_head = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class GPTBlock(nn.Module):
    """nanoGPT's ``Block``: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))`` (GELU, 4x)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """nanoGPT's ``GPT`` (inference): ``wte(idx) + wpe(arange(T))``, the blocks, ``ln_f``,
    ``lm_head`` over every position (the logits of shape (B, T, vocab))."""

    def __init__(self, n_layer: int = 4, n_head: int = 4, n_embd: int = 128,
                 block_size: int = 128, vocab: int = VOCAB) -> None:
        super().__init__()
        self.n_layer, self.block_size = n_layer, block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([GPTBlock(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: sm.Tensor) -> sm.Tensor:
        pos = sm.arange(0, idx.size(1), dtype=sm.int64, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def generate(model: Callable[[sm.Tensor], sm.Tensor], idx: sm.Tensor, steps: int) -> sm.Tensor:
    """The issue's greedy loop: ``steps`` times, append the argmax of the last position."""
    with sm.no_grad():
        for _ in range(steps):
            logits = model(idx)
            idx = sm.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], 1)
    return idx


class _PromptWorkload(Workload):
    """G1's workload: its input is a prompt of token ids, not random normals."""

    def build(self, quick: bool = False, seed: int = 0, batch: int | None = None,
              dtype: sm.dtype = sm.float32) -> tuple[nn.Module, sm.Tensor]:
        sm.manual_seed(seed)
        model = self.make(quick).train(False).to(dtype)
        return model, sm.randint(0, VOCAB, (batch or 1, PROMPT))


def specializations(traced: Any) -> int:
    """How many specializations the traced module's forward has built so far."""
    return int(traced.executor("forward").stats["specializations"])


def _single(seconds: float) -> Timing:
    """One sample as a ``Timing`` (a whole generation that includes compiles runs once)."""
    return Timing(seconds, seconds, seconds, 1, 1, seconds, seconds, seconds, seconds)


def _tokens_match(got: sm.Tensor, want: sm.Tensor) -> Match:
    a, b = got.numpy(force=True), want.numpy(force=True)
    if a.shape != b.shape:
        return Match(False, float("inf"), 0.0, f"token shape {a.shape}, eager's {b.shape}")
    wrong = int(np.sum(a != b))
    detail = f"{wrong} token(s) differ from eager's: {a.tolist()} vs {b.tolist()}"
    return Match(wrong == 0, float(wrong), 0.0, "" if wrong == 0 else detail[:300])


def _first_generation(model: nn.Module, prompt: sm.Tensor,
                      steps: int) -> tuple[float, Any, sm.Tensor]:
    """Trace on the prompt, then generate (what a user waits for): seconds, the traced
    module and its tokens."""
    from scriptmod.bench.runner import trace_model
    out: list[Any] = []

    def run() -> None:
        tr = trace_model(model, prompt)
        out[:] = [tr, generate(tr, prompt, steps)]

    seconds = time_once(run)
    return seconds, out[0], out[1]


def measure_g1(res: Any, model: nn.Module, prompt: sm.Tensor, opts: Any,
               stage: Callable[[str], None]) -> None:
    """G1 (see the module docstring); mismatches are recorded, never raised."""
    from scriptmod.bench.runner import _forget_kernels, fresh_kernel_cache
    steps = NEW_TOKENS[1] if opts.quick else NEW_TOKENS[0]
    if prompt.is_floating_point():       # --batch N: the runner drew normals; N prompts
        sm.manual_seed(1)
        prompt = sm.randint(0, VOCAB, (prompt.shape[0], PROMPT))
    stage("eager")
    want = generate(model, prompt, steps)
    stage("traced")
    first = {}
    with fresh_kernel_cache():
        first["cold"], _, _ = _first_generation(model, prompt, steps)
        _forget_kernels()
        first["warm"], tr, got = _first_generation(model, prompt, steps)
    res.matches["fused"] = _tokens_match(got, want)
    n = specializations(tr)
    stage("time")
    res.times.update(time_variants({"eager": Variant(lambda: generate(model, prompt, steps))},
                                   opts.budget, opts.repeat, opts.min_reps))
    repeat = time_variants({"r": Variant(lambda: generate(tr, prompt, steps))}, opts.budget,
                           opts.repeat, opts.min_reps)["r"]
    res.times["fused"] = _single(first["cold"])
    res.compile = {"compiler": "jit.trace", "cold_s": first["cold"], "warm_s": first["warm"],
                   "specializations": n, "calls": steps, "new_tokens": steps,
                   "repeat_s": repeat.median_s if repeat else None}
    res.notes.append(f"traced generation: {n} specialization(s) for {steps} calls (prompt "
                     f"{PROMPT}, {steps} new tokens); first generation {first['cold']:.3g} s "
                     f"cold, {first['warm']:.3g} s warm (kernels on disk); repeat with every "
                     f"length specialized {repeat.median_s if repeat else float('nan'):.3g} s; "
                     f"tokens {'equal' if res.matches['fused'].ok else 'DIFFER from'} eager's")
    if opts.compare_torch:
        from scriptmod.bench import dynamic_torch
        stage("torch")
        dynamic_torch.finish(res, model, prompt, want, steps, opts)


def measure_w5t(res: Any, model: nn.Module, x: sm.Tensor, opts: Any,
                stage: Callable[[str], None]) -> None:
    """W5T (see the module docstring): per length, the one-trace module against a module
    traced at that length; the last length's medians are the row's eager and fused."""
    from scriptmod.bench.runner import fresh_kernel_cache, trace_model
    base, *others = W5T_LENGTHS[1] if opts.quick else W5T_LENGTHS[0]
    b, _, d = x.shape
    sm.manual_seed(1)
    xs = {t: sm.randn(b, t, d, dtype=x.dtype) for t in (base, *others)}
    with sm.no_grad(), fresh_kernel_cache():     # each first call compiles cold
        stage("trace")
        one = trace_model(model, xs[base])
        lengths: dict[str, Any] = {}
        for t in (base, *others):
            stage(f"T={t}")
            lengths[str(t)] = _one_length(res, model, one, xs[t], t, opts)
    res.compile = {"compiler": "jit.trace", "traced_at": base, "lengths": lengths,
                   "specializations": specializations(one)}
    for length, r in lengths.items():
        res.notes.append(
            f"T={length}: one trace {_ms(r['one_trace_s'])}, traced at T={length} "
            f"{_ms(r['own_trace_s'])}"
            f" ({r['ratio']:.2f}x; target <= 1.15x), first call {_ms(r['first_call_s'])}, "
            f"new specialization: {'yes' if r['new_specialization'] else 'no'} "
            f"({r['specializations']} in all), {'matches' if r['ok'] else 'DIFFERS from'} eager")


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3g} ms"


def _one_length(res: Any, model: nn.Module, one: Any, x: sm.Tensor, t: int,
                opts: Any) -> dict[str, Any]:
    """One length of W5T: check, first call and medians of the one-trace module and of a
    module traced at ``t``; the check becomes ``res.matches[f"T{t}"]``."""
    from scriptmod.bench.runner import trace_model
    before = specializations(one)
    first = time_once(lambda: one(x))
    ref = host64(model(x))
    m = res.matches[f"T{t}"] = compare(one(x), ref, res.dtype)
    own = trace_model(model, x)
    own(x)
    times = time_variants({"eager": Variant(lambda: model(x)), "fused": Variant(lambda: one(x)),
                           "own": Variant(lambda: own(x))}, opts.budget, opts.repeat,
                          opts.min_reps)
    res.times.update({k: times[k] for k in ("eager", "fused")})
    one_s, own_s = (times[k].median_s if times[k] else None for k in ("fused", "own"))
    return {"ok": m.ok, "first_call_s": first, "one_trace_s": one_s, "own_trace_s": own_s,
            "ratio": one_s / own_s if one_s and own_s else math.nan,
            "new_specialization": specializations(one) > before,
            "specializations": specializations(one)}


_W5 = WORKLOADS["W5"]
DYNAMIC: dict[str, Workload] = {
    "G1": _PromptWorkload(
        "G1", "nanoGPT generate", lambda q: NanoGPT(n_layer=2 if q else 4), (1, PROMPT),
        (1, PROMPT), "none", "nanoGPT-shaped (4 layers, 4 heads, 128 wide, block 128, vocab "
        "65), prompt 8, 40 tokens greedy, whole generation; traced once on the prompt",
        measure=measure_g1),
    "W5T": Workload(
        "W5T", "W5 at T=64/128/200", _W5.make, _W5.shape, _W5.quick_shape, "none",
        "W5 traced at T=128, called at T=64 and T=200, against a trace at each length",
        measure=measure_w5t),
}
"""The rows that run only when ``--workload`` names them (each runs its own measurement,
``Workload.measure``)."""
