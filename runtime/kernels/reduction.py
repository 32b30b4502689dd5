"""Reference kernels of reductions and normalizations along a dim."""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.ir.ops.reduction import check_k
from scriptmod.ir.ops.rules import norm_dim, reduce_dims
from .. import threads
from ..arrays import NP_DTYPE
from . import kernel


def _axes(x: Any, dim: Any) -> tuple[int, ...]:
    axes = reduce_dims({"dim": dim}, x.ndim)   # validates dim; 0-d accepts dim 0 and -1
    return axes if x.ndim else ()


def _np(d: Any) -> Any:
    return None if d is None else NP_DTYPE[d]


def _acc(x: Any, dtype: Any) -> Any:
    """Accumulation dtype: ints and bools sum in int64 unless a dtype is asked for."""
    if dtype is not None:
        return NP_DTYPE[dtype] if NP_DTYPE[dtype].kind != "f" or x.dtype.kind != "f" else None
    return np.int64 if x.dtype.kind in "biu" else None


def _nonempty(x: Any, axes: tuple[int, ...], op: str) -> None:
    if any(x.shape[a] == 0 for a in axes) or (not axes and x.size == 0):
        raise IndexError(f"{op}(): expected a non-empty tensor along the reduced dim(s) "
                         f"{axes}, got shape {tuple(x.shape)}")


