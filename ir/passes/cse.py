"""Common subexpression elimination for pure nodes, scoped by blocks."""
from __future__ import annotations

from collections import ChainMap
from typing import Any, Hashable

from .. import schema as S
from ..dtypes import DType
from ..graph import Block, Graph, Node, Prim, known_value
from .effects import is_pure, mutates_modules
from ..printer import is_payload


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge equal pure nodes (same kind, inputs, attributes and types); a node only reuses
    one that dominates it (earlier in its block or in an enclosing block). Inputs of
    commutative ops are compared as a set.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(4)):
        ...   %a : Float(4) = sm::neg(%x)
        ...   %b : Float(4) = sm::neg(%x)
        ...   %c : Float(4) = sm::add(%a, %b)
        ...   return (%c)
        ... ''')
        >>> print(eliminate_common_subexpressions(g))
        graph(%x : Float(4)):
          %a : Float(4) = sm::neg(%x)
          %c : Float(4) = sm::add(%a, %a)
          return (%c)
    """
    _cse_block(graph.block, ChainMap(), mutates_modules(graph))
    return graph


def _cse_block(block: Block, table: ChainMap, mutating: bool) -> None:
    for node in block:
        for b in node.blocks:
            _cse_block(b, table.new_child(), mutating)
        if not is_pure(node) or (mutating and node.kind == Prim.GET_ATTR):
            continue
        key = node_key(node)
        earlier = table.get(key)
        if earlier is None:
            table[key] = node
            continue
        for mine, theirs in zip(node.outputs, earlier.outputs):
            mine.replace_all_uses_with(theirs)
        node.destroy()


def node_key(node: Node) -> Hashable:
    """What makes two pure nodes interchangeable. Two ``sm::size`` reads of one symbolic size
    (``size(q, -2)`` and ``size(k, -2)``, both ``T``) are one value whatever tensor they read:
    the specialization's types (and its guards) make them equal at every call, so what is
    computed from them (a causal mask's ``arange``) is computed once."""
    if node.kind == "sm::size":
        value = known_value(node.outputs[0])
        if isinstance(value, str):
            return node.kind, value
    inputs = [id(v) for v in node.inputs]
    if node.is_op and S.REGISTRY[node.op_name].has(S.COMMUTATIVE):
        inputs.sort()
    attrs = tuple(sorted((k, freeze(v)) for k, v in node.attrs.items()))
    return node.kind, tuple(inputs), attrs, tuple(repr(v.type) for v in node.outputs)


def freeze(value: Any) -> Hashable:
    """A hashable stand-in that tells 1, 1.0 and True apart (and -0.0 from 0.0)."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(freeze(v) for v in value)
    if isinstance(value, float):
        return "float", repr(value)
    if isinstance(value, DType) or is_payload(value):
        return "object", id(value)
    return type(value).__name__, value
