"""ONNX emitters of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views.

Most of the family is decompositions and exports through their parts. The strided views
become a Gather of constant positions: ``diagonal`` over its two dims flattened, ``unfold``
along its dim (the sizes those positions index must be static), ``as_strided`` over the whole
input flattened (its storage, as the exported graph sees it). The complex ops (``real``,
``imag``, ``view_as_real``, ``view_as_complex``, ``complex``, ``conj_physical``) have no
standard ONNX form: ONNX operators do not take complex tensors.
"""
from __future__ import annotations

import numpy as np

from scriptmod.ir.graph import Node
from scriptmod.ir.ops.views import diagonal_dims, diagonal_len, unfold_dim
from scriptmod.ir.types import TensorType
from scriptmod.runtime.kernels.views import positions

from ._context import Context
from ._table import emits, out_dtype, out_rank


def _static_shape(cx: Context, node: Node, dims: list[int] | None = None) -> list:
    """The input's shape, with the sizes at ``dims`` (all when None) known."""
    t = node.inputs[0].type
    shape = list(t.shape) if isinstance(t, TensorType) and t.shape is not None else None
    if shape is None or any(not isinstance(shape[d], int)
                            for d in (range(len(shape)) if dims is None else dims)):
        raise cx.error(f"{node.op_name}: exporting needs the input's sizes along the viewed "
                       f"dims to be static, got {shape}")
    return shape


@emits("diagonal")
def _diagonal(cx: Context, node: Node, ins: list) -> list:
    """The two dims moved last and flattened, then the diagonal's flat positions gathered."""
    a, rank = node.attrs, len(node.inputs[0].type.shape)      # type: ignore[attr-defined]
    d1, d2 = diagonal_dims(rank, a["dim1"], a["dim2"])
    shape = _static_shape(cx, node, [d1, d2])
    n1, n2, offset = shape[d1], shape[d2], a["offset"]
    perm = [i for i in range(rank) if i not in (d1, d2)] + [d1, d2]
    moved = cx.op("Transpose", [cx.tensor(ins[0])], perm=perm)
    flat = cx.op("Reshape", [moved, cx.ints([0] * (rank - 2) + [n1 * n2])])
    first = max(-offset, 0) * n2 + max(offset, 0)
    positions = first + (n2 + 1) * np.arange(diagonal_len(n1, n2, offset), dtype=np.int64)
    return [cx.sym("Gather", [flat, cx.const(positions)], out_dtype(node), out_rank(node),
                   axis=rank - 2)]


@emits("unfold")
def _unfold(cx: Context, node: Node, ins: list) -> list:
    """Gather of a (windows, size) grid of positions along the dim, the size moved last."""
    a, rank = node.attrs, len(node.inputs[0].type.shape)      # type: ignore[attr-defined]
    if rank == 0:
        return [cx.sym("Reshape", [cx.tensor(ins[0]), cx.ints([a["size"]])], out_dtype(node),
                       1)]
    d = unfold_dim(rank, a["dimension"])
    n = _static_shape(cx, node, [d])[d]
    starts = np.arange(0, n - a["size"] + 1, a["step"], dtype=np.int64)
    grid = starts[:, None] + np.arange(a["size"], dtype=np.int64)[None, :]
    picked = cx.op("Gather", [cx.tensor(ins[0]), cx.const(grid)], axis=d)
    perm = list(range(d + 1)) + list(range(d + 2, rank + 1)) + [d + 1]
    return [cx.sym("Transpose", [picked], out_dtype(node), out_rank(node), perm=perm)]


@emits("as_strided")
def _as_strided(cx: Context, node: Node, ins: list) -> list:
    """The input flattened (its storage in the exported graph), then a Gather of the
    positions ``offset + sum(index * stride)`` (constants: a dynamic batch size
    does not move them, as it does not in the traced graph)."""
    a = node.attrs
    grid = positions(a["size"], a["stride"], a["offset"])
    shape = node.inputs[0].type.shape                       # type: ignore[attr-defined]
    known = shape is not None and all(isinstance(n, int) for n in shape)
    if known and grid.size and grid.max() >= int(np.prod(shape)):
        raise cx.error(f"as_strided: positions up to {grid.max()} are past the input's "
                       f"{int(np.prod(shape))} elements")
    flat = cx.op("Reshape", [cx.tensor(ins[0]), cx.ints([-1])])
    return [cx.sym("Gather", [flat, cx.const(grid)], out_dtype(node), out_rank(node), axis=0)]
