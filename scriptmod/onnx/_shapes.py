"""Sizes, shape ops, indexing, factories and the run-time Python scalars of scripted
code (``x.size(0)`` of a dynamic dim is a 0-d int64 tensor; known sizes fold away)."""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType

from ._context import Context, Sym, scalar_dtype
from ._table import compute_dtype, emits, out_dtype, out_rank
from ._elementwise import COMPARE, floor_op


# ---- shapes -----------------------------------------------------------------------------
def static_dim(value: Any, node: Node, i: int = 0) -> Any:
    """``node.inputs[i]``'s size along ``dim`` when the IR knows it, else None."""
    shape = node.inputs[i].type.shape if isinstance(node.inputs[i].type, TensorType) else None
    dim = node.attrs["dim"]
    if shape is None or not isinstance(shape[dim], int):
        return None
    return shape[dim]


@emits("size")
def _size(cx: Context, node: Node, ins: list) -> list:
    known = static_dim(ins[0], node)
    if known is not None:
        return [known]
    shape = cx.op("Shape", [cx.tensor(ins[0])])
    return [Sym(cx.op("Gather", [shape, cx.tensor(node.attrs["dim"])], axis=0), D.int64, 0)]


@emits("shape")
def _shape(cx: Context, node: Node, ins: list) -> list:
    shape = node.inputs[0].type.shape                   # type: ignore[attr-defined]
    if shape is not None and all(isinstance(s, int) for s in shape):
        return [list(shape)]
    return [Sym(cx.op("Shape", [cx.tensor(ins[0])]), D.int64, 1)]


@emits("dim")
def _dim(cx: Context, node: Node, ins: list) -> list:
    return [node.inputs[0].type.rank]                  # type: ignore[attr-defined]


@emits("numel")
def _numel(cx: Context, node: Node, ins: list) -> list:
    return [Sym(cx.op("Size", [cx.tensor(ins[0])]), D.int64, 0)]


@emits("reshape")
def _reshape(cx: Context, node: Node, ins: list) -> list:
    zero = isinstance(ins[1], (list, tuple)) and 0 in ins[1]     # torch: an empty dim
    return [cx.sym("Reshape", [cx.tensor(ins[0]), cx.ints(ins[1])], out_dtype(node),
                   out_rank(node), **({"allowzero": 1} if zero else {}))]


@emits("expand")
def _expand(cx: Context, node: Node, ins: list) -> list:
    size = [1 if v == -1 else v for v in ins[1]]       # ONNX broadcasting keeps a size 1
    return [cx.sym("Expand", [cx.tensor(ins[0]), cx.ints(size)], out_dtype(node),
                   out_rank(node))]


@emits("permute")
def _permute(cx: Context, node: Node, ins: list) -> list:
    rank = out_rank(node)
    perm = [d % rank for d in node.attrs["dims"]] if rank else list(node.attrs["dims"])
    return [cx.sym("Transpose", [cx.tensor(ins[0])], out_dtype(node), rank, perm=perm)]


@emits("transpose")
def _transpose(cx: Context, node: Node, ins: list) -> list:
    rank = out_rank(node)
    if rank is None:
        raise cx.error("transpose of a tensor of unknown rank")
    perm = list(range(rank))
    a, b = node.attrs["dim0"] % rank, node.attrs["dim1"] % rank
    perm[a], perm[b] = perm[b], perm[a]
    return [cx.sym("Transpose", [cx.tensor(ins[0])], out_dtype(node), rank, perm=perm)]


@emits("unsqueeze")
def _unsqueeze(cx: Context, node: Node, ins: list) -> list:
    return [cx.sym("Unsqueeze", [cx.tensor(ins[0]), cx.ints([node.attrs["dim"]])],
                   out_dtype(node), out_rank(node))]


