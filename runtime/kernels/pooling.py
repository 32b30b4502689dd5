"""Reference kernels of pooling over the last n = 1, 2, 3 dims.

Every kernel works on ``(B, *S)``: the input's batch dims flattened into one. With NumPy
arrays, the forward max (with or without indices), average, adaptive max and (divisible)
adaptive average pools of float32/float64 1-D and 2-D inputs, the backward of max pooling
and the scatter-add of every pool with indices run natively (``runtime.pooling_native``)
once the arguments are checked. Windowed pools read a strided view ``(B, *O, *K)`` of the
padded input (``windows``, no copy of the windows); adaptive and fractional max pools gather
their windows by index. Max pools with indices pick the first largest value of each window
(NaN counts as largest: the native kernels, as PyTorch's CPU kernels, take a window's last
NaN, the reference its first), and return flat indices into ``S``; the backward of all of
them is one scatter-add (``_scatter_planes``), which ``max_unpool`` shares.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scriptmod.ir.errors import ArgumentValueError, ShapeError
from . import kernel
from .. import pooling_native as native
from .conv import col2im as conv_col2im, windows as conv_windows

Sizes = Sequence[int]


def _planes(x: Any, n: int, name: str) -> Any:
    """``x`` as ``(B, *S)``; the input must be ``(C, *S)`` or ``(N, C, *S)``."""
    if x.ndim not in (n + 1, n + 2):
        raise ShapeError(f"{name}: expected a {n + 1}-D or {n + 2}-D input, got shape "
                         f"{tuple(x.shape)}")
    return x.reshape((math.prod(x.shape[:-n]),) + tuple(x.shape[-n:]))   # B may be 0


def _lowest(dt: Any) -> Any:
    """The padding value of max pooling: -inf, or the smallest int (bfloat16 has kind 'V')."""
    return np.iinfo(dt).min if dt.kind in "iu" else -np.inf


def _compute(x: Any) -> Any:
    """float16/bfloat16 averaged in float32 (``_finish`` rounds the result back)."""
    return x.astype(np.float32) if x.dtype.itemsize == 2 and x.dtype.kind in "fV" else x


def windows(xp: Any, x: Any, k: Sizes, s: Sizes, p: Sizes, d: Sizes, ceil: bool = False,
            fill: float = 0.0) -> Any:
    """Strided view ``(B, *O, *K)`` of ``x`` ``(B, *S)`` padded with ``fill`` (convolution's
    window view, one lead dim)."""
    return conv_windows(xp, x, k, s, p, d, ceil, fill)[0]


def col2im(xp: Any, cols: Any, size: Sizes, k: Sizes, s: Sizes, p: Sizes, d: Sizes) -> Any:
    """Adjoint of ``windows``: add ``(B, *O, *K)`` back onto ``(B, *size)``, tap by tap,
    straight into a contiguous result (never into the padding)."""
    return conv_col2im(xp, cols, (cols.shape[0], *size), k, s, p, d)


def _max_of(xp: Any, win: Any, positions: Sequence[Any], size: Sizes) -> tuple[Any, Any]:
    """Max of each window of ``win`` ``(B, *O, *L)`` and its flat index into ``size``:
    ``positions[i]`` ``(1 or B, O_i, L_i)`` is where along dim i each window's taps read."""
    n = len(positions)
    b, outs = win.shape[0], win.shape[1:1 + n]
    flat = win.reshape(b, *outs, math.prod(win.shape[1 + n:]))
    arg = flat.argmax(axis=-1)
    values = xp.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    taps = xp.unravel_index(arg, win.shape[1 + n:])
    index = xp.zeros(arg.shape, dtype=np.int64)
    for i in range(n):
        pos = positions[i]
        plane = xp.arange(pos.shape[0]).reshape((-1,) + (1,) * n) if pos.shape[0] != 1 else 0
        o = xp.arange(outs[i]).reshape((1,) + tuple(-1 if j == i else 1 for j in range(n)))
        index = index * size[i] + pos[plane, o, taps[i]]
    return values, index


