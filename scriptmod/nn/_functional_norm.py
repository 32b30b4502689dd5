"""Normalization layers of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

from typing import Sequence

from scriptmod._dispatch import dispatch
from scriptmod.ir import dtypes
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _HALVES

__all__ = ["batch_norm", "layer_norm"]


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5, *,
               num_batches_tracked: Tensor | None = None) -> Tensor:
    """Normalize over every dim but 1. In training it updates the running stats in place and
    counts the batch in ``num_batches_tracked`` (a scriptmod extension: the op does the
    bookkeeping, so a traced model follows ``.train()``/``.eval()``); ``momentum=None`` is a
    cumulative average."""
    if training and input.numel() // max(input.shape[1] if input.dim() > 1 else 1, 1) <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {list(input.shape)}")
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and p.dtype.category < dtypes.FLOAT:
            raise DTypeError(f"batch_norm: mixed dtype (CPU): expect parameter to have scalar "
                             f"type of Float, got {name} of {p.dtype.name}")
    return dispatch("batch_norm", (input, running_mean, running_var, weight, bias, bool(training),
                                   num_batches_tracked),
                    {"momentum": None if momentum is None else float(momentum), "eps": float(eps)})


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the trailing ``normalized_shape`` dims, then affine."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else \
        [int(s) for s in normalized_shape]
    if list(input.shape[input.dim() - len(shape):]) != shape or input.dim() < len(shape):
        raise ShapeError(f"layer_norm: given normalized_shape={shape}, expected input with "
                         f"shape [*, {', '.join(map(str, shape))}], but got input of size "
                         f"{list(input.shape)}")
    _check_norm_params("layer_norm", input, weight, bias)
    dims = list(range(-len(shape), 0))
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
