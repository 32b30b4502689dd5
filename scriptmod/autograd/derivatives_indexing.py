"""Derivatives of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique (rows of ``autograd.derivatives``' table).

``gather`` and ``scatter`` are each other's adjoints, so every rule here is written with
those two ops (and elementwise ones): double backward works. ``scatter``'s reductions follow
PyTorch's ``scatter_reduce_backward``: ``prod`` divides out each factor (with the exclusive
product where a factor is 0), ``amax``/``amin`` share the gradient evenly among the values
that reach the extreme, ``mean`` divides by the count. The other ops of the family are
decompositions (their derivatives come from their parts) or have no derivative (counts,
indices, bins).
"""
from __future__ import annotations

from typing import Any

from scriptmod._creation import ones, zeros
from scriptmod._tensor_ops import where
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


def gather(t: Tensor, dim: int, index: Tensor) -> Tensor:
    return _op("gather", t, index, dim=dim)


def scatter(t: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str = "none",
            include_self: bool = True) -> Tensor:
    return _op("scatter", t, index, src, dim=dim, reduce=reduce, include_self=include_self)


def _zeros_at(t: Tensor, dim: int, index: Tensor) -> Tensor:
    """``t`` with 0 written where ``index`` points."""
    return scatter(t, dim, index, zeros((), dtype=t.dtype, device=t.device).expand(index.shape))


@derivative("gather", saves=(1,))
def _gather(ctx: Any, g: Tensor) -> tuple:
    """Zeros of the input's shape with ``g`` added where each element came from."""
    index = ctx.inputs[1]
    base = zeros(ctx.input_meta[0][0], dtype=g.dtype, device=g.device)
    return scatter(base, ctx.attrs["dim"], index, g, "sum"), None


def _mean_back(g: Tensor, x: Tensor, index: Tensor, src: Tensor, dim: int, result: Tensor,
               include_self: bool) -> tuple:
    count = (ones if include_self else zeros)(g.shape, dtype=g.dtype, device=g.device)
    count = scatter(count, dim, index, ones(index.shape, dtype=g.dtype, device=g.device), "sum")
    count = where(count == 0, 1.0, count)
    return g / count, gather(g, dim, index) / gather(count, dim, index)


def _extreme_back(g: Tensor, x: Tensor, index: Tensor, src: Tensor, dim: int,
                  result: Tensor) -> tuple:
    value = gather(result, dim, index)
    x_wins, src_wins = (x == result).to(g.dtype), (src == value).to(g.dtype)
    share = g / scatter(x_wins, dim, index, src_wins, "sum")
    return x_wins * share, src_wins * gather(share, dim, index)


def _prod_back(g: Tensor, x: Tensor, index: Tensor, src: Tensor, dim: int, result: Tensor,
               include_self: bool) -> tuple:
    one = ones((), dtype=x.dtype, device=x.device)
    x_nonzero = where(x == 0, one, x)
    g_x = g * scatter(x_nonzero, dim, index, src, "prod", include_self) / x_nonzero
    src_zero = src == 0
    zeros_at = gather(scatter(zeros(x.shape, dtype=x.dtype, device=x.device), dim, index,
                              src_zero.to(x.dtype), "sum"), dim, index)
    single_zero = src_zero & (zeros_at == 1)
    others = scatter(x, dim, index, where(single_zero, one, src), "prod", include_self)
    g_src = where(single_zero, gather(g * others, dim, index),
                  gather(g * result, dim, index) / where(src_zero, one, src))
    return g_x, g_src


@derivative("scatter", saves="all", output=True)
def _scatter(ctx: Any, g: Tensor) -> tuple:
    x, index, src = ctx.inputs
    dim, reduce, include_self = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    if index.numel() == 0:
        return g, None, zeros(src.shape, dtype=g.dtype, device=g.device)
    if reduce == "none":
        g_x, g_src = _zeros_at(g, dim, index), gather(g, dim, index)
    elif reduce == "mean":
        g_x, g_src = _mean_back(g, x, index, src, dim, ctx.output, include_self)
    elif reduce == "prod":
        g_x, g_src = _prod_back(g, x, index, src, dim, ctx.output, include_self)
    elif reduce == "sum":
        g_x, g_src = g, gather(g, dim, index)
    else:
        g_x, g_src = _extreme_back(g, x, index, src, dim, ctx.output)
    if not include_self:
        g_x = _zeros_at(g_x, dim, index)
    return g_x, None, _fit(g_src, tuple(src.shape))


def _fit(g_src: Tensor, shape: tuple) -> Tensor:
    """The gradient of the ``index``-shaped part of ``src`` in zeros of ``src``'s shape (a
    scatter reads only the leading ``index.shape`` block of a larger ``src``)."""
    if tuple(g_src.shape) == shape:
        return g_src
    if not shape or g_src.dim() == 0:     # a 0-d src or index is a 1-d one of one element
        g_src = g_src.reshape((1,) * max(len(shape), 1))
        if not shape:
            return g_src.reshape(())
    spec = tuple(("slice", 0, int(n), None) for n in g_src.shape)
    base = zeros(shape, dtype=g_src.dtype, device=g_src.device)
    return _op("index_put", base, g_src, spec=spec)
