"""Algebraic simplifications that the value types prove: ``x*1``, ``x+0``, ``x-0``, ``x/1``
(tensors; ``*1``, ``+0`` and ``-0`` on ints too), ``neg(neg(x))``, transpose of transpose,
permute of permute, cast to the same dtype, reshape or expand to the same shape.

Identity rewrites need the result type to equal ``x``'s type exactly (dtype, shape, device),
so promotion or broadcasting by the constant keeps the op. ``x + 0`` turns ``-0.0`` into
``0.0`` in IEEE arithmetic; like TorchScript we treat it as an identity.

An arithmetic identity that would make the graph return an argument or a module attribute
where eager returns new storage (``return w * 1``) is not folded: the caller would get the
parameter's own storage, and writing into the result would change it. Nor is one where
the result or ``x`` is written in place (``y = x * 1; y.add_(1)``): the write would reach
both. Views (reshape, expand, transposes) and same-dtype casts share storage in eager too,
so they still fold.
"""
from __future__ import annotations

from typing import Callable

from .. import schema as S
from ..builder import Builder
from ..graph import Graph, Node, Prim, Value
from ..types import IntType, TensorType
from .effects import is_view

Rule = Callable[[Node], "Value | None"]


def canonicalize(graph: Graph) -> Graph:
    """Apply the rewrite rules to a fixpoint; rewritten nodes are removed.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(4)):
        ...   %one : float = prim::Constant[value=1.0]()
        ...   %y : Float(4) = sm::mul(%x, %one)
        ...   %z : Float(4) = sm::neg(%y)
        ...   %w : Float(4) = sm::neg(%z)
        ...   %r : Float(4) = sm::relu(%w)
        ...   return (%r)
        ... ''')
        >>> print(canonicalize(g))      # x * 1 -> x, neg(neg(x)) -> x; dead code is left
        graph(%x : Float(4)):
          %one : float = prim::Constant[value=1.0]()
          %z : Float(4) = sm::neg(%x)
          %r : Float(4) = sm::relu(%x)
          return (%r)
    """
    changed = True
    while changed:
        changed = False
        written = _written(graph)
        for node in list(graph.walk()):
            if node.owning_block is None or not node.is_op:
                continue
            rule = RULES.get(node.op_name)
            new = rule(node) if rule is not None else None
            if new is not None and not _exposes_storage(graph, node, new) and not (
                    node.op_name in _NEW_STORAGE and {node.output, new} & written):
                node.output.replace_all_uses_with(new)
                node.destroy()
                changed = True
    return graph


def _exposes_storage(graph: Graph, node: Node, new: Value) -> bool:
    """Whether ``node``'s result reaches the graph's return and ``new`` is caller-visible
    storage (a graph input or a ``prim::GetAttr``), so that folding would alias the two."""
    if node.op_name not in _NEW_STORAGE:
        return False
    visible = new.node.kind == Prim.GET_ATTR or new in graph.inputs
    return visible and _returned(graph, node.output)


_NEW_STORAGE = frozenset({"mul", "add", "sub", "div", "neg"})


def _written(graph: Graph) -> set[Value]:
    """Values whose storage is written in place (``copy_``'s destination), directly or
    through a view of them. Folding ``y = x * 1`` into ``x`` where either is written would
    make the write reach the other (``y.add_(1)`` changing the argument ``x``)."""
    out: set[Value] = set()
    for node in graph.walk():
        if node.is_op and node.op_name == "copy_":
            v = node.inputs[0]
            while v not in out:
                out.add(v)
                if not is_view(v.node):
                    break
                v = v.node.inputs[0]
    return out


def _returned(graph: Graph, v: Value) -> bool:
    for use in v.uses:
        user = use.user
        if user is graph.block.return_node:
            return True
        if user.kind in (Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT) and _returned(graph, user.output):
            return True
    return False


def _same_type(result: Value, x: Value) -> bool:
    t = x.type
    return (isinstance(t, TensorType) and t == result.type and t.dtype is not None
            and t.shape is not None and all(d is not None for d in t.shape))


def _scalar(v: Value) -> object:
    n = v.node
    value = n.attrs.get("value") if n.kind == Prim.CONSTANT else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _identity_with(unit: float, commutative: bool) -> Rule:
    def rule(node: Node) -> Value | None:
        a, b = node.inputs
        candidates = [(a, b), (b, a)] if commutative else [(a, b)]
        for x, c in candidates:
            if _scalar(c) == unit and _same_type(node.output, x):
                return x
        return None
    return rule


def _int_identity(unit: int, commutative: bool) -> Rule:
    """``i * 1``, ``i + 0``, ``i - 0`` on ints (a loop's ``start + i * step`` for
    ``range(n)``): nothing to allocate, so returning ``i`` itself is exact."""
    def rule(node: Node) -> Value | None:
        a, b = node.inputs
        for x, c in ([(a, b), (b, a)] if commutative else [(a, b)]):
            n = c.node
            if n.kind == Prim.CONSTANT and type(n.attrs.get("value")) is int \
                    and n.attrs["value"] == unit and x.type == IntType:
                return x
        return None
    return rule


def _double_neg(node: Node) -> Value | None:
    inner = node.inputs[0].node
    if inner.kind == node.kind:
        x = inner.inputs[0]
        return x if _same_type(node.output, x) else None
    return None


def _double_transpose(node: Node) -> Value | None:
    inner = node.inputs[0].node
    rank = getattr(node.output.type, "rank", None)
    if inner.kind != node.kind or rank is None:
        return None
    dims = [{d % rank for d in (n.attrs["dim0"], n.attrs["dim1"])} for n in (node, inner)]
    x = inner.inputs[0]
    return x if dims[0] == dims[1] and _same_type(node.output, x) else None


def _double_permute(node: Node) -> Value | None:
    inner = node.inputs[0].node
    rank = getattr(node.output.type, "rank", None)
    if inner.kind != node.kind or rank is None:
        return None
    p = [d % rank for d in inner.attrs["dims"]]
    q = [d % rank for d in node.attrs["dims"]]
    composed = [p[i] for i in q]
    x = inner.inputs[0]
    if composed == list(range(rank)):
        return x if _same_type(node.output, x) else None
    with Builder(node.graph, node.source, node.scope).insert_before(node) as b:
        out = b.op("permute", x, dims=composed)
    out.type = node.output.type
    return out


def _same_dtype_cast(node: Node) -> Value | None:
    x = node.inputs[0]
    if getattr(x.type, "dtype", None) is node.attrs["dtype"] and _same_type(node.output, x):
        return x
    return None


def _same_shape(node: Node) -> Value | None:
    x = node.inputs[0]
    return x if _same_type(node.output, x) else None


RULES: dict[str, Rule] = {
    "mul": _identity_with(1, commutative=True),
    "add": _identity_with(0, commutative=True),
    "sub": _identity_with(0, commutative=False),
    "div": _identity_with(1, commutative=False),
    "neg": _double_neg,
    "transpose": _double_transpose,
    "permute": _double_permute,
    "cast": _same_dtype_cast,
    "reshape": _same_shape,
    "expand": _same_shape,
    "int_mul": _int_identity(1, commutative=True),
    "int_add": _int_identity(0, commutative=True),
    "int_sub": _int_identity(0, commutative=False),
}
assert all(name in S.REGISTRY for name in RULES)
