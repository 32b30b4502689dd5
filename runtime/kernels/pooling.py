"""Reference kernels of pooling, on the strided window views of ``kernels.conv``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir.errors import ShapeError
from . import kernel
from .conv import col2im, windows

def _pool_args(x: Any, name: str) -> None:
    if x.ndim not in (3, 4):
        raise ShapeError(f"{name}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, "
                         f"got shape {tuple(x.shape)}")


def _as4d(x: Any) -> Any:
    return x[None] if x.ndim == 3 else x


@kernel("max_pool2d")
def _max_pool2d(xp: Any, x: Any, kernel_size: Sequence[int], stride: Sequence[int],
                padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1),
                ceil_mode: bool = False) -> Any:
    _pool_args(x, "max_pool2d")
    if padding[0] * 2 > kernel_size[0] or padding[1] * 2 > kernel_size[1]:
        raise ShapeError(f"max_pool2d: pad should be at most half of effective kernel size, "
                         f"got padding={tuple(padding)} and kernel_size={tuple(kernel_size)}")
    fill = _lowest(x.dtype)
    view, _ = windows(xp, _as4d(x), kernel_size, stride, padding, dilation, ceil_mode, fill)
    out = view.max(axis=(4, 5))
    return out[0] if x.ndim == 3 else out


def _lowest(dt: Any) -> Any:
    """The padding value of max pooling: -inf, or the smallest int (bfloat16 has kind 'V')."""
    return np.iinfo(dt).min if dt.kind in "iu" else -np.inf


@kernel("max_pool2d_grad")
def max_pool2d_grad(xp: Any, gy: Any, x: Any, kernel_size: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool) -> Any:
    x4, g4 = _as4d(x), _as4d(gy)
    fill = _lowest(x.dtype)
    view, (oh, ow) = windows(xp, x4, kernel_size, stride, padding, dilation, ceil_mode, fill)
    flat = view.reshape(view.shape[:4] + (-1,))
    arg = flat.argmax(axis=-1)                     # first max in each window, as PyTorch
    onehot = (xp.arange(flat.shape[-1]) == arg[..., None]) * g4[..., None]
    cols = onehot.reshape(view.shape).astype(gy.dtype, copy=False)
    out = col2im(xp, cols, x4.shape, kernel_size, stride, padding, dilation)
    return out[0] if x.ndim == 3 else out


def _avg_divisor(xp: Any, x4: Any, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                 ceil: bool, include_pad: bool) -> Any:
    h, w = x4.shape[2:]
    if include_pad:
        ones = xp.zeros((1, 1, h + 2 * p[0], w + 2 * p[1]), dtype=x4.dtype)
        ones[...] = 1
        view, _ = windows(xp, ones, k, s, (0, 0), (1, 1), ceil)
        if ceil:   # windows past the padded edge were padded with zeros by `windows`
            view, _ = windows(xp, ones, k, s, (0, 0), (1, 1), ceil, 0.0)
        return view.sum(axis=(4, 5))
    ones = xp.ones((1, 1, h, w), dtype=x4.dtype)
    view, _ = windows(xp, ones, k, s, p, (1, 1), ceil, 0.0)
    return view.sum(axis=(4, 5))


@kernel("avg_pool2d")
def _avg_pool2d(xp: Any, x: Any, kernel_size: Sequence[int], stride: Sequence[int],
                padding: Sequence[int] = (0, 0), ceil_mode: bool = False,
                count_include_pad: bool = True) -> Any:
    _pool_args(x, "avg_pool2d")
    x4 = _as4d(x)
    view, _ = windows(xp, x4, kernel_size, stride, padding, (1, 1), ceil_mode, 0.0)
    out = view.sum(axis=(4, 5)) / _avg_divisor(xp, x4, kernel_size, stride, padding, ceil_mode,
                                                 count_include_pad)
    return out[0] if x.ndim == 3 else out


def avg_pool2d_grad(xp: Any, gy: Any, x_shape: Sequence[int], kernel_size: Sequence[int],
                    stride: Sequence[int], padding: Sequence[int], ceil_mode: bool,
                    count_include_pad: bool) -> Any:
    shape4 = (1,) + tuple(x_shape) if len(x_shape) == 3 else tuple(x_shape)
    g4 = _as4d(gy)
    div = _avg_divisor(xp, xp.zeros(shape4[:2] + shape4[2:], dtype=gy.dtype), kernel_size, stride,
                       padding, ceil_mode, count_include_pad)
    per = (g4 / div)[..., None, None]
    cols = xp.broadcast_to(per, per.shape[:4] + tuple(kernel_size))
    out = col2im(xp, cols, shape4, kernel_size, stride, padding, (1, 1))
    return out[0] if len(x_shape) == 3 else out


@kernel("avg_pool2d_grad")
def _avg_pool2d_grad(xp: Any, gy: Any, input_size: Sequence[int], kernel_size: Sequence[int],
                     stride: Sequence[int], padding: Sequence[int], ceil_mode: bool,
                     count_include_pad: bool) -> Any:
    return avg_pool2d_grad(xp, gy, tuple(input_size), kernel_size, stride, padding, ceil_mode,
                           count_include_pad)
