"""Normalization layers of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from scriptmod._dispatch import dispatch
from scriptmod.autograd import grad_mode
from scriptmod.ir import dtypes
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _HALVES, _opmath
from scriptmod.nn._functional_layers import pad

__all__ = ["batch_norm", "layer_norm", "group_norm", "instance_norm", "local_response_norm",
           "rms_norm"]


def _verify_batch_size(size: Sequence[int]) -> None:
    """PyTorch's training check: statistics need more than one value per channel
    (N times the spatial size; an empty batch passes)."""
    if size[0] * math.prod(size[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {list(size)}")


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5, *,
               num_batches_tracked: Tensor | None = None) -> Tensor:
    """Normalize over every dim but 1. In training it updates the running stats in place and
    counts the batch in ``num_batches_tracked`` (a scriptmod extension: the op does the
    bookkeeping, so a traced model follows ``.train()``/``.eval()``); ``momentum=None`` is a
    cumulative average."""
    if training:
        _verify_batch_size(list(input.shape))
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and p.dtype.category < dtypes.FLOAT:
            raise DTypeError(f"batch_norm: mixed dtype (CPU): expect parameter to have scalar "
                             f"type of Float, got {name} of {p.dtype.name}")
    if input.numel() == 0:
        return _empty_batch_norm(input, weight, bias, training, num_batches_tracked)
    return dispatch("batch_norm", (input, running_mean, running_var, weight, bias, bool(training),
                                   num_batches_tracked),
                    {"momentum": None if momentum is None else float(momentum), "eps": float(eps)})


def _empty_batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None,
                      training: bool, num_batches_tracked: Tensor | None) -> Tensor:
    """PyTorch's empty-batch path: no statistics (the running ones stay as they are), the
    output a copy of the input scaled by weight[0] and shifted by bias[0]; the batch counts."""
    if training and num_batches_tracked is not None:
        with grad_mode.no_grad():
            num_batches_tracked.add_(1)
    out = input.clone()
    if weight is not None:
        out = out * weight[0]
    return out if bias is None else out + bias[0]


def _normalized_dims(name: str, input: Tensor, normalized_shape: int | Sequence[int]) -> list[int]:
    """The trailing dims ``normalized_shape`` names (negative), checked against the input."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else \
        [int(s) for s in normalized_shape]
    if list(input.shape[input.dim() - len(shape):]) != shape or input.dim() < len(shape):
        raise ShapeError(f"{name}: given normalized_shape={shape}, expected input with "
                         f"shape [*, {', '.join(map(str, shape))}], but got input of size "
                         f"{list(input.shape)}")
    return list(range(-len(shape), 0))


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the trailing ``normalized_shape`` dims, then affine."""
    dims = _normalized_dims("layer_norm", input, normalized_shape)
    _check_norm_params("layer_norm", input, weight, bias)
    centered = input - input.mean(dim=dims, keepdim=True)
    var = (centered * centered).mean(dim=dims, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    out = out if bias is None else out + bias
    return out if out.dtype is input.dtype else out.to(input.dtype)   # half x, float32 w


def _check_norm_params(name: str, input: Tensor, *params: Tensor | None) -> None:
    """PyTorch's CPU rule: parameters of the input's dtype, or float32 for a half input."""
    for p in params:
        if p is not None and p.dtype is not input.dtype and not (
                input.dtype in _HALVES and p.dtype is dtypes.float32):
            raise DTypeError(f"{name}: mixed dtype (CPU): expected parameters of dtype "
                             f"{input.dtype.name} (the input's), got {p.dtype.name}")


def rms_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the trailing ``normalized_shape`` dims, times ``weight``;
    computed in float32 for a half input, ``eps=None`` the machine epsilon of that precision
    (PyTorch's rule; the weight multiplies after the cast back, so it may promote)."""
    dims = _normalized_dims("rms_norm", input, normalized_shape)
    x = _opmath(input)
    if eps is None:
        eps = float(np.finfo(x.dtype.name).eps)
    out = (x * ((x * x).mean(dim=dims, keepdim=True) + eps).rsqrt()).to(input.dtype)
    return out if weight is None else out * weight