def _gather_windows(xp: Any, x: Any, positions: Sequence[Any]) -> Any:
    """``(B, *O, *L)``: ``x[b, positions[0][b, o_0, l_0], ..., positions[n-1][b, ...]]``."""
    n = len(positions)
    rank = 1 + 2 * n
    index: list[Any] = [xp.arange(x.shape[0]).reshape((-1,) + (1,) * (rank - 1))]
    for i, pos in enumerate(positions):
        shape = [pos.shape[0]] + [1] * (rank - 1)
        shape[1 + i], shape[1 + n + i] = pos.shape[1], pos.shape[2]
        index.append(pos.reshape(shape))
    return x[tuple(index)]


def _scatter_planes(xp: Any, values: Any, index: Any, size: Sizes, add: bool) -> Any:
    """``(B, *size)`` zeros with each plane's ``values`` added (or written) at its flat
    ``index``: the backward of max pooling, and ``max_unpool``."""
    b, numel = values.shape[0], math.prod(size)
    flat = index.reshape(b, math.prod(index.shape[1:]))
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= numel):
        bad = int(flat.min()) if int(flat.min()) < 0 else int(flat.max())
        raise ArgumentValueError(f"max_unpool: Found an invalid max index: {bad} (output "
                                 f"volumes are of size {'x'.join(map(str, size))})")
    rows = xp.arange(b)[:, None]
    if add:
        summed = xp.bincount((rows * numel + flat).reshape(-1), weights=values.reshape(-1),
                             minlength=b * numel)
        return summed.astype(values.dtype, copy=False).reshape((b, *size))
    out = xp.zeros((b, numel), dtype=values.dtype)
    out[rows, flat] = values.reshape(flat.shape)
    return out.reshape((b, *size))


def _dims(given: Sizes, n: int, fill: int) -> tuple[int, ...]:
    """An optional size attribute (padding, dilation): as given, or ``fill`` in each dim."""
    return tuple(given) if given else (fill,) * n


# ---- windowed max and average pools --------------------------------------------------
def _check_padding(name: str, k: Sizes, p: Sizes, d: Sizes) -> None:
    if any(2 * p[i] > k[i] for i in range(len(k))):
        raise ShapeError(f"{name}: pad should be at most half of effective kernel size, got "
                         f"padding={tuple(p)} and kernel_size={tuple(k)}")


def max_pool_with_indices(xp: Any, x: Any, n: int, k: Sizes, s: Sizes, p: Sizes, d: Sizes,
                          ceil: bool, name: str) -> tuple[Any, Any]:
    """Max and its flat index of every window, each shaped as the pooled input."""
    planes = _planes(x, n, name)
    _check_padding(name, k, p, d)
    fast = native.max_pool_with_indices(x, n, k, s, p, d, ceil) if xp is np else None
    if fast is not None:
        return fast
    win = windows(xp, planes, k, s, p, d, ceil, _lowest(x.dtype))
    positions = [(xp.arange(win.shape[1 + i])[:, None] * s[i] - p[i]
                  + xp.arange(k[i])[None, :] * d[i])[None] for i in range(n)]
    values, index = _max_of(xp, win, positions, planes.shape[1:])
    lead = x.shape[:-n]
    return values.reshape(lead + values.shape[1:]), index.reshape(lead + index.shape[1:])


def _max_pool(n: int) -> Any:
    def run(xp: Any, x: Any, kernel_size: Sizes, stride: Sizes, padding: Sizes = (),
            dilation: Sizes = (), ceil_mode: bool = False) -> Any:
        name = f"max_pool{n}d"
        p, d = _dims(padding, n, 0), _dims(dilation, n, 1)
        planes = _planes(x, n, name)
        _check_padding(name, kernel_size, p, d)
        fast = native.max_pool(x, n, kernel_size, stride, p, d, ceil_mode) if xp is np else None
        if fast is not None:
            return fast
        win = windows(xp, planes, kernel_size, stride, p, d, ceil_mode, _lowest(x.dtype))
        out = win.max(axis=tuple(range(1 + n, 1 + 2 * n)))
        return out.reshape(x.shape[:-n] + out.shape[1:])
    return run


