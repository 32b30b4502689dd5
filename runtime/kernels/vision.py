"""Reference kernels of image resampling (interpolate, grid_sample, affine_grid).

Every mode of ``upsample`` is separable: along each spatial dim, output ``o`` is a weighted
sum of a few input positions, ``taps(...) -> (index (n_out, K), weight (n_out, K))``. The
forward applies one dim at a time, as one GEMM with the (n_out, n_in) matrix of the taps
where the dim is short enough for that to be cheaper, else as a gather and weighted sum per
tap; its adjoint (``upsample_grad``) multiplies by the transposes (or scatter-adds with
``bincount``). Positions and weights are computed in the precision
PyTorch's CPU kernels use (float32 for float32 and half inputs, float64 for float64), so that
a nearest pick or a linear weight on a boundary comes out as PyTorch's does.

``grid_sampler`` takes its taps per output point: the same separable weights per dim, at
coordinates read from the grid, combined over every tap of every dim.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir.errors import ShapeError
from . import kernel

Taps = tuple[np.ndarray, np.ndarray]          # index (n_out, K) int64, weight (n_out, K)
CUBIC_A = -0.75                                # PyTorch's (and OpenCV's) cubic convolution


def opmath(dtype: Any) -> Any:
    """The precision PyTorch computes source positions and weights in for ``dtype``."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def widened(x: Any) -> Any:
    """``x`` in float32 if it is float16 or bfloat16 (PyTorch computes those in float32)."""
    half = x.dtype.kind == "f" and x.dtype.itemsize < 4 or x.dtype.name == "bfloat16"
    return x.astype(np.float32) if half else x


def _ratio(ft: Any, n_in: int, n_out: int, align_corners: bool, scale: float | None) -> Any:
    """Input positions per output position (PyTorch's ``area_pixel_compute_scale``)."""
    if align_corners:
        return ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(n_in) / ft(n_out)


def _source(ft: Any, ratio: Any, n_out: int, align_corners: bool, cubic: bool) -> np.ndarray:
    """The real input position of every output position (``area_pixel_compute_source_index``):
    pixel corners align, or pixel centres, clamped at 0 except for cubic."""
    i = np.arange(n_out)
    if align_corners:
        return ratio * i.astype(ft)
    # ``ratio * (i + 0.5) - 0.5`` as one fused multiply-add, rounded once, as PyTorch's
    # compiled kernels compute it (in float64 the product of a float32 ratio is exact)
    src = (np.float64(ratio) * (i + 0.5) - 0.5).astype(ft)
    return src if cubic else np.maximum(src, ft(0))


def _floorf(v: np.ndarray) -> np.ndarray:
    """``floorf``: PyTorch floors positions in single precision, float64 ones too."""
    return np.floor(v.astype(np.float32)).astype(np.int64)


