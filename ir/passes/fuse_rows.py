"""Row fusion, ``fuse_elementwise``'s reduction-aware sibling: a row op (a ``ROW``-flagged op
over the trailing dims: ``softmax``, ``mean``, ``var``, ...) becomes a ``prim::FusionGroup``
together with the elementwise ops around it that a row kernel can compute in the same passes
over each row (``codegen.rows`` lowers such a group: one kernel per group).

Growing a group from each row op in block order (``S``: the row op's input shape; ``k``: the
trailing dims it reduces; ``R``: ``S`` with those dims 1):

- *consumers* join: an elementwise op reading a group value whose result has shape ``S`` or
  ``R`` (an epilogue: the affine of a norm, a residual add, an activation, ``rsqrt(var +
  eps)``), or another row op over the same dims of ``S`` (layer norm's variance after its
  mean); a reduced value without its kept dims is only ever a group output;
- *producers* join: an elementwise op of shape ``S`` or ``R`` feeding the group (a prologue:
  a scale, a mask, a bias); when its value is also used outside, the group returns it;
- nothing joins that would make a cycle, and every node obeys the ``supported`` veto (its
  backend must compile row kernels) and ``fuse_elementwise``'s rules for elementwise ops.

Run it before ``fuse_elementwise``, which then groups the remaining elementwise ops.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(B, 8), %w : Float(8)):
    ...   %m : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%x)
    ...   %d : Float(B, 8) = sm::sub(%x, %m)
    ...   %y : Float(B, 8) = sm::mul(%d, %w)
    ...   return (%y)
    ... ''')
    >>> print(fuse_rows(g))
    graph(%x : Float(B, 8), %w : Float(8)):
      %y : Float(B, 8) = prim::FusionGroup_0(%x, %w)
      return (%y)
    with prim::FusionGroup_0 = graph(%x : Float(B, 8), %w : Float(8)):
      %m : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%x)
      %d : Float(B, 8) = sm::sub(%x, %m)
      %y : Float(B, 8) = sm::mul(%d, %w)
      return (%y)
"""
from __future__ import annotations

from .. import log as irlog
from .. import schema as S
from ..graph import Block, Graph, Node, Value
from ..printer import Namer
from ..types import TensorType
from ..dtypes import bfloat16, float16, float32, float64
from .fuse import Supported, _Partition, _rewrite, _top_level, group_summary, why_not_fusible
from .pipeline import register_pass

TOPIC = "fusion"
ROW_DTYPES = frozenset({float16, bfloat16, float32, float64})
Geometry = tuple[tuple, int]
# Row ops whose formula holds the number of reduced elements (a mean divides by it, a
# variance by it less the correction): a row kernel builds it in, so their reduced dims must
# be concrete. The others (softmax, log_softmax, sum, amax, ...) also reduce symbolic dims:
# the row kernel reads its row length at run time.
COUNTED = frozenset({"mean", "var"})


def row_geometry(node: Node) -> Geometry | None:
    """``(S, k)``: the full shape ``S`` a row op reads and the number ``k`` of trailing dims
    it reduces, when a row kernel computes it (a ``ROW`` op over the trailing dims of a float
    tensor, those dims non-empty, no ``dtype`` argument; a symbolic reduced dim such as a
    sequence length ``s0`` only for ops outside ``COUNTED``); else None."""
    schema = S.REGISTRY.get(node.op_name) if node.is_op else None
    if schema is None or not schema.has(S.ROW) or len(node.inputs) != 1 \
            or node.attrs.get("dtype") is not None:
        return None
    t, out = node.inputs[0].type, node.outputs[0].type
    if not (isinstance(t, TensorType) and isinstance(out, TensorType)) or not t.shape \
            or t.dtype not in ROW_DTYPES or out.dtype is not t.dtype:
        return None
    rank = len(t.shape)
    if "dims" in _dim_arg(schema):
        dims = node.attrs.get("dim")
        dims = list(range(rank)) if dims is None else list(dims)
    else:
        dims = [node.attrs.get("dim")]
    if not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        return None
    norm = sorted({d % rank for d in dims})
    k = len(norm)
    if norm != list(range(rank - k, rank)):
        return None
    reduced = t.shape[rank - k:]
    if any(isinstance(d, int) and d <= 0 for d in reduced) \
            or any(not isinstance(d, (int, str)) for d in reduced):
        return None
    if node.op_name in COUNTED and not all(isinstance(d, int) for d in reduced):
        return None
    return tuple(t.shape), k


