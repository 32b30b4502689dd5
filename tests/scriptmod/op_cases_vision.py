"""``op_cases`` rows of image resampling (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders).

The references are written from the textbook formulas in float64, one output position at a
time: ``upsample`` as one dense (out, in) matrix per spatial dim (its backward: the
transposes), ``grid_sampler`` by looping over grid points and their taps, ``affine_grid`` as
each point's matrix product. Sizes and scales are chosen so that no nearest pick falls on a
tie that float32 and float64 positions would break differently.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from op_cases import FLOATS, Gen, Sample, SampleFn, case

FLOAT_PAIR = ("float32", "float64")


# ---- upsample ------------------------------------------------------------------------------
def _keys(x: float, a: float) -> float:
    """Keys' cubic convolution kernel at distance ``x``."""
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _keys_slope(x: float, a: float) -> float:
    """d/dx of ``_keys(x, a)``."""
    sign, x = (-1.0 if x < 0 else 1.0), abs(x)
    if x <= 1:
        return sign * (3 * (a + 2) * x - 2 * (a + 3)) * x
    if x < 2:
        return sign * ((3 * a * x - 10 * a) * x + 8 * a)
    return 0.0


_AA: dict[str, tuple[int, Callable[[float], float]]] = {
    "linear": (2, lambda x: max(0.0, 1 - abs(x))),
    "cubic": (4, lambda x: _keys(x, -0.5)),
    "lanczos": (6, lambda x: float(np.sinc(x) * np.sinc(x / 3)) if abs(x) < 3 else 0.0),
}


def _ratio(n_in: int, n_out: int, scale: float | None, align: bool) -> float:
    if align:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1 / scale if scale else n_in / n_out


def _row(mode: str, o: int, n_in: int, r: float, align: bool) -> dict[int, float]:
    """The input weights of output position ``o`` along one dim."""
    clamp = lambda i: min(max(i, 0), n_in - 1)  # noqa: E731
    if mode == "nearest":
        return {clamp(math.floor(o * r)): 1.0}
    if mode == "nearest-exact":
        return {clamp(math.floor((o + 0.5) * r)): 1.0}
    src = r * o if align else r * (o + 0.5) - 0.5
    if mode == "linear":
        src = max(src, 0.0)
        i0 = clamp(math.floor(src))
        lam = min(src - i0, 1.0)
        row = {i0: 1 - lam}
        row[clamp(i0 + 1)] = row.get(clamp(i0 + 1), 0.0) + lam
        return row
    i0 = math.floor(src)
    row = {}
    for k in range(-1, 3):
        row[clamp(i0 + k)] = row.get(clamp(i0 + k), 0.0) + _keys(src - (i0 + k), -0.75)
    return row


def _matrix(mode: str, n_in: int, n_out: int, scale: float | None, align: bool,
            antialias: bool) -> np.ndarray:
    m = np.zeros((n_out, n_in))
    r = _ratio(n_in, n_out, scale, align)
    for o in range(n_out):
        if mode == "area":
            start, end = o * n_in // n_out, -(-(o + 1) * n_in // n_out)
            m[o, start:end] = 1 / (end - start)
        elif antialias and n_in != n_out:
            size, f = _AA[mode]
            support = size / 2 * max(r, 1.0)
            center = r * (o + 0.5)
            lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
            for j in range(lo, hi):
                m[o, j] = f((j - center + 0.5) / max(r, 1.0))
            m[o] /= m[o].sum()
        elif antialias:
            m[o, o] = 1.0
        else:
            for i, w in _row(mode, o, n_in, r, align).items():
                m[o, i] += w
    return m


def _matrices(shape: Sequence[int], out: Sequence[int], mode: str, scales: Any, align: bool,
              antialias: bool) -> list[np.ndarray]:
    n = len(out)
    scales = scales or [None] * n
    return [_matrix(mode, shape[-n + d], out[d], scales[d], align, antialias) for d in range(n)]


def _apply(x: np.ndarray, mats: list[np.ndarray]) -> np.ndarray:
    n = len(mats)
    for d, m in enumerate(mats):
        axis = x.ndim - n + d
        x = np.moveaxis(np.tensordot(m, np.moveaxis(x, axis, 0), axes=1), 0, axis)
    return x


def _upsample_ref(x: np.ndarray, size: Sequence[int], mode: str, scale_factor: Any = None,
                  recompute_scale_factor: bool = False, align_corners: bool = False,
                  antialias: bool = False) -> np.ndarray:
    n = len(size) or len(scale_factor)
    out = list(size) or [int(d * s) for d, s in zip(x.shape[-n:], scale_factor)]
    scales = None if recompute_scale_factor else scale_factor
    return _apply(x, _matrices(x.shape, out, mode, scales, align_corners, antialias))


def _upsample_grad_ref(g: np.ndarray, input_size: Sequence[int], mode: str, scales: Any = None,
                       align_corners: bool = False, antialias: bool = False) -> np.ndarray:
    n = len(input_size) - 2
    mats = _matrices(input_size, g.shape[-n:], mode, scales, align_corners, antialias)
    return _apply(g, [m.T for m in mats])


