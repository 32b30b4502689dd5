"""ONNX emitters of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique.

``scatter`` is ScatterElements: its reductions are ONNX's ``add``/``mul``/``max``/``min``
(``max``/``min`` need opset 18); ``include_self=False`` first writes each reduction's
identity where values land; ``mean`` (floating only) is the scattered sum over the scattered
count. ``searchsorted``, ``isin``, ``histc``, ``histogram`` and ``nonzero_static`` have no
standard node, so they do not export (none of their names is a standard ONNX node's).
"""
from __future__ import annotations

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node

from ._context import Context, Sym, numpy_dtype
from ._table import emits, out_dtype, out_rank

_ONNX_REDUCTION = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _identity(reduce: str, dtype: D.DType) -> np.ndarray:
    """The value a position starts from when ``include_self=False``."""
    nd = numpy_dtype(dtype)
    if reduce in ("sum", "mean", "prod"):
        return np.array(1 if reduce == "prod" else 0, dtype=nd)
    if dtype.category == D.FLOAT:
        return np.array(-np.inf if reduce == "amax" else np.inf, dtype=nd)
    info = np.iinfo(nd) if dtype is not D.bool_ else None
    low, high = (False, True) if info is None else (info.min, info.max)
    return np.array(low if reduce == "amax" else high, dtype=nd)


def _filled_like(cx: Context, value: np.ndarray, like: str) -> str:
    """A tensor of ``like``'s shape filled with ``value``."""
    return cx.op("Expand", [cx.const(value), cx.op("Shape", [like])])


@emits("scatter")
def _scatter(cx: Context, node: Node, ins: list) -> list:
    a, d, rank = node.attrs, out_dtype(node), out_rank(node)
    reduce, dim = a["reduce"], a["dim"]
    if rank == 0:
        raise cx.error("scatter of a 0-d tensor has no ONNX ScatterElements form")
    if reduce in ("amax", "amin") and cx.opset < 18:
        raise cx.error(f"scatter with reduce={reduce!r} needs opset_version >= 18, got "
                       f"{cx.opset}")
    if reduce == "mean" and d.category != D.FLOAT:
        raise cx.error("scatter with reduce='mean' exports for floating dtypes only (ONNX "
                       "Div truncates integers; PyTorch floors)")
    x, index, src = cx.tensor(ins[0]), cx.tensor(ins[1], D.int64), cx.tensor(ins[2], d)
    if reduce == "none":
        return [cx.sym("ScatterElements", [x, index, src], d, rank, axis=dim)]
    if not a["include_self"]:
        start = _filled_like(cx, _identity(reduce, d), index)
        x = cx.op("ScatterElements", [x, index, start], axis=dim)
    out = cx.op("ScatterElements", [x, index, src], axis=dim,
                reduction=_ONNX_REDUCTION[reduce])
    if reduce != "mean":
        return [Sym(out, d, rank)]
    one = np.array(1, dtype=numpy_dtype(d))
    base = _filled_like(cx, one if a["include_self"] else one * 0, x)
    count = cx.op("ScatterElements", [base, index, _filled_like(cx, one, index)], axis=dim,
                  reduction="add")
    return [cx.sym("Div", [out, cx.op("Max", [count, cx.const(one)])], d, rank)]
