"""``op_cases`` rows of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders).

The references are plain loops (``scatter``) or NumPy's own functions, in float64."""
from __future__ import annotations

from typing import Any

import numpy as np

from op_cases import ALL, COMPLEX, FLOATS, INTS, REAL, Gen, Sample, case


# ---- scatter ---------------------------------------------------------------------------
def _scatter_samples(g: Gen) -> list[Sample]:
    x, i = g.arr((3, 4)), np.array([[0, 2, 2, 1], [2, 0, 0, 0]])   # duplicates in each column
    src = g.arr((2, 4), lo=0.5, hi=2.0)
    unique = np.array([[1, 0, 2, 1], [2, 1, 0, 0]])
    out = [Sample("none", (x, unique, src), {"dim": 0}, g.grad_of(0, 2)),
           Sample("none-dim-1-dup", (x, np.array([[3, 3], [0, 1], [2, 2]]), g.arr((3, 2))),
                  {"dim": -1}),
           Sample("sum-dup", (x, i, src), {"dim": 0, "reduce": "sum"}, g.grad_of(0, 2)),
           Sample("sum-excl", (x, i, src), {"dim": 0, "reduce": "sum", "include_self": False},
                  g.grad_of(0, 2)),
           Sample("sum-larger-src", (x, i[:, :3], g.arr((3, 4))), {"dim": 0, "reduce": "sum"},
                  g.grad_of(0, 2)),
           Sample("0d", (g.arr(()), np.array(0), g.arr(())), {"dim": 0, "reduce": "sum"},
                  g.grad_of(0, 2)),
           Sample("empty-index", (x, np.zeros((0, 4), np.int64), g.arr((0, 4))),
                  {"dim": 0, "reduce": "sum"}),
           Sample("noncontig", (g.arr((3, 4), noncontig=True), unique, src), {"dim": 0},
                  g.grad_of(0, 2))]
    if g.dtype in COMPLEX:
        return out
    for reduce in ("prod", "amax", "amin") + (("mean",) if g.dtype != "bool" else ()):
        for incl in (True, False):
            out.append(Sample(f"{reduce}-{int(incl)}", (x, i, src),
                              {"dim": 0, "reduce": reduce, "include_self": incl},
                              g.grad_of(0, 2)))
    return out


_INITIAL = {"sum": 0, "mean": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}
_COMBINE = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.fmax,
            "amin": np.fmin}


def _scatter_ref(x: np.ndarray, index: np.ndarray, src: np.ndarray, dim: int,
                 reduce: str = "none", include_self: bool = True) -> np.ndarray:
    out = x.reshape(x.shape or (1,)).copy()
    index, src = index.reshape(index.shape or (1,)), src.reshape(src.shape or (1,))
    d = dim % out.ndim
    if reduce == "none":
        for pos in np.ndindex(index.shape):
            out[pos[:d] + (index[pos],) + pos[d + 1:]] = src[pos]
        return out.reshape(x.shape)
    values: dict[tuple, list] = {}
    for pos in np.ndindex(index.shape):
        values.setdefault(pos[:d] + (int(index[pos]),) + pos[d + 1:], []).append(src[pos])
    for target, vals in values.items():
        acc = out[target] if include_self else None
        for v in vals:
            acc = v if acc is None else _COMBINE[reduce](acc, v)
        if reduce == "mean":
            n = len(vals) + include_self
            acc = acc // n if out.dtype.kind in "iu" else acc / n
        out[target] = acc
    return out.reshape(x.shape)


case("scatter", _scatter_samples, _scatter_ref, ALL)


# ---- searchsorted ------------------------------------------------------------------------
def _searchsorted_samples(g: Gen) -> list[Sample]:
    seq, rows = np.sort(g.arr((6,), -3, 3)), np.sort(g.arr((2, 5), -3, 3), axis=-1)
    vals = g.arr((2, 3), -3, 3)
    order = np.argsort(g.arr((6,), -3, 3), kind="stable")
    return [Sample("1d", (seq, vals, None), {}),
            Sample("right-ties", (seq, seq[[0, 2, 5]], None), {"right": True}),
            Sample("left-ties", (seq, seq[[0, 2, 5]], None), {}),
            Sample("batched", (rows, vals, None), {"out_int32": True}),
            Sample("scalar", (seq, g.scalar(-3, 3), None), {}),
            Sample("sorter", (seq[np.argsort(order)], vals, order), {}),
            Sample("empty", (seq, g.arr((0,)), None), {})]