@emits("squeeze")
def _squeeze(cx: Context, node: Node, ins: list) -> list:
    shape = node.inputs[0].type.shape                   # type: ignore[attr-defined]
    dims = node.attrs.get("dim")
    dims = range(len(shape)) if dims is None else [d % len(shape) for d in dims]
    ones = [d for d in dims if shape[d] == 1]         # torch skips a dim not of size 1
    if not ones:
        return [ins[0]]
    return [cx.sym("Squeeze", [cx.tensor(ins[0]), cx.ints(ones)], out_dtype(node),
                   out_rank(node))]


@emits("narrow")
def _narrow(cx: Context, node: Node, ins: list) -> list:
    x, start, length = ins
    end = start + length if not (isinstance(start, Sym) or isinstance(length, Sym)) else \
        Sym(cx.op("Add", [cx.tensor(start, D.int64), cx.tensor(length, D.int64)]), D.int64, 0)
    y = cx.op("Slice", [cx.tensor(x), cx.ints([start]), cx.ints([end]),
                        cx.ints([node.attrs["dim"]])])
    return [Sym(y, out_dtype(node), out_rank(node))]


@emits("cat", "stack")
def _cat(cx: Context, node: Node, ins: list) -> list:
    d, dim = out_dtype(node), node.attrs.get("dim", 0)
    parts = [cx.tensor(v, d) for v in ins]
    if node.op_name == "stack":
        dim = dim % out_rank(node) if dim < 0 else dim   # type: ignore[operator]
        parts = [cx.op("Unsqueeze", [p, cx.ints([dim])]) for p in parts]
    return [cx.sym("Concat", parts, d, out_rank(node), axis=dim)]


@emits("gather")
def _gather(cx: Context, node: Node, ins: list) -> list:
    return [cx.sym("GatherElements", [cx.tensor(ins[0]), cx.tensor(ins[1], D.int64)],
                   out_dtype(node), out_rank(node), axis=node.attrs["dim"])]


