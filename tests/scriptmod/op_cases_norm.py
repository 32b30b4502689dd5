"""``op_cases`` rows of normalization (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from typing import Any

import numpy as np

from op_cases import Gen, Sample, case


def _bn_backward_samples(g: Gen) -> list[Sample]:
    """Training (batch statistics) and eval (running ones), with and without a weight; the
    (4, 3, 20, 20) ones are large enough for the native float32 passes."""
    c = Gen("float32", 7)
    dt = g.arr(()).dtype
    rm, rv = c.arr((3,), -1, 1).astype(dt), c.arr((3,), 0.5, 2).astype(dt)
    w = g.arr((3,))
    out = []
    for shape in ((2, 3, 5), (4, 3, 20, 20)):
        x, gy = g.arr(shape), g.arr(shape)
        out += [Sample(f"train{len(shape)}d", (gy, x, rm, rv, w, True), {}),
                Sample(f"eval{len(shape)}d", (gy, x, rm, rv, w, False), {"eps": 1e-3}),
                Sample(f"no-weight{len(shape)}d", (gy, x, None, None, None, True), {})]
    return out


def _bn_backward_ref(gy: np.ndarray, x: np.ndarray, rm: Any, rv: Any, w: Any, training: bool,
                     eps: float = 1e-5) -> tuple:
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    batch = training or rm is None
    mean, var = (x.mean(axis=axes), x.var(axis=axes)) if batch else (rm, rv)
    inv = 1 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    gw, gb = (gy * xhat).sum(axis=axes), gy.sum(axis=axes)
    k = (inv if w is None else inv * w).reshape(shape)
    n = x.size // x.shape[1]
    gx = k * (gy - gb.reshape(shape) / n - xhat * gw.reshape(shape) / n) if batch else k * gy
    return gx, gw, gb


case("batch_norm_backward", _bn_backward_samples, _bn_backward_ref, ("float32", "float64"))
