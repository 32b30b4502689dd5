"""Derivatives of pooling (rows of ``autograd.derivatives``' table).

First order through the ``*_grad`` ops (which have no derivative of their own), except
``max_unpool``'s, a gather of the gradient at the indices (composite ops: any order). The
sizes the grad ops produce are inputs of theirs, read at run time in a compiled backward
(symbolic dims included).
"""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor

_MAX_ATTRS = ("kernel_size", "stride", "padding", "dilation")
_AVG_ATTRS = ("kernel_size", "stride", "padding")


def _lists(attrs: dict, names: tuple[str, ...]) -> dict[str, list]:
    return {k: list(attrs[k]) for k in names}


def _max_pool(n: int) -> Any:
    def rule(ctx: Any, g: Tensor) -> tuple:
        a = ctx.attrs
        return (_op(f"max_pool{n}d_grad", g, ctx.inputs[0], **_lists(a, _MAX_ATTRS),
                    ceil_mode=a["ceil_mode"]),)
    return rule


def _scatter_back(n: int, extra_inputs: int = 0) -> Any:
    """Pools that return indices: the gradient goes back to where each max came from."""
    def rule(ctx: Any, gs: list) -> tuple:
        gx = _op(f"max_pool{n}d_with_indices_grad", gs[0], ctx.outputs[1],
                 list(ctx.input_meta[0][0]))
        return (gx,) + (None,) * extra_inputs
    return rule


def _avg_pool(n: int) -> Any:
    def rule(ctx: Any, g: Tensor) -> tuple:
        a = ctx.attrs
        return (_op(f"avg_pool{n}d_grad", g, list(ctx.input_meta[0][0]), **_lists(a, _AVG_ATTRS),
                    ceil_mode=a["ceil_mode"], count_include_pad=a["count_include_pad"],
                    divisor_override=a.get("divisor_override")),)
    return rule


def _adaptive_avg(n: int) -> Any:
    def rule(ctx: Any, g: Tensor) -> tuple:
        return (_op(f"adaptive_avg_pool{n}d_grad", g, list(ctx.input_meta[0][0])),)
    return rule


def _max_unpool(n: int) -> Any:
    def rule(ctx: Any, g: Tensor) -> tuple:
        """Each input value went to its index: its gradient is read back from there."""
        idx = ctx.inputs[1]
        picked = g.flatten(-n).gather(-1, idx.flatten(-n))
        return picked.reshape(list(ctx.input_meta[0][0])), None, None
    return rule


for _n in (1, 2, 3):
    derivative(f"max_pool{_n}d", saves=(0,))(_max_pool(_n))
    derivative(f"max_pool{_n}d_with_indices", output=True)(_scatter_back(_n))
    derivative(f"adaptive_max_pool{_n}d", output=True)(_scatter_back(_n))
    derivative(f"avg_pool{_n}d")(_avg_pool(_n))
    derivative(f"adaptive_avg_pool{_n}d")(_adaptive_avg(_n))
    derivative(f"max_unpool{_n}d", saves=(1,))(_max_unpool(_n))
for _n in (2, 3):
    derivative(f"fractional_max_pool{_n}d", output=True)(_scatter_back(_n, extra_inputs=1))