def _dim_arg(schema: S.OpSchema) -> str:
    """``"dims"`` when the op takes a dim list (``dim=None``: every dim), else ``"dim"``."""
    arg = next((a for a in schema.attrs if a.name == "dim"), None)
    return "dims" if arg is not None and "[]" in arg.type_text else "dim"


def fuse_rows(graph: Graph, *, supported: Supported | None = None) -> Graph:
    """Group each row op with its elementwise prologue and epilogue (see the module
    docstring), in place. ``supported(node)``: the backend's veto, asked of row ops and
    elementwise ops alike."""
    _fuse_nested(graph, graph.block, supported or (lambda n: True))
    return graph


def _fuse_nested(graph: Graph, block: Block, supported: Supported) -> None:
    for node in block.nodes:
        for b in node.blocks:
            _fuse_nested(graph, b, supported)
    _fuse_block(graph, block, supported)


def _fuse_block(graph: Graph, block: Block, supported: Supported) -> None:
    geometry: dict[Node, Geometry] = {}
    elementwise: list[Node] = []
    for node in block:
        geo = row_geometry(node)
        if geo is not None and any(v.uses for v in node.outputs) and supported(node):
            geometry[node] = geo
        elif why_not_fusible(node, supported) is None:
            elementwise.append(node)
    if not geometry:
        return
    part = _Partition(graph, block, list(geometry) + elementwise)
    reps: dict[Node, None] = {}
    for seed, geo in geometry.items():
        rep = part.rep[seed]
        if len(part.members[rep]) == 1:           # (else it joined an earlier row op's group)
            rep = _grow(part, block, seed, geo, geometry)
        reps[rep] = None
    groups = [part.members[r] for r in dict.fromkeys(part.rep[r] for r in reps)]
    new = _rewrite(graph, block, part, sorted(groups, key=lambda g: part.index[g[-1]]))
    if irlog.enabled(TOPIC):
        names = Namer.for_graph(graph)
        for node in new:
            irlog.log(TOPIC, f"row group of {group_summary(node, names)}")


def _grow(part: _Partition, block: Block, seed: Node, geo: Geometry,
          geometry: dict[Node, Geometry]) -> Node:
    """Merge into ``seed``'s group every consumer and producer that fits, to a fixed point;
    returns the group's representative."""
    full, k = geo
    row = full[:len(full) - k] + (1,) * k

    def shape_of(v: Value) -> tuple | None:
        t = v.type
        return tuple(t.shape) if isinstance(t, TensorType) and t.shape is not None else None

    def alone(n: Node) -> bool:
        r = part.find(n)
        return r is not None and part.members[r] == [n]

    def reads_fit(n: Node, members: set[Node]) -> bool:
        """Group values ``n`` reads keep every dim (a reduced value without its kept dims
        would broadcast against the wrong dims)."""
        return all(len(shape_of(v) or ()) == len(full) for v in n.inputs
                   if v.node in members and isinstance(v.type, TensorType))

    def fits(n: Node, members: set[Node]) -> bool:
        if n in geometry:
            return geometry[n] == geo and reads_fit(n, members)
        return shape_of(n.outputs[0]) in (full, row) and reads_fit(n, members)

    rep = part.find(seed)
    assert rep is not None
    changed = True
    while changed:
        changed = False
        members = set(part.members[rep])
        for m in list(part.members[rep]):
            near = [_top_level(u.user, block) for v in m.outputs for u in v.uses]
            near += [v.node for v in m.inputs]
            for n in dict.fromkeys(x for x in near if x is not None and x not in members):
                if not alone(n) or not fits(n, members):
                    continue
                producer = any(v.node is n for v in m.inputs)
                if producer and n in geometry:
                    continue                 # a row op joins as a consumer only
                if producer and shape_of(n.outputs[0]) != full and not all(
                        _top_level(u.user, block) in members for v in n.outputs for u in v.uses):
                    continue                 # a per-row prologue used elsewhere stays out
                if part.would_cycle(rep, n):
                    continue
                part.merge(rep, n)
                members.add(n)
                changed = True
    return rep


register_pass("fuse_rows", fuse_rows)
