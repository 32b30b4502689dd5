"""Convolution of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

from typing import Any

from scriptmod._dispatch import dispatch
from scriptmod.ir.errors import ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _pair
from scriptmod.nn._functional_layers import pad

__all__ = ["conv2d"]


def _positive(v: tuple[int, int], arg: str, op: str, what: str) -> None:
    if min(v) <= 0:
        raise ShapeError(f"{op}: {what}, got {arg}={v}")


def _same_padding(input: Tensor, weight: Tensor, stride: tuple[int, int],
                  dilation: tuple[int, int]) -> tuple[Tensor, tuple[int, int]]:
    """'same': equal padding where it splits evenly, the extra row/column right/bottom."""
    if stride != (1, 1):
        raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
    total = [dilation[i] * (weight.shape[2 + i] - 1) for i in range(2)]
    sym = (total[0] // 2, total[1] // 2)
    extra = (total[1] - 2 * sym[1], total[0] - 2 * sym[0])
    if extra != (0, 0):
        input = pad(input, (0, extra[0], 0, extra[1]))
    return input, sym


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of a (N, C, H, W) or (C, H, W) input."""
    if input.dim() not in (3, 4):
        raise ShapeError(f"conv2d: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")
    batched = input.dim() == 4
    x = input if batched else input.unsqueeze(0)
    st, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
    _positive(st, "stride", "conv2d", "non-positive stride is not supported")
    _positive(dil, "dilation", "conv2d", "dilation should be greater than zero")
    if padding == "valid":
        pd = (0, 0)
    elif padding == "same":
        x, pd = _same_padding(x, weight, st, dil)
    else:
        pd = _pair(padding, "padding")
        if min(pd) < 0:
            raise ShapeError(f"conv2d: negative padding is not supported, got padding={pd}")
    out = dispatch("conv2d", (x, weight, bias), {"stride": st, "padding": pd, "dilation": dil,
                                                 "groups": int(groups)})
    return out if batched else out.squeeze(0)
