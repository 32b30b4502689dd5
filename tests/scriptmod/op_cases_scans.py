"""``op_cases`` rows of scans, statistics and random draws: cumprod/cummax/logcumsumexp,
quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal (imported by
``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

import cmath
from typing import Any

import numpy as np

from op_cases import COMPLEX, FLOATS, REAL, Gen, Sample, along, case


def _with_zeros(g: Gen) -> list[Sample]:
    """``along``'s samples plus rows holding one zero and two zeros (cumprod's gradient)."""
    x = g.arr((3, 5), 0.5, 1.5)
    if x.dtype.kind != "b":
        x[0, 2] = 0
        x[1, 1] = x[1, 3] = 0
    return along(-1.5, 1.5)(g) + [Sample("zeros", (x,), {"dim": 1}, g.grad_of(0))]


def _cumprod_ref(x: np.ndarray, dim: int, dtype: Any = None) -> np.ndarray:
    acc = np.int64 if x.dtype.kind in "biu" else None
    if x.ndim == 0:
        return x.astype(acc or x.dtype)
    return np.cumprod(x, axis=dim, dtype=acc)


case("cumprod", _with_zeros, _cumprod_ref, FLOATS + ("int32", "int64", "bool") + COMPLEX)


def _with_nan(g: Gen) -> list[Sample]:
    """``along``'s samples plus repeated values and NaN (ties and NaN pick their index)."""
    x = g.arr((3, 8), -2, 2)
    if g.floating:
        x = x.astype(np.float64).round().astype(x.dtype)
        x[0, 3] = x[2, 1] = x[2, 5] = np.nan
    return along()(g) + [Sample("ties-nan", (x,), {"dim": 1})]


def _running_ref(greater: bool) -> Any:
    """PyTorch's loop: an element replaces the running value when it is NaN or at least as
    large (small), unless the running value is NaN."""
    def ref(x: np.ndarray, dim: int) -> tuple:
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        rows = np.moveaxis(x, dim, -1).reshape(-1, x.shape[dim])
        values, indices = np.empty_like(rows), np.zeros(rows.shape, np.int64)
        for r, row in enumerate(rows):
            best, at = row[0], 0
            for i, v in enumerate(row):
                if v != v or (best == best and (v >= best if greater else v <= best)):
                    best, at = v, i
                values[r, i], indices[r, i] = best, at
        shape = np.moveaxis(x, dim, -1).shape
        return (np.moveaxis(values.reshape(shape), -1, dim),
                np.moveaxis(indices.reshape(shape), -1, dim))
    return ref


case("cummax", _with_nan, _running_ref(True), REAL)
case("cummin", _with_nan, _running_ref(False), REAL)


def _logcumsumexp_ref(x: np.ndarray, dim: int) -> np.ndarray:
    if x.ndim == 0 or x.size == 0:
        return x.copy()
    if x.dtype.kind != "c":
        return np.logaddexp.accumulate(x, axis=dim)
    return np.apply_along_axis(_complex_scan, dim, x.astype(np.complex128))


def _complex_scan(row: np.ndarray) -> np.ndarray:
    """PyTorch's complex recurrence: the running value plus log1p(exp(next - it)), shifted by
    the one of larger real part (its imaginary part is not wrapped into (-pi, pi])."""
    out, acc = [], row[0]
    for v in row:
        if out:
            big, small = (acc, v) if acc.real >= v.real else (v, acc)
            acc = big + cmath.log(1 + cmath.exp(small - big))
        out.append(acc)
    return np.array(out)


def _logcumsumexp_samples(g: Gen) -> list[Sample]:
    far = g.arr((2, 4), -1, 1)
    if not np.iscomplexobj(far):
        far[0, 0] = -60.0    # exp underflows in float16: the scan must not
    return along(-3, 3)(g) + [Sample("far", (far,), {"dim": 1}, g.grad_of(0))]


case("logcumsumexp", _logcumsumexp_samples, _logcumsumexp_ref, FLOATS + COMPLEX)


def _mode_samples(g: Gen) -> list[Sample]:
    x = g.arr((4, 9), -2, 2)
    if g.floating:
        x = x.astype(np.float64).round().astype(x.dtype)
    gr = g.grad_of(0)   # distinct values only: a tie's mode jumps under a small change
    return [Sample("dim-1", (x,), {}),
            Sample("dim0-keep", (x,), {"dim": 0, "keepdim": True}),
            Sample("3d", (g.arr((2, 3, 4), -1, 1),), {"dim": 1}, gr),
            Sample("0d", (g.arr(()),), {"dim": 0}, gr),
            Sample("noncontig", (g.arr((3, 4), noncontig=True),), {"dim": 1}, gr)]


def _mode_ref(x: np.ndarray, dim: int = -1, keepdim: bool = False) -> tuple:
    """Most frequent value (the smallest of ties), its last index."""
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    rows = np.moveaxis(x, dim, -1).reshape(-1, x.shape[dim])
    values, indices = [], []
    for row in rows:
        vals, counts = np.unique(row, return_counts=True)
        v = vals[np.argmax(counts)]
        values.append(v)
        indices.append(np.nonzero(row == v)[0][-1])
    kept = np.moveaxis(x, dim, -1).shape[:-1]
    v, i = np.array(values, x.dtype).reshape(kept), np.array(indices, np.int64).reshape(kept)
    if keepdim:
        v, i = np.expand_dims(v, dim), np.expand_dims(i, dim)
    return v, i


case("mode", _mode_samples, _mode_ref, REAL)


def _weights(g: Gen) -> list[Sample]:
    w = g.arr((3, 6), 0, 1)
    w[:, 2] = 0
    return [Sample("rows", (w,), {"num_samples": 4, "replacement": True}),
            Sample("rows-unique", (w,), {"num_samples": 5}),
            Sample("vector", (w[0],), {"num_samples": 3})]


def _multinomial_check(s: Sample, got: Any) -> None:
    w = s.inputs[0]
    k = s.attrs["num_samples"]
    assert got.shape == w.shape[:-1] + (k,) and got.dtype == np.int64
    rows = got.reshape(-1, k)
    assert ((rows >= 0) & (rows < w.shape[-1])).all() and not (rows == 2).any()  # weight 0
    if not s.attrs.get("replacement"):
        assert all(len(set(r.tolist())) == k for r in rows), "drew a category twice"


case("multinomial", _weights, None, FLOATS, grad=False, check=_multinomial_check)


def _poisson_check(s: Sample, got: Any) -> None:
    rates = s.inputs[0]
    assert got.shape == rates.shape and got.dtype == rates.dtype
    vals = got.astype(np.float64)
    assert (vals >= 0).all() and (vals == np.round(vals)).all()
    assert (vals[rates.astype(np.float64) == 0] == 0).all()


case("poisson", lambda g: [Sample("rates", (g.arr((4, 5), 0, 6),)),
                           Sample("zero", (np.zeros((3,), g.arr(()).dtype),)),
                           Sample("0d", (g.arr((), 1, 2),))],
     None, FLOATS, grad=False, check=_poisson_check)
