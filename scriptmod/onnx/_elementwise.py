"""Elementwise ops, and the activations ``_recompose`` finds, as ONNX nodes."""
from __future__ import annotations

import math
from typing import Callable

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node

from ._context import Context, Sym
from ._table import EMITTERS, compute_dtype, emits, out_dtype, out_rank


# ---- elementwise ------------------------------------------------------------------------
UNARY = {"abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
         "sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "erf": "Erf", "sin": "Sin",
         "cos": "Cos", "floor": "Floor", "ceil": "Ceil", "round": "Round", "sign": "Sign",
         "reciprocal": "Reciprocal", "logical_not": "Not", "isnan": "IsNaN", "isinf": "IsInf",
         "bitwise_not": "BitwiseNot"}
BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
          "maximum": "Max", "minimum": "Min", "logical_and": "And", "logical_or": "Or",
          "logical_xor": "Xor", "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr",
          "bitwise_xor": "BitwiseXor"}
COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
           "ge": "GreaterOrEqual"}
LOGICAL = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
           "logical_not": "Not"}           # also torch's bitwise ops on bool tensors
# unary ops ONNX has no single op for, written with those it has: f(cx, x, dtype) -> name
COMPOSED: dict[str, Callable[[Context, str, D.DType], str]] = {
    "rsqrt": lambda cx, x, d: cx.op("Reciprocal", [cx.op("Sqrt", [x])]),
    "erfc": lambda cx, x, d: cx.op("Sub", [cx.tensor(1.0, d), cx.op("Erf", [x])]),
    "expm1": lambda cx, x, d: cx.op("Sub", [cx.op("Exp", [x]), cx.tensor(1.0, d)]),
    "log1p": lambda cx, x, d: cx.op("Log", [cx.op("Add", [x, cx.tensor(1.0, d)])]),
    "log2": lambda cx, x, d: cx.op("Div", [cx.op("Log", [x]), cx.tensor(math.log(2), d)]),
    "exp2": lambda cx, x, d: cx.op("Pow", [cx.tensor(2.0, d), x]),
}


def _logical(name: str, dtype: D.DType) -> str | None:
    """The ONNX op of a logical op, or of a bitwise one on bools (``a & b`` of masks)."""
    if name.startswith("bitwise_") and dtype is D.bool_:
        name = name.replace("bitwise_", "logical_")
    return LOGICAL.get(name)


def _unary(cx: Context, node: Node, ins: list) -> list:
    dtype, name = out_dtype(node), node.op_name
    compute = dtype if name not in ("isnan", "isinf") else ins[0].dtype
    x = cx.tensor(ins[0], compute)
    op = _logical(name, dtype)
    if op is None and name in COMPOSED:
        y = COMPOSED[name](cx, x, dtype)
    else:
        y = cx.op(op or UNARY[name], [x])
    return [Sym(y, dtype, out_rank(node))]


def _binary(cx: Context, node: Node, ins: list) -> list:
    dtype, name = out_dtype(node), node.op_name
    op = _logical(name, dtype)
    compute = D.bool_ if op else compute_dtype(ins) if dtype is D.bool_ else dtype
    a, b = (cx.tensor(v, compute) for v in ins)
    if name == "ne":
        y = cx.op("Not", [cx.op("Equal", [a, b])])
    else:
        y = cx.op(op or BINARY.get(name) or COMPARE[name], [a, b])
    return [Sym(y, dtype, out_rank(node))]


def floor_op(cx: Context, ins: list, dtype: D.DType, remainder: bool) -> str:
    """Python's floor division or modulo (the result takes the divisor's sign); integer
    quotients go through float64, exact below 2**53."""
    if dtype.category == D.INT and remainder:
        return cx.op("Mod", [cx.tensor(v, dtype) for v in ins], fmod=0)
    compute = dtype if dtype.is_floating_point else D.float64
    a, b = (cx.tensor(v, compute) for v in ins)
    q = cx.op("Floor", [cx.op("Div", [a, b])])
    y = cx.op("Sub", [a, cx.op("Mul", [q, b])]) if remainder else q
    return cx.tensor(Sym(y, compute, None), dtype)


