"""Derivatives of pooling (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


@derivative("max_pool2d", saves=(0,))
def _max_pool2d(ctx: Any, g: Tensor) -> tuple:
    """First-order only (``max_pool2d_grad`` has no derivative)."""
    a = ctx.attrs
    return (_op("max_pool2d_grad", g, ctx.inputs[0], kernel_size=list(a["kernel_size"]),
                stride=list(a["stride"]), padding=list(a["padding"]),
                dilation=list(a["dilation"]), ceil_mode=a["ceil_mode"]),)


@derivative("avg_pool2d")
def _avg_pool2d(ctx: Any, g: Tensor) -> tuple:
    """First-order only (``avg_pool2d_grad`` has no derivative). The input's size is an
    input of the op, read at run time in a compiled backward (symbolic dims included)."""
    a = ctx.attrs
    return (_op("avg_pool2d_grad", g, list(ctx.input_meta[0][0]),
                kernel_size=list(a["kernel_size"]), stride=list(a["stride"]),
                padding=list(a["padding"]), ceil_mode=a["ceil_mode"],
                count_include_pad=a["count_include_pad"]),)
