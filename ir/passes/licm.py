"""Loop-invariant code motion: nodes of a ``prim::Loop`` body that read only values from
outside the loop move before it, so a scripted loop fetches and transposes its weights once,
not once per iteration.

Only nodes that cannot fail or observe anything move: constants, ``prim::GetAttr`` (when
nothing in the graph writes module attributes), view ops, size queries and elementwise ops
(their shapes were checked when the graph was typed; NaN and inf never raise). Inner loops
are done first, so an invariant climbs out of every loop it does not depend on.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(4, 4), %w : Float(4, 4), %n : int):
    ...   %t : bool = prim::Constant[value=1]()
    ...   %y : Float(4, 4) = prim::Loop(%n, %t, %x)
    ...     block0(%i : int, %h : Float(4, 4)):
    ...       %wt : Float(4, 4) = sm::transpose[dim0=0, dim1=1](%w)
    ...       %h2 : Float(4, 4) = sm::matmul(%h, %wt)
    ...       -> (%t, %h2)
    ...   return (%y)
    ... ''')
    >>> print(hoist_loop_invariants(g))
    graph(%x : Float(4, 4), %w : Float(4, 4), %n : int):
      %t : bool = prim::Constant[value=1]()
      %wt : Float(4, 4) = sm::transpose[dim0=0, dim1=1](%w)
      %y : Float(4, 4) = prim::Loop(%n, %t, %x)
        block0(%i : int, %h : Float(4, 4)):
          %h2 : Float(4, 4) = sm::matmul(%h, %wt)
          -> (%t, %h2)
      return (%y)
"""
from __future__ import annotations

from .. import schema as S
from ..graph import Block, Graph, Node, Prim, Value
from .effects import is_pure, mutates_modules
from .pipeline import register_pass

_QUERIES = frozenset({"size", "dim", "numel"})


def hoist_loop_invariants(graph: Graph) -> Graph:
    """Move loop-invariant nodes out of every ``prim::Loop`` (see the module docstring)."""
    attrs_fixed = not mutates_modules(graph)
    _block(graph.block, attrs_fixed)
    return graph


def _block(block: Block, attrs_fixed: bool) -> None:
    for node in block:
        for b in node.blocks:
            _block(b, attrs_fixed)
        if node.kind == Prim.LOOP:
            _hoist(node, attrs_fixed)


def _hoist(loop: Node, attrs_fixed: bool) -> None:
    body = loop.blocks[0]
    inside: set[Value] = set(body.params)
    for n in body.walk():
        inside.update(n.outputs)
        for b in n.blocks:
            inside.update(b.params)
    for n in list(body):                       # in order: a chain of invariants moves whole
        if n.blocks or not _movable(n, attrs_fixed):
            continue
        if any(v in inside for v in n.inputs):
            continue
        n.move_before(loop)
        inside.difference_update(n.outputs)


def _movable(n: Node, attrs_fixed: bool) -> bool:
    if n.kind == Prim.CONSTANT:
        return True
    if n.kind == Prim.GET_ATTR:
        return attrs_fixed
    if not (n.is_op and is_pure(n)):
        return False
    schema = S.REGISTRY.get(n.op_name)
    if schema is None:
        return False
    return (schema.has(S.VIEW) and n.op_name != "copy_") or schema.has(S.ELEMENTWISE) or \
        n.op_name in _QUERIES


register_pass("hoist_loop_invariants", hoist_loop_invariants)
