"""Which nodes may be removed, merged or moved: side effects and purity."""
from __future__ import annotations

from .. import schema as S
from ..graph import SIDE_EFFECT_KINDS, Graph, Node, Prim

STRUCTURAL_PURE = frozenset({Prim.CONSTANT, Prim.LIST_CONSTRUCT, Prim.LIST_UNPACK,
                             Prim.TUPLE_CONSTRUCT, Prim.TUPLE_UNPACK, Prim.TUPLE_INDEX,
                             Prim.GET_ATTR, Prim.UNINITIALIZED})


def has_side_effects(node: Node) -> bool:
    """True when removing the node (its outputs unused) could change behaviour."""
    if node.kind in SIDE_EFFECT_KINDS:
        return True
    if node.is_op:
        schema = S.REGISTRY.get(node.op_name)
        return schema is None or schema.has(S.IMPURE)
    if node.kind in (Prim.IF, Prim.LOOP):
        return any(has_side_effects(n) for b in node.blocks for n in b.walk())
    if node.kind == Prim.FUSION_GROUP:
        sub = node.attrs.get("subgraph")
        return not isinstance(sub, Graph) or any(has_side_effects(n) for n in sub.walk())
    return node.kind not in STRUCTURAL_PURE


# uses that may change a list, or hand it on to code that may (a loop carries it, a block
# returns it, a call receives it)
_LIST_WRITERS = frozenset({"sm::list_set", "sm::list_append", "sm::dict_set", "sm::py_call",
                           Prim.LOOP,
                           Prim.RETURN, Prim.CALL_METHOD, Prim.CALL_FUNCTION, Prim.SET_ATTR,
                           Prim.IF})


def is_view(node: Node) -> bool:
    """An op whose output may share storage with its first input (flagged ``VIEW``: views,
    and ops that return their written input)."""
    if not node.is_op:
        return False
    schema = S.REGISTRY.get(node.op_name)
    return schema is not None and schema.has(S.VIEW)


def is_pure(node: Node) -> bool:
    """A function of its inputs and attributes only: safe to merge with an equal node. A
    ``prim::ListConstruct`` whose list may be changed is not: two equal literals are two
    lists."""
    if node.blocks or has_side_effects(node):
        return False
    if node.kind == Prim.LIST_CONSTRUCT and any(
            u.user.kind in _LIST_WRITERS for u in node.output.uses):
        return False
    return node.is_op or node.kind in STRUCTURAL_PURE


def mutates_modules(graph: Graph) -> bool:
    """Whether module attributes may change while the graph runs (GetAttr is then not pure)."""
    return any(n.kind in (Prim.SET_ATTR, Prim.CALL_METHOD) for n in graph.walk())