# (label, input shape, size, attrs): every mode, rank and option once
_UPSAMPLES: list[tuple[str, tuple[int, ...], list[int], dict[str, Any]]] = [
    ("nearest-1d", (2, 3, 5), [8], {"mode": "nearest"}),
    ("nearest-scale", (1, 2, 4, 6), [], {"mode": "nearest", "scale_factor": [2.0, 0.5]}),
    ("nearest-exact", (1, 1, 5, 3), [4, 8], {"mode": "nearest-exact"}),
    ("linear", (2, 2, 5), [9], {"mode": "linear"}),
    ("bilinear-align", (1, 2, 4, 5), [7, 3], {"mode": "linear", "align_corners": True}),
    ("trilinear-scale", (1, 1, 2, 3, 4), [], {"mode": "linear", "scale_factor": [1.5, 2.0, 0.6]}),
    ("bicubic", (1, 2, 4, 5), [7, 3], {"mode": "cubic"}),
    ("bicubic-align", (1, 1, 3, 4), [5, 6], {"mode": "cubic", "align_corners": True}),
    ("area", (1, 2, 6, 5), [4, 2], {"mode": "area", "recompute_scale_factor": True}),
    ("recompute", (1, 1, 5), [], {"mode": "linear", "scale_factor": [1.7],
                                  "recompute_scale_factor": True}),
    ("aa-bilinear", (1, 2, 8, 9), [3, 4], {"mode": "linear", "antialias": True}),
    ("aa-bicubic", (1, 1, 9, 7), [4, 7], {"mode": "cubic", "antialias": True}),
    ("lanczos", (1, 1, 9, 8), [4, 5], {"mode": "lanczos", "antialias": True}),
]


def _upsample_samples(g: Gen) -> list[Sample]:
    out = [Sample(label, (g.arr(shape), size), attrs, g.grad_of(0))
           for label, shape, size, attrs in _UPSAMPLES]
    return out + [Sample("noncontig", (g.arr((1, 2, 3, 4), noncontig=True), [5, 6]),
                         {"mode": "linear"}, g.grad_of(0))]


def _upsample_grad_samples(g: Gen) -> list[Sample]:
    out = []
    for s in _upsample_samples(Gen("float64", 3)):
        x, size = s.inputs
        a = {"recompute_scale_factor": False, "scale_factor": None, **s.attrs}
        gy = g.arr(_upsample_ref(x, size, **a).shape)
        scales = None if a["recompute_scale_factor"] else a["scale_factor"]
        attrs = {k: v for k, v in a.items() if k in ("mode", "align_corners", "antialias")}
        out.append(Sample(s.label, (gy, list(x.shape)), dict(attrs, scales=scales)))
    return out


case("upsample", _upsample_samples, _upsample_ref, FLOATS)
case("upsample_grad", _upsample_grad_samples, _upsample_grad_ref, FLOAT_PAIR, grad=False)


# ---- grid_sampler --------------------------------------------------------------------------
def _pad(c: float, size: int, padding_mode: str, align: bool) -> tuple[float, float]:
    """A pixel coordinate after padding, and its derivative."""
    if padding_mode == "zeros":
        return c, 1.0
    grad = 1.0
    if padding_mode == "reflection":
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        span = hi - lo
        if span <= 0:
            return 0.0, 0.0
        d = c - lo
        grad = -1.0 if d < 0 else 1.0
        d = abs(d)
        flips, extra = math.floor(d / span), math.fmod(d, span)
        c, grad = (lo + extra, grad) if flips % 2 == 0 else (hi - extra, -grad)
    if c <= 0 or c >= size - 1:
        return min(max(c, 0.0), size - 1.0), 0.0
    return c, grad


def _grid_dim(g: float, size: int, mode: str, padding_mode: str,
              align: bool) -> list[tuple[int, float, float]]:
    """One grid coordinate's taps: (input index or -1 outside, weight, d weight / d g)."""
    unit = (size - 1) / 2 if align else size / 2
    c = (g + 1) * unit if align else ((g + 1) * size - 1) / 2
    taps = []
    if mode == "bicubic":
        lo = math.floor(c)
        t = c - lo
        for k in range(-1, 3):
            taps.append((_pad(lo + k, size, padding_mode, align)[0], _keys(t - k, -0.75),
                         _keys_slope(t - k, -0.75) * unit))
    else:
        c, dpad = _pad(c, size, padding_mode, align)
        if mode == "nearest":
            taps.append((float(np.rint(c)), 1.0, 0.0))
        else:
            lo = math.floor(c)
            taps += [(lo, lo + 1 - c, -dpad * unit), (lo + 1, c - lo, dpad * unit)]
    return [(int(i) if 0 <= i <= size - 1 else -1, w, dw) for i, w, dw in taps]


