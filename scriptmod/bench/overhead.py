"""Eager per-op overhead: scriptmod vs raw NumPy on a tiny (1, 64) float32 tensor, no grad.

NumPy and scriptmod are timed in alternation, round after round, and each keeps its best
round, so that load from other processes inflates both alike rather than one of them.

    $ python -m scriptmod.bench.overhead
    op      numpy µs  scriptmod µs  overhead µs
    add         0.30          1.90         1.60
"""
from __future__ import annotations

import timeit
from typing import Any, Callable

import numpy as np

Pair = tuple[Callable[[], Any], Callable[[], Any]]


def _pairs() -> dict[str, Pair]:
    import scriptmod as sm
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1, 64)).astype(np.float32) for _ in range(2))
    x, y = sm.from_numpy(a), sm.from_numpy(b)
    return {"add": (lambda: np.add(a, b), lambda: x + y),
            "relu": (lambda: np.maximum(a, 0), lambda: x.relu())}


def measure_overhead(number: int = 5000, rounds: int = 20) -> dict[str, dict[str, float]]:
    """``{op: {"numpy": µs, "scriptmod": µs, "overhead": µs}}`` for ``add`` and ``relu``."""
    import scriptmod as sm
    pairs = _pairs()
    best = {op: [float("inf"), float("inf")] for op in pairs}
    with sm.no_grad():
        for _ in range(rounds):
            for op, fns in pairs.items():
                for k, fn in enumerate(fns):
                    t = timeit.timeit(fn, number=number) / number * 1e6
                    best[op][k] = min(best[op][k], t)
    return {op: {"numpy": n, "scriptmod": s, "overhead": s - n} for op, (n, s) in best.items()}


def format_table(results: dict[str, dict[str, float]]) -> str:
    lines = [f"{'op':<6}{'numpy µs':>10}{'scriptmod µs':>14}{'overhead µs':>13}"]
    for op, r in results.items():
        lines.append(f"{op:<6}{r['numpy']:>10.2f}{r['scriptmod']:>14.2f}{r['overhead']:>13.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(measure_overhead()))
