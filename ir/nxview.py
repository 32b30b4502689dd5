"""networkx views of a graph, for dependence queries (fusion legality) and drawing.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(4)):
    ...   %a : Float(4) = sm::neg(%x)
    ...   %b : Float(4) = sm::exp(%a)
    ...   %c : Float(4) = sm::add(%b, %x)
    ...   return (%c)
    ... ''')
    >>> dg = to_networkx(g)                  # nodes of the top block, edges = data deps
    >>> dg.number_of_nodes(), dg.number_of_edges()
    (3, 2)
    >>> neg, exp, add = g.nodes
    >>> would_create_cycle(g, [neg, add])    # merging them into one node makes a cycle (via exp)
    True
    >>> print(to_dot(g))
    digraph G {
      node [shape=box, fontname=monospace];
      "in_x" [label="%x : Float(4)", shape=ellipse];
      n0 [label="sm::neg"];
      ...
      n2 -> "return" [label="%c"];
    }
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .graph import Block, Graph, Node
from .printer import Namer, format_attr

if TYPE_CHECKING:       # networkx is imported on first use: ``import scriptmod`` never loads it
    import networkx as nx


def _top_level(node: Node, block: Block) -> Node | None:
    """The node of ``block`` that is or encloses ``node`` (None when outside ``block``)."""
    n: Node | None = node
    while n is not None and n.owning_block is not block:
        owner = n.owning_block.owning_node if n.owning_block is not None else None
        n = owner
    return n


def to_networkx(graph: Graph, block: Block | None = None) -> nx.DiGraph:
    """DiGraph over the nodes of ``block`` (default: the top block).

    An edge ``u -> v`` means ``v`` (or a node nested in it) uses an output of ``u``. Node
    attributes: ``kind`` and ``index`` (position in the block).
    """
    import networkx as nx
    block = block or graph.block
    dg = nx.DiGraph()
    for i, n in enumerate(block):
        dg.add_node(n, kind=n.kind, index=i)
    for n in block:
        for v in n.outputs:
            for use in v.uses:
                user = _top_level(use.user, block)
                if user is not None and user is not n and user in dg:
                    dg.add_edge(n, user, value=v)
    return dg


def would_create_cycle(graph: Graph, nodes: Iterable[Node], dg: nx.DiGraph | None = None) -> bool:
    """Whether merging ``nodes`` (of one block) into a single node would create a cycle:
    some path leaves the set and comes back into it."""
    group = set(nodes)
    if not group:
        return False
    block = next(iter(group)).owning_block
    dg = dg if dg is not None else to_networkx(graph, block)
    from .passes.fuse import leaves_and_returns
    return leaves_and_returns(group, dg.successors)


def to_dot(graph: Graph) -> str:
    """Graphviz DOT text: one box per top-level node, edges labelled with value names."""
    names = Namer.for_graph(graph)
    dg = to_networkx(graph)
    ids = {n: f"n{i}" for i, n in enumerate(dg.nodes)}
    lines = ["digraph G {", "  node [shape=box, fontname=monospace];"]
    for v in graph.inputs:
        lines.append(f'  "in_{names[v]}" [label="%{names[v]} : {v.type!r}", shape=ellipse];')
    for n in dg.nodes:
        attrs = ", ".join(f"{k}={format_attr(a)}" for k, a in sorted(n.attrs.items())
                          if k != "subgraph")
        label = n.kind + (f"[{attrs}]" if attrs else "")
        lines.append(f"  {ids[n]} [label={_quote(label)}];")
        for v in n.inputs:
            if v in graph.inputs:
                lines.append(f'  "in_{names[v]}" -> {ids[n]};')
    for u, w, data in dg.edges(data=True):
        val = data["value"]
        lines.append(f"  {ids[u]} -> {ids[w]} [label={_quote('%' + names[val])}];")
    lines.append('  "return" [shape=ellipse];')
    for v in graph.outputs:
        src = ids.get(v.node, f'"in_{names[v]}"')
        lines.append(f'  {src} -> "return" [label={_quote("%" + names[v])}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
