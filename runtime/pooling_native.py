"""Native max and average pooling on the CPU for float32 and float64 NumPy arrays, 1-D to
3-D: windowed pools are ``codegen.conv_direct``'s stencil (a max or a sum over the taps of
a padded, phase-split scratch, vectorized along the output row; a 3-D pool is the 2-D pool
of every depth slice, combined along depth: ``_over_depth``), global pools one vector
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
``max_pool_with_indices`` also returns each window's int64 flat index into its input plane
(torch's CPU rule: the first maximum in row-major order, the last NaN), ``scatter_add``
is the backward of every pool that returns indices: each plane's gradients added at them.

    >>> values, index = max_pool_with_indices(x, 2, (2, 2), (2, 2), (0, 0), (1, 1), True)
    >>> index[0]
    array([[ 8, 10, 12, 13],
           [22, 24, 26, 27],
           [29, 31, 33, 34]])
    >>> scatter_add(np.ones_like(values), index, (5, 7))[0, 4]
    array([0., 1., 0., 1., 0., 1., 1.], dtype=float32)
"""
from __future__ import annotations

import ctypes
import math
from functools import lru_cache, partial
from typing import Any, Sequence

import numpy as np

from scriptmod.codegen.conv_direct import Stencil
from scriptmod.codegen.pooling import (adaptive_max_name, plane_name, render_adaptive_max,
                                       render_plane, render_scatter, scatter_name)
from . import conv_direct as _direct
from . import threads as _threads
from .conv_direct import data_ptr
from .llvm_jit import CompiledKernel, compile_units

PLANE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_void_p)
SCATTER_TYPE = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 4, *[ctypes.c_void_p] * 3)
ADAPTIVE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 4)
_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_UNIT = 64
MIN_THREAD_ELEMENTS = 1 << 18   # inputs smaller than this are pooled on the calling thread


def _spec(mode: str, x: np.ndarray) -> Stencil:
    dtype = _DTYPES[x.dtype]
    return Stencil(mode, dtype, _direct.lanes(dtype))


def _planes(x: Any, n: int, ranks: tuple[int, ...] = (1, 2)) -> np.ndarray | None:
    """``x`` as C-contiguous ``(B, *S)`` planes, or None where the native kernels do not
    take it (not a float32/float64 NumPy array of rank n+1 or n+2, ``n`` not in ``ranks``,
    or empty)."""
    if type(x) is not np.ndarray or x.dtype not in _DTYPES or n not in ranks:
        return None
    if x.ndim not in (n + 1, n + 2) or x.size == 0:
        return None
    return np.ascontiguousarray(x).reshape((math.prod(x.shape[:-n]),) + x.shape[-n:])


def _two(v: Sequence[int], fill: int) -> tuple[int, int]:
    """A 1-D size as the 2-D one of a single row."""
    return (fill, int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))


def _windowed(mode: str, x: Any, n: int, k: Sequence[int], s: Sequence[int],
              p: Sequence[int], d: Sequence[int], ceil_mode: bool,
              aux: Any = None) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The pooled ``x`` and (``argmax``) its indices, or None; ``aux(size, out, lanes,
    dtype)`` makes the kernel's table (``codegen.conv_direct``)."""
    planes = _planes(x, n)
    if planes is None or len(k) != n or min(s) < 1 or min(d) < 1 or min(p) < 0:
        return None
    if planes.shape[-1] + 2 * p[-1] >= _direct.MAX_WIDTH:
        return None                     # the stencil's column masks are int32
    size, k2, s2, p2, d2 = _two(planes.shape[1:], 1), _two(k, 1), _two(s, 1), _two(p, 0), \
        _two(d, 1)
    if min(_direct.out_size(size, k2, s2, p2, d2, bool(ceil_mode))) <= 0:
        return None                     # the reference raises its error
    spec = _direct.stencil(mode, _DTYPES[planes.dtype], k2, s2, d2)
    plan = _direct.plan(planes.shape[0], 1, 1, 1, size, k2, s2, p2, d2, bool(ceil_mode), spec)
    out = np.empty((planes.shape[0], *plan.out), planes.dtype)
    index = np.empty(out.shape, np.int64) if mode == "argmax" else None
    table = None if aux is None else aux(size, plan.out, spec.lanes, planes.dtype)
    _direct.run(spec, plan, planes, index, table, out, planes.size >= MIN_THREAD_ELEMENTS)
    shape = x.shape[:-n] + plan.out[2 - n:]
    return out.reshape(shape), None if index is None else index.reshape(shape)


def max_pool(x: Any, n: int, kernel_size: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int],
             ceil_mode: bool) -> np.ndarray | None:
    """``max_pool{n}d`` of checked arguments (padding at most half the kernel), or None."""
    if n == 3:
        return _over_depth("max", x, kernel_size, stride, padding, dilation, ceil_mode)
    done = _windowed("max", x, n, kernel_size, stride, padding, dilation, ceil_mode)
    return None if done is None else done[0]


