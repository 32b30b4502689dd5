"""Padding layers: zero, constant, reflection, replication and circular, 1-D to 3-D.

Each is ``F.pad`` with the layer's mode over its last 1, 2 or 3 dims (batched or unbatched
input); an int ``padding`` pads every side by it, a tuple is
``(left, right, top, bottom, front, back)``; negative amounts crop where torch allows it.

    >>> nn.ReflectionPad2d((1, 1, 2, 0))
    ReflectionPad2d((1, 1, 2, 0))
    >>> nn.ConstantPad1d(2, 3.5)(scriptmod.ones(1, 2))
    tensor([[3.5000, 3.5000, 1.0000, 1.0000, 3.5000, 3.5000]])
"""
from __future__ import annotations

from typing import Sequence

from scriptmod.nn import functional as F
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d",
           "ZeroPad3d"]


def _amounts(padding: int | Sequence[int], n: int) -> tuple[int, ...]:
    """torch's ``_ntuple(n)``: an int repeated ``n`` times, a sequence kept as it is."""
    if isinstance(padding, (tuple, list)):
        return tuple(padding)
    return (padding,) * n


class _PadNd(Module):
    """A padding layer of ``dims`` trailing dims in one ``F.pad`` mode."""

    mode: str
    dims: int

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__()
        self.padding = _amounts(padding, 2 * self.dims)

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    """Pads with ``value``; its repr names the padding and the value, as torch's."""

    mode = "constant"

    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class _ZeroPadNd(_ConstantPadNd):
    """Constant padding with 0 (its repr shows only the padding, as torch's)."""

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ReflectionPadNd(_PadNd):
    """Mirrors the input about its edge (the edge not repeated); each amount must be smaller
    than the padded dim."""

    mode = "reflect"


class _ReplicationPadNd(_PadNd):
    """Repeats the edge value."""

    mode = "replicate"


class _CircularPadNd(_PadNd):
    """Wraps around (each amount at most the padded dim); the layer checks the input's rank."""

    mode = "circular"

    def forward(self, input: Tensor) -> Tensor:
        if input.dim() not in (self.dims + 1, self.dims + 2):
            raise ValueError(f"{type(self).__name__}: expected {self.dims + 1}D or "
                             f"{self.dims + 2}D input (got {input.dim()}D input)")
        return F.pad(input, self.padding, "circular")


class ConstantPad1d(_ConstantPadNd):
    dims = 1


class ConstantPad2d(_ConstantPadNd):
    dims = 2


class ConstantPad3d(_ConstantPadNd):
    dims = 3


class ZeroPad1d(_ZeroPadNd):
    dims = 1


class ZeroPad2d(_ZeroPadNd):
    dims = 2


class ZeroPad3d(_ZeroPadNd):
    dims = 3


class ReflectionPad1d(_ReflectionPadNd):
    dims = 1


class ReflectionPad2d(_ReflectionPadNd):
    dims = 2


class ReflectionPad3d(_ReflectionPadNd):
    dims = 3


class ReplicationPad1d(_ReplicationPadNd):
    dims = 1


class ReplicationPad2d(_ReplicationPadNd):
    dims = 2


class ReplicationPad3d(_ReplicationPadNd):
    dims = 3


class CircularPad1d(_CircularPadNd):
    dims = 1


class CircularPad2d(_CircularPadNd):
    dims = 2


class CircularPad3d(_CircularPadNd):
    dims = 3
