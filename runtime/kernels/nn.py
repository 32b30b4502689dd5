"""Reference kernels of linear algebra and neural-network primitives, and the backward
helpers their derivatives call (col2im, pooling masks). Conv2d is im2col plus one BLAS
matmul per group; pooling uses strided window views, never Python loops over pixels."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir.ops.nn import _out_size, check_matrices
from .. import random as rng
from ..arrays import device_of
from . import kernel
from scriptmod.ir.errors import DTypeError, ShapeError


@kernel("matmul")
def _matmul(xp: Any, a: Any, b: Any) -> Any:
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: both arguments need at least 1 dimension, got a 0-dim tensor")
    if a.dtype != b.dtype:
        dt = np.result_type(a.dtype, b.dtype)
        a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    k1, k2 = a.shape[-1], (b.shape[-2] if b.ndim > 1 else b.shape[0])
    if k1 != k2:
        raise ShapeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                         f"multiplied ({k1} != {k2})")
    if xp is np and a.ndim >= 3 and b.ndim == 2 and a.dtype in _BLAS:
        return matmul_rows(a, b)
    return xp.matmul(a, b)


_BLAS = (np.dtype(np.float32), np.dtype(np.float64))


@kernel("attention")
def _attention(xp: Any, q: Any, k: Any, v: Any, mask: Any = None, scale: float = 1.0) -> Any:
    """The unfused chain the op stands for, op by op as eager runs it (the executor runs
    float32 CPU arrays through ``runtime.attention``'s native kernel instead)."""
    from .reduction import _softmax
    scores = _matmul(xp, q, xp.swapaxes(k, -1, -2)) * xp.asarray(scale, dtype=q.dtype)
    if mask is not None:
        scores = scores + mask
    return _matmul(xp, _softmax(xp, scores, -1), v)


def matmul_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` for a stacked ``a`` (rank >= 3) and a matrix ``b``, as few large
    BLAS calls as the layout of ``a`` allows (NumPy itself makes one GEMM per leading index:
    a transposed ``(L, N, E)`` view of an ``(N, L, E)`` array would be ``L`` GEMMs of ``N``
    rows). The result is C-contiguous, as NumPy's (and PyTorch's) is."""
    lead = a.ndim - 1
    if not a.size:
        return np.matmul(a, b)
    perm = sorted(range(lead), key=lambda d: -a.strides[d])
    ap = a.transpose(perm + [lead])
    if not ap.flags.c_contiguous or perm == list(range(lead)):
        if a.flags.c_contiguous:       # one GEMM over all rows
            return np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[1:])
        return np.matmul(a, b)
    out = np.empty(a.shape[:-1] + b.shape[1:], np.result_type(a, b))
    np.matmul(ap, b, out=out.transpose(perm + [lead]))   # GEMMs of ap.shape[-2] rows
    return out


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


@kernel("embedding")
def _embedding(xp: Any, weight: Any, indices: Any, padding_idx: int | None = None) -> Any:
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"embedding: expected indices of an integer dtype (long or int), "
                         f"got {indices.dtype}")
    n = weight.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = indices[(indices < 0) | (indices >= n)].reshape(-1)[0]
        raise IndexError(f"embedding: index {int(bad)} is out of range for a table of {n} rows")
    return weight[indices]


@kernel("dropout")
def _dropout(xp: Any, x: Any, train: bool, p: float = 0.5) -> Any:
    _check_p(p)
    if not train or p == 0.0:
        return x
    if p == 1.0:
        return xp.zeros_like(x)
    return x * dropout_mask(xp, x, p)


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


@kernel("avg_pool2d_grad")
def _avg_pool2d_grad(xp: Any, gy: Any, input_size: Sequence[int], kernel_size: Sequence[int],
                     stride: Sequence[int], padding: Sequence[int], ceil_mode: bool,
                     count_include_pad: bool) -> Any:
    return avg_pool2d_grad(xp, gy, tuple(input_size), kernel_size, stride, padding, ceil_mode,
                           count_include_pad)


@kernel("mse_loss")
def _mse_loss(xp: Any, x: Any, target: Any, reduction: str = "mean") -> Any:
    d = xp.subtract(x, target)
    if d.dtype.kind != "f":
        d = d.astype(np.float32)
    d *= d                                       # in place: one fresh array in all
    if reduction == "none":
        return d
    total = d.sum()
    return total / d.size if reduction == "mean" else total


@kernel("dropout_mask")
def _dropout_mask(xp: Any, x: Any, train: bool, p: float = 0.5) -> Any:
    """What ``dropout`` multiplies by, drawn as ``dropout`` draws (nothing when it does not)."""
    _check_p(p)
    if not train or p == 0.0:
        return xp.ones_like(x)
    if p == 1.0:
        return xp.zeros_like(x)
    return dropout_mask(xp, x, p)


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p}")


def dropout_mask(xp: Any, x: Any, p: float) -> Any:
    """Kept elements scaled by 1/(1-p); draws from the device generator (replayable)."""
    keep = rng.generator(device_of(x)).random(x.shape, dtype=np.float32) >= p
    return keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - p))


def _average_factor(num_batches_tracked: Any, momentum: float | None) -> float:
    """Count this batch; the weight of the new statistics (PyTorch's rule)."""
    if num_batches_tracked is not None:
        num_batches_tracked[...] += 1
    if momentum is not None:
        return momentum
    return 1.0 / float(num_batches_tracked) if num_batches_tracked is not None else 0.0


@kernel("batch_norm")
def _batch_norm(xp: Any, x: Any, running_mean: Any, running_var: Any, weight: Any, bias: Any,
                training: bool, num_batches_tracked: Any = None, momentum: float | None = 0.1,
                eps: float = 1e-5) -> Any:
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected at least a 2-D input (N, C, ...), got {tuple(x.shape)}")
    c = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ShapeError(f"batch_norm: expected {name} of shape ({c},), got {tuple(t.shape)}")
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, c) + (1,) * (x.ndim - 2)
    if training or running_mean is None:
        count = x.size // c if c else 0
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input of shape {tuple(x.shape)}")
        mean, var = xf.mean(axis=axes), xf.var(axis=axes)
        if training and running_mean is not None:
            f = _average_factor(num_batches_tracked, momentum)
            running_mean[...] = ((1 - f) * running_mean + f * mean).astype(running_mean.dtype)
            running_var[...] = ((1 - f) * running_var + f * var * count / (count - 1)
                                ).astype(running_var.dtype)
    else:
        mean, var = running_mean.astype(xf.dtype), running_var.astype(xf.dtype)
    out = (xf - mean.reshape(shape)) / xp.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(x.dtype, copy=False)


@kernel("linalg_svdvals")
def _svdvals(xp: Any, a: Any) -> Any:
    check_matrices(a.shape)
    return xp.linalg.svd(a, compute_uv=False)


@kernel("linalg_svdvals_grad")
def _svdvals_grad(xp: Any, a: Any, grad: Any) -> Any:
    check_matrices(a.shape)
    u, _, vh = xp.linalg.svd(a, full_matrices=False)
    return (u * grad.astype(u.dtype)[..., None, :]) @ vh
