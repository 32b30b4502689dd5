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
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from scriptmod._creation import arange, eye, full, zeros
from scriptmod._dispatch import dispatch
from scriptmod._ops_products import linalg_cross as cross
from scriptmod._ops_products import matrix_power, multi_dot, vander, vecdot
from scriptmod._public import with_out
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.ir.ops.rules import broadcast_shapes, norm_dim
from scriptmod.runtime.kernels.linalg import LinAlgError
from scriptmod.tensor import Tensor, _dtype_arg

# cross, vecdot, multi_dot, matrix_power and vander are the products family's
# (``scriptmod/_ops_products.py``), published here under torch.linalg's names
__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eig",
           "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex", "ldl_factor",
           "ldl_factor_ex", "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve",
           "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm",
           "pinv", "qr", "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals",
           "tensorinv", "tensorsolve", "vander", "vecdot", "vector_norm"]

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


# ---- result types (torch.return_types: indexable, unpackable, read by name) ---------------
def _result(name: str, fields: str) -> Any:
    return namedtuple(name, fields.split())


RETURN_TYPES = {name: _result(name, fields) for name, fields in (
    ("linalg_cholesky_ex", "L info"), ("linalg_inv_ex", "inverse info"),
    ("linalg_solve_ex", "result info"), ("linalg_qr", "Q R"), ("linalg_svd", "U S Vh"),
    ("linalg_eigh", "eigenvalues eigenvectors"), ("linalg_eig", "eigenvalues eigenvectors"),
    ("linalg_slogdet", "sign logabsdet"), ("linalg_lu_factor", "LU pivots"),
    ("linalg_lu_factor_ex", "LU pivots info"), ("linalg_lu", "P L U"),
    ("linalg_ldl_factor", "LD pivots"), ("linalg_ldl_factor_ex", "LD pivots info"),
    ("linalg_lstsq", "solution residuals rank singular_values"))}


def _returns(name: str, values: Any) -> Any:
    return RETURN_TYPES[name](*values)


def _checked(name: str, inputs: tuple, attrs: dict) -> Any:
    """Op ``name`` whose kernel raises ``LinAlgError`` with PyTorch's message: raised as it
    is (the dispatcher names the op in front of other errors)."""
    try:
        return dispatch(name, inputs, attrs)
    except LinAlgError as e:
        raise LinAlgError(str(e).removeprefix(f"{name}(): ")) from None


# ---- helpers: adjoints, identities, diagonals, batch broadcasting --------------------------
def adjoint(x: Tensor) -> Tensor:
    """The conjugate transpose of the matrices in the last two dims (``x.mH``)."""
    return x.mT.conj() if x.is_complex() else x.mT


def identity(n: int, like: Tensor, m: int | None = None) -> Tensor:
    return eye(n, m, dtype=like.dtype, device=like.device)


def diag_embed(v: Tensor) -> Tensor:
    """(..., n) -> (..., n, n) with ``v`` on the diagonal (written with a product, so it
    differentiates and traces with no op of its own)."""
    return v.unsqueeze(-1) * identity(v.shape[-1], v)


def diagonal_of(x: Tensor) -> Tensor:
    """The main diagonal of the matrices in the last two dims, (..., min(m, n))."""
    m, n = x.shape[-2], x.shape[-1]
    k = min(m, n)
    return (x.narrow(-2, 0, k).narrow(-1, 0, k) * identity(k, x)).sum(-1)


