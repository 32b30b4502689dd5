"""``split_reductions``: a sum or mean over several dims that leaves few rows is split in
two, first over the last dim, then over the others.

A row kernel runs its rows in parallel; ``x.sum()`` of a (2048, 2048) tensor is one row of
4M elements, so it ran on one thread, with all of its fused prologue. Split, the first
reduction has 2048 rows (threads share them, the prologue fuses into it), and the second
adds 2048 partials. Sums accumulate per row in float64 (the row kernels' rule), so the split
changes rounding only at the level of float32's last bit. Compiled backwards meet this often:
a scalar loss, a PReLU weight, and every bias broadcast over a batch reduce to few rows.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(64, 4096)):
    ...   %s : Float() = sm::sum(%x)
    ...   return (%s)
    ... ''')
    >>> print(split_reductions(g))
    graph(%x : Float(64, 4096)):
      %0 : Float(64, 1) = sm::sum[dim=[1], keepdim=1](%x)
      %1 : Float(1, 1) = sm::sum[dim=[0], keepdim=1](%0)
      %2 : Any[] = prim::Constant[value=[]]()
      %s : Float() = sm::reshape(%1, %2)
      return (%s)
"""
from __future__ import annotations

import math

from ..builder import Builder
from ..graph import Graph, Node, Value
from ..ops.rules import reduce_dims
from ..types import TensorType
from .pipeline import register_pass

SPLIT = ("sm::sum", "sm::mean")
MAX_ROWS = 16            # fewer rows than this leaves threads idle
MIN_ELEMENTS = 1 << 16   # below this one thread is quick anyway
MIN_LAST = 64            # the first reduction's rows should be long enough to vectorize


def split_reductions(graph: Graph) -> Graph:
    for node in list(graph.walk()):
        if node.kind in SPLIT and _worth_splitting(node):
            _split(graph, node)
    return graph


def _worth_splitting(node: Node) -> bool:
    shape = _static_shape(node.inputs[0])
    if shape is None or len(shape) < 2 or node.attrs.get("dtype") is not None:
        return False
    dims = reduce_dims(node.attrs, len(shape))
    last = len(shape) - 1
    if len(dims) < 2 or last not in dims:
        return False
    rows = math.prod(shape[d] for d in range(len(shape)) if d not in dims)
    n = math.prod(shape[d] for d in dims)
    return rows < MAX_ROWS and n >= MIN_ELEMENTS and shape[last] >= MIN_LAST \
        and n // shape[last] >= 2


def _static_shape(v: Value) -> tuple[int, ...] | None:
    t = v.type
    if not isinstance(t, TensorType) or t.shape is None:
        return None
    dims = [d for d in t.shape if type(d) is int]
    return tuple(dims) if len(dims) == len(t.shape) else None   # type: ignore[arg-type]


def _split(graph: Graph, node: Node) -> None:
    x, (out,) = node.inputs[0], node.outputs
    rank = len(_static_shape(x) or ())
    dims = reduce_dims(node.attrs, rank)
    name = node.op_name
    out_shape = _static_shape(out)
    with Builder(graph, node.source, node.scope).insert_before(node) as b:
        part = b.op(name, x, dim=[rank - 1], keepdim=True)
        whole = b.op(name, part, dim=sorted(d for d in dims if d != rank - 1), keepdim=True)
        result = whole if node.attrs.get("keepdim") or out_shape is None else \
            b.op("reshape", whole, list(out_shape))
    result.debug_name, out.debug_name = out.debug_name, None
    out.replace_all_uses_with(result)
    node.destroy()


register_pass("split_reductions", split_reductions)
