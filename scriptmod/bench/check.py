"""Checking a compiled (or reference) result against eager scriptmod's, within the dtype's
tolerance: one output (``compare``), or a training step's loss and gradients
(``compare_all``).

    >>> compare(np.ones(3), np.ones(3), "float32").ok
    True
    >>> m = compare_all({"loss": np.ones(()), "grad w": np.zeros(2)},
    ...                 {"loss": np.ones(()), "grad w": np.full(2, 1e-3)}, "float32")
    >>> m.ok, m.detail
    (False, 'grad w: max abs diff 0.001 > 1e-07')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import scriptmod as sm

TOLERANCE = {"float32": 1e-4, "float64": 1e-9}   # max |got - eager| / max(1, max |eager|)


@dataclass(frozen=True)
class Match:
    """How a compiled (or reference) output compares with eager scriptmod's."""

    ok: bool
    max_abs_diff: float
    tolerance: float
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "max_abs_diff": self.max_abs_diff, "tolerance": self.tolerance,
                "detail": self.detail}


def host64(x: Any) -> np.ndarray:
    """A float64 NumPy copy of a scriptmod/torch tensor or array (for comparisons)."""
    if isinstance(x, (tuple, list)):
        x = x[0]
    if isinstance(x, sm.Tensor):
        x = x.numpy(force=True)
    elif hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):
        x = x.get()
    return np.asarray(x, dtype=np.float64)


def compare(got: Any, ref: np.ndarray, dtype: str, scale: float | None = None) -> Match:
    """``got`` within ``TOLERANCE[dtype] * scale`` of ``ref`` everywhere; ``scale`` is
    ``max(1, max|ref|)`` unless given."""
    tol = TOLERANCE.get(dtype, 1e-4)
    g = host64(got)
    if g.shape != ref.shape:
        return Match(False, float("inf"), tol, f"shape {g.shape} != eager {ref.shape}")
    if not np.array_equal(np.isfinite(g), np.isfinite(ref)):
        return Match(False, float("inf"), tol, "non-finite values differ from eager")
    fin = np.isfinite(ref)
    err = float(np.abs(g[fin] - ref[fin]).max()) if fin.any() else 0.0
    if scale is None:
        scale = max(1.0, float(np.abs(ref[fin]).max())) if fin.any() else 1.0
    ok = err <= tol * scale
    return Match(ok, err, tol * scale, "" if ok else f"max abs diff {err:.3g} > {tol * scale:.3g}")


def compare_all(got: Mapping[str, Any], ref: Mapping[str, np.ndarray | None],
                dtype: str) -> Match:
    """Every entry of ``ref`` (a training step's ``"loss"`` and ``"grad NAME"`` arrays)
    against ``got``'s: the loss as ``compare`` does, a gradient relative to its own largest
    magnitude (an MSE-mean gradient is far below 1, where ``compare``'s ``max(1, ...)``
    would accept anything). The first failure, named, or the closest call when all pass."""
    worst: Match | None = None
    for name, r in ref.items():
        g = got.get(name)
        if (g is None) != (r is None):
            return Match(False, float("inf"), 0.0, f"{name}: " + (
                "no gradient" if g is None else "a gradient where eager has none"))
        if g is None or r is None:
            continue
        scale = None if name == "loss" else _magnitude(r)
        m = compare(g, r, dtype, scale)
        if not m.ok:
            return Match(False, m.max_abs_diff, m.tolerance, f"{name}: {m.detail}")
        if worst is None or m.max_abs_diff * worst.tolerance > worst.max_abs_diff * m.tolerance:
            worst = m
    return worst or Match(True, 0.0, 0.0)


def _magnitude(ref: np.ndarray) -> float:
    fin = ref[np.isfinite(ref)]
    peak = float(np.abs(fin).max()) if fin.size else 0.0
    return peak if peak > 0 else 1.0