def _over_depth(mode: str, x: Any, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                d: Sequence[int], ceil_mode: bool, include_pad: bool = True,
                override: int | None = None) -> np.ndarray | None:
    """A 3-D max (``mode="max"``) or average (``"avg"``) pool as the native 2-D pool of
    every depth slice (for an average: window sums, ``divisor_override=1``), combined along
    depth: each output depth takes the max, or the sum, of the pooled slices its window
    covers (NaN propagates through ``np.maximum``), and an average is divided by torch's
    divisor, the product of the per-dim counts (``_counts``). None where the 2-D pool is
    not taken, or a window has no depth tap inside the input (the reference's case)."""
    if type(x) is not np.ndarray or x.ndim not in (4, 5) or len(k) != 3 or x.size == 0:
        return None
    depth = x.shape[-3]
    od = _direct.out_size((1, depth), (1, int(k[0])), (1, int(s[0])), (0, int(p[0])),
                          (1, int(d[0])), bool(ceil_mode))[1]
    if od <= 0 or min(s) < 1 or min(d) < 1:
        return None
    slices = np.ascontiguousarray(x).reshape((-1,) + x.shape[-2:])
    if mode == "max":
        pooled = max_pool(slices, 2, k[1:], s[1:], p[1:], d[1:], ceil_mode)
    else:
        pooled = avg_pool(slices, 2, k[1:], s[1:], p[1:], ceil_mode, include_pad, 1)
    if pooled is None:
        return None
    pooled = pooled.reshape((-1, depth) + pooled.shape[-2:])
    starts = np.arange(od) * int(s[0]) - int(p[0])
    acc, taps = None, np.zeros(od, np.int64)
    fill = -np.inf if mode == "max" else 0.0
    for j in range(int(k[0])):
        at = starts + j * int(d[0])
        inside = (at >= 0) & (at < depth)
        if not inside.any():
            continue
        taps += inside
        part = pooled[:, np.clip(at, 0, depth - 1)]
        if not inside.all():
            part = np.where(inside[None, :, None, None], part, pooled.dtype.type(fill))
        acc = part if acc is None else (np.maximum(acc, part) if mode == "max" else acc + part)
    if acc is None or not taps.all():
        return None
    if mode == "avg":
        if override:
            acc /= pooled.dtype.type(override)
        else:
            counts = [_counts(size, o, kk, ss, pp, include_pad).astype(pooled.dtype)
                      for size, o, kk, ss, pp in zip((depth,) + x.shape[-2:],
                                                     acc.shape[1:], k, s, p)]
            acc /= counts[0][:, None, None] * counts[1][:, None] * counts[2]
    return acc.reshape(x.shape[:-3] + acc.shape[1:])