def _broadcast_batch(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` expanded to their common batch dims (their matrices unchanged)."""
    batch = list(broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])) or ())
    if list(a.shape[:-2]) != batch:
        a = a.expand(batch + list(a.shape[-2:]))
    if list(b.shape[:-2]) != batch:
        b = b.expand(batch + list(b.shape[-2:]))
    return a, b


def _need_matrices(A: Tensor, opname: str, square: bool = False) -> None:
    if A.ndim < 2:
        raise ShapeError(f"{opname}: The input tensor A must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"{opname}: A must be batches of square matrices, but they are "
                         f"{A.shape[-2]} by {A.shape[-1]} matrices")


def _need_lapack_dtype(A: Tensor, opname: str) -> None:
    if A.dtype.category < D.FLOAT:
        raise DTypeError(f"{opname}: Expected a floating point or complex tensor as input. "
                         f"Got {A.dtype.short}")
    if A.dtype in (D.float16, D.bfloat16):
        raise DTypeError(f"{opname}: Low precision dtypes not supported. Got "
                         f"{A.dtype.short}")


def _same_dtype(A: Tensor, B: Tensor, opname: str) -> None:
    if A.dtype != B.dtype:
        raise DTypeError(f"{opname}: Expected A and B to have the same dtype, but found A of "
                         f"type {A.dtype.short} and B of type {B.dtype.short} instead")


def _is_vector_rhs(A: Tensor, B: Tensor) -> bool:
    """torch.linalg.solve's rule: B is a vector (or a batch of them) when it is 1-d, or has
    one dim less than A and A's shape without its last dim."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and list(B.shape) == list(A.shape[:-1]))


# ---- Cholesky ------------------------------------------------------------------------------
def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> Any:
    """``(L, info)``: the Cholesky factor of the Hermitian positive-definite matrices of ``A``
    (lower, or upper with ``upper=True``: ``A = U^H U``), ``info`` 0 or the order of the first
    leading minor that is not positive-definite (``check_errors``: raise ``LinAlgError``).

        >>> import scriptmod as sm
        >>> sm.linalg.cholesky_ex(sm.tensor([[4.0, 2.0], [2.0, 5.0]])).L
        tensor([[2., 0.],
                [1., 2.]])
    """
    _need_lapack_dtype(A, "linalg.cholesky")
    return _returns("linalg_cholesky_ex", _checked(
        "linalg_cholesky_ex", (A,), {"upper": bool(upper), "check_errors": bool(check_errors)}))


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of ``A`` (``LinAlgError`` if not positive-definite).

        >>> import scriptmod as sm
        >>> sm.linalg.cholesky(sm.tensor([[4.0, 2.0], [2.0, 5.0]]), upper=True)
        tensor([[2., 1.],
                [0., 2.]])
    """
    return cholesky_ex(A, upper=upper, check_errors=True).L


# ---- solvers and the inverse ----------------------------------------------------------------
def _solve_ex(A: Tensor, B: Tensor, left: bool, check: str | None) -> tuple[Tensor, Tensor]:
    """X with A X = B (``left``) or X A = B; B a matrix, batch dims broadcast."""
    _need_lapack_dtype(A, "linalg.solve")
    _need_matrices(A, "linalg.solve", square=True)
    _same_dtype(A, B, "linalg.solve")
    if not left:
        x, info = _solve_ex(A.mT, B.mT, True, check)
        return x.mT, info
    A, B = _broadcast_batch(A, B)
    return _checked("linalg_solve_ex", (A, B), {"check": check})


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> Any:
    """``(result, info)``: ``solve`` that reports a singular matrix in ``info`` (the index of
    the first zero pivot, 1-based) instead of raising, unless ``check_errors``.

        >>> import scriptmod as sm
        >>> sm.linalg.solve_ex(sm.tensor([[2.0, 0.0], [0.0, 4.0]]), sm.tensor([2.0, 2.0])).result
        tensor([1.0000, 0.5000])
    """
    vector = _is_vector_rhs(A, B)
    if vector and not left:
        raise ShapeError("linalg.solve: Vector broadcasting of the left hand side is not "
                         "supported for left=False. In this case linalg.solve is equivalent "
                         "to B / A.squeeze(-1)")
    x, info = _solve_ex(A, B.unsqueeze(-1) if vector else B, left,
                        "torch.linalg.solve" if check_errors else None)
    return _returns("linalg_solve_ex", (x.squeeze(-1) if vector else x, info))


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """X with ``A X = B`` (``left=False``: ``X A = B``) for square ``A``; ``B`` a matrix or a
    vector (batch dims broadcast). A singular ``A`` raises ``LinAlgError``.

        >>> import scriptmod as sm
        >>> sm.linalg.solve(sm.tensor([[2.0, 1.0], [1.0, 3.0]]), sm.tensor([3.0, 5.0]))
        tensor([0.8000, 1.4000])
    """
    return solve_ex(A, B, left=left, check_errors=True).result


def inv_ex(A: Tensor, *, check_errors: bool = False) -> Any:
    """``(inverse, info)`` of the square matrices of ``A`` (``info``: see ``solve_ex``).

        >>> import scriptmod as sm
        >>> sm.linalg.inv_ex(sm.tensor([[2.0, 0.0], [0.0, 4.0]])).inverse
        tensor([[0.5000, 0.0000],
                [0.0000, 0.2500]])
    """
    _need_lapack_dtype(A, "linalg.inv")
    _need_matrices(A, "linalg.inv", square=True)
    eye_ = identity(A.shape[-1], A).expand(list(A.shape))
    x, info = _solve_ex(A, eye_, True, "linalg.inv" if check_errors else None)
    return _returns("linalg_inv_ex", (x, info))


def inv(A: Tensor) -> Tensor:
    """The inverse of the square matrices of ``A`` (``LinAlgError`` if singular).

        >>> import scriptmod as sm
        >>> sm.linalg.inv(sm.tensor([[2.0, 0.0], [0.0, 4.0]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.2500]])
    """
    return inv_ex(A, check_errors=True).inverse


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> Tensor:
    """X with ``A X = B`` (``left=False``: ``X A = B``) reading only the ``upper`` or lower
    triangle of ``A`` (its diagonal taken as ones if ``unitriangular``); batch dims broadcast.

        >>> import scriptmod as sm
        >>> sm.linalg.solve_triangular(sm.tensor([[2.0, 1.0], [0.0, 4.0]]),
        ...                            sm.tensor([[3.0], [4.0]]), upper=True)
        tensor([[1.],
                [1.]])
    """
    _need_lapack_dtype(A, "linalg.solve_triangular")
    _need_matrices(A, "linalg.solve_triangular", square=True)
    _need_matrices(B, "linalg.solve_triangular")
    _same_dtype(A, B, "linalg.solve_triangular")
    if not left:
        return solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT
    A, B = _broadcast_batch(A, B)
    return dispatch("linalg_solve_triangular", (A, B),
                    {"upper": bool(upper), "unitriangular": bool(unitriangular)})


# ---- LU ------------------------------------------------------------------------------------
def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> Any:
    """``(LU, pivots, info)``: LAPACK's getrf of the matrices of ``A`` (``L`` below the
    diagonal with ones implied on it, ``U`` on and above; 1-based int32 ``pivots``; ``info``
    the 1-based index of the first zero on U's diagonal, or 0).

        >>> import scriptmod as sm
        >>> sm.linalg.lu_factor_ex(sm.tensor([[1.0, 2.0], [3.0, 4.0]])).pivots
        tensor([2, 2], dtype=scriptmod.int32)
    """
    _need_lapack_dtype(A, "linalg.lu_factor")
    _need_matrices(A, "torch.linalg.lu_factor")
    return _returns("linalg_lu_factor_ex", _checked(
        "linalg_lu_factor_ex", (A,), {"pivot": bool(pivot), "check_errors": bool(check_errors)}))


def lu_factor(A: Tensor, *, pivot: bool = True) -> Any:
    """``(LU, pivots)`` of ``lu_factor_ex``; a zero on U's diagonal raises ``RuntimeError``.

        >>> import scriptmod as sm
        >>> sm.linalg.lu_factor(sm.tensor([[1.0, 2.0], [3.0, 4.0]])).LU
        tensor([[3.0000, 4.0000],
                [0.3333, 0.6667]])
    """
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot, check_errors=True)
    return _returns("linalg_lu_factor", (LU, pivots))


def permutation_matrix(pivots: Tensor, m: int, like: Tensor) -> Tensor:
    """P (..., m, m) in ``like``'s dtype, with ``A = P L U`` for LAPACK's ``pivots``."""
    perm = dispatch("linalg_lu_permutation", (pivots,), {"m": int(m)})
    rows = arange(m, device=like.device).unsqueeze(-1)      # P[r, i] = (perm[i] == r)
    return (perm.unsqueeze(-2) == rows).to(like.dtype)


def unpack(LU: Tensor, pivots: Tensor | None) -> tuple[Any, Tensor, Tensor]:
    """(P or None, L (..., m, k) unit lower, U (..., k, n) upper) of a compact ``LU``."""
    m, n = LU.shape[-2], LU.shape[-1]
    k = min(m, n)
    L = LU.narrow(-1, 0, k).tril(-1) + identity(m, LU, k)
    U = LU.narrow(-2, 0, k).triu()
    return (None if pivots is None else permutation_matrix(pivots, m, LU)), L, U


def lu(A: Tensor, *, pivot: bool = True) -> Any:
    """``(P, L, U)`` with ``A = P L U``: ``L`` unit lower (m, k), ``U`` upper (k, n).

        >>> import scriptmod as sm
        >>> P, L, U = sm.linalg.lu(sm.tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> P
        tensor([[0., 1.],
                [1., 0.]])
    """
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return _returns("linalg_lu", unpack(LU, pivots))


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
             adjoint: bool = False) -> Tensor:
    """X with ``A X = B`` from ``lu_factor``'s ``(LU, pivots)`` (``adjoint``: ``A^H X = B``;
    ``left=False``: ``X A = B``). Differentiable in ``LU`` and ``B``.

        >>> import scriptmod as sm
        >>> A = sm.tensor([[2.0, 1.0], [1.0, 3.0]])
        >>> sm.linalg.lu_solve(*sm.linalg.lu_factor(A), sm.tensor([[3.0], [5.0]]))
        tensor([[0.8000],
                [1.4000]])
    """
    _need_matrices(LU, "linalg.lu_solve", square=True)
    if not left:        # X A = B  <=>  A^H X^H = B^H
        return _adjoint(lu_solve(LU, pivots, _adjoint(B), adjoint=not adjoint))
    P, L, U = unpack(LU, pivots)
    if adjoint:         # A^H = U^H L^H P^T
        y = solve_triangular(_adjoint(U), B, upper=False)
        return P @ solve_triangular(_adjoint(L), y, upper=True, unitriangular=True)
    y = solve_triangular(L, P.mT @ B, upper=False, unitriangular=True)
    return solve_triangular(U, y, upper=True)


_adjoint = adjoint


# ---- QR, SVD, eigendecompositions ----------------------------------------------------------
def qr(A: Tensor, mode: str = "reduced") -> Any:
    """``(Q, R)`` with ``A = Q R`` (``mode``: 'reduced', 'complete', or 'r' for R alone with
    an empty Q), LAPACK's signs.

        >>> import scriptmod as sm
        >>> Q, R = sm.linalg.qr(sm.tensor([[3.0, 1.0], [4.0, 2.0]]))
        >>> R.abs()
        tensor([[5.0000, 2.2000],
                [0.0000, 0.4000]])
    """
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentValueError(f"qr received unrecognized mode '{mode}' but expected one of "
                                 f"'reduced' (default), 'r', or 'complete'")
    _need_lapack_dtype(A, "linalg.qr")
    _need_matrices(A, "linalg.qr")
    return _returns("linalg_qr", dispatch("linalg_qr", (A,), {"mode": mode}))


def svd(A: Tensor, full_matrices: bool = True, *, driver: str | None = None) -> Any:
    """``(U, S, Vh)`` with ``A = U diag(S) Vh`` (``full_matrices=False``: the thin U, Vh),
    S real and descending. ``driver`` is a CUDA option (None on the CPU, as in PyTorch).

        >>> import scriptmod as sm
        >>> sm.linalg.svd(sm.tensor([[3.0, 0.0], [0.0, -4.0]])).S
        tensor([4., 3.])
    """
    if driver is not None:
        raise ArgumentValueError("torch.linalg.svd: keyword argument `driver=` is only "
                                 "supported on CUDA inputs with cuSOLVER backend.")
    _need_lapack_dtype(A, "linalg.svd")
    _need_matrices(A, "linalg.svd")
    return _returns("linalg_svd", _checked("linalg_svd", (A,),
                                           {"full_matrices": bool(full_matrices)}))


def eigh(A: Tensor, UPLO: str = "L") -> Any:
    """``(eigenvalues, eigenvectors)`` of Hermitian ``A`` (its ``UPLO`` triangle read),
    eigenvalues real and ascending.

        >>> import scriptmod as sm
        >>> sm.linalg.eigh(sm.tensor([[2.0, 1.0], [1.0, 2.0]])).eigenvalues
        tensor([1., 3.])
    """
    if UPLO not in ("L", "U"):
        raise ArgumentValueError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    _need_lapack_dtype(A, "linalg.eigh")
    _need_matrices(A, "linalg.eigh", square=True)
    return _returns("linalg_eigh", _checked("linalg_eigh", (A,), {"UPLO": UPLO}))


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:
    """The eigenvalues of Hermitian ``A``, ascending (``eigh``'s first result).

        >>> import scriptmod as sm
        >>> sm.linalg.eigvalsh(sm.tensor([[2.0, 1.0], [1.0, 2.0]]))
        tensor([1., 3.])
    """
    return eigh(A, UPLO).eigenvalues


def eig(A: Tensor) -> Any:
    """``(eigenvalues, eigenvectors)`` of square ``A``, complex (eigenvectors of norm 1).

        >>> import scriptmod as sm
        >>> sm.linalg.eig(sm.tensor([[2.0, 0.0], [0.0, 3.0]])).eigenvalues
        tensor([2.+0.j, 3.+0.j])
    """
    _need_lapack_dtype(A, "linalg.eig")
    _need_matrices(A, "linalg.eig", square=True)
    return _returns("linalg_eig", _checked("linalg_eig", (A,), {}))


def eigvals(A: Tensor) -> Tensor:
    """The (complex) eigenvalues of square ``A`` (``eig``'s first result).

        >>> import scriptmod as sm
        >>> sm.linalg.eigvals(sm.tensor([[0.0, -1.0], [1.0, 0.0]]))
        tensor([0.+1.j, 0.-1.j])
    """
    return eig(A).eigenvalues


# ---- determinants and functions of a matrix -------------------------------------------------
def det(A: Tensor) -> Tensor:
    """The determinant of the square matrices of ``A``; differentiable also where singular.

        >>> import scriptmod as sm
        >>> sm.linalg.det(sm.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor(-2.)
    """
    _need_lapack_dtype(A, "linalg.det")
    _need_matrices(A, "linalg.det", square=True)
    return dispatch("linalg_det", (A,))


def slogdet(A: Tensor) -> Any:
    """``(sign, logabsdet)``: ``det(A) = sign * exp(logabsdet)`` (a singular A: 0, -inf).

        >>> import scriptmod as sm
        >>> sm.linalg.slogdet(sm.tensor([[1.0, 2.0], [3.0, 4.0]])).sign
        tensor(-1.)
    """
    _need_lapack_dtype(A, "linalg.slogdet")
    _need_matrices(A, "linalg.slogdet", square=True)
    return _returns("linalg_slogdet", dispatch("linalg_slogdet", (A,)))


def matrix_exp(A: Tensor) -> Tensor:
    """The exponential of the square matrices of ``A`` (SciPy's Padé ``expm``).

        >>> import scriptmod as sm
        >>> sm.linalg.matrix_exp(sm.zeros(2, 2))
        tensor([[1., 0.],
                [0., 1.]])
    """
    _need_lapack_dtype(A, "linalg.matrix_exp")
    _need_matrices(A, "linalg.matrix_exp", square=True)
    return dispatch("linalg_matrix_exp", (A,))


# ---- Householder products, LDL -------------------------------------------------------------
def householder_product(A: Tensor, tau: Tensor) -> Tensor:
    """The first n columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^H`` with ``v_i`` the
    i-th column of ``A`` below the diagonal and 1 on it (LAPACK's orgqr; ``geqrf``'s output
    gives Q). Written with matmuls, so it differentiates in ``A`` and ``tau``.

        >>> import scriptmod as sm
        >>> sm.linalg.householder_product(sm.tensor([[1.0], [0.0]]), sm.tensor([2.0]))
        tensor([[-1.],
                [ 0.]])
    """
    name = "torch.linalg.householder_product"
    if A.ndim < 2:
        raise ShapeError(f"{name}: input must have at least 2 dimensions.")
    if tau.ndim < 1 or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise ShapeError(f"{name}: Expected batch dimensions of tau to be equal to "
                         f"input.shape[:-2], but got {tuple(tau.shape[:-1])}")
    m, n, k = A.shape[-2], A.shape[-1], tau.shape[-1]
    if m < n:
        raise ShapeError(f"{name}: input.shape[-2] must be greater than or equal to "
                         f"input.shape[-1]")
    if n < k:
        raise ShapeError(f"{name}: input.shape[-1] must be greater than or equal to "
                         f"tau.shape[-1]")
    if A.dtype != tau.dtype:
        raise DTypeError(f"{name}: tau dtype {tau.dtype.short} does not match input dtype "
                         f"{A.dtype.short}")
    Q = identity(m, A, n).expand(list(A.shape))
    below = arange(m, device=A.device).unsqueeze(-1)
    for i in reversed(range(k)):          # Q <- H_i Q, the last reflector first
        v = A.narrow(-1, i, 1) * (below > i).to(A.dtype) + (below == i).to(A.dtype)
        t = tau.narrow(-1, i, 1).unsqueeze(-1)
        Q = Q - (t * v) @ (adjoint(v) @ Q)
    return Q


def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False) -> Any:
    """``(LD, pivots, info)``: LAPACK's sytrf (hetrf with ``hermitian``) of the symmetric
    matrices of ``A`` (lower triangle read), Bunch-Kaufman pivots as LAPACK's.

        >>> import scriptmod as sm
        >>> sm.linalg.ldl_factor_ex(sm.tensor([[4.0, 2.0], [2.0, 5.0]])).LD
        tensor([[4.0000, 0.0000],
                [0.5000, 4.0000]])
    """
    _need_lapack_dtype(A, "torch.linalg.ldl_factor_ex")
    _need_matrices(A, "torch.linalg.ldl_factor_ex", square=True)
    return _returns("linalg_ldl_factor_ex", _checked(
        "linalg_ldl_factor_ex", (A,), {"hermitian": bool(hermitian),
                                       "check_errors": bool(check_errors)}))


def ldl_factor(A: Tensor, *, hermitian: bool = False) -> Any:
    """``(LD, pivots)`` of ``ldl_factor_ex`` (a failure raises).

        >>> import scriptmod as sm
        >>> sm.linalg.ldl_factor(sm.tensor([[4.0, 2.0], [2.0, 5.0]])).pivots
        tensor([1, 2], dtype=scriptmod.int32)
    """
    LD, pivots, _ = ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    return _returns("linalg_ldl_factor", (LD, pivots))


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False) -> Tensor:
    """X with ``A X = B`` from ``ldl_factor``'s ``(LD, pivots)`` (LAPACK's sytrs).

        >>> import scriptmod as sm
        >>> A = sm.tensor([[4.0, 2.0], [2.0, 5.0]])
        >>> sm.linalg.ldl_solve(*sm.linalg.ldl_factor(A), sm.tensor([[6.0], [7.0]]))
        tensor([[1.],
                [1.]])
    """
    _need_matrices(LD, "torch.linalg.ldl_solve", square=True)
    _need_matrices(B, "torch.linalg.ldl_solve")
    if LD.dtype != B.dtype:
        raise DTypeError(f"torch.linalg.ldl_solve: Expected LD and B to have the same dtype, "
                         f"but found LD of type {LD.dtype.short} and B of type "
                         f"{B.dtype.short} instead")
    return dispatch("linalg_ldl_solve", (LD, pivots, B), {"hermitian": bool(hermitian)})


# ---- least squares, ranks, pseudo-inverses, condition numbers --------------------------------
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> Any:
    """``(solution, residuals, rank, singular_values)`` minimizing ``||A X - B||`` (CPU
    drivers: 'gelsy' (default), 'gels' (full rank), 'gelsd', 'gelss'). ``residuals``: the
    squared residuals per column when m > n and every matrix has full rank (not for gelsy),
    else empty; ``rank``: not for gels; ``singular_values``: gelsd and gelss only.

        >>> import scriptmod as sm
        >>> A = sm.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
        >>> sm.linalg.lstsq(A, sm.tensor([[1.0], [2.0], [3.0]])).solution
        tensor([[1.],
                [2.]])
    """
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise ArgumentValueError("torch.linalg.lstsq: parameter `driver` should be one of "
                                 "(gels, gelsy, gelsd, gelss)")
    _need_lapack_dtype(A, "torch.linalg.lstsq")
    _need_matrices(A, "torch.linalg.lstsq")
    _same_dtype(A, B, "torch.linalg.lstsq")
    vector = _is_vector_rhs(A, B)
    rhs = B.unsqueeze(-1) if vector else B
    if rhs.ndim < 2 or rhs.shape[-2] != A.shape[-2]:
        raise ShapeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    A, rhs = _broadcast_batch(A, rhs)
    out = dispatch("linalg_lstsq", (A, rhs), {"rcond": None if rcond is None else float(rcond),
                                             "driver": driver})
    x = out[0].squeeze(-1) if vector else out[0]
    return _returns("linalg_lstsq", (x,) + tuple(out[1:]))


def _tolerances(S: Tensor, A: Tensor, atol: Any, rtol: Any) -> Tensor:
    """max(atol, rtol * S.max): rtol defaults to eps * max(m, n) when neither is given,
    to 0 when only atol is."""
    real = D.to_real(A.dtype)
    if rtol is None:
        eps = float(np.finfo(np.float32 if real == D.float32 else np.float64).eps)
        rtol = eps * max(A.shape[-2], A.shape[-1]) if atol is None or _is_zero(atol) else 0.0
    smax = S.amax(-1, keepdim=True) if S.shape[-1] else zeros(list(S.shape[:-1]) + [1],
                                                              dtype=S.dtype, device=S.device)
    tol = _column(rtol, S) * smax
    if atol is not None:
        tol = where(_column(atol, S) > tol, _column(atol, S), tol)
    return tol


def _is_zero(x: Any) -> bool:
    return not isinstance(x, Tensor) and float(x) == 0.0


def _column(x: Any, S: Tensor) -> Any:
    """A tolerance as a (..., 1) tensor or a number, to compare with (..., k) values."""
    return x.unsqueeze(-1) if isinstance(x, Tensor) else float(x)


def matrix_rank(A: Tensor, tol: Any = None, hermitian: bool = False, *, atol: Any = None,
                rtol: Any = None) -> Tensor:
    """The number of singular values (eigenvalue magnitudes with ``hermitian``) above
    ``max(atol, rtol * largest)`` (``tol``: the older name of ``atol``, rtol then 0).

        >>> import scriptmod as sm
        >>> sm.linalg.matrix_rank(sm.tensor([[1.0, 2.0], [2.0, 4.0]]))
        tensor(1)
    """
    if tol is not None:
        if atol is not None or rtol is not None:
            raise ArgumentValueError("matrix_rank: tol cannot be used with atol or rtol")
        atol, rtol = tol, 0.0
    _need_lapack_dtype(A, "linalg.matrix_rank")
    _need_matrices(A, "torch.linalg.matrix_rank")
    S = eigvalsh(A).abs() if hermitian else svdvals(A)
    return (S > _tolerances(S, A, atol, rtol)).sum(-1)


def pinv(A: Tensor, rcond: Any = None, hermitian: bool = False, *, atol: Any = None,
         rtol: Any = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse: ``Vh^H diag(1/S) U^H`` over the singular values
    above ``max(atol, rtol * largest)`` (``rcond``: the older name of ``rtol``); with
    ``hermitian``, from ``eigh``. Its gradient is PyTorch's (Golub and Pereyra's formula).

        >>> import scriptmod as sm
        >>> sm.linalg.pinv(sm.tensor([[2.0, 0.0], [0.0, 0.0]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.0000]])
    """
    if rcond is not None:
        if rtol is not None:
            raise ArgumentValueError("linalg.pinv: rcond and rtol cannot both be given")
        rtol = rcond
    _need_lapack_dtype(A, "linalg.pinv")
    _need_matrices(A, "linalg.pinv")
    if rtol is None:
        eps = float(np.finfo(np.float32 if D.to_real(A.dtype) == D.float32 else np.float64).eps)
        rtol = eps * max(A.shape[-2], A.shape[-1]) if atol is None or _is_zero(atol) else 0.0
    real = D.to_real(A.dtype)
    atol_t, rtol_t = (t.to(real) if isinstance(t, Tensor) else
                      full([], float(t), dtype=real, device=A.device)
                      for t in (0.0 if atol is None else atol, rtol))
    return dispatch("linalg_pinv", (A, atol_t, rtol_t), {"hermitian": bool(hermitian)})


def cond(A: Tensor, p: Any = None) -> Tensor:
    """The condition number ``norm(A, p) * norm(inv(A), p)``; ``p`` None or 2 (-2): the
    ratio of the largest to the smallest singular value (or its inverse), for any shape;
    the other norms ('fro', 'nuc', inf, -inf, 1, -1) need square A (inf where singular).

        >>> import scriptmod as sm
        >>> sm.linalg.cond(sm.tensor([[2.0, 0.0], [0.0, 0.5]]))
        tensor(4.)
    """
    _need_lapack_dtype(A, "linalg.cond")
    _need_matrices(A, "linalg.cond")
    if p is None or (not isinstance(p, str) and p in (2, -2)):
        S = svdvals(A)
        if S.shape[-1] == 0:
            return S.sum(-1)
        big, small = S.narrow(-1, 0, 1).squeeze(-1), S.narrow(-1, S.shape[-1] - 1, 1).squeeze(-1)
        return small / big if p == -2 else big / small
    if isinstance(p, bool) or p not in _MATRIX_ORDS:
        raise ArgumentValueError(f"linalg.cond got an invalid norm type: {p}")
    _need_matrices(A, "linalg.cond", square=True)
    inverse, info = inv_ex(A)
    out = matrix_norm(A, p) * matrix_norm(inverse, p)
    return where(info > 0, math.inf, out) if A.numel() else out


def tensorinv(A: Tensor, ind: int = 2) -> Tensor:
    """The inverse of ``A`` read as a (prod(shape[:ind]), prod(shape[ind:])) square matrix,
    shaped ``shape[ind:] + shape[:ind]``.

        >>> import scriptmod as sm
        >>> sm.linalg.tensorinv(sm.eye(4).reshape(4, 2, 2), ind=1).shape
        scriptmod.Size([2, 2, 4])
    """
    if ind <= 0:
        raise ArgumentValueError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = list(A.shape[:ind]), list(A.shape[ind:])
    n_rows, n_cols = math.prod(rows), math.prod(cols)
    if n_rows != n_cols:
        raise ShapeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                         f"prod(self.shape[:ind]), but got {n_cols} != {n_rows}")
    return inv(A.reshape(n_rows, n_cols)).reshape(cols + rows)


def tensorsolve(A: Tensor, B: Tensor, dims: Sequence[int] | None = None) -> Tensor:
    """X with ``tensordot(A, X, X.ndim) = B``: X has shape ``A.shape[B.ndim:]`` (``dims``:
    dims of A moved to the end first).

        >>> import scriptmod as sm
        >>> sm.linalg.tensorsolve(2 * sm.eye(4).reshape(2, 2, 4), sm.ones(2, 2))
        tensor([0.5000, 0.5000, 0.5000, 0.5000])
    """
    if dims is not None:
        moved = [d % A.ndim for d in dims]
        A = A.permute([d for d in range(A.ndim) if d not in moved] + moved)
    out_shape = list(A.shape[B.ndim:])
    n = math.prod(out_shape)
    if B.numel() != n or math.prod(A.shape[:B.ndim]) != B.numel():
        raise ShapeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:])"
                         f" == prod(self.shape[:other.ndim]), but got {n} != {B.numel()}")
    return solve(A.reshape(B.numel(), n), B.reshape(-1)).reshape(out_shape)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """``A.diagonal(offset, dim1, dim2)`` with torch.linalg's defaults (the last two dims).

        >>> import scriptmod as sm
        >>> sm.linalg.diagonal(sm.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor([1., 4.])
    """
    return A.diagonal(offset, dim1, dim2)


# ---- out= forms: torch.linalg's functions take out= (a tensor or a tuple of them) ----------
for _name in ("cholesky", "cholesky_ex", "cond", "cross", "det", "eig", "eigh", "eigvals",
              "eigvalsh", "householder_product", "matrix_power", "multi_dot", "vecdot", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex", "ldl_solve",
              "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matrix_exp", "matrix_rank",
              "pinv", "qr", "slogdet", "solve", "solve_ex", "solve_triangular", "svd",
              "tensorinv", "tensorsolve"):
    globals()[_name] = with_out(globals()[_name], "linalg." + _name)
