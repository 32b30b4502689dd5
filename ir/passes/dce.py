"""Dead code elimination: drop nodes whose outputs are unused and that have no side effects,
and unused outputs of ``prim::If`` / carried values of ``prim::Loop``."""
from __future__ import annotations

from ir.graph import Block, Graph, Node, Prim
from ir.passes.effects import has_side_effects


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove dead nodes in place; IMPURE ops, SetAttr, calls, prints and raises stay.

        >>> eliminate_dead_code(g)     # doctest: +SKIP
    """
    while _sweep(graph.block):
        pass
    return graph


def _sweep(block: Block) -> bool:
    changed = False
    for node in reversed(block.nodes):
        if node.kind == Prim.IF:
            changed |= _prune_if_outputs(node)
        elif node.kind == Prim.LOOP:
            changed |= _prune_loop_carried(node)
        for b in node.blocks:
            changed |= _sweep(b)
        if not any(v.uses for v in node.outputs) and not has_side_effects(node):
            node.destroy()
            changed = True
    return changed


def _prune_if_outputs(node: Node) -> bool:
    dead = [i for i, v in enumerate(node.outputs) if not v.uses]
    for i in reversed(dead):
        for b in node.blocks:
            b.remove_output(i)
        node.remove_output(i)
    return bool(dead)


def _prune_loop_carried(node: Node) -> bool:
    body = node.blocks[0]
    changed = False
    for j in reversed(range(len(node.outputs))):
        param = body.params[j + 1]
        only_passed_on = all(u.user is body.return_node and u.index == j + 1 for u in param.uses)
        if node.outputs[j].uses or not only_passed_on:
            continue
        body.remove_output(j + 1)
        body.remove_param(j + 1)
        node.remove_input(j + 2)
        node.remove_output(j)
        changed = True
    return changed