def _normalize(x: Tensor, dims: list[int], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) over ``dims``, with the mean and biased variance (the
    callers pass a half input as float32 and round the result once, as PyTorch does)."""
    mean = x.mean(dim=dims, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dim=dims, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def _channel_affine(out: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """out * weight + bias, one value per channel (dim 1)."""
    shape = [-1] + [1] * (out.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize each of ``num_groups`` groups of channels of each sample over its channels
    and spatial positions, then scale and shift per channel."""
    if input.dim() < 2:
        raise ShapeError(f"Expected at least 2 dimensions for input tensor but received "
                         f"{input.dim()}")
    n, c, spatial = input.shape[0], input.shape[1], list(input.shape[2:])
    if num_groups <= 0 or c % num_groups:
        raise ShapeError(f"Expected number of channels in input to be divisible by num_groups, "
                         f"but got input of shape {list(input.shape)} and num_groups={num_groups}")
    _verify_batch_size([n * c // num_groups, num_groups] + spatial)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p.dim() != 1 or p.shape[0] != c):
            raise ShapeError(f"Expected {name} to be a vector of size equal to the number of "
                             f"channels in input, but got {name} of shape {list(p.shape)} and "
                             f"input of shape {list(input.shape)}")
    _check_norm_params("group_norm", input, weight, bias)
    grouped = _opmath(input).reshape([n, num_groups, c // num_groups] + spatial)
    out, _, _ = _normalize(grouped, list(range(2, grouped.dim())), eps)
    out = _channel_affine(out.reshape(input.shape), weight, bias)
    return out if out.dtype is input.dtype else out.to(input.dtype)


def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel of each sample over its spatial positions, then scale and shift
    per channel. With ``use_input_stats`` and running stats given, those move towards the
    batch's mean of the per-instance statistics (unbiased variance), in place."""
    if input.dim() < 2:
        raise ShapeError(f"instance_norm: expected at least a 2-D input (N, C, ...), got "
                         f"{list(input.shape)}")
    dims = list(range(2, input.dim()))
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when "
                             "use_input_stats is false")
        shape = [-1] + [1] * len(dims)
        out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
        return _channel_affine(out, weight, bias).to(input.dtype)
    spatial = math.prod(input.shape[2:])
    if spatial == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{list(input.shape)}")
    out, mean, var = _normalize(_opmath(input), dims, eps)
    if running_mean is not None or running_var is not None:
        _update_running_stats(running_mean, running_var, mean, var, spatial, momentum)
    return _channel_affine(out, weight, bias).to(input.dtype)


def _update_running_stats(running_mean: Tensor | None, running_var: Tensor | None, mean: Tensor,
                          var: Tensor, count: int, momentum: float) -> None:
    """stat <- (1 - momentum) stat + momentum * (the batch's mean of per-instance stats)."""
    with grad_mode.no_grad():
        if running_mean is not None:
            batch = mean.mean(dim=0).reshape(running_mean.shape)
            running_mean.copy_(running_mean * (1 - momentum) + batch * momentum)
        if running_var is not None:
            batch = var.mean(dim=0).reshape(running_var.shape) * (count / max(count - 1, 1))
            running_var.copy_(running_var * (1 - momentum) + batch * momentum)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """x / (k + alpha * mean of x^2 over a window of ``size`` channels)^beta; the window is
    zero-padded at the channel ends and always divided by ``size`` (PyTorch's avg-pool form)."""
    if input.dim() < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.dim()} "
                         f"dimensions)")
    if input.numel() == 0:
        return input
    c = input.shape[1]
    padded = pad(input * input, [0, 0] * (input.dim() - 2) + [size // 2, (size - 1) // 2])
    window = padded.narrow(1, 0, c)
    for i in range(1, size):
        window = window + padded.narrow(1, i, c)
    return input / ((window / size) * alpha + k) ** beta