def _nearest(ft: Any, n_in: int, n_out: int, scale: float | None, exact: bool,
             shortcut: bool) -> Taps:
    if shortcut and not exact and n_out in (n_in, 2 * n_in):
        return (np.arange(n_out) // (n_out // n_in))[:, None], np.ones((n_out, 1), ft)
    ratio = _ratio(ft, n_in, n_out, False, scale)
    if exact:
        src = _source(ft, ratio, n_out, False, False) + ft(0.5)
    else:
        src = ratio * np.arange(n_out).astype(ft)
    idx = np.minimum(_floorf(src), n_in - 1)
    return idx[:, None], np.ones((n_out, 1), ft)


def _index_and_lambda(src: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """``guard_index_and_lambda``: the tap left of ``src`` and the fraction past it."""
    ft = src.dtype.type
    idx = np.minimum(_floorf(src), n_in - 1)
    return idx, np.clip(src - idx.astype(ft), ft(0), ft(1))


def _linear(ft: Any, n_in: int, n_out: int, scale: float | None, align_corners: bool) -> Taps:
    if n_in == n_out:
        return np.arange(n_out)[:, None], np.ones((n_out, 1), ft)
    ratio = _ratio(ft, n_in, n_out, align_corners, scale)
    idx, lam = _index_and_lambda(_source(ft, ratio, n_out, align_corners, False), n_in)
    nxt = idx + (idx < n_in - 1)
    return np.stack([idx, nxt], 1), np.stack([ft(1) - lam, lam], 1)


def cubic_weights(t: np.ndarray, a: float = CUBIC_A) -> np.ndarray:
    """The four cubic-convolution weights of taps at -1, 0, 1, 2 for fraction ``t``."""
    ft = t.dtype.type
    a_ = ft(a)

    def near(x: np.ndarray) -> np.ndarray:      # |x| <= 1
        return ((a_ + ft(2)) * x - (a_ + ft(3))) * x * x + ft(1)

    def far(x: np.ndarray) -> np.ndarray:       # 1 < |x| < 2
        return ((a_ * x - ft(5) * a_) * x + ft(8) * a_) * x - ft(4) * a_

    return np.stack([far(t + ft(1)), near(t), near(ft(1) - t), far(ft(2) - t)], -1)


def cubic_weights_grad(t: np.ndarray, a: float = CUBIC_A) -> np.ndarray:
    """d/dt of ``cubic_weights(t)``."""
    ft = t.dtype.type
    a_ = ft(a)

    def near(x: np.ndarray) -> np.ndarray:
        return (ft(3) * (a_ + ft(2)) * x - ft(2) * (a_ + ft(3))) * x

    def far(x: np.ndarray) -> np.ndarray:
        return (ft(3) * a_ * x - ft(10) * a_) * x + ft(8) * a_

    return np.stack([far(t + ft(1)), near(t), -near(ft(1) - t), -far(ft(2) - t)], -1)


def _cubic(ft: Any, n_in: int, n_out: int, scale: float | None, align_corners: bool) -> Taps:
    ratio = _ratio(ft, n_in, n_out, align_corners, scale)
    idx, t = _index_and_lambda(_source(ft, ratio, n_out, align_corners, True), n_in)
    taps = np.clip(idx[:, None] + np.arange(-1, 3), 0, n_in - 1)
    return taps, cubic_weights(t)


def _area(ft: Any, n_in: int, n_out: int) -> Taps:
    """Adaptive average pooling: output ``o`` averages inputs ``floor(o*n_in/n_out)`` up to
    ``ceil((o+1)*n_in/n_out)``."""
    o = np.arange(n_out)
    start, end = o * n_in // n_out, ((o + 1) * n_in + n_out - 1) // n_out
    k = np.arange(int((end - start).max(initial=1)))
    idx = start[:, None] + k
    inside = idx < end[:, None]
    w = np.where(inside, ft(1) / (end - start)[:, None].astype(ft), ft(0)).astype(ft)
    return np.where(inside, idx, start[:, None]), w


# antialiasing filters of PyTorch's separable kernels: (support at scale 1, filter)
_AA_FILTERS: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    "linear": (2, lambda x: np.maximum(1 - np.abs(x), 0)),
    "cubic": (4, lambda x: _keys(np.abs(x))),
    "lanczos": (6, lambda x: np.where(np.abs(x) < 3, np.sinc(x) * np.sinc(x / 3), 0)),
}


def _keys(x: np.ndarray) -> np.ndarray:
    """Keys' cubic with a = -0.5 (Pillow's, which antialiased bicubic follows)."""
    ft = x.dtype.type
    a = ft(-0.5)
    near = ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)
    far = ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a
    return np.where(x < 1, near, np.where(x < 2, far, ft(0)))