@kernel("sum")
def _sum(xp: Any, x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if dtype is not None:
        x = x.astype(NP_DTYPE[dtype] if dtype not in (D.float16, D.bfloat16) else np.float32)
    return xp.sum(x, axis=_axes(x, dim), keepdims=keepdim, dtype=_acc(x, None))


@kernel("prod")
def _prod(xp: Any, x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if dtype is not None:
        x = x.astype(NP_DTYPE[dtype] if dtype not in (D.float16, D.bfloat16) else np.float32)
    return xp.prod(x, axis=_axes(x, dim), keepdims=keepdim, dtype=_acc(x, None))


@kernel("mean")
def _mean(xp: Any, x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if dtype is not None:
        x = x.astype(NP_DTYPE[dtype] if dtype not in (D.float16, D.bfloat16) else np.float32)
    axes = _axes(x, dim)
    inner = _trailing(xp, x, axes)
    if inner:
        flat = np.einsum("ij->i", x.reshape(-1, inner))
        flat /= inner
        kept = tuple(1 if a in axes else n for a, n in enumerate(x.shape))
        return flat.reshape(kept if keepdim else tuple(n for a, n in enumerate(x.shape)
                                                        if a not in axes))
    with np.errstate(all="ignore"), warnings.catch_warnings():   # mean of nothing is nan
        warnings.simplefilter("ignore", RuntimeWarning)
        return xp.mean(x, axis=axes, keepdims=keepdim)


def _trailing(xp: Any, x: Any, axes: tuple[int, ...]) -> int:
    """Elements per row when ``axes`` are the trailing dims of a C-contiguous non-empty
    float32/64 NumPy array with rows short enough for einsum's lane sums; else 0."""
    if xp is not np or x.dtype not in _FLOATS or not x.size or not axes \
            or not x.flags.c_contiguous or sorted(axes) != list(range(x.ndim - len(axes), x.ndim)):
        return 0
    inner = x.size // max(1, int(np.prod(x.shape[:x.ndim - len(axes)])))
    return inner if inner <= _EINSUM_ROW else 0


@kernel("var")
def _var(xp: Any, x: Any, dim: Any = None, keepdim: bool = False, correction: float = 1) -> Any:
    with np.errstate(all="ignore"), warnings.catch_warnings():   # n <= correction: inf/nan
        warnings.simplefilter("ignore", RuntimeWarning)
        return xp.var(x, axis=_axes(x, dim), keepdims=keepdim, ddof=correction)


@kernel("amax")
def _amax(xp: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    axes = _axes(x, dim)
    _nonempty(x, axes, "amax")
    return xp.max(x, axis=axes, keepdims=keepdim)


@kernel("amin")
def _amin(xp: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    axes = _axes(x, dim)
    _nonempty(x, axes, "amin")
    return xp.min(x, axis=axes, keepdims=keepdim)


@kernel("logsumexp")
def _logsumexp(xp: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    axes = _axes(x, dim)
    if x.size == 0:
        with np.errstate(divide="ignore"):   # log(0) = -inf, as in PyTorch
            return xp.log(xp.sum(xp.exp(x), axis=axes, keepdims=keepdim))
    m = xp.max(x, axis=axes, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        out = xp.log(xp.sum(xp.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdim else xp.squeeze(out, axis=axes)


def _arg(xp: Any, x: Any, dim: int, keepdim: bool, fn: str) -> tuple[Any, Any]:
    d = norm_dim(dim, x.ndim, fn)
    xx = x.reshape(1) if x.ndim == 0 else x
    _nonempty(xx, (d,), fn)
    idx = getattr(xp, "arg" + fn)(xx, axis=d)
    idx = xp.expand_dims(idx, d)
    val = xp.take_along_axis(xx, idx, axis=d)
    if not keepdim or x.ndim == 0:
        idx, val = xp.squeeze(idx, axis=d), xp.squeeze(val, axis=d)
    if x.ndim == 0:
        idx, val = idx.reshape(()), val.reshape(())
    return val, idx


kernel("max_dim")(lambda xp, x, dim, keepdim=False: _arg(xp, x, dim, keepdim, "max"))
kernel("min_dim")(lambda xp, x, dim, keepdim=False: _arg(xp, x, dim, keepdim, "min"))


def _argext(xp: Any, x: Any, dim: Any, keepdim: bool, fn: str) -> Any:
    if dim is None:
        _nonempty(x, (), fn)
        flat = getattr(xp, fn)(x.reshape(-1))
        return flat.reshape((1,) * x.ndim) if keepdim else flat
    return _arg(xp, x, dim, keepdim, fn[3:])[1]


kernel("argmax")(lambda xp, x, dim=None, keepdim=False: _argext(xp, x, dim, keepdim, "argmax"))
kernel("argmin")(lambda xp, x, dim=None, keepdim=False: _argext(xp, x, dim, keepdim, "argmin"))
kernel("any")(lambda xp, x, dim=None, keepdim=False: xp.any(x, axis=_axes(x, dim), keepdims=keepdim))
kernel("all")(lambda xp, x, dim=None, keepdim=False: xp.all(x, axis=_axes(x, dim), keepdims=keepdim))


def _cast_for(x: Any, dtype: Any) -> Any:
    if dtype is None:
        return x
    return x.astype(NP_DTYPE[dtype] if dtype not in (D.float16, D.bfloat16) else np.float32)


@kernel("softmax")
def _softmax(xp: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    x = _cast_for(x, dtype)
    d = norm_dim(dim, x.ndim, "softmax")
    if x.ndim == 0:
        return xp.ones_like(x)
    if _rowwise_ok(xp, x, d):
        return _by_rows(x, _softmax_rows)
    m = xp.max(x, axis=d, keepdims=True) if x.size else x
    with np.errstate(all="ignore"):
        e = xp.exp(x - m)
        return e / xp.sum(e, axis=d, keepdims=True)


@kernel("log_softmax")
def _log_softmax(xp: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    x = _cast_for(x, dtype)
    d = norm_dim(dim, x.ndim, "log_softmax")
    if x.ndim == 0:
        return xp.zeros_like(x)
    if _rowwise_ok(xp, x, d):
        return _by_rows(x, _log_softmax_rows)
    m = xp.max(x, axis=d, keepdims=True) if x.size else x
    with np.errstate(all="ignore"):
        s = x - m
        return s - xp.log(xp.sum(xp.exp(s), axis=d, keepdims=True))


# ---- row kernels: a C-contiguous float array reduced along its last dim ----------------------
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_EINSUM_ROW = 1024       # rows up to this long are summed by einsum (SIMD lanes, short chains)
_ROWS_PER_TASK = 1 << 18  # elements below which a row kernel stays on the calling thread


def _rowwise_ok(xp: Any, x: Any, d: int) -> bool:
    """The row path: NumPy, float32/64, C-contiguous, reducing the last dim, non-empty."""
    return xp is np and x.dtype in _FLOATS and d == x.ndim - 1 and x.size > 0 \
        and x.flags.c_contiguous


def _by_rows(x: np.ndarray, rows: Any) -> np.ndarray:
    """``rows(src, dst)`` over the rows of ``x`` into a new C-contiguous array, split into row
    blocks across the kernel threads (NumPy releases the GIL inside its loops)."""
    n = x.shape[-1]
    src, out = x.reshape(-1, n), np.empty_like(x)
    dst = out.reshape(-1, n)
    with np.errstate(all="ignore"):
        threads.parallel_for(lambda lo, hi: rows(src[lo:hi], dst[lo:hi]), src.shape[0],
                             min_split=max(1, _ROWS_PER_TASK // n))
    return out


def _row_sum(e: np.ndarray) -> np.ndarray:
    """Sums of the rows of a 2-D array, shape (rows, 1)."""
    if e.shape[1] <= _EINSUM_ROW:
        return np.einsum("ij->i", e)[:, None]
    return np.add.reduce(e, axis=1, keepdims=True)


def _row_max(x: np.ndarray) -> np.ndarray:
    """Row maxima for softmax. ``fmax`` skips NaN (and is faster than ``maximum``): a row
    holding a NaN still comes out all NaN, through its sum, exactly as with ``max``."""
    return np.fmax.reduce(x, axis=1, keepdims=True)


_EXP_SAFE = 60.0    # |x| <= this: exp(x) is normal and n * exp(x) finite (float32 too)


def _bounded(x: np.ndarray) -> bool:
    """Every element within +-_EXP_SAFE (False for NaN/inf): softmax may skip the row max.
    exp(x) / sum(exp(x)) is then as accurate as the shifted form, more so where x - max
    would round, and two whole-block reductions cost far less than one per row."""
    return bool(x.max() <= _EXP_SAFE and x.min() >= -_EXP_SAFE)


def _softmax_rows(x: np.ndarray, out: np.ndarray) -> None:
    if _bounded(x):
        np.exp(x, out=out)
    else:
        np.subtract(x, _row_max(x), out=out)
        np.exp(out, out=out)
    np.divide(out, _row_sum(out), out=out)


def _log_softmax_rows(x: np.ndarray, out: np.ndarray) -> None:
    # always shifted: x - log(sum(exp(x))) would lose absolute accuracy near 0 for large x
    np.subtract(x, _row_max(x), out=out)
    out -= np.log(_row_sum(np.exp(out)))


@kernel("cumsum")
def _cumsum(xp: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    x = _cast_for(x, dtype)
    d = norm_dim(dim, x.ndim, "cumsum")
    if x.ndim == 0:
        return x.astype(np.int64) if x.dtype.kind in "biu" else x.copy()
    return xp.cumsum(x, axis=d, dtype=np.int64 if x.dtype.kind in "biu" else None)


@kernel("linalg_vector_norm")
def _vector_norm(xp: Any, x: Any, ord: float = 2.0, dim: Any = None, keepdim: bool = False,
                 dtype: Any = None) -> Any:
    x = _cast_for(x, dtype)
    axes = _axes(x, dim)
    p = float(ord)
    if p < 0 or p == math.inf:   # min/max-like: no identity, so no norm of nothing
        _norm_nonempty(x, axes, p, dim)
    with np.errstate(all="ignore"):   # overflow to inf, 0 ** -1 = inf: as in torch
        return _p_norm(xp, x, p, axes, keepdim)


def _p_norm(xp: Any, x: Any, p: float, axes: tuple[int, ...], keepdim: bool) -> Any:
    over = {"axis": axes, "keepdims": keepdim}
    if p == 2 and x.dtype.kind == "f":   # no |x| pass: x * x is |x| ** 2
        if xp is np and len(axes) == x.ndim and x.flags.c_contiguous:
            flat = x.reshape(-1)             # a whole tensor (clip_grad_norm_): BLAS's dot,
            total = np.sqrt(np.dot(flat, flat))   # one pass with no temporary
            return total.reshape((1,) * x.ndim) if keepdim else total
        inner = _trailing(xp, x, axes)
        if inner:                            # short rows: einsum's lane sums, no temporary
            rows = x.reshape(-1, inner)
            total = np.sqrt(np.einsum("ij,ij->i", rows, rows))
            kept = tuple(1 if a in axes else n for a, n in enumerate(x.shape))
            return total.reshape(kept if keepdim else tuple(n for a, n in enumerate(x.shape)
                                                            if a not in axes))
        return xp.sqrt(xp.sum(x * x, **over))
    a = xp.abs(x)
    if p == math.inf:
        return xp.max(a, **over)
    if p == -math.inf:
        return xp.min(a, **over)
    if p == 0:
        return xp.sum(a != 0, **over).astype(a.dtype)
    if p == 1:
        return xp.sum(a, **over)
    if p == 2:
        return xp.sqrt(xp.sum(a * a, **over))
    return xp.sum(a ** p, **over) ** (1.0 / p)


def _norm_nonempty(x: Any, axes: tuple[int, ...], p: float, dim: Any) -> None:
    order = int(p) if p.is_integer() else p
    if dim is None and x.size == 0:
        raise ArgumentValueError(f"linalg.vector_norm cannot compute the {order} norm on an "
                                 f"empty tensor because the operation does not have an identity")
    empty = next((d for d in axes if x.shape[d] == 0), None)
    if empty is not None:
        raise ArgumentValueError(f"linalg.vector_norm cannot compute the {order} norm on the "
                                 f"dimension {empty} because this dimension is empty and the "
                                 f"operation does not have an identity")


def _sort_order(xp: Any, x: Any, d: int, descending: bool) -> Any:
    """Stable sort indices along axis ``d``: NaN is the largest value, and equal values keep
    their order, descending too (a stable sort of the reversed row, read backwards)."""
    key = x.astype(np.float32) if x.dtype in _HALF_KEYS else x   # NumPy misorders bfloat16
    if not descending:
        return xp.argsort(key, axis=d, kind="stable")
    n = x.shape[d]
    back = xp.flip(xp.argsort(xp.flip(key, axis=d), axis=d, kind="stable"), axis=d)
    return (n - 1) - back


_HALF_KEYS = {NP_DTYPE[D.float16], NP_DTYPE[D.bfloat16]}


@kernel("sort")
def _sort(xp: Any, x: Any, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    d = norm_dim(dim, x.ndim, "sort")
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    idx = _sort_order(xp, x, d, descending)
    return xp.take_along_axis(x, idx, axis=d), idx


@kernel("topk")
def _topk(xp: Any, x: Any, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Any, Any]:
    d = norm_dim(dim, x.ndim, "topk")
    check_k(k, x.shape[d] if x.ndim else 1, dim)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    idx = xp.take(_sort_order(xp, x, d, largest), xp.arange(k), axis=d)
    return xp.take_along_axis(x, idx, axis=d), idx
