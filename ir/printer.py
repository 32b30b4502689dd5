"""Deterministic TorchScript-like text for graphs (the format is described in ir/README.md).

    >>> from scriptmod.ir import Builder, Graph
    >>> from scriptmod.ir.dtypes import float32
    >>> from scriptmod.ir.types import TensorType
    >>> g = Graph(); b = Builder(g, source="model.py:3")
    >>> b.ret(b.op("neg", b.input(TensorType(float32, ("B", 4)), "x")))
    >>> print(g)
    graph(%x : Float(B, 4)):
      %0 : Float(B, 4) = sm::neg(%x)  # model.py:3
      return (%0)
"""
from __future__ import annotations

import json
import re
from typing import Any

from . import schema as S
from .dtypes import DType
from .graph import Block, Graph, Node, Prim, Value

INDENT = "  "
TENSOR_TEXT = "<Tensor>"
_SUFFIX_RE = re.compile(r"\.\d+$")
SCOPE_TAG = "scope: "
_SCOPE_RE = re.compile(r"^(?:(?P<source>.*), )?scope: (?P<scope>.+)$")


class Namer:
    """Print names: debug names where set (deduplicated with ``.N``), else numbers."""

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self._taken: set[str] = set()
        self._counter = 0

    def define(self, v: Value) -> str:
        name = v.debug_name
        if name is None:
            while str(self._counter) in self._taken:
                self._counter += 1
            name = str(self._counter)
        elif name in self._taken:
            stem, k = _SUFFIX_RE.sub("", name), 1
            while f"{stem}.{k}" in self._taken:
                k += 1
            name = f"{stem}.{k}"
        self._taken.add(name)
        self.names[v] = name
        return name

    def __getitem__(self, v: Value) -> str:
        return self.names[v] if v in self.names else self.define(v)

    @classmethod
    def for_graph(cls, graph: Graph) -> "Namer":
        """Names in text order: inputs, then each node's outputs before its blocks."""
        namer = cls()
        for v in graph.inputs:
            namer.define(v)
        for n in graph.walk():
            for v in n.outputs:
                namer.define(v)
            for b in n.blocks:
                for p in b.params:
                    namer.define(p)
        return namer


def subgraphs(graph: Graph) -> list[Graph]:
    """Fusion subgraphs in print order (``prim::FusionGroup_<index>``), nested ones included."""
    out: list[Graph] = []
    todo = [graph]
    while todo:
        g = todo.pop(0)
        for n in g.walk():
            sub = n.attrs.get("subgraph") if n.kind == Prim.FUSION_GROUP else None
            if isinstance(sub, Graph) and all(sub is not s for s in out):
                out.append(sub)
                todo.append(sub)
    return out


def tensor_constants(graph: Graph) -> list[Node]:
    """``prim::Constant`` nodes holding tensor payloads, in print order (``c0``, ``c1``...)."""
    return [n for g in [graph] + subgraphs(graph) for n in g.walk()
            if n.kind == Prim.CONSTANT and is_payload(n.attrs.get("value"))]


