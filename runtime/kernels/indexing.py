"""Reference kernels of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique.

``scatter`` turns every element of ``index`` into the flat position it addresses in the
output and applies one unbuffered ufunc (``np.add.at``, ``np.maximum.at``, ...) over those
positions: duplicates combine in order, as PyTorch's CPU loops do, and on one flat axis
NumPy's ``ufunc.at`` is a vectorized loop (about 2 ns an element).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from scriptmod.ir.errors import ArgumentValueError, DTypeError, KernelDTypeError, ShapeError
from .. import arrays
from ..arrays import from_np_dtype
from . import kernel

_UFUNCS = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}


def check_index(index: Any, size: int, dim: int, negative: bool = False) -> None:
    """PyTorch's bounds check of an index along a dim of ``size`` (``negative``: -size..-1
    count from the end)."""
    if not index.size:
        return
    lo, hi = int(index.min()), int(index.max())
    if hi >= size or lo < (-size if negative else 0):
        bad = hi if hi >= size else lo
        raise ShapeError(f"index {bad} is out of bounds for dimension {dim} with size {size}")


def scatter_targets(xp: Any, shape: tuple, index: Any, dim: int) -> Any:
    """The flat position in an array of ``shape`` that each element of ``index`` addresses
    along ``dim`` (the other coordinates are the element's own), in ``index``'s order."""
    strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
    flat = index.astype(np.int64) * int(strides[dim])
    for k, n in enumerate(index.shape):
        if k != dim and n > 1:
            view = [1] * index.ndim
            view[k] = n
            flat = flat + (xp.arange(n, dtype=np.int64) * int(strides[k])).reshape(view)
    return xp.broadcast_to(flat, index.shape).reshape(-1)


def _identity(reduce: str, dtype: np.dtype) -> Any:
    """The value a position starts from when ``include_self=False``."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = True if dtype == bool else np.iinfo(dtype).max if dtype.kind in "iu" else np.inf
    small = False if dtype == bool else np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf
    return small if reduce == "amax" else big


def _check_scatter(x: Any, index: Any, src: Any, dim: int) -> int:
    """PyTorch's checks of a scatter's operands; returns ``dim`` made non-negative."""
    rank = max(x.ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, "
                         f"{rank - 1}], but got {dim})")
    if index.dtype.kind not in "iu":
        raise DTypeError("scatter(): Expected dtype int32/int64 for index")
    if max(index.ndim, 1) != rank:
        raise ShapeError("Index tensor must have the same number of dimensions as self tensor")
    if src.dtype != x.dtype:
        raise DTypeError("scatter(): Expected self.dtype to be equal to src.dtype")
    d = dim % rank
    shape, ishape, sshape = (tuple(a.shape) or (1,) for a in (x, index, src))
    if index.size and any(ishape[k] > sshape[k] or k != d and ishape[k] > shape[k]
                          for k in range(rank)):
        raise ShapeError(f"Expected index {list(ishape)} to be no larger than self "
                         f"{list(shape)} apart from dimension {d} and to be no larger size "
                         f"than src {list(sshape)}")
    check_index(index, shape[d], d)
    return d


@kernel("scatter")
def _scatter(xp: Any, x: Any, index: Any, src: Any, dim: int, reduce: str = "none",
             include_self: bool = True) -> Any:
    d = _check_scatter(x, index, src, dim)
    out = x.copy(order="C")          # flat positions below are row-major
    if not index.size:
        return out
    index, src = index.reshape(index.shape or (1,)), src.reshape(src.shape or (1,))
    src = src[tuple(slice(0, n) for n in index.shape)].reshape(-1)
    flat = out.reshape(-1)          # a view of ``out`` (a fresh contiguous copy)
    at = scatter_targets(xp, x.shape or (1,), index, d)
    if reduce == "none":
        flat[at] = src
        return out
    if reduce == "mean" and x.dtype == bool or reduce in ("amax", "amin") and x.dtype.kind == "c":
        raise KernelDTypeError(f'"scatter_gather_tensor_cpu_reduce_{reduce}" not implemented '
                               f"for '{_short(x.dtype)}'")
    if not include_self:
        flat[at] = _identity(reduce, x.dtype)
    _reduce_at(xp, _UFUNCS[reduce], flat, at, src)
    if reduce == "mean":
        count = xp.bincount(at, minlength=flat.size)[at] + (1 if include_self else 0)
        total = flat[at]
        flat[at] = total // count if x.dtype.kind in "iu" else total / count
    return out


def _reduce_at(xp: Any, ufunc: str, flat: Any, at: Any, src: Any) -> None:
    """``flat[at[k]] = ufunc(flat[at[k]], src[k])`` for every k in order, in place. CuPy's
    ``ufunc.at`` covers add/maximum/minimum; the others run on the host and copy back."""
    fn = getattr(xp, ufunc)
    if xp is not np and not hasattr(fn, "at"):
        host = arrays.to_device(flat, "cpu")
        _reduce_at(np, ufunc, host, arrays.to_device(at, "cpu"), arrays.to_device(src, "cpu"))
        flat[...] = xp.asarray(host)
        return
    with np.errstate(invalid="ignore"):       # NaN wins amax/amin, as in PyTorch
        fn.at(flat, at, src)


def _rows(a: Any) -> Any:
    """``a`` as a stack of rows (one row for a 1-d or 0-d array)."""
    if a.ndim < 2:
        return a.reshape(1, a.size)
    return a.reshape(int(np.prod(a.shape[:-1])), a.shape[-1])


@kernel("searchsorted")
def _searchsorted(xp: Any, seq: Any, values: Any, sorter: Any = None, right: bool = False,
                  out_int32: bool = False) -> Any:
    side = "right" if right else "left"
    values = xp.asarray(values)
    if seq.ndim > 1 and seq.shape[:-1] != values.shape[:-1]:
        raise ShapeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or "
                         f"the first N-1 dimensions of boundaries tensor and input value "
                         f"tensor must match, but we got boundaries tensor "
                         f"{list(seq.shape)} and input value tensor {list(values.shape)}")
    if sorter is not None:
        if sorter.shape != seq.shape:
            raise ShapeError("torch.searchsorted(): boundary and sorter must have the same "
                             "size, but got boundary tensor " f"{list(seq.shape)} and got "
                             f"sorter tensor {list(sorter.shape)}")
        check_index(sorter, seq.shape[-1] if seq.ndim else 1, seq.ndim - 1)
        seq = xp.take_along_axis(seq, sorter.astype(np.int64), axis=-1)
    dtype = np.int32 if out_int32 else np.int64
    if seq.ndim <= 1 and not (seq.dtype.kind in "fc" and xp.isnan(seq).any()):
        found = xp.searchsorted(seq.reshape(-1), values.reshape(-1), side=side)  # same answers
    else:
        found = _bisect(xp, _rows(seq), _rows(values) if seq.ndim > 1 else values.reshape(1, -1),
                        right)
    return found.reshape(values.shape).astype(dtype)