def _searchsorted_ref(seq: np.ndarray, values: Any, sorter: Any = None, right: bool = False,
                      out_int32: bool = False) -> np.ndarray:
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter, axis=-1)
    side = "right" if right else "left"
    values = np.asarray(values)
    if seq.ndim == 1:
        return np.searchsorted(seq, values, side=side)
    return np.stack([np.searchsorted(r, v, side=side) for r, v in zip(seq, values)])


case("searchsorted", _searchsorted_samples, _searchsorted_ref, FLOATS + INTS, grad=False)


# ---- isin ----------------------------------------------------------------------------------
def _isin_samples(g: Gen) -> list[Sample]:
    x = g.arr((3, 4), -3, 3)
    return [Sample("some", (x, x.reshape(-1)[[0, 5, 7]]), {}),
            Sample("invert", (x, g.arr((5,), -3, 3)), {"invert": True}),
            Sample("scalar-test", (x, x.reshape(-1)[3].item()), {}),
            Sample("scalar-elements", (x.reshape(-1)[1].item(), x), {}),
            Sample("empty", (g.arr((0, 2)), x), {})]


case("isin", _isin_samples,
     lambda e, t, assume_unique=False, invert=False: np.isin(e, t, invert=invert),
     REAL, grad=False)


# ---- histc / histogram ---------------------------------------------------------------------
def _histc_samples(g: Gen) -> list[Sample]:
    x = g.arr((4, 5), -2.1, 2.1)
    return [Sample("range", (x,), {"bins": 6, "min": -2.0, "max": 2.0}),
            Sample("data-range", (x,), {"bins": 5}),
            Sample("constant", (np.full((3,), 1.5, x.dtype),), {"bins": 4}),
            Sample("empty", (g.arr((0,)),), {"bins": 3})]


def _histc_ref(x: np.ndarray, bins: int = 100, min: float = 0.0, max: float = 0.0) -> np.ndarray:
    x = x.reshape(-1)
    lo, hi = (min, max) if min != max or not x.size else (x.min(), x.max())
    lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
    inside = x[(x >= lo) & (x <= hi)]
    return np.histogram(inside, bins=bins, range=(lo, hi))[0].astype(np.float64)


case("histc", _histc_samples, _histc_ref, FLOATS, grad=False)


def _histogram_samples(g: Gen) -> list[Sample]:
    x = g.arr((4, 5), -2.1, 2.1)
    edges = np.array([-2.0, -0.5, 0.0, 1.0, 2.5], x.dtype)
    return [Sample("bins", (x, None, None), {"bins": 4}),
            Sample("range-weight", (x, g.arr((4, 5), 0, 1), None),
                   {"bins": 3, "range": [-1.0, 1.0]}),
            Sample("edges-density", (x, None, edges), {"density": True}),
            Sample("weight-density", (x, g.arr((4, 5), 0, 1), None),
                   {"bins": 5, "density": True})]


def _histogram_ref(x: np.ndarray, weight: Any = None, edges: Any = None, bins: int = 100,
                   range: Any = None, density: bool = False) -> tuple:
    lo_hi = None if range is None else tuple(range)
    hist, e = np.histogram(x.reshape(-1), bins=edges if edges is not None else bins,
                           range=lo_hi, density=density,
                           weights=None if weight is None else weight.reshape(-1))
    return hist.astype(np.float64), e


case("histogram", _histogram_samples, _histogram_ref, ("float32", "float64"), grad=False)


# ---- nonzero_static --------------------------------------------------------------------------
def _nonzero_static_samples(g: Gen) -> list[Sample]:
    x = g.arr((3, 4), -1, 1)
    x.reshape(-1)[[1, 5, 6]] = 0
    return [Sample("pad", (x,), {"size": 14}),
            Sample("cut", (x,), {"size": 2, "fill_value": 7}),
            Sample("0d", (g.arr(()),), {"size": 2}),
            Sample("empty", (g.arr((0, 2)),), {"size": 1})]


def _nonzero_static_ref(x: np.ndarray, size: int, fill_value: int = -1) -> np.ndarray:
    found = np.argwhere(x)[:size]
    pad = np.full((size - len(found), x.ndim), fill_value)
    return np.concatenate([found, pad]).astype(np.int64)


case("nonzero_static", _nonzero_static_samples, _nonzero_static_ref, ALL, grad=False)
