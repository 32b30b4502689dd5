"""Running a traced graph at another input rank.

A graph traced at one rank is re-specialized for another by shape propagation, which is only
right where every op that sees a tensor of a new rank computes what eager code would at that
rank. The registry says which ops do (``ir.schema.rank_polymorphic``: elementwise ops,
reductions, softmax, matmul, ...); a view or reshape whose dims or sizes were recorded for the
traced rank, a conv, an index, or an elementwise op broadcasting against a tensor the traced
code reshaped for that rank (PReLU's ``(C, 1)`` weight) *pins* it, and the call gets a
``ShapeError`` naming the op, the user's line, the operand and both ranks. An in-place write
into an argument follows its rank as eager's does: the tracer records the new value with
rank-following ops (``copy_``'s broadcast as a ``where``) and writes it back with ``copy_`` or
``index_put``, which follow ``self``'s rank.

    >>> traced = scriptmod.jit.trace(nn.Linear(4, 8), scriptmod.randn(2, 4))
    >>> traced(scriptmod.randn(3, 2, 4)).shape
    scriptmod.Size([3, 2, 8])
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

from scriptmod.ir import schema as S
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph, Node, Value
from scriptmod.ir.passes.shapes import ShapePropagationError
from scriptmod.ir.types import TensorType, TupleType, Type
from scriptmod.runtime.errors import op_label, place


NO_CALLEES: Mapping[Node, Graph] = MappingProxyType({})   # a graph without kept calls


def rank_of(t: Type) -> int | None:
    return len(t.shape) if isinstance(t, TensorType) and t.shape is not None else None


def _nodes(g: Graph, callees: Mapping[Node, Graph]) -> Iterator[Node]:
    """Every node, those of the callee graphs of kept calls (``callees``) included."""
    for n in g.walk():
        yield n
        callee = callees.get(n)
        if callee is not None:
            yield from _nodes(callee, callees)


def _values(g: Graph, callees: Mapping[Node, Graph]) -> Iterator[Value]:
    yield from g.inputs
    for n in _nodes(g, callees):
        yield from n.outputs
        for b in n.blocks:
            yield from b.params


def traced_ranks(g: Graph, callees: Mapping[Node, Graph] = NO_CALLEES) -> dict[Value, int]:
    """The rank of every tensor value of ``g`` (and of its kept calls' ``callees``) before
    it is re-typed for a call."""
    out = {}
    for v in _values(g, callees):
        r = rank_of(v.type)
        if r is not None:
            out[v] = r
    return out


def changed_args(declared: Sequence[Type], given: Sequence[Type | None],
                 names: Sequence[str]) -> list[str]:
    """'argument 'x' (position 0) was traced at rank 2, got rank 3 (shape (3, 2, 4))' per
    argument (tuple element) whose rank differs from the traced signature."""
    out: list[str] = []
    for i, (d, g) in enumerate(zip(declared, given)):
        name = names[i] if i < len(names) else f"arg{i}"
        for label, dt, gt in _pairs(f"argument '{name}' (position {i})", d, g):
            rd, rg = rank_of(dt), rank_of(gt) if gt is not None else None
            if rd is not None and rg is not None and rd != rg:
                assert isinstance(gt, TensorType)
                out.append(f"{label} was traced at rank {rd}, got rank {rg} (shape {gt.shape})")
    return out


def _pairs(label: str, d: Type, g: Type | None) -> Iterator[tuple[str, Type, Type | None]]:
    if isinstance(d, TupleType) and isinstance(g, TupleType):
        for k, (de, ge) in enumerate(zip(d.elements, g.elements)):
            yield from _pairs(f"{label}[{k}]", de, ge)
    else:
        yield label, d, g


def check_ranks(g: Graph, traced: dict[Value, int], args: list[str], where: str,
                callees: Mapping[Node, Graph] = NO_CALLEES) -> None:
    """Raise ``ShapeError`` at the first op that cannot follow the new ranks (see module doc),
    in ``g`` or a kept call's graph in ``callees``."""
    for node in _nodes(g, callees):
        if not node.is_op:
            continue
        changed = [(i, v) for i, v in enumerate(node.inputs)
                   if v in traced and rank_of(v.type) not in (None, traced[v])]
        if not changed:
            continue
        schema = S.get(node.kind)
        i, v = changed[0]
        if not S.rank_polymorphic(schema):
            raise _pinned(node, i, traced[v], rank_of(v.type), args, where,
                          "its dims or sizes were recorded for the traced rank")
        if schema.has(S.ELEMENTWISE):
            _check_broadcast(node, traced, args, where)


def _check_broadcast(node: Node, traced: dict[Value, int], args: list[str], where: str) -> None:
    """An operand of unchanged rank that traced code reshaped with an inner size-1 dim (a
    weight shaped to broadcast along one dim of the traced rank) would now line up with
    another dim than eager code would build it for."""
    for i, u in enumerate(node.inputs):
        r = rank_of(u.type)
        if r is None or r < 2 or traced.get(u) != r or not u.node.is_op \
                or not S.get(u.node.kind).has(S.VIEW):
            continue
        shape = list(u.type.shape)                                  # type: ignore[union-attr]
        while shape and shape[0] == 1:
            shape.pop(0)
        if 1 in shape:
            j, v = next((j, v) for j, v in enumerate(node.inputs)
                        if v in traced and rank_of(v.type) not in (None, traced[v]))
            raise _pinned(node, j, traced[v], rank_of(v.type), args, where,
                          f"it broadcasts it against '{_operand(node, i)}' of shape "
                          f"{tuple(u.type.shape)}, which the traced code "  # type: ignore[union-attr]
                          f"reshaped for rank {traced[v]}")


def _operand(node: Node, i: int) -> str:
    ins = S.get(node.kind).inputs
    return ins[min(i, len(ins) - 1)].name if ins else f"input {i}"


def _pinned(node: Node, i: int, was: int, now: Any, args: list[str], where: str,
            why: str) -> ShapeError:
    return ShapeError(
        f"{where}: {'; '.join(args) or 'an input changed rank'}, and the traced graph cannot "
        f"follow: {op_label(node)}{place(node)} pins the rank: its operand "
        f"'{_operand(node, i)}' was rank {was} when traced and would be rank {now} ({why}). Trace the model with an input "
        f"of this rank.")


def propagation_error(e: ShapePropagationError, args: list[str], where: str) -> ShapeError:
    """A type rule rejected the new rank: the node it failed at pins it."""
    node = e.node
    op = f"{op_label(node)}{place(node)}" if node is not None else "an op"
    first = str(e).split("\n")[0]
    if node is not None and node.source and first.startswith(f"{node.source}: "):
        first = first[len(node.source) + 2:]
    return ShapeError(f"{where}: {'; '.join(args)}, and the traced graph cannot follow: {op} "
                      f"pins the rank ({first}). Trace the model with an input of this rank.")