def _bisect(xp: Any, rows: Any, vals: Any, right: bool) -> Any:
    """PyTorch's binary search (``cus_lower_bound``/``cus_upper_bound``) for every value at
    once, one vectorized step per halving: a value moves past ``mid`` unless
    ``rows[mid] >= v`` (``> v`` with ``right``), so NaNs compare exactly as in PyTorch."""
    n = rows.shape[1]
    lo = xp.zeros(vals.shape, dtype=np.int64)
    if n == 0:
        return lo
    hi = xp.full(vals.shape, n, dtype=np.int64)
    for _ in range(n.bit_length()):
        mid = (lo + hi) >> 1
        at = xp.take_along_axis(rows, xp.minimum(mid, n - 1), axis=1)
        stop = (at > vals) if right else (at >= vals)
        active = lo < hi
        lo = xp.where(active & ~stop, mid + 1, lo)
        hi = xp.where(active & stop, mid, hi)
    return lo


@kernel("isin")
def _isin(xp: Any, elements: Any, test: Any, assume_unique: bool = False,
          invert: bool = False) -> Any:
    elements, test = xp.asarray(elements), xp.asarray(test)
    return xp.isin(elements, test, assume_unique=assume_unique, invert=invert)


def _short(dtype: np.dtype) -> str:
    """PyTorch's name of a dtype in kernel messages ('Long', 'ComplexFloat')."""
    return from_np_dtype(dtype).short


