"""Derivatives of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views (rows of ``autograd.derivatives``' table).

Every rule is written with differentiable ops (``diagonal_scatter``, ``index_put``,
``complex``, the views themselves), so double backward works. The windowed views
(``unfold``, ``as_strided``) send each output element's gradient back to the input element
it reads by the positions that element has: the same view taken of ``arange``.
"""
from __future__ import annotations

from typing import Any

from scriptmod import _creation as C
from scriptmod._ops_views import diagonal_scatter
from scriptmod._shape_ops import index_put
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.ir import dtypes as D
from scriptmod.runtime.kernels.views import offset_in_storage, storage_size
from scriptmod.tensor import Tensor


@derivative("diagonal")
def _diagonal(ctx: Any, g: Tensor) -> tuple:
    shape = ctx.input_meta[0][0]
    zeros = C.zeros(*shape, dtype=g.dtype, device=g.device)
    a = ctx.attrs
    return (diagonal_scatter(zeros, g, a["offset"], a["dim1"], a["dim2"]),)


@derivative("unfold")
def _unfold(ctx: Any, g: Tensor) -> tuple:
    """Each window element's gradient added into the input element it reads."""
    shape = list(ctx.input_meta[0][0])
    a = ctx.attrs
    if not shape:
        return (g.sum(),)
    d = a["dimension"] % len(shape)
    positions = _op("unfold", C.arange(shape[d], device=g.device), dimension=0,
                    size=a["size"], step=a["step"])
    zeros = C.zeros(*shape, dtype=g.dtype, device=g.device)
    spec = (("slice", None, None, None),) * d + (("tensor", 0),)
    return (index_put(zeros, g.movedim(-1, d + 1), positions, spec=spec, accumulate=True),)


@derivative("as_strided", saves=(0,))
def _as_strided(ctx: Any, g: Tensor) -> tuple:
    """PyTorch's geometry: the gradient summed into the input's storage at the positions
    the output reads, then read back at the positions the input occupies."""
    x, a = ctx.inputs[0]._data, ctx.attrs
    cells = C.arange(storage_size(x), device=g.device)      # ops, so a compiled backward
    read = _op("as_strided", cells, size=a["size"], stride=a["stride"],   # builds them too
               offset=offset_in_storage(x) + a["offset"])
    held = _op("as_strided", cells, size=list(x.shape),
               stride=[s // x.itemsize for s in x.strides], offset=offset_in_storage(x))
    storage = index_put(C.zeros(storage_size(x), dtype=g.dtype, device=g.device),
                        g.reshape(-1), read.reshape(-1), spec=(("tensor", 0),), accumulate=True)
    return (storage[held.reshape(-1)].reshape(list(x.shape)),)


def _complex_input(ctx: Any) -> bool:
    return ctx.input_meta[0][1].category == D.COMPLEX


@derivative("real")
def _real(ctx: Any, g: Tensor) -> tuple:
    if not _complex_input(ctx):
        return (g,)
    return (_op("complex", g, C.zeros(*g.shape, dtype=g.dtype, device=g.device)),)


@derivative("imag")
def _imag(ctx: Any, g: Tensor) -> tuple:
    zeros = C.zeros(*g.shape, dtype=g.dtype, device=g.device)
    return (_op("complex", zeros, g) if _complex_input(ctx) else zeros,)


@derivative("view_as_real")
def _view_as_real(ctx: Any, g: Tensor) -> tuple:
    if not _complex_input(ctx):
        return (g[..., 0],)
    return (_op("view_as_complex", g.contiguous()),)


@derivative("view_as_complex")
def _view_as_complex(ctx: Any, g: Tensor) -> tuple:
    return (_op("view_as_real", g),)


@derivative("complex")
def _complex(ctx: Any, g: Tensor) -> tuple:
    if not g.is_complex():
        return (g, C.zeros(*g.shape, dtype=g.dtype, device=g.device))
    return (_op("real", g), _op("imag", g))


@derivative("conj_physical")
def _conj_physical(ctx: Any, g: Tensor) -> tuple:
    return (_op("conj_physical", g) if g.is_complex() else g,)
