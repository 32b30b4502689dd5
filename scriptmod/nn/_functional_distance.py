"""Distances and similarities of ``scriptmod.nn.functional`` (re-exported by it).

All are decompositions into ``linalg_vector_norm`` (whose derivative is torch's
``norm_backward``: 0 at a zero vector) and elementwise ops, so they trace, fuse and export.
"""
from __future__ import annotations

from scriptmod._creation import arange
from scriptmod._tensor_ops import where
from scriptmod.linalg import vector_norm
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.tensor import Tensor

__all__ = ["cosine_similarity", "pairwise_distance", "pdist"]


def _clamped_norm(x: Tensor, dim: int, eps: float) -> Tensor:
    """``||x||`` along ``dim`` clamped below at ``eps`` with the gradient of the unclamped
    norm, as torch clamps it in place under ``no_grad``."""
    norm = vector_norm(x, 2, dim, keepdim=True)
    return where(norm < eps, (norm - norm.detach()) + eps, norm)   # the first: eps, grad 1


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcast first), each
    divided by its norm clamped at ``eps`` as PyTorch does (zeros give 0, not nan).

    >>> F.cosine_similarity(scriptmod.tensor([[1.0, 0.0]]), scriptmod.tensor([[1.0, 1.0]]))
    tensor([0.7071])
    """
    joint = x1 + x2       # its shape and dtype are the broadcast and promoted ones
    common, shape = joint.dtype, list(joint.shape)
    if common.category < D.FLOAT:
        raise DTypeError(f"cosine_similarity: expected common dtype to be floating point, yet "
                         f"common dtype is {common.name}")
    a, b = x1.to(common).expand(shape), x2.to(common).expand(shape)
    return ((a / _clamped_norm(a, dim, eps)) * (b / _clamped_norm(b, dim, eps))).sum(dim=dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The ``p``-norm of ``x1 - x2 + eps`` over the last dimension of the broadcast pair.

    >>> F.pairwise_distance(scriptmod.tensor([[0.0, 0.0]]), scriptmod.tensor([[3.0, 4.0]]), eps=0)
    tensor([5.])
    """
    return vector_norm(x1 - x2 + eps, p, -1, keepdim=keepdim)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """The ``p``-norm distance between every pair of rows ``i < j`` of an (N, M) ``input``,
    in row-major order of the pairs: N (N - 1) / 2 values.

    >>> F.pdist(scriptmod.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]))
    tensor([5.0000, 1.0000, 4.2426])
    """
    if input.dim() != 2:
        raise ShapeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if p < 0:
        raise ArgumentValueError(f"pdist only supports non-negative p values, got p={p}")
    if input.dtype.category < D.FLOAT:
        raise DTypeError(f"pdist only supports floating-point dtypes, got {input.dtype.name}")
    rows, cols = _upper_pairs(input.shape[0])
    return vector_norm(input.index_select(0, rows) - input.index_select(0, cols), p, 1)


def _upper_pairs(n: int) -> tuple[Tensor, Tensor]:
    """(rows, cols) of the pairs i < j of ``n`` rows in row-major order, from each pair's
    number k by the closed form of the row (then moved by one where rounding put it past a
    row's start), so that a trace follows ``n`` instead of baking index constants."""
    k = arange(n * (n - 1) // 2, dtype=D.float64)
    b = n * 2 - 1       # tensors stay on the left: ``2 * n`` or ``n - t`` would bake n

    def start(row: Tensor) -> Tensor:          # the number of row's first pair
        return row * (-row + b) / 2

    row = ((-(k * -8 + b * b).clamp(min=0).sqrt() + b) / 2).floor()
    row = where(start(row) > k, row - 1, row)
    row = where(start(row + 1) <= k, row + 1, row)
    col = k - start(row) + row + 1
    return row.to(D.int64), col.to(D.int64)
