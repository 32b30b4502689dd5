"""Reference kernels of scans, statistics and random draws: cumprod/cummax/logcumsumexp,
quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal.

Each scan is one NumPy accumulate along the axis, float16/bfloat16 in float32 (``_wide``; the
result is rounded once to the half type); draws come from the device generator of
``runtime.random``."""
from __future__ import annotations

from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.ir.ops.rules import norm_dim
from .. import random as rng
from ..arrays import NP_DTYPE, device_of
from . import kernel


_HALF = {NP_DTYPE[D.float16], NP_DTYPE[D.bfloat16]}


def _wide(x: Any) -> Any:
    """float16/bfloat16 as float32, as PyTorch accumulates them (and NumPy misorders
    bfloat16); other dtypes as they are."""
    return x.astype(np.float32) if x.dtype in _HALF else x


@kernel("cumprod")
def _cumprod(xp: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    x = _wide(x if dtype is None else x.astype(NP_DTYPE[dtype]))
    d = norm_dim(dim, x.ndim, "cumprod")
    acc = np.int64 if x.dtype.kind in "biu" else None
    if x.ndim == 0:
        return x.astype(acc or x.dtype)
    return xp.cumprod(x, axis=d, dtype=acc)


def _running(xp: Any, x: Any, dim: int, name: str, ufunc: Any) -> tuple[Any, Any]:
    """PyTorch's running extreme: an element at least as large (small) as the running value
    replaces it and its index, and so does every NaN, which no number replaces."""
    d = norm_dim(dim, x.ndim, name)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    x = _wide(x)
    values = ufunc.accumulate(x, axis=d)
    taken = (x == values) | (xp.isnan(x) if x.dtype.kind == "f" else False)
    shape = [1] * x.ndim
    shape[d] = x.shape[d]
    pos = xp.arange(x.shape[d], dtype=np.int64).reshape(shape)
    indices = xp.maximum.accumulate(xp.where(taken, pos, 0), axis=d)
    return values, indices


@kernel("cummax")
def _cummax(xp: Any, x: Any, dim: int) -> tuple[Any, Any]:
    return _running(xp, x, dim, "cummax", xp.logical_or if x.dtype == bool else xp.maximum)


@kernel("cummin")
def _cummin(xp: Any, x: Any, dim: int) -> tuple[Any, Any]:
    return _running(xp, x, dim, "cummin", xp.logical_and if x.dtype == bool else xp.minimum)


@kernel("logcumsumexp")
def _logcumsumexp(xp: Any, x: Any, dim: int) -> Any:
    d = norm_dim(dim, x.ndim, "logcumsumexp")
    if x.ndim == 0 or x.size == 0:
        return x.copy()
    x = _wide(x)
    if x.dtype.kind != "c":
        with np.errstate(invalid="ignore"):     # inf - inf inside: the result is right
            return xp.logaddexp.accumulate(x, axis=d)
    rows = xp.moveaxis(x, d, 0)
    out = xp.empty_like(rows)
    out[0] = rows[0]
    with np.errstate(all="ignore"):
        for i in range(1, rows.shape[0]):
            out[i] = _complex_logaddexp(xp, out[i - 1], rows[i])
    return xp.moveaxis(out, 0, d)


def _complex_logaddexp(xp: Any, a: Any, b: Any) -> Any:
    """log(exp(a) + exp(b)) of complex numbers, shifted by the one of larger real part."""
    big = xp.where(a.real >= b.real, a, b)
    small = xp.where(a.real >= b.real, b, a)
    both_inf = xp.isneginf(big.real)          # exp(-inf) + exp(-inf) is 0: log is -inf
    out = big + xp.log1p(xp.exp(small - big))
    return xp.where(both_inf, big, out)


@kernel("mode")
def _mode(xp: Any, x: Any, dim: int = -1, keepdim: bool = False) -> tuple[Any, Any]:
    """Per row: sort (stable, NaN last), find runs of equal values, keep the longest (the
    first, so the smallest value, of equally long ones) and the last index in it."""
    d = norm_dim(dim, x.ndim, "mode")
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    rows = xp.moveaxis(_wide(x), d, -1).reshape(-1, n)
    order = xp.argsort(rows, axis=1, kind="stable")
    s = xp.take_along_axis(rows, order, axis=1)
    pos = xp.broadcast_to(xp.arange(n), s.shape)
    starts = xp.ones(s.shape, dtype=bool)
    starts[:, 1:] = s[:, 1:] != s[:, :-1]
    ends = xp.ones(s.shape, dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = xp.maximum.accumulate(xp.where(starts, pos, 0), axis=1)
    counts = xp.where(ends, pos - first + 1, 0)
    best = xp.argmax(counts, axis=1)[:, None]
    kept = x.shape[:d] + x.shape[d + 1:]
    values = xp.take_along_axis(s, best, axis=1).reshape(kept)
    indices = xp.take_along_axis(order, best, axis=1).reshape(kept).astype(np.int64)
    if keepdim:
        values, indices = xp.expand_dims(values, d), xp.expand_dims(indices, d)
    return values, indices


@kernel("multinomial")
def _multinomial(xp: Any, probs: Any, num_samples: int, replacement: bool = False) -> Any:
    p = _check_weights(xp, probs.astype(np.float64), num_samples, replacement)
    rows = p.reshape(-1, p.shape[-1])
    g = rng.generator(device_of(probs))
    if replacement:
        cdf = xp.cumsum(rows, axis=1)
        cdf /= cdf[:, -1:]
        u = g.random((rows.shape[0], num_samples))
        picks = xp.stack([xp.searchsorted(c, v, side="right") for c, v in zip(cdf, u)])
    else:   # the k largest of p / Exp(1) draws: k draws without replacement
        keys = rows / g.exponential(1.0, rows.shape)
        picks = xp.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    return picks.reshape(p.shape[:-1] + (num_samples,)).astype(np.int64)


def _check_weights(xp: Any, p: Any, num_samples: int, replacement: bool) -> Any:
    """PyTorch's refusals of multinomial's weights and sample count."""
    if p.ndim not in (1, 2):
        raise ArgumentValueError(f"multinomial(): prob_dist must be 1 or 2 dim, got a tensor "
                                 f"of shape {tuple(p.shape)}")
    if num_samples <= 0:
        raise ArgumentValueError(f"multinomial(): cannot sample n_sample <= 0 samples "
                                 f"(got num_samples={num_samples})")
    n = p.shape[-1] if p.ndim else 0
    if not replacement and num_samples > n:
        raise ArgumentValueError(f"multinomial(): cannot sample n_sample > prob_dist.size(-1) "
                                 f"samples without replacement (got num_samples={num_samples} "
                                 f"from {n} categories)")
    if p.size and not (xp.isfinite(p).all() and (p >= 0).all()):
        raise ArgumentValueError("multinomial(): probability tensor contains either `inf`, "
                                 "`nan` or element < 0")
    sums = p.sum(axis=-1)
    if (sums <= 0).any():
        raise ArgumentValueError("multinomial(): invalid multinomial distribution (sum of "
                                 "probabilities <= 0)")
    if not replacement and ((p > 0).sum(axis=-1) < num_samples).any():
        raise ArgumentValueError("multinomial(): invalid multinomial distribution (with "
                                 "replacement=False, not enough non-negative category to "
                                 "sample)")
    return p


@kernel("poisson")
def _poisson(xp: Any, rates: Any) -> Any:
    if rates.size and not (rates >= 0).all():
        raise ArgumentValueError("poisson(): invalid Poisson rate, expected rate to be "
                                 "non-negative")
    counts = rng.generator(device_of(rates)).poisson(rates.astype(np.float64))
    return xp.asarray(counts).astype(rates.dtype)