def _max_pool_indices(n: int) -> Any:
    def run(xp: Any, x: Any, kernel_size: Sizes, stride: Sizes, padding: Sizes = (),
            dilation: Sizes = (), ceil_mode: bool = False) -> tuple[Any, Any]:
        p, d = _dims(padding, n, 0), _dims(dilation, n, 1)
        return max_pool_with_indices(xp, x, n, kernel_size, stride, p, d, ceil_mode,
                                     f"max_pool{n}d")
    return run


def _max_pool_grad(n: int) -> Any:
    def run(xp: Any, gy: Any, x: Any, kernel_size: Sizes, stride: Sizes, padding: Sizes,
            dilation: Sizes, ceil_mode: bool) -> Any:
        _, index = max_pool_with_indices(xp, x, n, kernel_size, stride, padding,
                                         _dims(dilation, n, 1), ceil_mode, f"max_pool{n}d")
        return _indices_grad(n)(xp, gy, index, x.shape)
    return run


def _indices_grad(n: int) -> Any:
    def run(xp: Any, gy: Any, indices: Any, input_size: Sizes) -> Any:
        size = tuple(input_size)
        g = _planes(gy, n, f"max_pool{n}d_with_indices_grad")
        index = indices.reshape(g.shape)
        out = native.scatter_add(g, index, size[-n:]) if xp is np else None
        if out is None:
            out = _scatter_planes(xp, g, index, size[-n:], add=True)
        return out.reshape(size)
    return run


def _avg_divisor(xp: Any, size: Sizes, out: Sizes, k: Sizes, s: Sizes, p: Sizes,
                 include_pad: bool, dtype: Any) -> Any:
    """``(1, *out)``: how many taps each window averages, a product of one count per dim
    (the padding counts with ``include_pad``; the part past it, of a ceil-mode window, never)."""
    div = xp.ones((1,) * (1 + len(k)), dtype=dtype)
    for i in range(len(k)):
        start = xp.arange(out[i]) * s[i] - p[i]
        end = xp.minimum(start + k[i], size[i] + p[i])
        if not include_pad:
            start, end = xp.maximum(start, 0), xp.minimum(end, size[i])
        div = div * (end - start).astype(dtype).reshape((1,) + tuple(
            -1 if j == i else 1 for j in range(len(k))))
    return div


def _avg_pool(n: int) -> Any:
    def run(xp: Any, x: Any, kernel_size: Sizes, stride: Sizes, padding: Sizes = (),
            ceil_mode: bool = False, count_include_pad: bool = True,
            divisor_override: int | None = None) -> Any:
        name = f"avg_pool{n}d"
        p = _dims(padding, n, 0)
        planes = _compute(_planes(x, n, name))
        _check_padding(name, kernel_size, p, (1,) * n)
        fast = native.avg_pool(x, n, kernel_size, stride, p, ceil_mode, count_include_pad,
                               divisor_override) if xp is np else None
        if fast is not None:
            return fast
        win = windows(xp, planes, kernel_size, stride, p, (1,) * n, ceil_mode, 0.0)
        total = win.sum(axis=tuple(range(1 + n, 1 + 2 * n)))
        if divisor_override:
            out = total / planes.dtype.type(divisor_override)
        else:
            out = total / _avg_divisor(xp, planes.shape[1:], total.shape[1:], kernel_size,
                                       stride, p, count_include_pad, planes.dtype)
        return out.reshape(x.shape[:-n] + out.shape[1:])
    return run


def _avg_pool_grad(n: int) -> Any:
    def run(xp: Any, gy: Any, input_size: Sizes, kernel_size: Sizes, stride: Sizes,
            padding: Sizes, ceil_mode: bool, count_include_pad: bool,
            divisor_override: int | None = None) -> Any:
        size = tuple(input_size)
        g = _compute(_planes(gy, n, f"avg_pool{n}d_grad"))
        if divisor_override:
            per = g / g.dtype.type(divisor_override)
        else:
            per = g / _avg_divisor(xp, size[-n:], g.shape[1:], kernel_size, stride, padding,
                                   count_include_pad, g.dtype)
        per = per.reshape(per.shape + (1,) * n)
        cols = xp.broadcast_to(per, per.shape[:1 + n] + tuple(kernel_size))
        out = col2im(xp, cols, size[-n:], kernel_size, stride, padding, (1,) * n)
        return out.reshape(size)
    return run


