"""Inlining of ``prim::CallMethod``: the callee's body replaces the call. Each inlined node
records the module path it came from (``Node.scope``): the ``prim::GetAttr`` path of the
called module from the graph's ``self``, then the node's own path inside the callee."""
from __future__ import annotations

from typing import Callable

from ..graph import Block, Graph, IRError, Node, Prim, clone_node, join_scope, module_path
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
          %y : Float(4) = sm::relu(%x)  # scope: act
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
    scope = callee_scope(call)
    for n in body.block:
        copy = clone_node(n, call.graph, env).insert_before(call)
        for inner in copy.walk():
            inner.scope = join_scope(scope, inner.scope)
    for out, ret in zip(call.outputs, body.outputs):
        if env[ret].debug_name is None and ret.node.kind != Prim.PARAM:
            env[ret].debug_name = out.debug_name          # the caller's variable (``h = ...``)
        out.replace_all_uses_with(env[ret])
    call.destroy()


def callee_scope(call: Node) -> str | None:
    """The module path of the module a call's first input stands for: its ``prim::GetAttr``
    chain from the graph's ``self`` (``fc1`` for ``self.fc1(x)``; a call inlined from a
    callee reads its module through the callee's chain, so the path is already whole), else
    the call's own scope."""
    root, path = module_path(call.inputs[0]) if call.inputs else (None, "")
    if call.graph.inputs and root is call.graph.inputs[0]:
        return path or None
    return call.scope
