"""Reference kernels of convolution: im2col plus one GEMM per group, and the backward
kernels (``conv2d_grad_input``/``_weight``) through ``col2im``, its adjoint."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir.ops.conv import _out_size
from scriptmod.ir.errors import ShapeError
from . import kernel

def _lib(xp: Any) -> Any:
    if xp is np:
        return np.lib.stride_tricks
    import cupy.lib.stride_tricks as st  # type: ignore
    return st


def windows(xp: Any, x: Any, k: Sequence[int], s: Sequence[int], p: Sequence[int],
            d: Sequence[int], ceil: bool = False, fill: float = 0.0) -> tuple[Any, tuple[int, int]]:
    """Strided view (N, C, OH, OW, KH, KW) of the padded input; no copy of the windows."""
    n, c, h, w = x.shape
    oh = _out_size(h, k[0], s[0], p[0], d[0], ceil)
    ow = _out_size(w, k[1], s[1], p[1], d[1], ceil)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"input of spatial size ({h}, {w}) is too small for kernel {tuple(k)} "
                         f"with padding {tuple(p)} and dilation {tuple(d)}: output would be ({oh}, {ow})")
    need_h = (oh - 1) * s[0] + (k[0] - 1) * d[0] + 1
    need_w = (ow - 1) * s[1] + (k[1] - 1) * d[1] + 1
    ph2, pw2 = max(need_h - h - p[0], p[0]), max(need_w - w - p[1], p[1])
    xp_ = x
    if p[0] or p[1] or ph2 or pw2:
        xp_ = xp.pad(x, ((0, 0), (0, 0), (p[0], ph2), (p[1], pw2)), constant_values=fill)
    sn, sc, sh, sw = xp_.strides
    view = _lib(xp).as_strided(xp_, (n, c, oh, ow, k[0], k[1]),
                               (sn, sc, sh * s[0], sw * s[1], sh * d[0], sw * d[1]))
    return view, (oh, ow)


def _tap(start: int, n_out: int, s: int, size: int) -> tuple[slice, slice] | None:
    """One kernel tap along a dim: the window positions ``o < n_out`` whose input index
    ``start + o*s`` (``start``: the tap's offset less the padding) lies in ``[0, size)``, as
    (input slice, window slice); None when there are none (the tap only sees padding)."""
    lo = (max(0, -start) + s - 1) // s
    hi = min(n_out - 1, (size - 1 - start) // s)
    if hi < lo:
        return None
    return slice(start + lo * s, start + hi * s + 1, s), slice(lo, hi + 1)


def col2im(xp: Any, cols: Any, x_shape: Sequence[int], k: Sequence[int], s: Sequence[int],
           p: Sequence[int], d: Sequence[int]) -> Any:
    """Adjoint of ``windows``: scatter-add (N, C, OH, OW, KH, KW) back onto (N, C, H, W).
    Each tap adds only where it meets the input (not the padding), straight into a
    contiguous result, as PyTorch's gradients are: no padded buffer to slice, whose view
    would be strided at some sizes only (a fused kernel after it would see two layouts)."""
    n, c, h, w = x_shape
    _, _, oh, ow = cols.shape[:4]
    out = xp.zeros((n, c, h, w), dtype=cols.dtype)
    for i in range(k[0]):
        rows = _tap(i * d[0] - p[0], oh, s[0], h)
        for j in range(k[1]):
            tcols = _tap(j * d[1] - p[1], ow, s[1], w)
            if rows is not None and tcols is not None:
                out[:, :, rows[0], tcols[0]] += cols[:, :, rows[1], tcols[1], i, j]
    return out


def _conv_check(x: Any, w: Any, bias: Any, groups: int) -> None:
    if x.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D input (N, C, H, W), got shape {tuple(x.shape)}")
    if w.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D weight (O, C/groups, KH, KW), got {tuple(w.shape)}")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ShapeError(f"conv2d: input has {x.shape[1]} channels but weight {tuple(w.shape)} "
                         f"with groups={groups} expects {w.shape[1] * groups}")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise ShapeError(f"conv2d: expected bias of shape ({w.shape[0]},), got {tuple(bias.shape)}")


def im2col(xp: Any, x: Any, kshape: Sequence[int], stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int) -> tuple[Any, tuple[int, int]]:
    """(G, N*OH*OW, C/G*KH*KW) contiguous patches."""
    view, (oh, ow) = windows(xp, x, kshape, stride, padding, dilation)
    n, c = x.shape[:2]
    g = groups
    cols = view.reshape(n, g, c // g, oh, ow, kshape[0], kshape[1])
    cols = cols.transpose(1, 0, 3, 4, 2, 5, 6).reshape(g, n * oh * ow, -1)
    return cols, (oh, ow)


@kernel("conv2d")
def _conv2d(xp: Any, x: Any, w: Any, bias: Any, stride: Sequence[int] = (1, 1),
            padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1), groups: int = 1) -> Any:
    _conv_check(x, w, bias, groups)
    w = w.astype(x.dtype, copy=False)
    o, g = w.shape[0], groups
    cols, (oh, ow) = im2col(xp, x, w.shape[2:], stride, padding, dilation, g)
    wm = w.reshape(g, o // g, -1).transpose(0, 2, 1)                 # (G, K, O/G)
    out = xp.matmul(cols, wm)                                          # (G, N*OH*OW, O/G)
    n = x.shape[0]
    out = out.reshape(g, n, oh, ow, o // g).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    if bias is not None:
        out = out + bias.astype(x.dtype, copy=False).reshape(1, -1, 1, 1)
    return xp.ascontiguousarray(out)


def conv2d_grad_input(xp: Any, gy: Any, w: Any, x_shape: Sequence[int], stride: Sequence[int],
                      padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
    n, o, oh, ow = gy.shape
    g, kh, kw = groups, w.shape[2], w.shape[3]
    gm = gy.reshape(n, g, o // g, oh, ow).transpose(1, 0, 3, 4, 2).reshape(g, n * oh * ow, o // g)
    wm = w.reshape(g, o // g, -1)                                       # (G, O/G, K)
    dcols = xp.matmul(gm, wm)                                           # (G, N*OH*OW, K)
    c = x_shape[1]
    dcols = dcols.reshape(g, n, oh, ow, c // g, kh, kw).transpose(1, 0, 4, 2, 3, 5, 6)
    dcols = dcols.reshape(n, c, oh, ow, kh, kw)
    return col2im(xp, dcols, x_shape, (kh, kw), stride, padding, dilation)


def conv2d_grad_weight(xp: Any, gy: Any, x: Any, w_shape: Sequence[int], stride: Sequence[int],
                       padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
    n, o, oh, ow = gy.shape
    g = groups
    cols, _ = im2col(xp, x, w_shape[2:], stride, padding, dilation, g)   # (G, NP, K)
    gm = gy.reshape(n, g, o // g, oh, ow).transpose(1, 0, 3, 4, 2).reshape(g, n * oh * ow, o // g)
    gw = xp.matmul(cols.transpose(0, 2, 1), gm)                          # (G, K, O/G)
    return gw.transpose(0, 2, 1).reshape(w_shape)


@kernel("conv2d_grad_input")
def _conv2d_grad_input(xp: Any, gy: Any, w: Any, input_size: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                       groups: int) -> Any:
    return conv2d_grad_input(xp, gy, w.astype(gy.dtype, copy=False), tuple(input_size), stride,
                             padding, dilation, groups)


@kernel("conv2d_grad_weight")
def _conv2d_grad_weight(xp: Any, gy: Any, x: Any, weight_size: Sequence[int],
                        stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                        groups: int) -> Any:
    return conv2d_grad_weight(xp, gy, x.astype(gy.dtype, copy=False), tuple(weight_size), stride,
                              padding, dilation, groups)
