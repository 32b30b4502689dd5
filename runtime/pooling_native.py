"""Native max and average pooling on the CPU for float32 and float64 NumPy arrays, 1-D and
2-D: windowed pools are ``codegen.conv_direct``'s stencil (a max or a sum over the taps of
a padded, phase-split scratch, vectorized along the output row), global pools one vector
reduction per plane (``codegen.pooling``). The reference kernels (``runtime.kernels.
pooling``) check the arguments and call these; each returns None where it does not take
the arrays (another dtype or rank, an empty input, a non-divisible adaptive pool), and the
reference computes them.

    >>> x = np.arange(2 * 5 * 7, dtype=np.float32).reshape(2, 5, 7)
    >>> max_pool(x, 2, (2, 2), (2, 2), (1, 1), (1, 1), False)
    array([[[ 0.,  2.,  4.,  6.],
            [14., 16., 18., 20.],
            [28., 30., 32., 34.]],
    <BLANKLINE>
           [[35., 37., 39., 41.],
            [49., 51., 53., 55.],
            [63., 65., 67., 69.]]], dtype=float32)
    >>> adaptive_avg_pool(x, 2, (1, 1))[:, 0, 0]
    array([17., 52.], dtype=float32)

NaN propagates through max pooling as in torch (a window with a NaN gives NaN).
"""
from __future__ import annotations

import ctypes
import math
from functools import lru_cache, partial
from typing import Any, Sequence

import numpy as np

from scriptmod.codegen.conv_direct import Stencil
from scriptmod.codegen.pooling import plane_name, render_plane
from . import conv_direct as _direct
from . import threads as _threads
from .conv_direct import data_ptr
from .llvm_jit import CompiledKernel, compile_units

PLANE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_void_p)
_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_UNIT = 64
MIN_THREAD_ELEMENTS = 1 << 18   # inputs smaller than this are pooled on the calling thread


def _spec(mode: str, x: np.ndarray) -> Stencil:
    dtype = _DTYPES[x.dtype]
    return Stencil(mode, dtype, _direct.lanes(dtype))


def _planes(x: Any, n: int) -> np.ndarray | None:
    """``x`` as C-contiguous ``(B, *S)`` planes, or None where the native kernels do not
    take it (not a float32/float64 NumPy array of rank n+1 or n+2, n > 2, or empty)."""
    if type(x) is not np.ndarray or x.dtype not in _DTYPES or n not in (1, 2):
        return None
    if x.ndim not in (n + 1, n + 2) or x.size == 0:
        return None
    return np.ascontiguousarray(x).reshape((math.prod(x.shape[:-n]),) + x.shape[-n:])


def _two(v: Sequence[int], fill: int) -> tuple[int, int]:
    """A 1-D size as the 2-D one of a single row."""
    return (fill, int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))


def _windowed(mode: str, x: Any, n: int, k: Sequence[int], s: Sequence[int],
              p: Sequence[int], d: Sequence[int], ceil_mode: bool,
              divisors: Any = None) -> np.ndarray | None:
    planes = _planes(x, n)
    if planes is None or len(k) != n or min(s) < 1 or min(d) < 1 or min(p) < 0:
        return None
    size, k2, s2, p2, d2 = _two(planes.shape[1:], 1), _two(k, 1), _two(s, 1), _two(p, 0), \
        _two(d, 1)
    if min(_direct.out_size(size, k2, s2, p2, d2, bool(ceil_mode))) <= 0:
        return None                     # the reference raises its error
    spec = _direct.stencil(mode, _DTYPES[planes.dtype], k2, s2, d2)
    plan = _direct.plan(planes.shape[0], 1, 1, 1, size, k2, s2, p2, d2, bool(ceil_mode), spec)
    out = np.empty((planes.shape[0], *plan.out), planes.dtype)
    aux = None if divisors is None else divisors(size, plan.out, spec.lanes, planes.dtype)
    _direct.run(spec, plan, planes, None, aux, out, planes.size >= MIN_THREAD_ELEMENTS)
    return out.reshape(x.shape[:-n] + plan.out[2 - n:])


