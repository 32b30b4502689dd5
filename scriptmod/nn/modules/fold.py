"""``Fold`` and ``Unfold``: sliding local blocks to columns and back (``F.fold``/``F.unfold``).

    >>> nn.Unfold(kernel_size=2)(scriptmod.ones(1, 3, 4, 4)).shape
    scriptmod.Size([1, 12, 9])
    >>> nn.Fold(output_size=(4, 4), kernel_size=2)
    Fold(output_size=(4, 4), kernel_size=2, dilation=1, padding=0, stride=1)
"""
from __future__ import annotations

from typing import Any

from scriptmod.nn import functional as F
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = ["Fold", "Unfold"]


class Fold(Module):
    """Sum (N, C * prod(kernel_size), L) blocks into (N, C, *output_size); the arguments
    are kept as given (an int or a pair), as PyTorch keeps them."""

    __constants__ = ["output_size", "kernel_size", "dilation", "padding", "stride"]

    def __init__(self, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")


class Unfold(Module):
    """Extract the sliding blocks of a (N, C, H, W) input as (N, C * prod(kernel_size), L)."""

    __constants__ = ["kernel_size", "dilation", "padding", "stride"]

    def __init__(self, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = (kernel_size, dilation,
                                                                      padding, stride)

    def forward(self, input: Tensor) -> Tensor:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
