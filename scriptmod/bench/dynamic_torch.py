"""G1's PyTorch columns (``bench.dynamic``): nanoGPT's GPT in PyTorch with the scriptmod
model's weights, generating from the same prompt with the same greedy loop, in a child
process (``python -m scriptmod.bench.dynamic_torch JOB_DIR``) killed after
``--torch-compile-timeout``:

- ``torch_eager``: the median of whole generations under ``torch.no_grad()``;
- ``torch_compile``: ``torch.compile(twin)`` (default mode, automatic dynamic shapes), its
  first whole generation with an empty inductor cache (compiles included, as G1's fused
  column is); the repeat's median is ``torch_compile_repeat_s``.

Each column's tokens are checked against scriptmod eager's (a mismatch is a note, as for
every PyTorch column). Each column is written to the job folder as it completes, so a
timeout keeps what finished.

(Not run as a doctest: it needs torch and a child process that runs for seconds.)
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from scriptmod.bench.child import run_child
from scriptmod.bench.timing import Timing, Variant, time_variants
from scriptmod.bench.torch_ref import weights_of

COLUMNS = ("torch_eager", "torch_compile")


def finish(res: Any, model: Any, prompt: Any, want: Any, steps: int, opts: Any) -> None:
    """Run the child; record its checks, timings and first calls ("n/a" where it failed)."""
    import importlib.util
    for name in COLUMNS:
        res.times[name] = None
    if importlib.util.find_spec("torch") is None:
        res.notes.append("PyTorch is not importable: pip install torch")
        return
    with tempfile.TemporaryDirectory(prefix="scriptmod-torch-g1-") as d:
        job = Path(d)
        weights: dict[str, Any] = weights_of(model)
        np.savez(job / "weights.npz", **weights)
        np.save(job / "prompt.npy", prompt.numpy(force=True))
        np.save(job / "want.npy", want.numpy(force=True))
        (job / "job.json").write_text(json.dumps({
            "n_layer": model.n_layer, "n_head": model.h[0].attn.n_head,
            "block_size": model.block_size, "steps": steps, "budget": opts.budget,
            "repeat": opts.repeat, "min_reps": opts.min_reps, "threads": opts.threads}))
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(job / "ind")}
        result = run_child(["-m", "scriptmod.bench.dynamic_torch", d],
                           opts.torch_compile_timeout_s, env)
        for name in COLUMNS:
            done = job / f"{name}.json"
            if name not in result and done.exists():
                result[name] = json.loads(done.read_text())
    from scriptmod.bench.check import Match
    for name in COLUMNS:
        part = result.get(name)
        if part:
            res.matches[name] = Match(**part["match"])
            res.times[name] = Timing(**part["timing"])
            for key in ("first_s", "repeat_s"):
                if key in part:
                    res.compile[f"{name}_{key}"] = part[key]
    if "error" in result:
        res.notes.append(f"PyTorch: {result['error']}")
    res.notes += [_note(name, result[name]) for name in COLUMNS if result.get(name)]


def _note(name: str, part: dict[str, Any]) -> str:
    """``torch_compile: first generation 41.5 s, repeat 61.2 ms; tokens equal ...``."""
    same = "equal" if part["match"]["ok"] else "DIFFER from"
    return (f"{name}: first generation {part['first_s']:.3g} s, repeat (median) "
            f"{part['repeat_s'] * 1e3:.3g} ms; tokens {same} scriptmod eager's")


def _twin(spec: dict[str, Any], weights: dict[str, np.ndarray]) -> Any:
    """nanoGPT's GPT (inference forward, every position's logits), loaded key for key."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.n_head, self.c_attn, self.c_proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x: Any) -> Any:
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                       for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = CausalSelfAttention(d, heads)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, n_layer: int, heads: int, d: int, block: int, vocab: int) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.h = nn.ModuleList([Block(d, heads) for _ in range(n_layer)])
            self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    vocab, d = weights["wte.weight"].shape
    twin = GPT(spec["n_layer"], spec["n_head"], d, spec["block_size"], vocab)
    twin = twin.to(torch.float64 if weights["wte.weight"].dtype == np.float64 else torch.float32)
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
    return twin.eval()


def _generate(model: Any, idx: Any, steps: int) -> Any:
    import torch
    with torch.no_grad():
        for _ in range(steps):
            logits = model(idx)
            idx = torch.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], 1)
    return idx


def _column(d: Path, name: str, model: Any, prompt: Any, want: np.ndarray,
            spec: dict[str, Any]) -> dict[str, Any]:
    """One column: the first generation (timed), its tokens checked, then the repeats."""
    t0 = time.perf_counter()
    got = _generate(model, prompt, spec["steps"]).numpy()
    first = time.perf_counter() - t0
    wrong = int(np.sum(got != want)) if got.shape == want.shape else -1
    ok = wrong == 0
    match = {"ok": ok, "max_abs_diff": 0.0 if ok else float("inf") if wrong < 0 else wrong,
             "tolerance": 0.0, "detail": "" if ok else f"tokens differ from scriptmod eager's: "
             f"{got.tolist()} vs {want.tolist()}"[:300]}
    t = time_variants({"r": Variant(lambda: _generate(model, prompt, spec["steps"]))},
                      spec["budget"], spec["repeat"], spec["min_reps"])["r"]
    timing = t.as_dict() if name == "torch_eager" else Timing(
        first, first, first, 1, 1, first, first, first, first).as_dict()
    part = {"match": match, "timing": timing, "first_s": first, "repeat_s": t.median_s}
    (d / f"{name}.json").write_text(json.dumps(part))
    return part


def _child_main(job_dir: str) -> dict[str, Any]:
    import torch
    d = Path(job_dir)
    spec = json.loads((d / "job.json").read_text())
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    with np.load(d / "weights.npz") as w:
        twin = _twin(spec, {k: w[k] for k in w.files})
    prompt = torch.from_numpy(np.load(d / "prompt.npy")).long()
    want = np.load(d / "want.npy")
    out = {"torch_eager": _column(d, "torch_eager", twin, prompt, want, spec)}
    out["torch_compile"] = _column(d, "torch_compile", torch.compile(twin), prompt, want, spec)
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(_child_main(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001  (the parent reads the reason)
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