def _counts(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """The taps each of ``out`` windows counts along one dim (torch's divisor rule: the
    padding counts with ``count_include_pad``, the part of a ceil-mode window past it
    never)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if not include_pad:
        start, end = np.maximum(start, 0), np.minimum(end, size)
    return end - start


def max_pool_with_indices(x: Any, n: int, kernel_size: Sequence[int], stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int],
                          ceil_mode: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """``max_pool{n}d_with_indices`` of checked arguments: the values and their int64 flat
    indices into each input plane, or None."""
    k, d = _two(kernel_size, 1), _two(dilation, 1)
    if ((k[0] - 1) * d[0] + 1) * (x.shape[-1] if n == 2 else 1) + k[1] * d[1] >= 1 << 31:
        return None                     # the kernel's tap offsets are int32
    tables = partial(_first_taps, s=_two(stride, 1), p=_two(padding, 0), d=d)
    return _windowed("argmax", x, n, kernel_size, stride, padding, dilation, ceil_mode,
                     tables)  # type: ignore[return-value]


def _first_taps(size: tuple[int, int], out: tuple[int, int], lanes: int, dtype: Any,
                s: tuple[int, int], p: tuple[int, int], d: tuple[int, int]) -> np.ndarray:
    """The ``argmax`` stencil's ``aux``: ``(rowbase, rowskip)`` per output row, then
    ``colbase`` and ``colskip`` per output column (whole vectors of them): where each
    window's corner is in the input plane, and how far its first in-bounds tap is from it
    (torch's ``while (start < 0) start += dilation``), rows counted in elements."""
    cols = -(-out[1] // lanes) * lanes
    base, skip = [], []
    for i, count in enumerate((out[0], cols)):
        start = np.arange(count, dtype=np.int64) * s[i] - p[i]
        base.append(start)
        skip.append(-(np.minimum(start, 0) // d[i]) * d[i])
    rows = np.stack([base[0] * size[1], skip[0] * size[1]], axis=1).reshape(-1)
    return np.concatenate([rows, base[1], skip[1]])


def avg_pool(x: Any, n: int, kernel_size: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
             divisor_override: int | None) -> np.ndarray | None:
    """``avg_pool{n}d`` of checked arguments, or None."""
    if n == 3:
        return _over_depth("avg", x, kernel_size, stride, padding, (1, 1, 1), ceil_mode,
                           bool(count_include_pad), divisor_override)
    k, s, p = _two(kernel_size, 1), _two(stride, 1), _two(padding, 0)
    divisors = partial(_divisors, k=k, s=s, p=p, include_pad=bool(count_include_pad),
                       override=divisor_override)
    done = _windowed("avg", x, n, kernel_size, stride, padding, (1,) * n, ceil_mode, divisors)
    return None if done is None else done[0]


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
    rows, columns = (_counts(size[i], out[i], k[i], s[i], p[i], include_pad).astype(dtype)
                     for i in range(2))
    return np.concatenate([rows, columns, np.ones(cols - out[1], dtype)])


def adaptive_avg_pool(x: Any, n: int, output_size: Sequence[int]) -> np.ndarray | None:
    """``adaptive_avg_pool{n}d`` where every output size divides its input size (torch's
    windows are then a stride-``in/out`` tiling; one output per plane is a plane mean),
    or None (other sizes, and an output as large as the input: the reference's copy)."""
    planes = _planes(x, n, (1, 2, 3))
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


@lru_cache(maxsize=None)
def scatter_kernel(dtype: str) -> tuple[Any, CompiledKernel]:
    """The compiled scatter-add for ``dtype``: its ctypes function and the kernel."""
    k, = compile_units([(f"scatter_add\0{dtype}", partial(render_scatter, dtype),
                         scatter_name(dtype))])
    return SCATTER_TYPE(k.address), k


def scatter_add(g: Any, index: Any, size: Sequence[int]) -> np.ndarray | None:
    """``(B, *size)``: zeros with each plane ``g[b]`` added at its flat indices
    ``index[b]`` into ``size`` (the backward of max pooling: overlapping windows add up);
    None unless ``g`` is a float32/float64 and ``index`` an int64 NumPy array, both
    ``(B, ...)`` of one shape. An index outside the plane is skipped (as torch's
    backward: only a window with no tap inside the input has one)."""
    if type(g) is not np.ndarray or g.dtype not in _DTYPES or type(index) is not np.ndarray \
            or index.dtype != np.int64 or index.shape != g.shape or g.ndim < 1:
        return None
    b, numel = g.shape[0], math.prod(size)
    per = g.size // b if b else 0
    out = np.empty((b, numel), g.dtype)
    if out.size == 0:
        return out.reshape((b, *size))
    src, idx = np.ascontiguousarray(g), np.ascontiguousarray(index)
    fn = scatter_kernel(_DTYPES[g.dtype])[0]
    pointers = (data_ptr(src), data_ptr(idx), data_ptr(out))

    def chunk(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, per, numel, *pointers)
    if out.size + g.size < MIN_THREAD_ELEMENTS or b < 2:
        chunk(0, b * _UNIT)
    else:
        _threads.parallel_for(chunk, b * _UNIT, min_split=0)
    return out.reshape((b, *size))


@lru_cache(maxsize=None)
def adaptive_max_kernel(dtype: str) -> tuple[Any, CompiledKernel]:
    """The compiled adaptive max pool for ``dtype``: its ctypes function and the kernel."""
    k, = compile_units([(f"adaptive_max\0{dtype}", partial(render_adaptive_max, dtype),
                         adaptive_max_name(dtype))])
    return ADAPTIVE_TYPE(k.address), k


def adaptive_max_pool(x: Any, n: int,
                      output_size: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """``adaptive_max_pool{n}d``: the max of each window ``[floor(o * in / out),
    ceil((o + 1) * in / out))`` and its int64 flat index into the input plane, or None
    (another dtype or rank, an empty input or output)."""
    planes = _planes(x, n)
    if planes is None or len(output_size) != n or min(output_size) <= 0:
        return None
    size, out_hw = _two(planes.shape[1:], 1), _two(output_size, 1)
    bounds = []
    for s, o in zip(size, out_hw):
        i = np.arange(o, dtype=np.int64)
        bounds.append(np.concatenate([i * s // o, -(-(i + 1) * s // o)]))
    params = np.concatenate([np.array([*size, *out_hw], np.int64), *bounds])
    b = planes.shape[0]
    values = np.empty((b, *out_hw), planes.dtype)
    index = np.empty((b, *out_hw), np.int64)
    fn = adaptive_max_kernel(_DTYPES[planes.dtype])[0]
    pointers = (data_ptr(params), data_ptr(planes), data_ptr(values), data_ptr(index))

    def chunk(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, *pointers)
    if planes.size < MIN_THREAD_ELEMENTS or b < 2:
        chunk(0, b * _UNIT)
    else:
        _threads.parallel_for(chunk, b * _UNIT, min_split=0)
    shape = x.shape[:-n] + tuple(output_size)
    return values.reshape(shape), index.reshape(shape)
