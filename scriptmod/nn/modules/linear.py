"""``Linear`` (y = x W^T + b), ``LazyLinear`` (in_features inferred on the first call) and
``Bilinear`` (y = x1^T A x2 + b).

    >>> nn.Linear(4, 2)
    Linear(in_features=4, out_features=2, bias=True)
"""
from __future__ import annotations

import math
from typing import Any

from scriptmod._creation import empty
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.ir.errors import ShapeError
from scriptmod.nn.module import Module
from scriptmod.nn.parameter import Parameter, UninitializedParameter
from scriptmod.tensor import Tensor

__all__ = ["Linear", "NonDynamicallyQuantizableLinear", "LazyLinear", "Bilinear"]


def reset_fan_in_uniform(weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's default for Linear and Conv: kaiming_uniform_(a=sqrt(5)) on the weight,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


def check_last_dim(layer: str, input: Tensor, in_features: int) -> None:
    if input.dim() == 0 or input.shape[-1] != in_features:
        raise ShapeError(f"{layer}: expected input with last dimension {in_features} "
                         f"(in_features), got shape {tuple(input.shape)}")


class Linear(Module):
    """y = x W^T + b with W of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_fan_in_uniform(self.weight, self.bias)

    def forward(self, input: Tensor) -> Tensor:
        check_last_dim(type(self).__name__, input, self.in_features)
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention's ``out_proj`` class (named so that reprs match PyTorch's)."""


class LazyLinear(Linear):
    """A ``Linear`` whose ``in_features`` is taken from the first input's last dimension.

    >>> m = nn.LazyLinear(3); m(scriptmod.randn(2, 5)).shape; m.in_features
    scriptmod.Size([2, 3])
    5
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)

    def has_uninitialized_params(self) -> bool:
        return isinstance(self.weight, UninitializedParameter)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def _build(self, *inputs: Any, **kwargs: Any) -> bool | None:
        """Materialize the parameters from the first input's last dimension and become a
        plain ``Linear`` (the Module lazy-build hook); False when there is no input yet."""
        if not self.has_uninitialized_params():
            if self.in_features == 0 and self.weight is not None:   # given by v= or a checkpoint
                self.in_features = int(self.weight.shape[1])
                self.__class__ = self.cls_to_become
            return None
        if not inputs or not isinstance(inputs[0], Tensor):
            return False
        if inputs[0].dim() == 0:
            raise ShapeError("LazyLinear: expected input with at least 1 dimension (the last "
                             "one is in_features), got a 0-d tensor")
        self.in_features = int(inputs[0].shape[-1])
        self.weight.materialize((self.out_features, self.in_features))
        if self.bias is not None:
            self.bias.materialize((self.out_features,))
        self.reset_parameters()
        self.__class__ = self.cls_to_become
        return None

    initialize_parameters = _build

    def forward(self, input: Tensor) -> Tensor:
        self._build(input)
        return Linear.forward(self, input)


class Bilinear(Module):
    """y_k = x1^T A_k x2 + b_k with A of shape (out_features, in1_features, in2_features).

        >>> nn.Bilinear(3, 4, 2)(scriptmod.randn(5, 3), scriptmod.randn(5, 4)).shape
        scriptmod.Size([5, 2])
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, device=device,
                                      dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's: U(-1/sqrt(in1_features), 1/sqrt(in1_features)) on weight and bias."""
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features="
                             f"{self.in1_features})")
        bound = 1 / math.sqrt(self.in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
