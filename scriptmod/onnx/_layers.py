"""Embedding bags, padding, distances and other layers as ONNX nodes.

ONNX has no embedding-bag node: ``embedding_bag`` becomes a ``Gather`` of the rows and a
``ScatterND`` with ``reduction`` ``add`` (opset 16) or ``max`` (opset 18) into the bags, each
index's bag being the number of bag starts at or before its position, less one. Rows that
do not count (``padding_idx``, past the last offset) add the reduction's identity.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node

from ._context import ONNX_DTYPES, Context, Sym, numpy_dtype
from ._table import emits, out_dtype

_MIN_OPSET = {"sum": 16, "mean": 16, "max": 18}


def _bag_ids(cx: Context, indices: str, starts: str, last: str | None) -> tuple[str, str]:
    """(each index position's bag id, whether the position is inside a bag)."""
    n = cx.op("Squeeze", [cx.op("Shape", [indices]), cx.ints([0])])
    pos = cx.op("Range", [cx.tensor(0), n, cx.tensor(1)])
    began = cx.op("LessOrEqual", [cx.op("Unsqueeze", [starts, cx.ints([0])]),
                                  cx.op("Unsqueeze", [pos, cx.ints([1])])])
    began = cx.op("Cast", [began], to=ONNX_DTYPES[D.int64])
    count = cx.op("ReduceSum", [began, cx.ints([1])], keepdims=0)
    bag = cx.op("Sub", [count, cx.tensor(1)])
    inside = cx.op("Less", [pos, last]) if last is not None else \
        cx.op("GreaterOrEqual", [bag, cx.tensor(0)])
    return bag, inside


def _filled(cx: Context, rows: str, cols: str | None, fill: float, dtype: D.DType) -> str:
    """A (rows[, cols]) tensor of ``fill``; ``rows``/``cols`` are 1-element int64 tensors."""
    shape = rows if cols is None else cx.op("Concat", [rows, cols], axis=0)
    value = np.array([fill], dtype=numpy_dtype(dtype))
    return cx.op("ConstantOfShape", [shape], value=numpy_helper.from_array(value))


@emits("embedding_bag")
def _embedding_bag(cx: Context, node: Node, ins: list) -> list:
    a, d = node.attrs, out_dtype(node)
    mode, pad = a.get("mode", "sum"), a.get("padding_idx")
    if cx.opset < _MIN_OPSET[mode]:
        raise cx.error(f"embedding_bag mode={mode!r} needs opset_version >= "
                       f"{_MIN_OPSET[mode]} (ScatterND's reduction), got {cx.opset}")
    weight, indices = cx.tensor(ins[0], d), cx.tensor(ins[1], D.int64)
    offsets = cx.tensor(ins[2], D.int64)
    starts, last = offsets, None
    if a.get("include_last_offset"):
        starts = cx.op("Slice", [offsets, cx.ints([0]), cx.ints([-1])])
        last = cx.op("Squeeze", [cx.op("Slice", [offsets, cx.ints([-1]), cx.ints([2 ** 62])]),
                                 cx.ints([0])])
    bag, keep = _bag_ids(cx, indices, starts, last)
    if pad is not None:
        keep = cx.op("And", [keep, cx.op("Not", [cx.op("Equal", [indices, cx.tensor(pad)])])])
    bag = cx.op("Unsqueeze", [cx.op("Max", [bag, cx.tensor(0)]), cx.ints([1])])
    rows = cx.op("Gather", [weight, indices], axis=0)
    if ins[3] is not None:
        rows = cx.op("Mul", [rows, cx.op("Unsqueeze", [cx.tensor(ins[3], d), cx.ints([1])])])
    identity = -np.inf if mode == "max" else 0.0
    rows = cx.op("Where", [cx.op("Unsqueeze", [keep, cx.ints([1])]), rows,
                           cx.tensor(identity, d)])
    n_bags, dim = cx.op("Shape", [starts]), cx.op("Slice", [cx.op("Shape", [weight]),
                                                             cx.ints([1]), cx.ints([2])])
    out = cx.op("ScatterND", [_filled(cx, n_bags, dim, identity, d), bag, rows],
                reduction="max" if mode == "max" else "add")
    return [Sym(out if mode == "sum" else _by_count(cx, mode, out, keep, bag, n_bags, d), d, 2)]


def _by_count(cx: Context, mode: str, out: str, keep: str, bag: str, n_bags: str,
              dtype: D.DType) -> str:
    """A mean's division by each bag's count of kept rows; a max's zeros for bags with none."""
    counts = cx.op("ScatterND", [_filled(cx, n_bags, None, 0.0, dtype), bag,
                                 cx.op("Cast", [keep], to=ONNX_DTYPES[dtype])], reduction="add")
    counts = cx.op("Unsqueeze", [counts, cx.ints([1])])
    if mode == "mean":
        return cx.op("Div", [out, cx.op("Max", [counts, cx.tensor(1.0, dtype)])])
    filled = cx.op("Greater", [counts, cx.tensor(0.0, dtype)])
    return cx.op("Where", [filled, out, cx.tensor(0.0, dtype)])