def _antialiased(ft: Any, mode: str, n_in: int, n_out: int, scale: float | None,
                 align_corners: bool) -> Taps:
    """PyTorch's (and Pillow's) antialiased resampling: the filter is stretched by the
    downscale factor and its weights renormalized over the taps inside the image. Each
    quantity is rounded where PyTorch's kernel keeps it in the input's precision ``ft``."""
    size, fn = _AA_FILTERS[mode]
    ratio = _ratio(ft, n_in, n_out, align_corners, scale)
    stretch = float(ratio) >= 1.0
    support = ft(size * 0.5 * float(ratio) if stretch else size * 0.5)
    inv = ft(1.0 / float(ratio) if stretch else 1.0)
    k_max = int(math.ceil(support)) * 2 + 1
    center = (float(ratio) * (np.arange(n_out) + 0.5)).astype(ft)
    lo = np.maximum(((center - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    hi = ((center + support).astype(np.float64) + 0.5).astype(np.int64)
    n = np.clip(np.minimum(hi, n_in) - lo, 0, k_max)
    k = np.arange(k_max)
    inside = k < n[:, None]
    offset = (k + lo[:, None]).astype(ft) - center[:, None]
    w = np.where(inside, fn(((offset.astype(np.float64) + 0.5) * float(inv)).astype(ft)),
                 ft(0)).astype(ft)
    total = np.zeros(n_out, ft)
    for j in range(k_max):             # summed in order, in ``ft``, as PyTorch does
        total += w[:, j]
    w = np.divide(w, total[:, None], out=np.zeros_like(w), where=total[:, None] != 0)
    return np.where(inside, np.minimum(lo[:, None] + k, n_in - 1), lo[:, None]), w


def taps(mode: str, n_in: int, n_out: int, scale: float | None, align_corners: bool,
         antialias: bool, dtype: Any, shortcut: bool = True) -> Taps:
    """The source positions and weights of one spatial dim of ``upsample``.

    ``shortcut``: nearest mode copies (same size) or repeats each input twice (twice the
    size) whatever the scale factor says, as PyTorch's nearest backward kernels at every
    rank and its 2-D forward kernel do (its 1-D and 3-D forwards use the scale)."""
    ft = opmath(dtype)
    if antialias and n_in == n_out:     # PyTorch leaves such a dim as it is, whatever the scale
        return np.arange(n_out)[:, None], np.ones((n_out, 1), ft)
    if antialias:
        return _antialiased(ft, mode, n_in, n_out, scale, align_corners)
    if mode in ("nearest", "nearest-exact"):
        return _nearest(ft, n_in, n_out, scale, mode == "nearest-exact", shortcut)
    if mode == "linear":
        return _linear(ft, n_in, n_out, scale, align_corners)
    if mode == "cubic":
        return _cubic(ft, n_in, n_out, scale, align_corners)
    if mode == "area":
        return _area(ft, n_in, n_out)
    raise ValueError(f"upsample: unknown mode {mode!r}")


def _coordinate_scales(n: int, scale_factor: Sequence[float] | None,
                       recompute: bool) -> list[float | None]:
    if scale_factor is None or recompute:
        return [None] * n
    return [float(s) for s in scale_factor]


def _dense(idx: np.ndarray, w: np.ndarray, n_in: int) -> np.ndarray | None:
    """The (n_out, n_in) matrix of one dim's taps where a GEMM with it is cheaper than
    gathering each tap (measured: up to about 128 inputs per tap), else None."""
    if n_in > 128 * idx.shape[1]:
        return None
    m = np.zeros((idx.shape[0], n_in), w.dtype)
    np.add.at(m, (np.arange(idx.shape[0])[:, None], idx), w)
    return m


def _matmul_axis(xp: Any, x: Any, m: Any, axis: int) -> Any:
    """``x`` with ``axis`` replaced by ``m @ x`` along it: one GEMM over every other dim
    (a batch of small GEMMs, NumPy's broadcast matmul, runs many times slower)."""
    moved = xp.moveaxis(x, axis, -1)
    rows = int(np.prod(moved.shape[:-1], dtype=np.int64))
    out = xp.ascontiguousarray(moved).reshape(rows, moved.shape[-1]) @ m.T
    return xp.moveaxis(out.reshape(moved.shape[:-1] + (m.shape[0],)), -1, axis)


def _resample(xp: Any, x: Any, idx: np.ndarray, w: np.ndarray, axis: int, n_in: int,
              weighted: bool, adjoint: bool) -> Any:
    """One dim of ``upsample`` (or of its adjoint): a GEMM with the taps' matrix where that
    is cheaper, else a gather (a scatter-add) per tap."""
    m = _dense(idx, w, n_in) if weighted else None
    if m is not None:
        return _matmul_axis(xp, x, xp.asarray((m.T if adjoint else m).astype(x.dtype)), axis)
    if adjoint:
        return _scatter(xp, x, idx, w, axis, n_in)
    return _gather(xp, x, idx, w, axis, weighted)


def _gather(xp: Any, x: Any, idx: np.ndarray, w: np.ndarray, axis: int, weighted: bool) -> Any:
    """``out[..., o, ...] = sum_k x[..., idx[o, k], ...] * w[o, k]`` along ``axis``."""
    shape = (-1,) + (1,) * (x.ndim - axis - 1)
    out = None
    for k in range(idx.shape[1]):
        part = xp.take(x, xp.asarray(idx[:, k]), axis=axis)
        if weighted:
            part *= xp.asarray(w[:, k].astype(x.dtype)).reshape(shape)
        if out is None:
            out = part
        else:
            out += part
    return out


def _scatter(xp: Any, g: Any, idx: np.ndarray, w: np.ndarray, axis: int, n_in: int) -> Any:
    """The adjoint of ``_gather``: add ``g[..., o, ...] * w[o, k]`` into position
    ``idx[o, k]`` along ``axis`` (one ``bincount`` over all taps)."""
    moved = xp.moveaxis(g, axis, -1)
    lead, n_out = moved.shape[:-1], moved.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    flat = moved.reshape(rows, n_out, 1) * xp.asarray(w)
    where = xp.arange(rows).reshape(rows, 1, 1) * n_in + xp.asarray(idx)
    out = xp.bincount(where.ravel(), flat.ravel(), minlength=rows * n_in)
    return xp.moveaxis(out.astype(g.dtype).reshape(lead + (n_in,)), -1, axis)


def _spatial(x: Any, n: int, name: str) -> None:
    if x.ndim < n + 1 or n == 0:
        raise ShapeError(f"{name}: expected an input with {n} spatial dims after (N, C), "
                         f"got shape {tuple(x.shape)}")


@kernel("upsample")
def _upsample(xp: Any, x: Any, size: Sequence[int], mode: str,
              scale_factor: Sequence[float] | None = None, recompute_scale_factor: bool = False,
              align_corners: bool = False, antialias: bool = False) -> Any:
    n = len(size) if len(size) else len(scale_factor or ())
    _spatial(x, n, "upsample")
    sizes_in = x.shape[x.ndim - n:]
    if len(size):
        sizes_out = [int(s) for s in size]
    else:
        sizes_out = [int(d * float(s)) for d, s in zip(sizes_in, scale_factor or ())]
    if mode != "area" and (min(sizes_out) <= 0 or min(sizes_in) <= 0):
        names = ("D", "H", "W")[3 - n:]
        raise ShapeError(f"Input and output sizes should be greater than 0, but got input "
                         f"({', '.join(f'{a}: {b}' for a, b in zip(names, sizes_in))}) output "
                         f"({', '.join(f'{a}: {b}' for a, b in zip(names, sizes_out))})")
    weighted = mode not in ("nearest", "nearest-exact")
    x = widened(x) if weighted else x
    if weighted and x.dtype.kind not in "fc":
        raise NotImplementedError(f"upsample: mode {mode!r} on {x.dtype} inputs is not "
                                  f"supported (float inputs only)")
    scales = _coordinate_scales(n, scale_factor, recompute_scale_factor)
    for d in reversed(range(n)):
        axis = x.ndim - n + d
        idx, w = taps(mode, sizes_in[d], sizes_out[d], scales[d], align_corners, antialias,
                      x.dtype, shortcut=n == 2)
        x = _resample(xp, x, idx, w, axis, sizes_in[d], weighted, False)
    return xp.ascontiguousarray(x)


@kernel("upsample_grad")
def _upsample_grad(xp: Any, g: Any, input_size: Sequence[int], mode: str,
                   scales: Sequence[float] | None = None, align_corners: bool = False,
                   antialias: bool = False) -> Any:
    n = len(input_size) - 2
    g = widened(g)
    sizes_in, sizes_out = [int(s) for s in input_size[2:]], g.shape[g.ndim - n:]
    coordinate = _coordinate_scales(n, scales, False)
    for d in range(n):
        axis = g.ndim - n + d
        idx, w = taps(mode, sizes_in[d], sizes_out[d], coordinate[d], align_corners, antialias,
                      g.dtype)
        g = _resample(xp, g, idx, w, axis, sizes_in[d], True, True)
    return xp.ascontiguousarray(g)


# ---- grid sampling ------------------------------------------------------------------------
def _unnormalize(ft: Any, coord: Any, size: int, align_corners: bool) -> tuple[Any, Any]:
    """Grid coordinate in [-1, 1] -> pixel coordinate, and d(pixel)/d(grid)."""
    if align_corners:
        return (coord + ft(1)) / ft(2) * ft(size - 1), ft(size - 1) / ft(2)
    # ``(coord + 1) * size - 1`` as one fused multiply-add, as PyTorch's compiled kernel
    scaled = ((coord + ft(1)).astype(np.float64) * size - 1).astype(coord.dtype)
    return scaled / ft(2), ft(size) / ft(2)


def _reflect(xp: Any, c: Any, twice_low: int, twice_high: int) -> tuple[Any, Any]:
    """Reflect ``c`` into [low, high] as often as needed; and the sign of d(out)/d(c)."""
    ft = c.dtype.type
    if twice_low == twice_high:
        return xp.zeros_like(c), xp.zeros_like(c)
    lo, span = ft(twice_low / 2), ft((twice_high - twice_low) / 2)
    sign = xp.where(c < lo, ft(-1), ft(1))
    c = xp.abs(c - lo)
    extra, flips = xp.fmod(c, span), xp.floor(c / span)
    even = flips % 2 == 0
    return xp.where(even, extra + lo, span - extra + lo), xp.where(even, sign, -sign)


def _pad_coordinates(xp: Any, c: Any, size: int, padding_mode: str,
                     align_corners: bool) -> tuple[Any, Any]:
    """``compute_coordinates``: border clips, reflection reflects then clips (a NaN lands
    on 0, as in PyTorch's CPU kernel); and the derivative of the result in ``c``."""
    ft = c.dtype.type
    grad = xp.ones_like(c)
    if padding_mode == "reflection":
        c, grad = (_reflect(xp, c, 0, 2 * (size - 1)) if align_corners
                   else _reflect(xp, c, -1, 2 * size - 1))
    if padding_mode in ("border", "reflection"):
        inside = (c > 0) & (c < size - 1)
        grad = xp.where(inside, grad, ft(0))
        c = xp.where(xp.isnan(c), ft(0), xp.clip(c, ft(0), ft(size - 1)))
    return c, grad


def _grid_taps(xp: Any, coord: Any, size: int, mode: str, padding_mode: str,
               align_corners: bool) -> list[tuple[Any, Any, Any, Any]]:
    """One grid dim's taps: (index, inside, weight, d weight / d grid coordinate)."""
    ft = coord.dtype.type
    c, unit = _unnormalize(ft, coord, size, align_corners)
    if mode == "bicubic":          # padding applies to each tap, not to the coordinate
        lo = xp.floor(c)
        t = c - lo
        w, dw = cubic_weights(t), cubic_weights_grad(t)
        out = []
        for k in range(4):
            tap, _ = _pad_coordinates(xp, lo + ft(k - 1), size, padding_mode, align_corners)
            out.append((tap, w[..., k], dw[..., k] * unit))
    else:
        c, dpad = _pad_coordinates(xp, c, size, padding_mode, align_corners)
        if mode == "nearest":
            out = [(xp.rint(c), xp.ones_like(c), xp.zeros_like(c))]
        else:
            lo = xp.floor(c)
            frac = c - lo
            out = [(lo, ft(1) - frac, -dpad * unit), (lo + ft(1), frac, dpad * unit)]
    result = []
    for tap, w, dw in out:
        inside = (tap >= 0) & (tap <= size - 1)
        result.append((xp.where(inside, tap, 0).astype(np.int64), inside, w, dw))
    return result


def _grid_args(x: Any, grid: Any, mode: str) -> int:
    n = x.ndim - 2
    if x.ndim not in (4, 5) or grid.ndim != x.ndim or grid.shape[-1] != n \
            or grid.shape[0] != x.shape[0]:
        raise ShapeError(f"grid_sampler: expected a 4-D input with an (N, H, W, 2) grid or a "
                         f"5-D input with an (N, D, H, W, 3) grid of the same N, got input "
                         f"{tuple(x.shape)} and grid {tuple(grid.shape)}")
    if mode == "bicubic" and n != 2:
        raise ShapeError("grid_sampler(): bicubic interpolation only supports 4D input")
    return n


def _combinations(xp: Any, x: Any, grid: Any, mode: str, padding_mode: str,
                  align_corners: bool) -> Any:
    """Every combination of one tap per dim: (flat index (N, P), inside, weights per dim,
    weight derivatives per dim), with the grid's dims (x, y[, z]) matched to W, H[, D]."""
    n = x.ndim - 2
    sizes = x.shape[2:]
    pts = grid.reshape(grid.shape[0], int(np.prod(grid.shape[1:-1], dtype=np.int64)), n)
    with np.errstate(invalid="ignore"):        # a NaN or infinite grid point: NaN weights
        per_dim = [_grid_taps(xp, pts[..., n - 1 - d], sizes[d], mode, padding_mode,
                              align_corners) for d in range(n)]
    strides = [int(np.prod(sizes[d + 1:], dtype=np.int64)) for d in range(n)]
    for combo in itertools.product(*per_dim):
        flat = sum(t[0] * s for t, s in zip(combo, strides))
        inside = combo[0][1]
        for t in combo[1:]:
            inside = inside & t[1]
        yield flat, inside, [t[2] for t in combo], [t[3] for t in combo]


def _pixel_rows(xp: Any, x: Any) -> tuple[Any, Any]:
    """``x`` as one row of channels per pixel, (N * pixels, C), and each batch's first row:
    a tap then gathers whole rows, many times faster than a strided gather per channel."""
    nb, ch = x.shape[:2]
    count = int(np.prod(x.shape[2:], dtype=np.int64))
    return _channels_last(xp, x), (xp.arange(nb) * count).reshape(nb, 1)


def _channels_last(xp: Any, x: Any) -> Any:
    """(N, C, *spatial) -> (N * pixels, C), contiguous."""
    nb, ch = x.shape[:2]
    count = int(np.prod(x.shape[2:], dtype=np.int64))
    return xp.ascontiguousarray(x.reshape(nb, ch, count).transpose(0, 2, 1)).reshape(nb * count, ch)


@kernel("grid_sampler")
def _grid_sampler(xp: Any, x: Any, grid: Any, mode: str = "bilinear",
                  padding_mode: str = "zeros", align_corners: bool = False) -> Any:
    _grid_args(x, grid, mode)
    x = widened(x)
    grid = grid.astype(x.dtype, copy=False)
    rows, first = _pixel_rows(xp, x)
    out = None
    for flat, inside, ws, _ in _combinations(xp, x, grid, mode, padding_mode, align_corners):
        w = _masked(xp, inside, _product(ws))
        part = xp.take(rows, (first + flat).ravel(), axis=0)
        part *= w.reshape(-1, 1)
        if out is None:
            out = part
        else:
            out += part
    nb, ch = x.shape[:2]
    out = out.reshape((nb, int(np.prod(grid.shape[1:-1], dtype=np.int64)), ch)).transpose(0, 2, 1)
    return xp.ascontiguousarray(out).reshape((nb, ch) + grid.shape[1:-1])


def _masked(xp: Any, inside: Any, w: Any) -> Any:
    """A tap's weight where it reads the image, else ``0 * w``: a tap outside reads 0, and
    0 times a NaN weight (a NaN or infinite grid point) is NaN, as in PyTorch."""
    return xp.where(inside, w, w * 0)


def _product(factors: Sequence[Any]) -> Any:
    out = factors[0]
    for f in factors[1:]:
        out = out * f
    return out


@kernel("grid_sampler_grad")
def _grid_sampler_grad(xp: Any, g: Any, x: Any, grid: Any, mode: str = "bilinear",
                       padding_mode: str = "zeros", align_corners: bool = False) -> Any:
    n = _grid_args(x, grid, mode)
    g, x = widened(g), widened(x)
    nb, ch = x.shape[:2]
    rows, first = _pixel_rows(xp, x)
    gy = _channels_last(xp, g)
    gx = xp.zeros(rows.size, np.float64)
    ggrid = xp.zeros(grid.shape[:1] + (int(np.prod(grid.shape[1:-1], dtype=np.int64)), n), x.dtype)
    channels = xp.arange(ch)
    for flat, inside, ws, dws in _combinations(xp, x, grid.astype(x.dtype, copy=False), mode,
                                               padding_mode, align_corners):
        w = _masked(xp, inside, _product(ws))
        at = (first + flat).reshape(-1, 1)
        gx += xp.bincount((at * ch + channels).ravel(), (gy * w.reshape(-1, 1)).ravel(),
                          minlength=gx.size)
        if mode == "nearest":
            continue
        dot = (xp.take(rows, at.ravel(), axis=0) * gy).sum(1).reshape(w.shape)
        dot = xp.where(inside, dot, 0)
        for d in range(n):         # grid component n-1-d moves dim d
            dw = _product([dws[e] if e == d else ws[e] for e in range(n)])
            ggrid[..., n - 1 - d] += dot * dw
    gx = gx.reshape((nb, rows.shape[0] // max(nb, 1), ch)).transpose(0, 2, 1).astype(x.dtype)
    return xp.ascontiguousarray(gx).reshape(x.shape), ggrid.reshape(grid.shape).astype(grid.dtype)


# ---- affine grids -------------------------------------------------------------------------
def base_grid(xp: Any, sizes: Sequence[int], align_corners: bool, dtype: Any) -> Any:
    """The identity grid of spatial ``sizes`` (D, H, W or H, W): (*sizes, n + 1) holding
    (x, y[, z], 1), each coordinate evenly spaced over [-1, 1] (pixel centres without
    ``align_corners``)."""
    n = len(sizes)
    axes = []
    for size in sizes:
        if size <= 1:
            axes.append(xp.zeros(size, dtype))
            continue
        line = xp.linspace(-1.0, 1.0, size).astype(dtype)
        axes.append(line if align_corners else line * dtype(size - 1) / dtype(size))
    out = xp.ones(tuple(sizes) + (n + 1,), dtype)
    mesh = xp.meshgrid(*axes, indexing="ij")
    for d in range(n):
        out[..., n - 1 - d] = mesh[d]
    return out


@kernel("affine_grid")
def _affine_grid(xp: Any, theta: Any, size: Sequence[int], align_corners: bool = False) -> Any:
    sizes = [int(s) for s in size[2:]]
    n = len(sizes)
    if theta.ndim != 3 or theta.shape[1:] != (n, n + 1) or theta.shape[0] != int(size[0]):
        raise ShapeError(f"affine_grid: expected a batch of {n}D affine matrices of shape "
                         f"({int(size[0])}, {n}, {n + 1}) for size {list(map(int, size))}, got "
                         f"{tuple(theta.shape)}")
    theta = widened(theta)
    base = base_grid(xp, sizes, align_corners, theta.dtype.type).reshape(-1, n + 1)
    out = xp.einsum("pk,nik->npi", base, theta)
    return out.reshape((theta.shape[0],) + tuple(sizes) + (n,))
