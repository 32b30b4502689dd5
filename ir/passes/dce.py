"""Dead code elimination: drop nodes whose outputs are unused and that have no side effects,
and unused outputs of ``prim::If`` / carried values of ``prim::Loop``."""
from __future__ import annotations

from ..graph import Block, Graph, Node, Prim, Value
from .effects import has_side_effects


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove dead nodes in place; IMPURE ops, SetAttr, calls, prints and raises stay.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(4)):
        ...   %a : Float(4) = sm::neg(%x)
        ...   %b : Float(4) = sm::exp(%x)
        ...   return (%a)
        ... ''')
        >>> print(eliminate_dead_code(g))
        graph(%x : Float(4)):
          %a : Float(4) = sm::neg(%x)
          return (%a)
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
    """Drop carried values whose loop output is unused and that feed only themselves."""
    body = node.blocks[0]
    dead = {j for j, v in enumerate(node.outputs) if not v.uses}
    while dead:
        live_outs = [body.outputs[0]] + [v for j, v in enumerate(body.outputs[1:]) if j not in dead]
        needed = _needed_values(body, live_outs)
        still = {j for j in dead if body.params[j + 1] not in needed}
        if still == dead:
            break
        dead = still
    for j in sorted(dead, reverse=True):
        body.remove_output(j + 1)
        _sweep(body)
        body.remove_param(j + 1)
        node.remove_input(j + 2)
        node.remove_output(j)
    return bool(dead)


def _needed_values(block: Block, live: list[Value]) -> set[Value]:
    """Values the block needs to compute ``live`` and to run its side effects."""
    needed = set(live)
    for node in reversed(block.nodes):
        if has_side_effects(node) or any(v in needed for v in node.outputs):
            for n in node.walk():
                needed.update(n.inputs)
                for b in n.blocks:
                    needed.update(b.outputs)
    return needed
