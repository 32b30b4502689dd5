"""Elementwise fusion: maximal connected sets of elementwise ops become ``prim::FusionGroup``
nodes whose ``subgraph`` attribute holds the fused ops (one kernel each, see DESIGN §4).

Legality, per block (a group never spans blocks; If/Loop bodies are fused separately):

- a fusible node is a pure ``ELEMENTWISE`` op with every tensor type known (dtype and rank),
  all tensors on one device, scalar inputs that are ``prim::Constant`` (copied into the
  subgraph as immediates) and ``supported(node)`` true;
- merging two groups never creates a cycle: reachability is checked on the block's
  dependence graph contracted by the groups so far (``_Partition.would_cycle``, the walk of
  ``ir.nxview.would_create_cycle`` over plain successor sets: networkx made up a third of
  ``import scriptmod``), where side-effecting nodes are chained so that fusion never
  reorders them;
- every value a group returns has the group's iteration shape. Producer and consumer merge
  when their shapes are provably equal; a producer of a smaller (broadcast) shape joins
  only when all its uses are inside the consumer's group, so it stays internal.

``SCRIPTMOD_LOG=fusion`` prints each group and why a node or an edge was not fused.

    >>> from scriptmod.ir import parse
    >>> src = '''graph(%x : Float(B, 4)):
    ...   %a : Float(B, 4) = sm::neg(%x)
    ...   %b : Float(B, 4) = sm::exp(%a)
    ...   %c : Float(B, 4) = sm::add(%b, %x)
    ...   return (%c)
    ... '''
    >>> print(fuse_elementwise(parse(src)))
    graph(%x : Float(B, 4)):
      %c : Float(B, 4) = prim::FusionGroup_0(%x)
      return (%c)
    with prim::FusionGroup_0 = graph(%x : Float(B, 4)):
      %a : Float(B, 4) = sm::neg(%x)
      %b : Float(B, 4) = sm::exp(%a)
      %c : Float(B, 4) = sm::add(%b, %x)
      return (%c)
    >>> from scriptmod.ir.passes import run_pipeline
    >>> g = run_pipeline(parse(src), ["fuse_elementwise"], verify=True,
    ...                  options={"fuse_elementwise": {"min_size": 4}})
    >>> [n.kind for n in g.nodes]                      # a group of 3 is under min_size
    ['sm::neg', 'sm::exp', 'sm::add']
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Iterable, Sequence

from .. import log as irlog
from .. import schema as S
from ..graph import Block, Graph, Node, Prim, Value, clone_node, common_scope
from .effects import has_side_effects, mutates_modules
from .pipeline import register_pass
from ..printer import Namer, node_label
from ..types import TensorType

Supported = Callable[[Node], bool]
TOPIC = "fusion"


def fuse_elementwise(graph: Graph, *, min_size: int = 1,
                     supported: Supported | None = None) -> Graph:
    """Group connected elementwise ops into ``prim::FusionGroup`` nodes, in place.

    ``min_size``: groups with fewer ops stay unfused. ``supported(node)``: the target's veto
    (e.g. dtypes it cannot compile): ``scriptmod.jit._fuser`` passes the ``can_lower`` of the
    node's ``runtime.targets`` target, which is codegen's ``codegen.lower.can_lower``. The
    same graph always gives the same groups.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(B, 4)):
        ...   %a : Float(B, 4) = sm::neg(%x)
        ...   %b : Float(B, 4) = sm::exp(%a)
        ...   %c : Float(B, 4) = sm::add(%b, %x)
        ...   return (%c)
        ... ''')
        >>> g = fuse_elementwise(g, min_size=2, supported=lambda n: n.op_name != "add")
        >>> [n.kind for n in g.nodes]
        ['prim::FusionGroup', 'sm::add']
    """
    if min_size < 1:
        raise ValueError(f"fuse_elementwise: min_size must be >= 1, got {min_size}")
    _fuse_nested(graph, graph.block, min_size, supported or (lambda n: True))
    return graph


def _fuse_nested(graph: Graph, block: Block, min_size: int, supported: Supported) -> None:
    for node in block.nodes:
        for b in node.blocks:
            _fuse_nested(graph, b, min_size, supported)
    _fuse_block(graph, block, min_size, supported)


def _fuse_block(graph: Graph, block: Block, min_size: int, supported: Supported) -> None:
    candidates = _candidates(block, supported)
    if not candidates:
        return
    part = _Partition(graph, block, candidates)
    refused = _merge_same_shape(part, candidates)
    _absorb_broadcast_producers(part)
    groups = [g for g in part.groups() if len(g) >= min_size]
    if irlog.enabled(TOPIC):
        _log_refusals(graph, part, refused)
        _log_small(graph, [g for g in part.groups() if len(g) < min_size], min_size)
    if groups:
        new = _rewrite(graph, block, part, groups)
        if irlog.enabled(TOPIC):
            _log_groups(graph, new)


# ---- which nodes may fuse -------------------------------------------------------------------

def _candidates(block: Block, supported: Supported) -> list[Node]:
    out = []
    for node in block:
        why = why_not_fusible(node, supported)
        if why is None:
            out.append(node)
        elif node.is_op and why != "not elementwise" and irlog.enabled(TOPIC):
            irlog.log(TOPIC, f"not fused: {why}: {node_label(node)}{_at(node)}")
    return out


def why_not_fusible(node: Node, supported: Supported | None = None) -> str | None:
    """Why ``node`` cannot join a fusion group, or None when it can."""
    schema = S.REGISTRY.get(node.op_name) if node.is_op else None
    if schema is None or not schema.has(S.ELEMENTWISE):
        return "impure" if schema is not None and schema.has(S.IMPURE) else "not elementwise"
    if schema.has(S.IMPURE):
        return "impure"
    why = _why_types_unknown(node)
    if why is not None:
        return why
    if not any(v.uses for v in node.outputs):
        return "unused (dead code)"
    if supported is not None and not supported(node):
        return "unsupported by the backend"
    return None


def _why_types_unknown(node: Node) -> str | None:
    named = [(f"input {i}", v) for i, v in enumerate(node.inputs)]
    named += [(f"output {i}", v) for i, v in enumerate(node.outputs)]
    devices = set()
    for what, v in named:
        t = v.type
        if isinstance(t, TensorType):
            if t.dtype is None or t.shape is None:
                return f"unknown type ({what} is {t!r})"
            devices.add(t.device)
        elif what.startswith("output") or not is_scalar_constant(v):
            return f"unknown type ({what} is {t!r}, not a tensor or scalar constant)"
    if len(devices) > 1:
        return f"different devices ({', '.join(sorted(devices))})"
    if not any(isinstance(v.type, TensorType) for v in node.inputs):
        return "no tensor input (a constant expression)"
    return None


def is_scalar_constant(v: Value) -> bool:
    """A ``prim::Constant`` bool, int or float: copied into subgraphs as an immediate."""
    value = v.node.attrs.get("value") if v.node.kind == Prim.CONSTANT else None
    return isinstance(value, (bool, int, float))


def _device(node: Node) -> str:
    return next(v.type.device for v in node.outputs if isinstance(v.type, TensorType))


def _provably_same_shape(v: Value, user: Node) -> bool:
    """``user``'s output has ``v``'s shape at run time, not only in the static types."""
    a, b = v.type, user.outputs[0].type
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)) or a.shape != b.shape:
        return False
    assert a.shape is not None
    return None not in a.shape or S.REGISTRY[user.op_name].has(S.UNARY)


# ---- grouping ---------------------------------------------------------------------------------

class _Partition:
    """Groups of one block and the block's dependence graph contracted by them.

    Groups are keyed by a representative node; ``succ``/``pred`` hold one vertex per group
    and one per unfused node, so that ``would_cycle`` sees paths through other groups.
    """

    def __init__(self, graph: Graph, block: Block, candidates: Sequence[Node]) -> None:
        self.graph = graph
        self.index = {n: i for i, n in enumerate(block)}
        self.base = dependence_graph(graph, block)
        self.succ: dict[Node, set[Node]] = {n: set(s) for n, s in self.base.items()}
        self.pred: dict[Node, set[Node]] = {n: set() for n in self.base}
        for n, succ in self.base.items():
            for s in succ:
                self.pred[s].add(n)
        self.rep: dict[Node, Node] = {n: n for n in candidates}
        self.members: dict[Node, list[Node]] = {n: [n] for n in candidates}

    def find(self, n: Node) -> Node | None:
        return self.rep.get(n)

    def would_cycle(self, a: Node, b: Node) -> bool:
        """Whether contracting ``a`` and ``b`` makes a cycle: some path leaves them and
        comes back."""
        return leaves_and_returns({a, b}, self.succ.__getitem__)

    def merge(self, keep: Node, gone: Node) -> None:
        """Merge group ``gone`` into group ``keep`` (both representatives)."""
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p is not keep:
                self.succ[p].add(keep)
                self.pred[keep].add(p)
        for s in self.succ.pop(gone):
            self.pred[s].discard(gone)
            if s is not keep:
                self.pred[s].add(keep)
                self.succ[keep].add(s)
        moved = self.members.pop(gone)
        for m in moved:
            self.rep[m] = keep
        self.members[keep] = sorted(self.members[keep] + moved, key=self.index.__getitem__)

    def groups(self) -> list[list[Node]]:
        """Groups in block order of their last member; members in block order."""
        return sorted(self.members.values(), key=lambda g: self.index[g[-1]])


def dependence_graph(graph: Graph, block: Block) -> dict[Node, dict[Node, None]]:
    """Data dependences of ``block``'s nodes (each node's successors, in order), plus a
    chain through the nodes whose relative order matters (side effects; module reads when
    the graph writes module attributes). The edges of ``ir.nxview.to_networkx``."""
    dg: dict[Node, dict[Node, None]] = {n: {} for n in block}
    for n in block:
        for v in n.outputs:
            for use in v.uses:
                user = _top_level(use.user, block)
                if user is not None and user is not n and user in dg:   # not the return
                    dg[n][user] = None
    mutating = mutates_modules(graph)
    ordered = [n for n in block if any(has_side_effects(m) or (mutating and m.kind == Prim.GET_ATTR)
                                       for m in n.walk())]
    for a, b in zip(ordered, ordered[1:]):
        dg[a][b] = None
    return dg


def _top_level(node: Node, block: Block) -> Node | None:
    """The node of ``block`` that is or encloses ``node`` (None when outside ``block``)."""
    n: Node | None = node
    while n is not None and n.owning_block is not block:
        n = n.owning_block.owning_node if n.owning_block is not None else None
    return n


def _merge_same_shape(part: _Partition, candidates: Sequence[Node]) -> dict[tuple[Node, Node], str]:
    """Merge producer into consumer along provably same-shape edges, in block order.
    Returns the refused edges with the reason."""
    refused: dict[tuple[Node, Node], str] = {}
    for c in candidates:
        for v in c.inputs:
            p = v.node
            rp, rc = part.find(p), part.find(c)
            if rp is None or rc is None or rp is rc:
                continue
            if _device(p) != _device(c):
                refused[p, c] = f"different devices ({_device(p)}, {_device(c)})"
            elif not _provably_same_shape(v, c):
                refused[p, c] = f"different shape ({v.type!r} vs {c.outputs[0].type!r})"
            elif part.would_cycle(rp, rc):
                refused[p, c] = "would create a cycle"
            else:
                part.merge(rc, rp)
    return refused


def _absorb_broadcast_producers(part: _Partition) -> None:
    """A group all of whose uses lie in one other group joins it: its values stay internal,
    so their (broadcast) shape does not matter, and no cycle can form."""
    changed = True
    while changed:
        changed = False
        for first in [g[0] for g in reversed(part.groups())]:
            rep = part.rep[first]
            users = _user_groups(part, part.members[rep])
            if users is not None and len(users) == 1 and _device(users[0]) == _device(rep):
                part.merge(users[0], rep)
                changed = True


def _user_groups(part: _Partition, group: list[Node]) -> list[Node] | None:
    """Representatives of the groups using ``group``'s values; None if anything else does."""
    me = part.rep[group[0]]
    found: list[Node] = []
    for u in (u for m in group for v in m.outputs for u in v.uses):
        r = part.find(u.user)
        if r is None:
            return None
        if r is not me and r not in found:
            found.append(r)
    return found


# ---- rewriting ---------------------------------------------------------------------------------

def _rewrite(graph: Graph, block: Block, part: _Partition, groups: list[list[Node]]) -> list[Node]:
    """Replace each group by a FusionGroup node and reorder the block topologically (stable:
    a group takes its last member's place; only nodes that must move do)."""
    order = _schedule(part, groups)
    placed: list[Node] = []
    new: list[Node] = []
    for unit in order:
        if isinstance(unit, list):
            new.append(_build_group(graph, block, unit))
            placed.append(new[-1])
        else:
            placed.append(unit)
    for n in placed:
        if n.owning_block is block:   # scalar constants moved into subgraphs are gone
            n.move_before(block.return_node)
    return new


def _schedule(part: _Partition, groups: list[list[Node]]) -> list[Node | list[Node]]:
    """The block's nodes and groups (a group stands at its last member) in topological order,
    always taking the ready unit that comes first in the block (as networkx's
    ``lexicographical_topological_sort`` keyed by block position)."""
    unit_of = {n: n for n in part.base}
    for g in groups:
        for m in g:
            unit_of[m] = g[-1]
    succ: dict[Node, set[Node]] = {u: set() for u in unit_of.values()}
    indegree = dict.fromkeys(succ, 0)
    for u, targets in part.base.items():
        for v in targets:
            a, b = unit_of[u], unit_of[v]
            if a is not b and b not in succ[a]:
                succ[a].add(b)
                indegree[b] += 1
    at = {part.index[u]: u for u in succ}
    ready = [i for i, u in at.items() if not indegree[u]]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        u = at[heapq.heappop(ready)]
        order.append(u)
        for v in succ[u]:
            indegree[v] -= 1
            if not indegree[v]:
                heapq.heappush(ready, part.index[v])
    if len(order) != len(succ):
        raise AssertionError("fuse_elementwise: the contracted dependence graph has a cycle")
    by_last = {g[-1]: g for g in groups}
    return [by_last.get(u, u) for u in order]


def escaping_values(members: Sequence[Node]) -> list[Value]:
    """Outputs of ``members`` used by anything else (other nodes, nested blocks, returns)."""
    inside = set(members)
    return [v for m in members for v in m.outputs if any(u.user not in inside for u in v.uses)]


def _build_group(graph: Graph, block: Block, members: list[Node]) -> Node:
    sub, inputs, outputs = extract_subgraph(members)
    source = next((m.source for m in members if m.source is not None), None)
    node = graph.create(Prim.FUSION_GROUP, inputs, [v.type for v in outputs],
                        {"subgraph": sub}, source)
    node.scope = common_scope(m.scope for m in members)
    block.append(node)
    inside = set(members)
    for old, out in zip(outputs, node.outputs):
        out.debug_name = old.debug_name
        old.replace_uses_if(out, keep=lambda u: u.user in inside)
    feeding = [v.node for m in members for v in m.inputs if v.node.kind == Prim.CONSTANT]
    for m in reversed(members):
        m.destroy()
    for c in dict.fromkeys(feeding):
        if c.owning_block is not None and not c.output.uses:
            c.destroy()
    return node


def extract_subgraph(members: Sequence[Node]) -> tuple[Graph, list[Value], list[Value]]:
    """The subgraph computing ``members`` (in block order), the outer values it takes (tensors,
    in order of first use) and the outer values it returns. Scalar constants are copied in."""
    sub = Graph()
    env: dict[Value, Value] = {}
    inputs: list[Value] = []
    for m in members:
        for v in m.inputs:
            if v in env:
                continue
            if is_scalar_constant(v):
                sub.append(clone_node(v.node, sub, env))
            else:
                inputs.append(v)
                env[v] = sub.add_input(v.type, v.debug_name)
        sub.append(clone_node(m, sub, env))
    outputs = escaping_values(members)
    for v in outputs:
        sub.register_output(env[v])
    return sub, inputs, outputs


# ---- SCRIPTMOD_LOG=fusion --------------------------------------------------------------------

def _log_groups(graph: Graph, nodes: Iterable[Node]) -> None:
    names = Namer.for_graph(graph)
    for node in nodes:
        irlog.log(TOPIC, f"fused {group_summary(node, names)}")


def group_summary(node: Node, names: Namer) -> str:
    """``3 op(s) over Float(4, 32) (sm::add, sm::mul, sm::sigmoid) from fc1, act: act.mul
    (%5) at model.py:12``: a fusion group's ops, the module paths they came from, and the
    values it computes, named by the nodes that computed them."""
    sub: Graph = node.attrs["subgraph"]
    ops = [n for n in sub.nodes if n.is_op]
    scopes = ", ".join(dict.fromkeys(n.scope or "(top level)" for n in ops))
    outs = ", ".join(node_label(v.node, names, out) for v, out in zip(sub.outputs, node.outputs))
    return (f"{len(ops)} op(s) over {node.outputs[0].type!r} "
            f"({', '.join(n.kind for n in ops)}) from {scopes}: {outs}{_at(node)}")


def _at(node: Node) -> str:
    return f" at {node.source}" if node.source else ""


def _log_refusals(graph: Graph, part: _Partition, refused: dict[tuple[Node, Node], str]) -> None:
    names = Namer.for_graph(graph)
    for (p, c), why in refused.items():
        if part.find(p) is not part.find(c):
            edge = f"{node_label(p, names)} -> {node_label(c, names)}"
            irlog.log(TOPIC, f"kept apart: {edge}: {why}")


def _log_small(graph: Graph, groups: list[list[Node]], min_size: int) -> None:
    names = Namer.for_graph(graph)
    for g in groups:
        irlog.log(TOPIC, f"not fused: group of {len(g)} op(s) is below min_size={min_size}: "
                         f"{node_label(g[-1], names)}{_at(g[-1])}")


def leaves_and_returns(group: set, successors: Callable[[Any], Iterable[Any]]) -> bool:
    """Whether some path leaves ``group`` and comes back into it (merging the group into one
    node would then make a cycle); ``successors(n)``: the nodes that read ``n``'s outputs."""
    frontier = [s for n in group for s in successors(n) if s not in group]
    seen = set(frontier)
    while frontier:
        for s in successors(frontier.pop()):
            if s in group:
                return True
            if s not in seen:
                seen.add(s)
                frontier.append(s)
    return False


register_pass("fuse_elementwise", fuse_elementwise)
