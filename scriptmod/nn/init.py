"""``scriptmod.nn.init``: in-place weight initializers with PyTorch's semantics.

Every function runs under ``no_grad``, writes into the tensor it is given and returns it.
Draws come from ``scriptmod.rand``/``scriptmod.randn``, so ``scriptmod.manual_seed`` makes
them reproducible::

    >>> w = scriptmod.empty(3, 5)
    >>> nn.init.kaiming_uniform_(w, a=math.sqrt(5)) is w
    True
"""
from __future__ import annotations

import math
import warnings
from typing import Any

from scriptmod._creation import Generator, default_generator, rand, randn
from scriptmod._tensor_ops import where
from scriptmod.autograd.grad_mode import no_grad
from scriptmod.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_"]

_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
               "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's table)."""
    if nonlinearity in _LINEAR_FNS:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         "2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _write(tensor: Tensor, values: Tensor) -> Tensor:
    with no_grad():
        return tensor.copy_(values)


def _draw(kind: Any, tensor: Tensor, generator: Generator | None) -> Tensor:
    """``kind`` (rand or randn) of ``tensor``'s shape, drawn from ``generator`` if given."""
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"nn.init: argument 'generator' must be a scriptmod.Generator, got "
                        f"{type(generator).__name__}")
    dtype = tensor.dtype if tensor.is_floating_point() else None
    with (generator or default_generator)._drawing(tensor._device_str()):
        return kind(*tensor.shape, dtype=dtype, device=tensor.device)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0,
             generator: Generator | None = None) -> Tensor:
    """Fill with U(a, b) (drawn from ``generator`` when given)."""
    return _write(tensor, _draw(rand, tensor, generator) * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0,
            generator: Generator | None = None) -> Tensor:
    """Fill with N(mean, std^2) (drawn from ``generator`` when given)."""
    return _write(tensor, _draw(randn, tensor, generator) * std + mean)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Generator | None = None) -> Tensor:
    """Fill with N(mean, std^2) restricted to [a, b] (rejection sampling: the same
    distribution as PyTorch's inverse-CDF method)."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    with no_grad():
        values = _draw(randn, tensor, generator) * std + mean
        for _ in range(100):
            outside = (values < a) | (values > b)
            if not outside.any().item():
                break
            values = where(outside, _draw(randn, tensor, generator) * std + mean, values)
        return tensor.copy_(values.clamp(a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix in a 2-D tensor."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    from scriptmod._creation import eye
    return _write(tensor, eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0,
                    generator: Generator | None = None) -> Tensor:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0,
                   generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float | None:
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator: Generator | None = None) -> Tensor:
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al., 2015)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor if std is None else normal_(tensor, 0.0, std, generator)
