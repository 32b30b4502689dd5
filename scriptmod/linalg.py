"""``scriptmod.linalg``: vector and matrix norms, with ``torch.linalg``'s arguments and rules.

Every vector norm is the registry op ``linalg_vector_norm`` (a row reduction: traced, fused
with its neighbours by the row kernels, differentiated as torch does, 0 at a zero vector),
followed for the matrix 1- and inf-norms by ``amax``/``amin``; the matrix 2-norms and the
nuclear norm reduce the singular values (the registry op ``linalg_svdvals``).

    >>> import scriptmod as sm
    >>> x = sm.tensor([[3.0, -4.0], [0.0, 0.0]])
    >>> sm.linalg.vector_norm(x, dim=1)
    tensor([5., 0.])
    >>> sm.linalg.matrix_norm(x, ord=1)
    tensor(4.)
    >>> x.norm()
    tensor(5.)
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from scriptmod._dispatch import dispatch
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.ir.ops.rules import norm_dim
from scriptmod.tensor import Tensor, _dtype_arg

__all__ = ["matrix_norm", "norm", "svdvals", "vector_norm"]

_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def vector_norm(x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None,
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``sum(|x| ** ord) ** (1 / ord)`` over ``dim`` (None: every element); ``ord`` inf/-inf
    is max/min ``|x|``, 0 the count of non-zeros. ``dtype``: compute (and return) in it.

        >>> import scriptmod as sm
        >>> sm.linalg.vector_norm(sm.tensor([3.0, -4.0]), ord=1)
        tensor(7.)
    """
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"linalg.vector_norm(): argument 'ord' must be a number, got "
                        f"{type(ord).__name__} ({ord!r})")
    if dim is not None:
        dim = [int(dim)] if isinstance(dim, int) else [int(d) for d in dim]
    return dispatch("linalg_vector_norm", (x,), {
        "ord": float(ord), "dim": dim, "keepdim": bool(keepdim),
        "dtype": None if dtype is None else _dtype_arg(dtype)})


def matrix_norm(A: Tensor, ord: str | float = "fro", dim: Sequence[int] = (-2, -1),
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The norm of the matrices in the two dims ``dim`` of ``A``: ``'fro'`` (Frobenius),
    ``'nuc'`` (sum of the singular values), 2/-2 (largest/smallest singular value), 1/-1
    (max/min column sum of ``|A|``), inf/-inf (max/min row sum).

        >>> import scriptmod as sm
        >>> sm.linalg.matrix_norm(sm.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=float("inf"))
        tensor(7.)
        >>> sm.linalg.matrix_norm(sm.tensor([[3.0, 0.0], [0.0, -4.0]]), ord="nuc")
        tensor(7.)
    """
    d0, d1 = _matrix_dims(A, ord, dim)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim, dtype=dtype)
    if ord in ("nuc", 2, -2):
        return _singular_value_norm(A, ord, d0, d1, keepdim, dtype)
    if math.isinf(ord):               # the inf-norm is the 1-norm of the transpose
        d0, d1 = d1, d0
    if not keepdim and d0 < d1:       # the column sums dropped dim d0
        d1 -= 1
    sums = vector_norm(A, 1, d0, keepdim, dtype=dtype)
    return sums.amax(d1, keepdim) if ord > 0 else sums.amin(d1, keepdim)


def _matrix_dims(A: Tensor, ord: Any, dim: Sequence[int]) -> tuple[int, int]:
    """torch's checks, in its order: ord, then A's dtype and rank, then ``dim``."""
    if isinstance(ord, bool) or ord not in _MATRIX_ORDS:
        raise ArgumentValueError(f"linalg.matrix_norm: Order {ord} not supported.")
    if A.dtype.category < D.FLOAT:
        raise DTypeError(f"linalg.matrix_norm: Expected a floating point or complex tensor as "
                         f"input. Got {A.dtype.name}")
    if A.ndim < 2:
        raise ShapeError(f"linalg.matrix_norm: The input tensor A must have at least 2 "
                         f"dimensions, got shape {tuple(A.shape)}.")
    dims = [dim] if isinstance(dim, int) else list(dim)
    if len(dims) != 2:
        raise ShapeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dims}")
    d0, d1 = (norm_dim(int(d), A.ndim, "linalg.matrix_norm") for d in dims)
    if d0 == d1:
        raise ShapeError(f"linalg.matrix_norm: dims must be different. Got {tuple(dims)}")
    return d0, d1


def norm(A: Tensor, ord: str | float | None = None, dim: int | Sequence[int] | None = None,
         keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """A vector norm over one dim, or a matrix norm over two, as ``torch.linalg.norm``
    chooses: without ``dim``, a 1-d ``A`` is a vector and a 2-d one a matrix (``ord=None``:
    the 2-norm of every element, whatever the rank).

        >>> import scriptmod as sm
        >>> sm.linalg.norm(sm.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1)
        tensor(6.)
    """
    dims = None if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if dims is not None and len(dims) not in (1, 2):
        raise ShapeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. "
                         f"Got {dims}")
    if dims is None and ord is not None and A.ndim not in (1, 2):
        raise ShapeError(f"linalg.norm: If dim is not specified but ord is, the input must "
                         f"be 1D or 2D. Got {A.ndim}D.")
    matrix = isinstance(ord, str) or ord is not None and (
        len(dims) == 2 if dims is not None else A.ndim == 2)
    if matrix:
        return matrix_norm(A, ord, dims or (0, 1), keepdim, dtype=dtype)   # type: ignore[arg-type]
    return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)


def _singular_value_norm(A: Tensor, ord: str | float, d0: int, d1: int, keepdim: bool,
                         dtype: Any) -> Tensor:
    """'nuc', 2 or -2: the matrices moved to the last two dims, their singular values summed
    or reduced to the largest / smallest; ``keepdim`` puts the two dims back (size 1)."""
    order = [d for d in range(A.ndim) if d not in (d0, d1)] + [d0, d1]
    s = svdvals((A if dtype is None else A.to(_dtype_arg(dtype))).permute(order))
    out = s.sum(-1) if ord == "nuc" else s.amax(-1) if ord == 2 else s.amin(-1)
    if not keepdim:
        return out
    inverse = [order.index(d) for d in range(A.ndim)]
    return out.reshape(list(out.shape) + [1, 1]).permute(inverse)


def svdvals(A: Tensor) -> Tensor:
    """The singular values of the matrices in the last two dims of ``A``, descending (real,
    also for complex ``A``); differentiable once (``U diag(grad) Vh``).

        >>> import scriptmod as sm
        >>> sm.linalg.svdvals(sm.tensor([[3.0, 0.0], [0.0, -4.0]]))
        tensor([4., 3.])
    """
    return dispatch("linalg_svdvals", (A,))