def max_pool(x: Any, n: int, kernel_size: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int],
             ceil_mode: bool) -> np.ndarray | None:
    """``max_pool{n}d`` of checked arguments (padding at most half the kernel), or None."""
    return _windowed("max", x, n, kernel_size, stride, padding, dilation, ceil_mode)


def avg_pool(x: Any, n: int, kernel_size: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
             divisor_override: int | None) -> np.ndarray | None:
    """``avg_pool{n}d`` of checked arguments, or None."""
    k, s, p = _two(kernel_size, 1), _two(stride, 1), _two(padding, 0)
    divisors = partial(_divisors, k=k, s=s, p=p, include_pad=bool(count_include_pad),
                       override=divisor_override)
    return _windowed("avg", x, n, kernel_size, stride, padding, (1,) * n, ceil_mode, divisors)


def _divisors(size: tuple[int, int], out: tuple[int, int], lanes: int, dtype: Any,
              k: tuple[int, int], s: tuple[int, int], p: tuple[int, int], include_pad: bool,
              override: int | None) -> np.ndarray:
    """The stencil's ``aux`` for an average: a factor per output row, then one per output
    column (padded to whole vectors with ones); each window's divisor is their product, the
    taps it counts (torch's rule: the padding counts with ``count_include_pad``, the part
    of a ceil-mode window past it never), or ``divisor_override``."""
    cols = -(-out[1] // lanes) * lanes
    if override:
        return np.concatenate([np.full(out[0], override, dtype), np.ones(cols, dtype)])
    factors = []
    for i in range(2):
        start = np.arange(out[i]) * s[i] - p[i]
        end = np.minimum(start + k[i], size[i] + p[i])
        if not include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size[i])
        factors.append((end - start).astype(dtype))
    return np.concatenate([factors[0], factors[1], np.ones(cols - out[1], dtype)])


def adaptive_avg_pool(x: Any, n: int, output_size: Sequence[int]) -> np.ndarray | None:
    """``adaptive_avg_pool{n}d`` where every output size divides its input size (torch's
    windows are then a stride-``in/out`` tiling; one output per plane is a plane mean),
    or None (other sizes, and an output as large as the input: the reference's copy)."""
    planes = _planes(x, n)
    if planes is None or len(output_size) != n:
        return None
    sizes = planes.shape[1:]
    if tuple(output_size) == sizes or any(o <= 0 or s % o for s, o in zip(sizes, output_size)):
        return None
    if all(o == 1 for o in output_size):
        out = plane_reduce("mean", planes)
        return out.reshape(x.shape[:-n] + (1,) * n)
    k = tuple(s // o for s, o in zip(sizes, output_size))
    return avg_pool(x, n, k, k, (0,) * n, False, True, None)


@lru_cache(maxsize=None)
def plane_kernel(spec: Stencil) -> tuple[Any, CompiledKernel]:
    """The compiled plane reduction for ``spec``: its ctypes function and the kernel."""
    k, = compile_units([(f"plane\0{spec!r}", partial(render_plane, spec), plane_name(spec))])
    return PLANE_TYPE(k.address), k


def plane_reduce(mode: str, planes: np.ndarray) -> np.ndarray:
    """The mean (``mode="mean"``) or NaN-propagating max of each C-contiguous plane
    ``planes[b]``, shape ``(B,)``."""
    fn = plane_kernel(_spec(mode, planes))[0]
    b, per = planes.shape[0], math.prod(planes.shape[1:])
    out = np.empty(b, planes.dtype)
    src, dst = data_ptr(planes), data_ptr(out)

    def chunk(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, per, src, dst)
    if planes.size < MIN_THREAD_ELEMENTS or b < 2:
        chunk(0, b * _UNIT)
    else:
        _threads.parallel_for(chunk, b * _UNIT, min_split=0)
    return out