@emits("full")
def _full(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    value = cx.tensor(ins[1], d)
    return [cx.sym("Expand", [value, cx.ints(ins[0])], d, out_rank(node))]


@emits("guard")
def _guard(cx: Context, node: Node, ins: list) -> list:
    """A trace's check that a call takes the path traced: ONNX cannot raise, so a check
    that depends on run-time sizes is dropped (a false one known now is an error)."""
    if ins[0] is False:
        raise cx.error(f"the trace's guard {node.attrs['what']!r} fails for the exported types")
    return [ins[0]]


# ---- run-time Python scalars (ints, floats, bools of scripted code) ---------------------
SCALAR_OPS: dict[str, tuple[Callable[..., Any], str]] = {
    "int_add": (operator.add, "Add"), "int_sub": (operator.sub, "Sub"),
    "int_mul": (operator.mul, "Mul"), "int_max": (max, "Max"), "int_min": (min, "Min"),
    "int_neg": (operator.neg, "Neg"), "int_eq": (operator.eq, "Equal"),
    "int_ne": (operator.ne, "NotEqual"), "int_floordiv": (operator.floordiv, "FloorDiv"),
    "int_mod": (operator.mod, "FloorMod"), "py_floordiv": (operator.floordiv, "FloorDiv"),
    "py_mod": (operator.mod, "FloorMod"), "py_ne": (operator.ne, "NotEqual"),
    "py_truediv": (operator.truediv, "Div"),
    "int_lt": (operator.lt, "Less"), "int_le": (operator.le, "LessOrEqual"),
    "int_gt": (operator.gt, "Greater"), "int_ge": (operator.ge, "GreaterOrEqual"),
    "py_add": (operator.add, "Add"), "py_sub": (operator.sub, "Sub"),
    "py_mul": (operator.mul, "Mul"), "py_neg": (operator.neg, "Neg"),
    "py_lt": (operator.lt, "Less"), "py_le": (operator.le, "LessOrEqual"),
    "py_gt": (operator.gt, "Greater"), "py_ge": (operator.ge, "GreaterOrEqual"),
    "py_eq": (operator.eq, "Equal"), "py_not": (operator.not_, "Not"),
    "py_float": (float, "Cast"), "py_int": (int, "Cast"), "py_bool": (bool, "Cast"),
}
_CONVERT = {"py_float": D.float64, "py_int": D.int64, "py_bool": D.bool_}


@emits(*SCALAR_OPS)
def _scalar(cx: Context, node: Node, ins: list) -> list:
    fn, op = SCALAR_OPS[node.op_name]
    if not any(isinstance(v, Sym) for v in ins):
        return [fn(*ins)]
    if node.op_name in _CONVERT:
        target = _CONVERT[node.op_name]
        x = cx.tensor(ins[0])
        if ins[0].rank != 0:        # float(t) of a one-element tensor
            x = cx.op("Reshape", [x, cx.ints([])])
        return [Sym(cx.tensor(Sym(x, ins[0].dtype, 0), target), target, 0)]
    common = D.bool_ if op == "Not" else compute_dtype(
        [Sym("", scalar_dtype(v), 0) if not isinstance(v, Sym) else v for v in ins])
    if op == "Div":                                   # Python's / of ints is a float
        common = D.float64
    if op in ("FloorDiv", "FloorMod"):
        return [Sym(floor_op(cx, ins, common, op == "FloorMod"), common, 0)]
    operands = [cx.tensor(v, common) for v in ins]
    y = cx.op("Not", [cx.op("Equal", operands)]) if op == "NotEqual" else cx.op(op, operands)
    dtype = D.bool_ if op in ("Not", "NotEqual", *COMPARE.values()) else common
    return [Sym(y, dtype, 0)]


# ---- basic indexing: x[i, a:b, None, ..., idx] ------------------------------------------
_INT_MAX = np.iinfo(np.int64).max


@emits("index")
def _index(cx: Context, node: Node, ins: list) -> list:
    """Slices for ``a:b:c``, Unsqueeze for ``None``, Gather for an int or one index tensor
    (an int drops its dim). Walks the dims of ``x`` left to right, as NumPy reads them."""
    spec, rank = node.attrs["spec"], node.inputs[0].type.rank  # type: ignore[attr-defined]
    if rank is None:
        raise cx.error("indexing a tensor of unknown rank")
    if sum(e[0] == "tensor" for e in spec) > 1:
        raise cx.error("indexing with more than one index tensor (advanced indexing)")
    x, dim = cx.tensor(ins[0]), 0
    used = sum(e[0] in ("int", "slice", "tensor") for e in spec)

    def value(v: Any) -> Any:
        return ins[1 + v[1]] if isinstance(v, tuple) else v
    for entry in spec:
        kind = entry[0]
        if kind == "ellipsis":
            dim += rank - used
        elif kind == "none":
            x = cx.op("Unsqueeze", [x, cx.ints([dim])])
            dim += 1
        elif kind == "slice":
            start, stop, step = (value(v) for v in entry[1:])
            if (start, stop, step) != (None, None, None):
                x = cx.op("Slice", [x, cx.ints([0 if start is None else start]),
                                    cx.ints([_INT_MAX if stop is None else stop]),
                                    cx.ints([dim]), cx.ints([1 if step is None else step])])
            dim += 1
        elif kind == "int":
            x = cx.op("Gather", [x, cx.tensor(value(entry[1]), D.int64)], axis=dim)
        elif kind == "tensor":
            index = ins[1 + entry[1]]
            if index.dtype is D.bool_:
                raise cx.error("indexing with a bool mask (its result's size depends on data)")
            x = cx.op("Gather", [x, cx.tensor(index, D.int64)], axis=dim)
            dim += index.rank
        else:
            raise cx.error(f"index entry {entry!r}")
    return [Sym(x, out_dtype(node), out_rank(node))]


@emits("arange")
def _arange(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    return [cx.sym("Range", [cx.tensor(v, d) for v in ins], d, 1)]
