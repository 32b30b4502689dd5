"""Inlining of ``prim::CallMethod``: the callee's body replaces the call."""
from __future__ import annotations

from typing import Callable

from ..graph import Block, Graph, IRError, Node, Prim, clone_node
from ..printer import describe

Resolver = Callable[[Node], "Graph | None"]
MAX_DEPTH = 64


def inline_calls(graph: Graph, resolve: Resolver, max_depth: int = MAX_DEPTH) -> Graph:
    """Inline every ``prim::CallMethod`` for which ``resolve(call_node)`` returns the callee
    graph (its first input is the module); calls it returns None for are kept. Callees are
    copied, never changed, and inlined recursively.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%self : __module__.Net, %x : Float(4)):
        ...   %act : __module__.Act = prim::GetAttr[name="act"](%self)
        ...   %y : Float(4) = prim::CallMethod[name="forward"](%act, %x)
        ...   return (%y)
        ... ''')
        >>> graphs = {"forward": parse('''graph(%self : __module__.Act, %x : Float(4)):
        ...   %y : Float(4) = sm::relu(%x)
        ...   return (%y)
        ... ''')}
        >>> print(inline_calls(g, lambda call: graphs[call.attrs["name"]]))
        graph(%self : __module__.Net, %x : Float(4)):
          %act : __module__.Act = prim::GetAttr[name="act"](%self)
          %y : Float(4) = sm::relu(%x)
          return (%y)
    """
    _inline_block(graph.block, resolve, max_depth)
    return graph


def _inline_block(block: Block, resolve: Resolver, depth: int) -> None:
    for node in block:
        for b in node.blocks:
            _inline_block(b, resolve, depth)
        if node.kind == Prim.CALL_METHOD:
            callee = resolve(node)
            if callee is not None:
                _inline_one(node, callee, resolve, depth)


def _inline_one(call: Node, callee: Graph, resolve: Resolver, depth: int) -> None:
    if depth <= 0:
        raise IRError(f"inline_calls: calls nest deeper than {MAX_DEPTH} (recursion?)\n"
                      f"    {describe(call)}")
    if any(n.kind == Prim.CALL_METHOD for n in callee.walk()):
        body = callee.copy()              # its own calls are inlined first, in the copy
        _inline_block(body.block, resolve, depth - 1)
    else:
        body = callee                     # nothing to inline: cloned below, never changed
    if len(body.inputs) != len(call.inputs) or len(body.outputs) != len(call.outputs):
        raise IRError(f"inline_calls: callee takes {len(body.inputs)} input(s) and returns "
                      f"{len(body.outputs)}, the call has {len(call.inputs)} and "
                      f"{len(call.outputs)}\n    {describe(call)}")
    env = dict(zip(body.inputs, call.inputs))
    for n in body.block:
        clone_node(n, call.graph, env).insert_before(call)
    for out, ret in zip(call.outputs, body.outputs):
        out.replace_all_uses_with(env[ret])
    call.destroy()
