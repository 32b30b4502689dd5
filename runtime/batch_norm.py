"""Batch norm over float32 NumPy arrays in two native passes each way (``codegen.batch_norm``),
split over the thread pool by channels: the forward's statistics then the normalization, the
backward's four sums then the input gradient; the per-channel arithmetic between them (on
``C`` values) is NumPy in float64. The kernels ``batch_norm`` and ``batch_norm_backward``
(``runtime.kernels.nn``) call these where ``taken`` holds, their NumPy formulas elsewhere.

    >>> x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    >>> mean, var = stats(x)
    >>> mean.tolist(), var.round(3).tolist()
    ([7.5, 11.5, 15.5], [37.25, 37.25, 37.25])
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

import numpy as np

from scriptmod.codegen.batch_norm import AFFINE, SUMS, render_affine, render_sums
from . import threads as _threads
from .llvm_jit import compile_units

_P = ctypes.c_void_p
SUMS_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, _P, _P, _P, _P)
AFFINE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, _P, _P, _P, _P, _P)
MIN_SIZE = 1 << 12               # smaller tensors stay with NumPy
MIN_ROW = 2                      # and so do tensors of single-element rows, (N, C): NumPy's
                                 # column sums (64 x 512: 161 vs 269 us); rows of 4 (ResNet's
                                 # last stage at 64 x 64) ran 3-4x faster here (bwd 688 -> 149)
MIN_THREAD_SIZE = 1 << 20        # fewer elements than this run on the calling thread: handing
                                 # off to the pool costs ~50-100 us on a 2-vCPU VM; stats of
                                 # 8x64x16x16 took 37 us alone, 124 us on two threads
_UNIT = 64


def data_ptr(a: np.ndarray) -> int:
    """The array's data address (``runtime.native`` has a faster one, but that package
    imports the kernels that import this module)."""
    return a.ctypes.data


@lru_cache(maxsize=None)
def _kernels() -> tuple[Any, Any, tuple]:
    sums, affine = compile_units([("bn sums f32", render_sums, SUMS),
                                  ("bn affine f32", render_affine, AFFINE)])
    return SUMS_TYPE(sums.address), AFFINE_TYPE(affine.address), (sums, affine)


def taken(x: Any, *others: Any) -> bool:
    """Whether these run: ``x`` a float32 NumPy array ``(N, C, *spatial)`` of ``MIN_SIZE``
    elements or more and rows of ``MIN_ROW`` (an ``(N, C)`` input's rows would be single
    elements: NumPy's column sums serve it better), ``others`` (gradients, parameters,
    statistics) float32 NumPy arrays or None."""
    if type(x) is not np.ndarray or x.dtype != np.float32 or x.ndim < 3 or x.size < MIN_SIZE:
        return False
    if x.size < MIN_ROW * x.shape[0] * x.shape[1]:
        return False
    return all(o is None or (type(o) is np.ndarray and o.dtype == np.float32) for o in others)


def _params(x: np.ndarray) -> np.ndarray:
    n, c = x.shape[0], x.shape[1]
    return np.array([n, c, x.size // (n * c)], np.int64)


def _over_channels(x: np.ndarray, fn: Any) -> None:
    """``fn(lo, hi)`` over channel ranges, on the pool for large tensors."""
    c = x.shape[1]

    def run(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT)
    if x.size < MIN_THREAD_SIZE or c < 2:
        run(0, c * _UNIT)
    else:
        _threads.parallel_for(run, c * _UNIT, min_split=0)


def _sums(u: np.ndarray, v: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(C, 4)`` float64: per channel Σa, Σa², and with ``v`` Σv, Σav, where ``a = u - K``;
    and the shifts ``K`` (``codegen.batch_norm``)."""
    fn = _kernels()[0]
    out = np.zeros((u.shape[1], 4), np.float64)
    params = _params(u)
    pu, pv, po, pp = data_ptr(u), (0 if v is None else data_ptr(v)), data_ptr(out), \
        data_ptr(params)
    _over_channels(u, lambda lo, hi: fn(lo, hi, pu, pv or None, po, pp))
    return out, u.reshape(u.shape[0], u.shape[1], -1)[0, :, 0].astype(np.float64)


def _affine(u: np.ndarray, v: np.ndarray | None, coef: np.ndarray) -> np.ndarray:
    """``k1*u + k2*(v - m) + k3`` per channel (``codegen.batch_norm``), ``coef`` ``(C, 4)``."""
    fn = _kernels()[1]
    out = np.empty(u.shape, np.float32)
    coef = np.ascontiguousarray(coef, np.float32)
    params = _params(u)
    ptrs = (data_ptr(u), None if v is None else data_ptr(v), data_ptr(out), data_ptr(params),
            data_ptr(coef))
    _over_channels(u, lambda lo, hi: fn(lo, hi, *ptrs))
    return out


def stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each channel's mean and biased variance (float64) over every dim but 1."""
    x = np.ascontiguousarray(x)
    s, shift = _sums(x, None)
    n = x.size // x.shape[1]
    d = s[:, 0] / n                     # the mean less the shift
    return shift + d, np.maximum(s[:, 1] / n - d * d, 0.0)


def normalize(x: np.ndarray, mean: Any, var: Any, weight: Any, bias: Any,
              eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per channel."""
    x = np.ascontiguousarray(x)
    inv = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
    coef = np.zeros((x.shape[1], 4), np.float64)
    coef[:, 0] = inv if weight is None else inv * weight
    coef[:, 2] = 0.0 if bias is None else bias
    coef[:, 3] = mean
    return _affine(x, None, coef)


def backward(g: np.ndarray, x: np.ndarray, mean: Any, var: Any, weight: Any, eps: float,
             batch_stats: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(grad_input, grad_weight, grad_bias)`` of ``normalize`` at output gradient ``g``.
    ``batch_stats``: the statistics were the batch's (training), so they depend on ``x`` and
    are recomputed here (with ``mean``/``var`` ignored); else ``mean``/``var`` are the
    running ones, constants."""
    g, x = np.ascontiguousarray(g), np.ascontiguousarray(x)
    s, shift = _sums(x, g)                # Σa, Σa², Σg, Σag with a = x - shift
    n = x.size // x.shape[1]
    if batch_stats:
        d = s[:, 0] / n
        mean, var = shift + d, np.maximum(s[:, 1] / n - d * d, 0.0)
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    inv = 1.0 / np.sqrt(var + eps)
    sum_g = s[:, 2]
    sum_gxhat = inv * (s[:, 3] - (mean - shift) * sum_g)
    w = np.ones_like(inv) if weight is None else np.asarray(weight, np.float64)
    coef = np.zeros((x.shape[1], 4), np.float64)
    coef[:, 0] = w * inv
    if batch_stats:
        coef[:, 3] = mean
        coef[:, 1] = -w * inv * inv * sum_gxhat / n
        coef[:, 2] = -w * inv * sum_g / n
        gx = _affine(g, x, coef)
    else:
        gx = _affine(g, None, coef)
    return gx, sum_gxhat.astype(np.float32), sum_g.astype(np.float32)
