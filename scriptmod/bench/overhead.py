"""Eager per-op overhead: scriptmod vs raw NumPy on a tiny (1, 64) float32 tensor, no grad.

    $ python -m scriptmod.bench.overhead
    op      numpy µs  scriptmod µs  overhead µs
    add         0.50          2.40         1.90
"""
from __future__ import annotations

import timeit
from typing import Any, Callable

import numpy as np


def _best_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """Best-of-``repeat`` mean time per call in µs (the least disturbed run)."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure_overhead(number: int = 20000, repeat: int = 7) -> dict[str, dict[str, float]]:
    """``{op: {"numpy": µs, "scriptmod": µs, "overhead": µs}}`` for ``add`` and ``relu``."""
    import scriptmod as sm
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1, 64)).astype(np.float32) for _ in range(2))
    x, y = sm.from_numpy(a), sm.from_numpy(b)
    pairs = {"add": (lambda: np.add(a, b), lambda: x + y),
             "relu": (lambda: np.maximum(a, 0), lambda: x.relu())}
    out: dict[str, dict[str, float]] = {}
    with sm.no_grad():
        for op, (ref, ours) in pairs.items():
            n, s = _best_us(ref, number, repeat), _best_us(ours, number, repeat)
            out[op] = {"numpy": n, "scriptmod": s, "overhead": s - n}
    return out


def format_table(results: dict[str, dict[str, float]]) -> str:
    lines = [f"{'op':<6}{'numpy µs':>10}{'scriptmod µs':>14}{'overhead µs':>13}"]
    for op, r in results.items():
        lines.append(f"{op:<6}{r['numpy']:>10.2f}{r['scriptmod']:>14.2f}{r['overhead']:>13.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(measure_overhead()))
