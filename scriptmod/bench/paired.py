"""``scriptmod bench --paired``: scriptmod's fused variant against PyTorch eager, in one
process, in alternating rounds.

    scriptmod bench --paired --workload T5 --threads 2     # training rows: default T2,T3,T5
    scriptmod bench --paired --workload W5 --json out.json

A shared machine drifts by tens of percent over seconds. ``--compare torch`` measures the
PyTorch columns in a child process after scriptmod's own timings, so the two sides meet
different windows, and a comparison that is close flips between runs. Here both run in
this process: round after round, ``CALLS`` calls of the fused variant, then as many of
PyTorch's eager twin (the same weights and input; for a training row the same step,
``torch.optim.AdamW`` on the twin with its loss, ``torch_train``), and the report gives each
side's median round, the ratio and the rounds scriptmod won. Before timing, one output of
each side (a training row's first loss) is compared, so the two compute the same thing.
Both sides leave threads spinning after their parallel work (PyTorch's OpenMP workers,
OpenBLAS's), which would take a core from the other side's next round; each round therefore
starts after ``GAP_S`` of sleep, longer than either spins.
Exit status: 0, 1 when the two sides' outputs differ, 2 without torch or on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

import scriptmod as sm
from scriptmod.bench import runner, training
from scriptmod.bench.check import compare
from scriptmod.bench.workloads import WORKLOADS

ROUNDS = 12          # alternating rounds per workload (--repeat overrides)
ROUND_S = 0.25       # each round runs about this long on each side (0.02 with --quick)
GAP_S = 0.3          # sleep before each round: the other side's spinning threads go idle
DEFAULT = "T2,T3,T5"


@dataclass
class Paired:
    """One workload's pairing: per-round mean call times (ms), scriptmod's first."""

    workload: str
    calls: int
    scriptmod_ms: list[float]
    torch_ms: list[float]

    @property
    def ratio(self) -> float:
        """torch's median round over scriptmod's: above 1, scriptmod is faster."""
        return float(np.median(self.torch_ms) / np.median(self.scriptmod_ms))

    @property
    def won(self) -> int:
        return sum(s < t for s, t in zip(self.scriptmod_ms, self.torch_ms))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "won": self.won}


def run(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:
        print("scriptmod bench --paired: needs torch (pip install torch)", file=sys.stderr)
        return 2
    chosen = DEFAULT if args.workload == ",".join(WORKLOADS) else args.workload  # the default
    ids = [w.strip().upper() for w in chosen.split(",") if w.strip()]
    bad = [w for w in ids if w not in WORKLOADS or WORKLOADS[w].script]
    if bad or not ids:
        print(f"scriptmod bench --paired: --workload: unknown or scripted {','.join(bad)}; "
              f"expected traced workloads among {','.join(WORKLOADS)}", file=sys.stderr)
        return 2
    if args.threads:
        runner.set_threads(args.threads)
        torch.set_num_threads(args.threads)
    rounds = args.repeat or ROUNDS
    results, ok = [], True
    for wid in ids:
        ours, theirs, same = _sides(wid, args.quick)
        ok &= same
        results.append(pair(wid, ours, theirs, rounds, 0.02 if args.quick else ROUND_S))
    out = sys.stderr if args.json == "-" else sys.stdout
    print(format_table(results), file=out)
    if not ok:
        print("MISMATCH: the two sides' outputs differ (see above)", file=sys.stderr)
    if args.json:
        text = json.dumps([r.as_dict() for r in results], indent=1)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0 if ok else 1


def pair(wid: str, ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int,
         round_s: float) -> Paired:
    """``rounds`` alternating rounds of the same number of calls each (sized from one warm
    call of ``ours`` to last about ``round_s``)."""
    for f in (ours, theirs, ours, theirs):
        f()
    t0 = time.perf_counter()
    ours()
    calls = max(1, int(round_s / max(time.perf_counter() - t0, 1e-6)))
    s, t = [], []
    gap = GAP_S if round_s >= ROUND_S else 0.0
    for _ in range(rounds):
        s.append(_round(ours, calls, gap))
        t.append(_round(theirs, calls, gap))
    return Paired(wid, calls, s, t)


def _round(f: Callable[[], Any], calls: int, gap: float) -> float:
    time.sleep(gap)
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    return (time.perf_counter() - t0) / calls * 1e3


def _sides(wid: str, quick: bool) -> tuple[Callable[[], Any], Callable[[], Any], bool]:
    """(scriptmod's fused call or step, the torch twin's, whether their outputs agree)."""
    import torch

    from scriptmod.bench.torch_ref import build_twin, dims_of, weights_of
    w = WORKLOADS[wid]
    model, x = w.build(quick=quick)
    twin = build_twin(wid, dims_of(wid, model), weights_of(model)).train(w.train)
    tx = torch.from_numpy(x.numpy().copy())
    compiled = runner.compile_model(w, model, x)
    if w.train:
        from scriptmod.bench.torch_train import _with_loss, torch_optimizer, torch_step
        target = training.target_for(model, x, w.loss)
        tt = torch.from_numpy(target.numpy().copy())
        loss_of = _with_loss(twin, w.loss)
        params = list(twin.parameters())
        opt = torch_optimizer(w.optimizer, params)
        with torch.no_grad():
            want = float(loss_of(tx, tt))
        same = bool(np.isclose(float(compiled(x, target).item()), want, rtol=1e-4))
        ours = training.compiled_step(compiled, x, target, w.optimizer)

        def theirs() -> Any:
            return torch_step(w.optimizer, opt, params, loss_of, tx, tt)
        return ours, theirs, same
    def ours_call() -> Any:
        with w.grad_mode():
            return compiled(x)

    def theirs_call() -> Any:
        with torch.set_grad_enabled(w.grad):
            return twin(tx)
    same = compare(ours_call(), theirs_call().detach().numpy().astype(np.float64), "float32").ok
    return ours_call, theirs_call, same


def format_table(results: list[Paired]) -> str:
    lines = [f"{'workload':<8} {'calls':>5}  {'scriptmod fused':>15}  {'torch eager':>11}  "
             f"{'torch/scriptmod':>15}  {'rounds won':>10}"]
    for r in results:
        lines.append(f"{r.workload:<8} {r.calls:>5}  {np.median(r.scriptmod_ms):>12.3f} ms  "
                     f"{np.median(r.torch_ms):>8.3f} ms  {r.ratio:>14.2f}x  "
                     f"{r.won:>4} of {len(r.scriptmod_ms)}")
    lines.append(f"medians of per-round means; rounds alternate scriptmod, torch in one process, "
                 f"each after {GAP_S} s of sleep (training rows: whole steps with AdamW)")
    return "\n".join(lines)
