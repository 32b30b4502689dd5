"""ONNX emitters of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy,
batched): the determinant is ONNX's Det (float inputs, any batch); ONNX has no node for a
factorization or a linear solve, so graphs that use them do not export."""
from __future__ import annotations

from scriptmod.ir.graph import Node

from ._context import Context, Sym
from ._table import emits, out_dtype, out_rank


@emits("linalg_det")
def _det(cx: Context, node: Node, ins: list) -> list:
    dtype = out_dtype(node)
    return [Sym(cx.op("Det", [cx.tensor(ins[0], dtype)]), dtype, out_rank(node))]
