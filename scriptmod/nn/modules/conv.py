"""``Conv2d`` with PyTorch's arguments, padding modes and parameter layout.

    >>> nn.Conv2d(3, 8, 3, padding=1)
    Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
"""
from __future__ import annotations

from typing import Any

from scriptmod._creation import empty
from scriptmod.nn import functional as F
from scriptmod.ir.errors import ShapeError
from scriptmod.nn.module import Module
from scriptmod.nn.modules.linear import reset_fan_in_uniform
from scriptmod.nn.parameter import Parameter
from scriptmod.tensor import Tensor

__all__ = ["Conv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check_conv_args(in_channels: int, out_channels: int, groups: int, padding: Any,
                     stride: tuple[int, int], padding_mode: str) -> None:
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups:
        raise ValueError("out_channels must be divisible by groups")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             "{'valid', 'same'}")
        if padding == "same" and stride != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions")
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                         f"padding_mode='{padding_mode}'")


def _reversed_padding(padding: Any, kernel_size: tuple[int, int],
                      dilation: tuple[int, int]) -> tuple[int, ...]:
    """F.pad's (left, right, top, bottom) for the explicit padding modes."""
    out: list[int] = []
    for i in (1, 0):
        if padding == "same":
            total = dilation[i] * (kernel_size[i] - 1)
            out += [total // 2, total - total // 2]
        elif padding == "valid":
            out += [0, 0]
        else:
            out += [padding[i], padding[i]]
    return tuple(out)


class Conv2d(Module):
    """2-D convolution over (N, C, H, W) or (C, H, W) input."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.kernel_size = F._pair(kernel_size, "kernel_size")
        self.stride = F._pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else F._pair(padding, "padding")
        self.dilation = F._pair(dilation, "dilation")
        _check_conv_args(in_channels, out_channels, groups, padding, self.stride, padding_mode)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.transposed, self.output_padding = False, (0, 0)
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = _reversed_padding(self.padding, self.kernel_size,
                                                                  self.dilation)
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size,
                                      device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_fan_in_uniform(self.weight, self.bias)

    def _check_input(self, input: Tensor) -> None:
        c = self.in_channels
        if input.dim() not in (3, 4) or input.shape[-3] != c:
            raise ShapeError(f"{type(self).__name__}: expected 3-D or 4-D input (C, H, W) / "
                             f"(N, C, H, W) with C={c}, got shape {tuple(input.shape)}")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return F.conv2d(padded, self.weight, self.bias, self.stride, 0, self.dilation,
                            self.groups)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s
