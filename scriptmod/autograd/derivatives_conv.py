"""Derivatives of convolution and of the sliding-block ops (rows of ``autograd.derivatives``'
table).

A convolution ``y = conv(x, w)`` is bilinear, and its two backward ops are the other two
products of the same bilinear form ``<conv(x, w), gy>``: ``grad_input(gy, w) = dx`` and
``grad_weight(gy, x) = dw``. So the derivative of each of the three ops is the other two
(``grad_input`` is also the transposed convolution, whose gradients these are), and every
order of derivative runs through the same three kernels. The sizes the backward ops produce
are inputs of theirs, read at run time in a compiled backward (symbolic dims included).
"""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative, needs_grad
from scriptmod.ir.ops.conv import RANKS
from scriptmod.tensor import Tensor


def _conv_attrs(ctx: Any) -> dict[str, Any]:
    a = ctx.attrs
    return dict(stride=list(a["stride"]), padding=list(a["padding"]),
                dilation=list(a["dilation"]), groups=a["groups"])


def _fit(t: Tensor, like: Tensor) -> Tensor:
    """``t`` cut to ``like``'s spatial size: a convolution over an input with rows no window
    of ``like`` reached (a transposed convolution's ``output_padding`` past its stride) has
    positions more."""
    for dim in range(2, t.dim()):
        if t.shape[dim] != like.shape[dim]:
            t = t.narrow(dim, 0, like.shape[dim])
    return t


def _as(g: Tensor, like: Tensor) -> Tensor:
    return g if g.dtype is like.dtype else g.to(like.dtype)


def _register(rank: int) -> None:
    """The derivative rows of ``conv{rank}d`` and its two backward ops."""
    conv, grad_input, grad_weight = f"conv{rank}d", f"conv{rank}d_grad_input", \
        f"conv{rank}d_grad_weight"

    @derivative(conv, saves=(0, 1))
    def _forward(ctx: Any, g: Tensor) -> tuple:
        x, w = ctx.inputs[0], ctx.inputs[1]
        gy, kw = _as(g, x), _conv_attrs(ctx)
        gx = _op(grad_input, gy, w, list(x.shape), **kw) if needs_grad(ctx, 0) else None
        gw = _op(grad_weight, gy, x, list(w.shape), **kw) if needs_grad(ctx, 1) else None
        gb = g.sum(dim=(0, *range(2, rank + 2))) \
            if ctx.input_meta[2] is not None and needs_grad(ctx, 2) else None
        return gx, gw, gb

    @derivative(grad_input, saves=(0, 1))
    def _grad_input(ctx: Any, g: Tensor) -> tuple:
        """d/d(gy) is the convolution of ``g``; d/dw the weight gradient of ``g`` by ``gy``."""
        gy, w = ctx.inputs[0], ctx.inputs[1]
        kw = _conv_attrs(ctx)
        ggy = _fit(_op(conv, _as(g, w), w, None, **kw), gy)
        gw = _op(grad_weight, gy, _as(g, gy), list(w.shape), **kw)
        return ggy, gw, None

    @derivative(grad_weight, saves=(0, 1))
    def _grad_weight(ctx: Any, g: Tensor) -> tuple:
        """d/d(gy) is the convolution of the input by ``g``; d/dx the input gradient."""
        gy, x = ctx.inputs[0], ctx.inputs[1]
        kw = _conv_attrs(ctx)
        ggy = _fit(_op(conv, x, _as(g, x), None, **kw), gy)
        gx = _op(grad_input, gy, _as(g, gy), list(x.shape), **kw)
        return ggy, gx, None


for _rank in RANKS:
    _register(_rank)


def _blocks_attrs(ctx: Any) -> dict[str, Any]:
    a = ctx.attrs
    return {k: list(a[k]) for k in ("kernel_size", "dilation", "padding", "stride")}


@derivative("im2col")
def _im2col(ctx: Any, g: Tensor) -> tuple:
    """unfold's adjoint is fold: each block's gradient summed back where it was read."""
    return (_op("col2im", g, list(ctx.input_meta[0][0][2:]), **_blocks_attrs(ctx)),)


@derivative("col2im")
def _col2im(ctx: Any, g: Tensor) -> tuple:
    """fold's adjoint is unfold: each block reads the gradient where it was added."""
    return _op("im2col", g, **_blocks_attrs(ctx)), None