@emits("floor_divide", "remainder")
def _floor_ops(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    return [Sym(floor_op(cx, ins, dtype, node.op_name == "remainder"), dtype, out_rank(node))]


for _name in (*UNARY, *COMPOSED):
    EMITTERS[_name] = _unary
for _name in (*BINARY, *COMPARE, "ne"):
    EMITTERS[_name] = _binary


@emits("where")
def _where(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    cond = cx.tensor(ins[0], D.bool_)
    return [cx.sym("Where", [cond, cx.tensor(ins[1], dtype), cx.tensor(ins[2], dtype)],
                   dtype, out_rank(node))]


@emits("clamp")
def _clamp(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    bounds = [cx.tensor(v, dtype) if v is not None else "" for v in (lo, hi)]
    return [cx.sym("Clip", [cx.tensor(ins[0], dtype), *bounds], dtype, out_rank(node))]


@emits("cast")
def _cast(cx: Context, node: Node, ins: list) -> list:
    return [Sym(cx.tensor(ins[0], out_dtype(node)), out_dtype(node), out_rank(node))]


@emits("contiguous", "clone", "detach", "to_device")
def _identity(cx: Context, node: Node, ins: list) -> list:
    return [ins[0]]


@emits("dropout")
def _dropout(cx: Context, node: Node, ins: list) -> list:
    if ins[1] is not False:
        raise cx.error("dropout in training mode: call model.eval() before exporting")
    return [ins[0]]


# ---- recomposed activations and norms (see ``_recompose``) -------------------------------
GELU_OPSET = 20


@emits("gelu")
def _gelu(cx: Context, node: Node, ins: list) -> list:
    """``Gelu`` from opset 20; before it, ONNX's own formula (Erf or Tanh)."""
    d, approximate = out_dtype(node), node.attrs["approximate"]
    x = cx.tensor(ins[0], d)
    if cx.opset >= GELU_OPSET:
        return [cx.sym("Gelu", [x], d, out_rank(node), approximate=approximate)]
    if approximate == "tanh":
        cube = cx.op("Mul", [cx.op("Mul", [x, x]), x])
        inner = cx.op("Add", [x, cx.op("Mul", [cube, cx.tensor(0.044715, d)])])
        core = cx.op("Tanh", [cx.op("Mul", [inner, cx.tensor(math.sqrt(2 / math.pi), d)])])
    else:
        core = cx.op("Erf", [cx.op("Mul", [x, cx.tensor(math.sqrt(0.5), d)])])
    half_x = cx.op("Mul", [x, cx.tensor(0.5, d)])
    y = cx.op("Mul", [half_x, cx.op("Add", [core, cx.tensor(1.0, d)])])
    return [Sym(y, d, out_rank(node))]


SWISH_OPSET = 24


@emits("silu")
def _silu(cx: Context, node: Node, ins: list) -> list:
    """``Swish`` from opset 24; before it, ``x * Sigmoid(x)``."""
    d = out_dtype(node)
    x = cx.tensor(ins[0], d)
    y = cx.op("Swish", [x]) if cx.opset >= SWISH_OPSET else cx.op(
        "Mul", [x, cx.op("Sigmoid", [x])])
    return [Sym(y, d, out_rank(node))]


@emits("leaky_relu", "elu")
def _negative_slope(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    op = "LeakyRelu" if node.op_name == "leaky_relu" else "Elu"
    return [cx.sym(op, [cx.tensor(ins[0], d)], d, out_rank(node),
                   alpha=float(node.attrs["alpha"]))]


@emits("prelu")
def _prelu(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    return [cx.sym("PRelu", [cx.tensor(ins[0], d), cx.tensor(ins[1], d)], d, out_rank(node))]


@emits("clip")
def _clip(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    bounds = [cx.tensor(float(node.attrs[k]), d) for k in ("min", "max")]
    return [cx.sym("Clip", [cx.tensor(ins[0], d), *bounds], d, out_rank(node))]