# ---- adaptive pools --------------------------------------------------------------------
def _adaptive_bounds(xp: Any, size: int, out: int) -> tuple[Any, Any]:
    """Window ``o`` of an adaptive pool covers ``[floor(o*size/out), ceil((o+1)*size/out))``."""
    o = xp.arange(out)
    return (o * size) // out, ((o + 1) * size + out - 1) // out


def _adaptive_matrix(xp: Any, size: int, out: int, dtype: Any) -> Any:
    """``(out, size)``: row o averages window o (an adaptive average is separable)."""
    start, end = _adaptive_bounds(xp, size, out)
    i = xp.arange(size)[None, :]
    inside = (i >= start[:, None]) & (i < end[:, None])
    return inside.astype(dtype) / (end - start).astype(dtype)[:, None]


def _along(xp: Any, x: Any, axis: int, matrix: Any) -> Any:
    """``x`` with dim ``axis`` mapped through ``matrix`` ``(new, old)``."""
    moved = xp.moveaxis(x, axis, -1) @ matrix.T
    return xp.moveaxis(moved, -1, axis)


def _adaptive_avg(n: int) -> Any:
    def run(xp: Any, x: Any, output_size: Sizes) -> Any:
        out = _compute(_planes(x, n, f"adaptive_avg_pool{n}d"))
        fast = native.adaptive_avg_pool(x, n, output_size) if xp is np else None
        if fast is not None:
            return fast
        if tuple(output_size) == out.shape[1:]:      # (7, 7) of a 7x7 map: a copy, no view
            return out.reshape(x.shape).copy()
        for i, o in enumerate(output_size):
            size, axis = out.shape[1 + i], 1 + i
            if size == o:
                continue
            if size % o == 0:          # even windows: a reshape and a mean
                shape = out.shape[:axis] + (o, size // o) + out.shape[axis + 1:]
                out = out.reshape(shape).mean(axis=axis + 1)
            else:
                out = _along(xp, out, axis, _adaptive_matrix(xp, size, o, out.dtype))
        return out.reshape(x.shape[:-n] + out.shape[1:])
    return run


def _adaptive_avg_grad(n: int) -> Any:
    def run(xp: Any, gy: Any, input_size: Sizes) -> Any:
        size = tuple(input_size)
        g = _compute(_planes(gy, n, f"adaptive_avg_pool{n}d_grad"))
        for i, s in enumerate(size[-n:]):
            g = _along(xp, g, 1 + i, _adaptive_matrix(xp, s, g.shape[1 + i], g.dtype).T)
        return g.reshape(size)
    return run


def _adaptive_max(n: int) -> Any:
    def run(xp: Any, x: Any, output_size: Sizes) -> tuple[Any, Any]:
        planes = _planes(x, n, f"adaptive_max_pool{n}d")
        fast = native.adaptive_max_pool(x, n, output_size) if xp is np else None
        if fast is not None:
            return fast
        positions = []
        for i, o in enumerate(output_size):
            start, end = _adaptive_bounds(xp, planes.shape[1 + i], o)
            taps = int((end - start).max()) if o else 1
            pos = xp.minimum(start[:, None] + xp.arange(taps)[None, :], end[:, None] - 1)
            positions.append(pos[None])
        values, index = _max_of(xp, _gather_windows(xp, planes, positions), positions,
                                planes.shape[1:])
        lead = x.shape[:-n]
        return values.reshape(lead + values.shape[1:]), index.reshape(lead + index.shape[1:])
    return run


# ---- fractional max pools and unpooling ------------------------------------------------
def _fractional_starts(xp: Any, u: Any, size: int, out: int, k: int) -> Any:
    """``(B, out)`` window starts of PyTorch's ``generate_intervals``: with
    ``alpha = (size - k) / (out - 1)``, ``int((i + u) * alpha) - int(u * alpha)`` and the last
    window at ``size - k``, computed in the samples' dtype as PyTorch computes them."""
    dt = u.dtype.type
    starts = xp.full((u.shape[0], out), size - k, dtype=np.int64)
    if out > 1:
        alpha = dt(size - k) / dt(out - 1)
        i = xp.arange(out - 1).astype(u.dtype)[None, :]
        steps = ((i + u[:, None]) * alpha).astype(np.int64) - (u * alpha).astype(np.int64)[:, None]
        starts[:, :-1] = steps
    return starts


def _fractional(n: int) -> Any:
    def run(xp: Any, x: Any, samples: Any, kernel_size: Sizes,
            output_size: Sizes) -> tuple[Any, Any]:
        name = f"fractional_max_pool{n}d"
        planes = _planes(x, n, name)
        batch = x.shape[0] if x.ndim == n + 2 else 1       # unbatched: the first N's samples
        if samples.ndim != 3 or samples.shape[0] < batch or samples.shape[1:] != (
                x.shape[-n - 1], n):
            raise ShapeError(f"{name}: expected _random_samples of shape (N, C, {n}) for an "
                             f"input of shape {tuple(x.shape)}, got {tuple(samples.shape)}")
        u = samples[:batch].reshape(-1, n)
        compute = u.astype(np.float32) if u.dtype.itemsize == 2 else u
        positions = []
        for i in range(n):
            size, o, k = planes.shape[1 + i], output_size[i], kernel_size[i]
            if o + k - 1 > size:
                raise ShapeError(f"{name}: kernel_size {k} and output_size {o} are too large "
                                 f"for input size {size} (output_size + kernel_size - 1 must "
                                 f"be at most the input size) in dim {i}")
            # the 2-d kernel reads the samples as (w, h), the 3-d one as (t, h, w)
            column = n - 1 - i if n == 2 else i
            starts = _fractional_starts(xp, compute[:, column], size, o, k)
            positions.append(starts[:, :, None] + xp.arange(k)[None, None, :])
        values, index = _max_of(xp, _gather_windows(xp, planes, positions), positions,
                                planes.shape[1:])
        lead = x.shape[:-n]
        return values.reshape(lead + values.shape[1:]), index.reshape(lead + index.shape[1:])
    return run


def _max_unpool(n: int) -> Any:
    def run(xp: Any, x: Any, indices: Any, output_size: Sizes) -> Any:
        name = f"max_unpool{n}d"
        if tuple(indices.shape) != tuple(x.shape):
            raise ShapeError(f"{name}: Expected shape of indices to be same as that of the "
                             f"input tensor ({tuple(x.shape)}) but got indices tensor with "
                             f"shape: {tuple(indices.shape)}")
        planes = _planes(x, n, name)
        out = _scatter_planes(xp, planes, indices.reshape(planes.shape), tuple(output_size),
                              add=False)
        return out.reshape(x.shape[:-n] + tuple(output_size))
    return run


for _n in (1, 2, 3):
    kernel(f"max_pool{_n}d")(_max_pool(_n))
    kernel(f"max_pool{_n}d_with_indices")(_max_pool_indices(_n))
    kernel(f"max_pool{_n}d_grad")(_max_pool_grad(_n))
    kernel(f"max_pool{_n}d_with_indices_grad")(_indices_grad(_n))
    kernel(f"avg_pool{_n}d")(_avg_pool(_n))
    kernel(f"avg_pool{_n}d_grad")(_avg_pool_grad(_n))
    kernel(f"adaptive_avg_pool{_n}d")(_adaptive_avg(_n))
    kernel(f"adaptive_avg_pool{_n}d_grad")(_adaptive_avg_grad(_n))
    kernel(f"adaptive_max_pool{_n}d")(_adaptive_max(_n))
    kernel(f"max_unpool{_n}d")(_max_unpool(_n))
for _n in (2, 3):
    kernel(f"fractional_max_pool{_n}d")(_fractional(_n))
