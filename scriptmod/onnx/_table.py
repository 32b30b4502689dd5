"""One table: IR op name -> ONNX emitter, filled by ``_elementwise``, ``_nn`` and
``_shapes`` (one row per op, as ``ir/ops`` declares them). An emitter takes the context, the
IR node and its inputs' values (static Python values or ``Sym``) and returns the values of
the node's outputs.
"""
from __future__ import annotations

from typing import Any, Callable

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType

from ._context import Context, Sym

Emitter = Callable[[Context, Node, list], list]
EMITTERS: dict[str, Emitter] = {}


def emits(*names: str) -> Callable[[Emitter], Emitter]:
    def register(fn: Emitter) -> Emitter:
        for name in names:
            EMITTERS[name] = fn
        return fn
    return register


def out_dtype(node: Node, i: int = 0) -> D.DType:
    t = node.outputs[i].type
    assert isinstance(t, TensorType) and t.dtype is not None, f"{node.kind}: untyped output"
    return t.dtype


def out_rank(node: Node, i: int = 0) -> int | None:
    t = node.outputs[i].type
    return t.rank if isinstance(t, TensorType) else 0


def operand_dtype(v: Any) -> tuple[list, list, list]:
    """``v`` in ``result_type``'s three tiers: dim tensors, 0-d tensors, Python scalars."""
    if isinstance(v, Sym):
        return ([v.dtype], [], []) if v.rank != 0 else ([], [v.dtype], [])
    return [], [], [type(v)]


def compute_dtype(values: list) -> D.DType:
    tiers: tuple[list, list, list] = ([], [], [])
    for v in values:
        for tier, part in zip(tiers, operand_dtype(v)):
            tier += part
    return D.result_type(*tiers)