def _grid_walk(x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align: bool) -> Any:
    """(batch, grid point, input index, weight, d weight per grid component) for every tap."""
    n = x.ndim - 2
    for b in range(x.shape[0]):
        for pos in np.ndindex(*grid.shape[1:-1]):
            dims = [_grid_dim(float(grid[(b,) + pos + (n - 1 - d,)]), x.shape[2 + d], mode,
                              padding_mode, align) for d in range(n)]
            for combo in itertools.product(*dims):
                if min(t[0] for t in combo) < 0:
                    continue
                w = math.prod(t[1] for t in combo)
                dws = [math.prod(t[2] if e == d else t[1] for e, t in enumerate(combo))
                       for d in range(n)]
                yield b, pos, tuple(t[0] for t in combo), w, dws[::-1]


def _grid_ref(x: np.ndarray, grid: np.ndarray, mode: str = "bilinear",
              padding_mode: str = "zeros", align_corners: bool = False) -> np.ndarray:
    out = np.zeros(x.shape[:2] + grid.shape[1:-1])
    for b, pos, idx, w, _ in _grid_walk(x, grid, mode, padding_mode, align_corners):
        out[(b, slice(None)) + pos] += w * x[(b, slice(None)) + idx]
    return out


def _grid_grad_ref(g: np.ndarray, x: np.ndarray, grid: np.ndarray, mode: str = "bilinear",
                   padding_mode: str = "zeros", align_corners: bool = False) -> tuple:
    gx, ggrid = np.zeros(x.shape), np.zeros(grid.shape)
    for b, pos, idx, w, dws in _grid_walk(x, grid, mode, padding_mode, align_corners):
        gy = g[(b, slice(None)) + pos]
        gx[(b, slice(None)) + idx] += w * gy
        ggrid[(b,) + pos] += np.dot(gy, x[(b, slice(None)) + idx]) * np.array(dws)
    return gx, ggrid


# (label, input shape, grid shape, attrs)
_GRIDS: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ("bilinear", (2, 2, 3, 4), (2, 2, 3, 2), {}),
    ("nearest-border", (1, 2, 4, 3), (1, 3, 2, 2), {"mode": "nearest", "padding_mode": "border"}),
    ("bicubic-reflection", (1, 1, 3, 4), (1, 2, 3, 2),
     {"mode": "bicubic", "padding_mode": "reflection", "align_corners": True}),
    ("bicubic-zeros", (1, 2, 4, 4), (1, 2, 2, 2), {"mode": "bicubic"}),
    ("border-align", (1, 1, 3, 3), (1, 3, 3, 2), {"padding_mode": "border", "align_corners": True}),
    ("trilinear-reflection", (1, 2, 2, 3, 3), (1, 2, 2, 2, 3), {"padding_mode": "reflection"}),
    ("nearest-3d", (2, 1, 2, 2, 3), (2, 1, 2, 2, 3), {"mode": "nearest"}),
]


def _grid_samples(g: Gen) -> list[Sample]:
    out = [Sample(label, (g.arr(xs), g.arr(gs, -1.3, 1.3)), attrs, g.grad_of(0, 1))
           for label, xs, gs, attrs in _GRIDS]
    return out + [Sample("noncontig", (g.arr((1, 1, 3, 4), noncontig=True),
                                       g.arr((1, 2, 2, 2), -1.0, 1.0)), {}, g.grad_of(0, 1))]


def _grid_grad_samples(g: Gen) -> list[Sample]:
    out = []
    for s in _grid_samples(Gen("float64", 5)):
        x, grid = (a.astype(g.dtype) for a in s.inputs)
        gy = g.arr(_grid_ref(x, grid, **s.attrs).shape)
        out.append(Sample(s.label, (gy, x, grid), s.attrs))
    return out


case("grid_sampler", _grid_samples, _grid_ref, FLOAT_PAIR)
case("grid_sampler_grad", _grid_grad_samples, _grid_grad_ref, FLOAT_PAIR, grad=False)


# ---- affine_grid ---------------------------------------------------------------------------
def _affine_ref(theta: np.ndarray, size: Sequence[int], align_corners: bool = False) -> np.ndarray:
    sizes = list(size[2:])
    n = len(sizes)

    def line(k: int, s: int) -> float:
        if s == 1:
            return 0.0
        v = -1 + 2 * k / (s - 1)
        return v if align_corners else v * (s - 1) / s

    out = np.zeros([theta.shape[0]] + sizes + [n])
    for b in range(theta.shape[0]):
        for pos in np.ndindex(*sizes):
            point = [line(pos[n - 1 - i], sizes[n - 1 - i]) for i in range(n)] + [1.0]
            out[(b,) + pos] = theta[b] @ np.array(point)
    return out


def _affine_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("2d", (g.arr((2, 2, 3)), [2, 3, 4, 5]), {}, gr),
            Sample("2d-align", (g.arr((1, 2, 3)), [1, 1, 3, 1]), {"align_corners": True}, gr),
            Sample("3d", (g.arr((2, 3, 4)), [2, 1, 2, 3, 2]), {}, gr),
            Sample("3d-align", (g.arr((1, 3, 4)), [1, 2, 3, 2, 4]), {"align_corners": True}, gr)]


case("affine_grid", _affine_samples, _affine_ref, FLOATS)
