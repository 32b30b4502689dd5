"""Derivatives of convolution (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


@derivative("conv2d", saves=(0, 1))
def _conv2d(ctx: Any, g: Tensor) -> tuple:
    """Through the registry's backward kernels (``conv2d_grad_input``/``_weight``), which
    have no derivative of their own: first order only. The sizes they produce are inputs
    of theirs, read at run time in a compiled backward (symbolic dims included)."""
    x, w = ctx.inputs[0], ctx.inputs[1]
    a = ctx.attrs
    conv = dict(stride=list(a["stride"]), padding=list(a["padding"]),
                dilation=list(a["dilation"]), groups=a["groups"])
    gy = g if g.dtype is x.dtype else g.to(x.dtype)
    gx = _op("conv2d_grad_input", gy, w, list(x.shape), **conv)
    gw = _op("conv2d_grad_weight", gy, x, list(w.shape), **conv)
    gb = g.sum(dim=(0, 2, 3)) if ctx.input_meta[2] is not None else None
    return gx, gw, gb
