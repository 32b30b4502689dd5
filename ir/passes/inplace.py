"""In-place writes into graph values: drop the ones nobody can observe.

The tracer records an in-place op on a method's input as ``sm::copy_(input, new_value)``,
so that the caller's tensor changes as it does in eager mode. After inlining, the input of a
submodule's method is often the caller's intermediate (``Linear -> ReLU(inplace=True) ->
Linear``): writing it back costs a copy and pins the value to a buffer, while no later node
reads it (later reads use the new value). Those copies are removed here, so the activation
fuses as if it were out of place.
"""
from __future__ import annotations

from .. import schema as S
from ..graph import Graph, Node

COPY = "sm::copy_"


def elide_unobserved_copies(graph: Graph) -> Graph:
    """Remove ``copy_(dst, src)`` where ``dst`` is an op's fresh result (not a graph input,
    module state, a view or a call's result) that nothing reads after the copy, or where
    ``src`` is already ``dst``'s storage (an inlined callee wrote the same argument back)."""
    for block in [graph.block] + [b for n in graph.walk() for b in n.blocks]:
        order = {n: k for k, n in enumerate(block.nodes)}
        for node in [n for n in block.nodes if n.kind == COPY]:
            if _unobserved(node, order):
                out, src = node.outputs[0], node.inputs[1]
                out.replace_all_uses_with(src)
                node.destroy()
    return graph


def _unobserved(node: Node, order: dict[Node, int]) -> bool:
    dst, src = node.inputs
    if src.node.kind == COPY and src.node.inputs[0] is dst:
        return True
    producer = dst.node
    if not producer.is_op or S.get(producer.kind).has(S.VIEW) or producer.kind == COPY:
        return False
    at = order[node]
    return all(u.user is node or order.get(u.user, at + 1) < at for u in dst.uses)
