"""ONNX emitters of elementwise math beyond the core: the trigonometric/hyperbolic nodes
(Tan, Asin, ..., Atanh), log10 as Log / ln(10), fmod as Mod with fmod=1 and hypot as
Sqrt(a*a + b*b). The decompositions of the family (lerp, logaddexp, xlogy, ...) export
through their parts."""
from __future__ import annotations

import math

from scriptmod.ir.graph import Node

from ._context import Context, Sym
from ._table import emits, out_dtype, out_rank

UNARY = {"tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
         "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh"}

# registry ops with no standard ONNX node of their own, and why they are not emitted
NOT_EMITTED = {
    "bitwise_left_shift": "ONNX BitShift takes unsigned integers only",
    "bitwise_right_shift": "ONNX BitShift takes unsigned integers only",
}


def _unary(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    x = cx.tensor(ins[0], dtype)
    if node.op_name == "log10":
        y = cx.op("Div", [cx.op("Log", [x]), cx.tensor(math.log(10.0), dtype)])
    else:
        y = cx.op(UNARY[node.op_name], [x])
    return [Sym(y, dtype, out_rank(node))]


for _name in (*UNARY, "log10"):
    emits(_name)(_unary)


@emits("fmod")
def _fmod(cx: Context, node: Node, ins: list) -> list:
    """C's fmod: ONNX Mod with fmod=1 (the sign of the dividend)."""
    dtype = out_dtype(node)
    a, b = (cx.tensor(v, dtype) for v in ins)
    return [Sym(cx.op("Mod", [a, b], fmod=1), dtype, out_rank(node))]


@emits("hypot")
def _hypot(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    a, b = (cx.tensor(v, dtype) for v in ins)
    y = cx.op("Sqrt", [cx.op("Add", [cx.op("Mul", [a, a]), cx.op("Mul", [b, b])])])
    return [Sym(y, dtype, out_rank(node))]