def _float_only(x: Any, op: str) -> None:
    if x.dtype.kind not in "f" and x.dtype.name != "bfloat16":
        raise KernelDTypeError(f"\"{op}\" not implemented for '{_short(x.dtype)}'")


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def histc_range(x: Any, lo: float, hi: float) -> tuple[float, float]:
    """``histc``'s interval: ``[lo, hi]``, or the data's own when both are equal, widened by
    one around a constant."""
    if lo == hi and x.size:
        lo, hi = float(x.min()), float(x.max())
    if lo > hi:
        raise ArgumentValueError("torch.histc: max must be larger than min")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ArgumentValueError(f"torch.histc: range of [{_fmt(lo)}, {_fmt(hi)}] is not finite")
    return (lo - 1, hi + 1) if lo == hi else (lo, hi)


def histogram_range(x: Any, bounds: Any, dim: int = 0) -> tuple[float, float]:
    """``histogram``'s interval (NumPy's): ``bounds``, or the data's minimum and maximum
    ([0, 1] for no data), widened by a half around a constant."""
    if bounds is None:
        lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 1.0)
    else:
        lo, hi = (float(b) for b in bounds)
        if lo > hi:
            raise ArgumentValueError(f"torch.histogramdd: min should not exceed max, but got "
                                     f"min {_fmt(lo)} max {_fmt(hi)} for dimension {dim}")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ArgumentValueError(f"torch.histogramdd: dimension {dim}'s range [{_fmt(lo)}, "
                                 f"{_fmt(hi)}] is not finite")
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)


def _check_bins(bins: int) -> None:
    if bins <= 0:
        raise ArgumentValueError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                                 f"dimension 0")


def bin_counts(xp: Any, x: Any, edges: Any, weight: Any) -> Any:
    """Counts (or summed weights) of ``x`` in the bins between the sorted ``edges``; the last
    bin includes its right edge, values outside (and NaN) fall nowhere."""
    n = edges.shape[0] - 1
    x = x.reshape(-1)
    pos = xp.searchsorted(edges, x, side="right") - 1
    pos = xp.where(x == edges[-1], n - 1, pos)
    keep = (pos >= 0) & (pos < n) & (x <= edges[-1])
    w = None if weight is None else weight.reshape(-1)[keep].astype(np.float64)
    return xp.bincount(pos[keep], weights=w, minlength=max(n, 0))[:max(n, 0)]


@kernel("histc")
def _histc(xp: Any, x: Any, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Any:
    """PyTorch's linear bin placement: ``int((x - lo) * bins / (hi - lo))`` in the input's
    precision (float32 for half types), ``hi`` itself in the last bin."""
    _float_only(x, "histogram_cpu")
    _check_bins(bins)
    ft = np.float64 if x.dtype == np.float64 else np.float32
    v = x.reshape(-1).astype(ft)
    lo, hi = (ft(e) for e in histc_range(v, float(min), float(max)))
    keep = (v >= lo) & (v <= hi)
    pos = ((v[keep] - lo) * ft(bins) / (hi - lo)).astype(np.int64)
    pos = xp.minimum(pos, bins - 1)
    return xp.bincount(pos, minlength=bins).astype(x.dtype)


@kernel("histogram")
def _histogram(xp: Any, x: Any, weight: Any = None, edges: Any = None, bins: int = 100,
               range: Any = None, density: bool = False) -> tuple:
    if x.dtype not in (np.float32, np.float64):        # PyTorch's histogram: no half kernels
        raise KernelDTypeError(f"\"histogramdd\" not implemented for '{_short(x.dtype)}'")
    if weight is not None and weight.shape != x.shape:
        raise ShapeError("torch.histogram(): if weight tensor is provided it should have the "
                         "same shape as the input tensor")
    if edges is None:
        _check_bins(bins)
        lo, hi = histogram_range(x, range)
        edges = xp.linspace(lo, hi, bins + 1).astype(x.dtype)
    counts = bin_counts(xp, x, edges, weight)
    if density:
        total = counts.sum()
        counts = counts / (total * xp.diff(edges.astype(np.float64)))
    return counts.astype(x.dtype), edges.astype(x.dtype)


@kernel("nonzero_static")
def _nonzero_static(xp: Any, x: Any, size: int, fill_value: int = -1) -> Any:
    if size < 0:
        raise ArgumentValueError(f"nonzero_static: 'size' must be an non-negative integer, "
                                 f"but got {size}")
    found = xp.argwhere(x)[:size]
    out = xp.full((size, x.ndim), fill_value, dtype=np.int64)
    out[:found.shape[0]] = found
    return out
