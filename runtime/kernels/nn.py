"""Reference kernels of linear algebra and neural-network primitives, and the backward
helpers their derivatives call (col2im, pooling masks). Conv2d is im2col plus one BLAS
matmul per group; pooling uses strided window views, never Python loops over pixels."""
from __future__ import annotations

from typing import Any

import numpy as np

from scriptmod.ir.ops.nn import check_matrices
from .. import batch_norm as bn
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
    if x.size == 0:     # an empty batch (PyTorch): counted, running stats untouched, a copy out
        if training and running_mean is not None:
            _average_factor(num_batches_tracked, momentum)
        return x.copy()
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected at least a 2-D input (N, C, ...), got {tuple(x.shape)}")
    c = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ShapeError(f"batch_norm: expected {name} of shape ({c},), got {tuple(t.shape)}")
    fast = bn.taken(x, running_mean, running_var, weight, bias)
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    axes = (0,) + tuple(range(2, x.ndim))
    if training or running_mean is None:
        count = x.size // c if c else 0
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input of shape {tuple(x.shape)}")
        mean, var = bn.stats(x) if fast else (xf.mean(axis=axes), xf.var(axis=axes))
        if training and running_mean is not None:
            f = _average_factor(num_batches_tracked, momentum)
            running_mean[...] = ((1 - f) * running_mean + f * mean).astype(running_mean.dtype)
            running_var[...] = ((1 - f) * running_var + f * var * count / (count - 1)
                                ).astype(running_var.dtype)
    else:
        mean, var = running_mean.astype(xf.dtype), running_var.astype(xf.dtype)
    if fast:
        return bn.normalize(x, mean, var, weight, bias, eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    out = (xf - mean.reshape(shape)) / xp.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(x.dtype, copy=False)


@kernel("batch_norm_backward")
def _batch_norm_backward(xp: Any, g: Any, x: Any, running_mean: Any, running_var: Any,
                         weight: Any, training: bool, eps: float = 1e-5) -> tuple:
    """``(grad_input, grad_weight, grad_bias)`` of ``batch_norm`` (first order): with batch
    statistics (training, or no running ones) the input gradient goes through them too.
    float32 on the CPU: two native passes (``runtime.batch_norm``)."""
    c = x.shape[1] if x.ndim >= 2 else -1
    if tuple(g.shape) != tuple(x.shape) or c < 0 or any(
            t is not None and tuple(t.shape) != (c,) for t in (running_mean, running_var, weight)):
        raise ShapeError(f"batch_norm_backward: expected grad of the input's shape "
                         f"{tuple(x.shape)} and per-channel tensors of shape ({c},); got grad "
                         f"{tuple(g.shape)}")
    batch_stats = training or running_mean is None
    if bn.taken(x, g, running_mean, running_var, weight):
        return bn.backward(g, x, running_mean, running_var, weight, eps, batch_stats)
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    gf = g.astype(xf.dtype, copy=False)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if batch_stats:
        mean, var = xf.mean(axis=axes), xf.var(axis=axes)
    else:
        mean, var = running_mean.astype(xf.dtype), running_var.astype(xf.dtype)
    inv = 1 / xp.sqrt(var + eps)
    xhat = (xf - mean.reshape(shape)) * inv.reshape(shape)
    sum_g, sum_gxhat = gf.sum(axis=axes), (gf * xhat).sum(axis=axes)
    k = inv if weight is None else inv * weight.astype(xf.dtype)
    if batch_stats:
        n = x.size // x.shape[1]
        gx = k.reshape(shape) * (gf - (sum_g / n).reshape(shape)
                                 - xhat * (sum_gxhat / n).reshape(shape))
    else:
        gx = gf * k.reshape(shape)
    return gx.astype(x.dtype, copy=False), sum_gxhat, sum_g


@kernel("linalg_svdvals")
def _svdvals(xp: Any, a: Any) -> Any:
    check_matrices(a.shape)
    return xp.linalg.svd(a, compute_uv=False)


@kernel("linalg_svdvals_grad")
def _svdvals_grad(xp: Any, a: Any, grad: Any) -> Any:
    check_matrices(a.shape)
    u, _, vh = xp.linalg.svd(a, full_matrices=False)
    return (u * grad.astype(u.dtype)[..., None, :]) @ vh