def is_payload(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(is_payload(v) for v in value)
    return not isinstance(value, (bool, int, float, str, type(None), DType, Graph))


def format_attr(value: Any, nested: bool = False) -> str:
    """One attribute value: ints, floats (repr), 0/1 for bools (True/False inside a list or
    tuple, where no schema says which ints were bools), JSON strings, dtype names."""
    if isinstance(value, bool):
        if nested:
            return "True" if value else "False"
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "None"
    if isinstance(value, DType):
        return value.short
    if isinstance(value, list):
        return "[" + ", ".join(format_attr(v, True) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(format_attr(v, True) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return TENSOR_TEXT


def node_comment(node: Node) -> str | None:
    """``model.py:12, scope: fc1``: where the user wrote the node, and the module path it
    came from (as TorchScript's ``scope:``); ``split_comment`` reads it back."""
    parts = [] if node.source is None else [node.source.replace("\n", " ")]
    if node.scope:
        parts.append(SCOPE_TAG + node.scope)
    return ", ".join(parts) if parts else None


def split_comment(comment: str | None) -> tuple[str | None, str | None]:
    """(source, scope) of a node line's comment."""
    m = _SCOPE_RE.match(comment or "")
    if m is None:
        return comment, None
    return m.group("source"), m.group("scope")


def _shown_attrs(node: Node) -> list[tuple[str, Any]]:
    items = [(k, v) for k, v in node.attrs.items() if not isinstance(v, Graph)]
    if node.is_op and node.op_name in S.REGISTRY:   # None-valued defaults are implied
        defaults = {a.name: a.default for a in S.REGISTRY[node.op_name].attrs}
        items = [(k, v) for k, v in items if not (v is None and defaults.get(k) is None
                                                   and k in defaults)]
    return sorted(items)


class Printer:
    """Prints one graph and its fusion subgraphs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.subgraphs = subgraphs(graph)
        self.lines: list[str] = []

    def kind_text(self, node: Node) -> str:
        sub = node.attrs.get("subgraph")
        if node.kind == Prim.FUSION_GROUP and isinstance(sub, Graph):
            index = next((i for i, s in enumerate(self.subgraphs) if s is sub), -1)
            return f"{Prim.FUSION_GROUP}_{index}"
        return node.kind

    def node_line(self, node: Node, names: Namer) -> str:
        outs = ", ".join(f"%{names[v]} : {v.type!r}" for v in node.outputs)
        attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in _shown_attrs(node))
        attrs = f"[{attrs}]" if attrs else ""
        args = ", ".join(f"%{names[v]}" for v in node.inputs)
        line = f"{outs + ' ' if outs else ''}= {self.kind_text(node)}{attrs}({args})"
        comment = node_comment(node)
        return line if comment is None else f"{line}  # {comment}"

    def print_block_body(self, block: Block, names: Namer, depth: int) -> None:
        pad = INDENT * depth
        for node in block:
            self.lines.append(pad + self.node_line(node, names))
            for i, b in enumerate(node.blocks):
                params = ", ".join(f"%{names[p]} : {p.type!r}" for p in b.params)
                self.lines.append(f"{pad}{INDENT}block{i}({params}):")
                self.print_block_body(b, names, depth + 2)
                outs = ", ".join(f"%{names[v]}" for v in b.outputs)
                self.lines.append(f"{pad}{INDENT * 2}-> ({outs})")

    def print_graph(self, graph: Graph, prefix: str = "") -> None:
        names = Namer.for_graph(graph)
        params = ", ".join(f"%{names[v]} : {v.type!r}" for v in graph.inputs)
        self.lines.append(f"{prefix}graph({params}):")
        self.print_block_body(graph.block, names, 1)
        self.lines.append(INDENT + "return (" + ", ".join(f"%{names[v]}" for v in graph.outputs) + ")")

    def text(self) -> str:
        self.print_graph(self.graph)
        for i, sub in enumerate(self.subgraphs):
            self.print_graph(sub, f"with {Prim.FUSION_GROUP}_{i} = ")
        return "\n".join(self.lines) + "\n"


def print_graph(graph: Graph) -> str:
    """The graph's text, fusion subgraphs after it; ``str(graph)`` calls this."""
    return Printer(graph).text()


def node_label(node: Node, names: Namer | None = None, value: Value | None = None) -> str:
    """How logs name a node: its module path and op, then the printed name of ``value``
    (default: its first output; the user's variable where the frontend knew it):
    ``fc1.matmul (%3)``, ``mul (%h)``. ``names``: the namer of ``value``'s graph."""
    op = node.kind.partition("::")[2]
    head = f"{node.scope}.{op}" if node.scope else op
    value = value or (node.outputs[0] if node.outputs else None)
    if value is None:
        return head
    names = names or Namer.for_graph(value.node.graph)
    return f"{head} (%{names[value]})"


def describe(node: Node) -> str:
    """The node's printed line (names as in its whole graph), for error messages."""
    names = Namer.for_graph(node.graph)
    return Printer(node.graph).node_line(node, names)


