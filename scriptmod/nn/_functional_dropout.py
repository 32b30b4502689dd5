"""Dropout variants (channel-wise, alpha) of ``scriptmod.nn.functional`` (re-exported by it).

Channel-wise (feature) dropout zeroes whole channels: one draw per (sample, channel), scaled
by 1/(1-p), made by the ``dropout_mask`` op on a (N, C, 1, ...) tensor of ones, so its
``training`` flag is an op input and a traced model follows ``.train()``/``.eval()``. Alpha
dropout keeps SELU's mean and variance: a dropped element becomes -alpha * scale, and the
result is rescaled (Klambauer et al., 2017); its training flag is a Python value, so a traced
model keeps the mode it was traced in (as PyTorch's trace does).
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

from scriptmod._creation import ones, rand
from scriptmod._dispatch import dispatch
from scriptmod.ir.errors import ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _apply, _tracing

__all__ = ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]

_SELU_NEGATIVE = 1.7580993408473766   # SELU's scale * alpha: the value a dropped unit takes


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _feature_shape(x: Tensor) -> list:
    """One draw per (sample, channel): (N, C, 1, ...)."""
    if x.dim() < 2:
        raise ShapeError("Feature dropout requires at least 2 dimensions in the input")
    return [x.shape[0], x.shape[1]] + [1] * (x.dim() - 2)


def _feature_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """x times a per-channel multiplier (kept 1/(1-p), dropped 0; ones in eval)."""
    if not training and not _tracing() or x.numel() == 0:
        return x
    mask = dispatch("dropout_mask", (ones(_feature_shape(x), dtype=x.dtype, device=x.device),
                                     bool(training)), {"p": float(p)})
    return x * mask


def _channelwise(input: Tensor, p: float, training: bool, inplace: bool,
                 batched: bool) -> Tensor:
    """Feature dropout of ``input``, an unbatched one seen as a batch of one."""
    _check_p(p)

    def fn(x: Tensor) -> Tensor:
        if batched:
            return _feature_dropout(x, p, training)
        return _feature_dropout(x.unsqueeze(0), p, training).squeeze(0)
    return _apply(input, fn, inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of a (N, C, L) or unbatched (C, L) input with probability ``p``,
    scaling the others by 1/(1-p)."""
    _check_p(p)
    if input.dim() not in (2, 3):
        raise ShapeError(f"dropout1d: Expected 2D or 3D input, but received a {input.dim()}D "
                         f"input. Note that dropout1d exists to provide channel-wise dropout on "
                         f"inputs with 1 spatial dimension, a channel dimension, and an optional "
                         f"batch dimension (i.e. 2D or 3D inputs).")
    return _channelwise(input, p, training, inplace, input.dim() == 3)


def _deprecated_rank(name: str, ndim: int, spatial: int) -> None:
    warnings.warn(f"{name}: Received a {ndim}-D input to {name}, which is deprecated and will "
                  f"result in an error in a future release. To retain the behavior and silence "
                  f"this warning, please use dropout instead. Note that {name} exists to provide "
                  f"channel-wise dropout on inputs with {spatial} spatial dimensions, a channel "
                  f"dimension, and an optional batch dimension (i.e. {spatial + 1}D or "
                  f"{spatial + 2}D inputs).", stacklevel=3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of a (N, C, H, W) input with probability ``p``. A 3-D input is
    taken as (N, C, L), as PyTorch still does (with its warning)."""
    _check_p(p)
    if input.dim() not in (3, 4):
        _deprecated_rank("dropout2d", input.dim(), 2)
    if input.dim() == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change in "
                      "a future release to interpret the input as one without a batch dimension, "
                      "i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, "
                      "please switch to using dropout1d instead.", stacklevel=2)
    return _channelwise(input, p, training, inplace, True)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of a (N, C, D, H, W) or unbatched (C, D, H, W) input with
    probability ``p``."""
    _check_p(p)
    if input.dim() not in (4, 5):
        _deprecated_rank("dropout3d", input.dim(), 3)
    return _channelwise(input, p, training, inplace, input.dim() == 5)


def _alpha(input: Tensor, p: float, training: bool, inplace: bool,
           noise_shape: Callable[[Tensor], list]) -> Tensor:
    """PyTorch's alpha dropout: keep ~ Bernoulli(1 - p) of ``noise_shape``, then
    a * (x * keep + alpha' * (keep - 1)) + a * alpha' * p, a = 1/sqrt((alpha'^2 p + 1)(1 - p))."""
    _check_p(p)
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return _apply(input, lambda x: x * 0, inplace)
    a = 1.0 / math.sqrt((_SELU_NEGATIVE ** 2 * p + 1) * (1 - p))

    def fn(x: Tensor) -> Tensor:
        keep = (rand(noise_shape(x), device=x.device) >= p).to(x.dtype)
        shift = (keep - 1.0) * (_SELU_NEGATIVE * a) + _SELU_NEGATIVE * a * p
        return x * (keep * a) + shift
    return _apply(input, fn, inplace)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Tensor:
    """Dropout for SELU networks: keeps the input's mean and variance (dropped elements take
    SELU's negative saturation value, then an affine map restores the moments)."""
    return _alpha(input, p, training, inplace, lambda x: list(x.shape))


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels (one draw per sample and channel)."""
    return _alpha(input, p, training, inplace, _feature_shape)
