"""Linear algebra, normalization and reductions as ONNX nodes (convolution and pooling:
``_conv``, ``_pooling``)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node

from ._context import Context, Sym, numpy_dtype
from ._table import emits, out_dtype, out_rank


# ---- linear algebra and nn --------------------------------------------------------------
@emits("matmul")
def _matmul(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    return [cx.sym("MatMul", [cx.tensor(ins[0], d), cx.tensor(ins[1], d)], d, out_rank(node))]


@emits("batch_norm")
def _batch_norm(cx: Context, node: Node, ins: list) -> list:
    x, mean, var, weight, bias, training = ins[:6]
    if training is not False or mean is None:
        raise cx.error("batch_norm in training mode (or without running stats): call "
                       "model.eval() before exporting")
    d = out_dtype(node)
    channels = node.inputs[1].type.shape[0]             # type: ignore[attr-defined]
    scale = cx.tensor(weight, d) if weight is not None else cx.const(
        np.ones(channels, numpy_dtype(d)))
    shift = cx.tensor(bias, d) if bias is not None else cx.const(
        np.zeros(channels, numpy_dtype(d)))
    y = cx.op("BatchNormalization", [cx.tensor(x, d), scale, shift, cx.tensor(mean, d),
                                     cx.tensor(var, d)], epsilon=float(node.attrs["eps"]))
    return [Sym(y, d, out_rank(node))]


@emits("embedding")
def _embedding(cx: Context, node: Node, ins: list) -> list:
    return [cx.sym("Gather", [cx.tensor(ins[0]), cx.tensor(ins[1], D.int64)],
                   out_dtype(node), out_rank(node), axis=0)]


@emits("softmax", "log_softmax")
def _softmax(cx: Context, node: Node, ins: list) -> list:
    op = "Softmax" if node.op_name == "softmax" else "LogSoftmax"
    d = out_dtype(node)
    return [cx.sym(op, [cx.tensor(ins[0], d)], d, out_rank(node), axis=node.attrs["dim"])]


# ---- reductions -------------------------------------------------------------------------
REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax",
          "amin": "ReduceMin", "prod": "ReduceProd", "logsumexp": "ReduceLogSumExp"}


def reduce(cx: Context, op: str, x: str, dims: Any, keepdim: bool) -> str:
    """ReduceX over ``dims`` (None: all). ReduceSum takes axes as an input from opset 13,
    the others from opset 18 (an attribute before)."""
    kw: dict[str, Any] = {"keepdims": int(keepdim)}
    if dims is None:
        return cx.op(op, [x], **kw)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if op == "ReduceSum" or cx.opset >= 18:
        return cx.op(op, [x, cx.ints(dims)], **kw)
    return cx.op(op, [x], axes=dims, **kw)


@emits(*REDUCE)
def _reduce(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    y = reduce(cx, REDUCE[node.op_name], cx.tensor(ins[0], d), node.attrs.get("dim"),
               node.attrs.get("keepdim", False))
    return [Sym(y, d, out_rank(node))]


@emits("linalg_vector_norm")
def _vector_norm(cx: Context, node: Node, ins: list) -> list:
    """ReduceL1/ReduceL2 for orders 1 and 2, ReduceMax/ReduceMin of |x| for +-inf, the count
    of non-zeros for 0, and (sum |x|^p)^(1/p) otherwise (complex inputs do not export)."""
    d, a = out_dtype(node), node.attrs
    dims, keep, p = a.get("dim"), a.get("keepdim", False), float(a.get("ord", 2.0))
    x = cx.tensor(ins[0], d)
    if p in (1.0, 2.0):
        y = reduce(cx, "ReduceL1" if p == 1.0 else "ReduceL2", x, dims, keep)
    elif math.isinf(p):
        y = reduce(cx, "ReduceMax" if p > 0 else "ReduceMin", cx.op("Abs", [x]), dims, keep)
    elif p == 0.0:
        nonzero = Sym(cx.op("Not", [cx.op("Equal", [x, cx.tensor(0.0, d)])]), D.bool_, None)
        y = reduce(cx, "ReduceSum", cx.tensor(nonzero, d), dims, keep)
    else:
        powered = cx.op("Pow", [cx.op("Abs", [x]), cx.tensor(p, d)])
        y = cx.op("Pow", [reduce(cx, "ReduceSum", powered, dims, keep), cx.tensor(1.0 / p, d)])
    return [Sym(y, d, out_rank(node))]


@emits("var")
def _var(cx: Context, node: Node, ins: list) -> list:
    d, dims, keep = out_dtype(node), node.attrs.get("dim"), node.attrs.get("keepdim", False)
    shape = node.inputs[0].type.shape                   # type: ignore[attr-defined]
    axes = range(len(shape)) if dims is None else dims
    sizes = [shape[a] for a in axes]
    if not all(isinstance(s, int) for s in sizes):
        raise cx.error("var over a dim whose size is known only at run time")
    n, correction = math.prod(sizes), node.attrs.get("correction", 1)
    x = cx.tensor(ins[0], d)
    dev = cx.op("Sub", [x, reduce(cx, "ReduceMean", x, dims, True)])
    mean_sq = reduce(cx, "ReduceMean", cx.op("Mul", [dev, dev]), dims, keep)
    y = cx.op("Mul", [mean_sq, cx.tensor(n / max(n - correction, 0), d)])
    return [Sym(y, d, out_rank(node))]


@emits("argmax", "argmin", "max_dim", "min_dim")
def _arg_reduce(cx: Context, node: Node, ins: list) -> list:
    x, dim, keep = cx.tensor(ins[0]), node.attrs.get("dim"), node.attrs.get("keepdim", False)
    if dim is None:
        x, dim = cx.op("Reshape", [x, cx.ints([-1])]), 0
    arg = "ArgMax" if node.op_name in ("argmax", "max_dim") else "ArgMin"
    idx = Sym(cx.op(arg, [x], axis=dim, keepdims=int(keep)), D.int64, out_rank(node, -1))
    if node.op_name.endswith("_dim"):
        values = reduce(cx, "ReduceMax" if arg == "ArgMax" else "ReduceMin", x, [dim], keep)
        return [Sym(values, out_dtype(node), out_rank(node)), idx]
    return [idx]


@emits("cumsum")
def _cumsum(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    axis = cx.const(np.array(node.attrs["dim"], dtype=np.int64))
    return [cx.sym("CumSum", [cx.tensor(ins[0], d), axis], d, out_rank(node))]


@emits("topk")
def _topk(cx: Context, node: Node, ins: list) -> list:
    """TopK (its output is sorted either way: ``sorted=False`` only lets torch skip it)."""
    a = node.attrs
    values, indices = cx.op("TopK", [cx.tensor(ins[0]), cx.ints([a["k"]])], outputs=2,
                            axis=a.get("dim", -1), largest=int(a.get("largest", True)),
                            sorted=1)
    return [Sym(values, out_dtype(node), out_rank(node)), Sym(indices, D.int64, out_rank(node))]


@emits("layer_norm")
def _layer_norm(cx: Context, node: Node, ins: list) -> list:
    d, axis = out_dtype(node), node.attrs["axis"]
    shape = node.inputs[0].type.shape                   # type: ignore[attr-defined]
    w, b = node.attrs.get("weight"), node.attrs.get("bias")
    scale = cx.tensor(ins[w], d) if w is not None else cx.const(
        np.ones(shape[axis:], numpy_dtype(d)))
    inputs = [cx.tensor(ins[0], d), scale] + ([cx.tensor(ins[b], d)] if b is not None else [])
    return [cx.sym("LayerNormalization", inputs, d, out_rank(node), axis=axis,
                   epsilon=float(node.attrs["eps"]))]
