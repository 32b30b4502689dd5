"""``expand_losses``: a loss op that eager runs as one registry op becomes the elementwise
ops and reduction it stands for, so that fusion can put it in the kernel that makes its input.

``mse_loss`` is one op because eager pays a pass over memory per op; in a compiled graph its
``(x - t)**2`` fuses into the kernel that computes ``x``, and the mean is a row reduction of
that kernel (``split_reductions`` gives it rows, ``fuse_rows`` the prologue). A model traced
with its loss then never writes its output: the forward reads the input and the target once.
Only the fusion pipeline runs this pass: unfused, the single op is the fast one.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(8, 64), %t : Float(8, 64)):
    ...   %l : Float() = sm::mse_loss[reduction="mean"](%x, %t)
    ...   return (%l)
    ... ''')
    >>> print(expand_losses(g))
    graph(%x : Float(8, 64), %t : Float(8, 64)):
      %0 : Float(8, 64) = sm::sub(%x, %t)
      %1 : Float(8, 64) = sm::mul(%0, %0)
      %l : Float() = sm::mean[keepdim=0](%1)
      return (%l)
"""
from __future__ import annotations

from typing import Callable

from ..builder import Builder
from ..dtypes import float32, float64
from ..graph import Graph, Node, Value
from ..types import TensorType
from .pipeline import register_pass

# the dtypes whose row sums are at least as exact as eager's (float64 accumulation); half
# losses stay one op, as eager rounds them
EXPANDED_DTYPES = (float32, float64)


def _mse_loss(b: Builder, node: Node) -> Value:
    x, t = node.inputs
    d = b.op("sub", x, t)
    sq = b.op("mul", d, d)
    reduction = node.attrs.get("reduction", "mean")
    return sq if reduction == "none" else b.op(reduction, sq, keepdim=False)


EXPANSIONS: dict[str, Callable[[Builder, Node], Value]] = {"sm::mse_loss": _mse_loss}


def expand_losses(graph: Graph) -> Graph:
    """Replace, in place, each op of ``EXPANSIONS`` whose tensor inputs are CPU tensors of one
    float dtype of ``EXPANDED_DTYPES`` (CUDA kernels do not fuse reductions) and whose
    reduction is known."""
    for node in list(graph.walk()):
        expand = EXPANSIONS.get(node.kind)
        if expand is None or not _expandable(node):
            continue
        out = node.outputs[0]
        with Builder(graph, node.source, node.scope).insert_before(node) as b:
            result = expand(b, node)
        result.debug_name, out.debug_name = out.debug_name, None
        out.replace_all_uses_with(result)
        node.destroy()
    return graph


def _expandable(node: Node) -> bool:
    types = [v.type for v in (*node.inputs, *node.outputs) if isinstance(v.type, TensorType)]
    if len(types) != len(node.inputs) + len(node.outputs):
        return False
    dtypes = {t.dtype for t in types}
    return (len(dtypes) == 1 and dtypes.pop() in EXPANDED_DTYPES
            and all(t.device == "cpu" for t in types)
            and node.attrs.get("reduction", "mean") in ("none", "mean", "sum"))


register_pass("expand_losses", expand_losses)
