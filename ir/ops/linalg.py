"""Schemas of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched).

Only the factorizations and the solvers LAPACK computes are ops (each traces as one node; the
kernels call NumPy/SciPy per stack of matrices); ``scriptmod.linalg`` builds everything else
from them (inv from solve, lu and lu_solve from lu_factor and triangular solves, pinv from svd,
householder_product from matmuls). Every op takes a stack of matrices in its last two dims and
computes in float32/float64/complex64/complex128: half and integer inputs are refused as
PyTorch's CPU kernels refuse them. Pivots and infos are int32, as LAPACK's (and PyTorch's).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError, ShapeError
from ..schema import ANY_RANK, NONDIFF, op
from ..types import Dim, Shape
from . import rules as R

_LAPACK = (D.float32, D.float64, D.complex64, D.complex128)


def lapack_dtype(opname: str, d: D.DType) -> D.DType:
    """``d`` if LAPACK computes in it, else PyTorch's refusal."""
    if d not in _LAPACK:
        kind = "floating point or complex" if d.category < D.FLOAT else "float32/float64/complex"
        raise DTypeError(f"{opname}: Expected a {kind} tensor as input. Got {d.name}")
    return d


def _same(opname: str) -> Any:
    return lambda ops, attrs: lapack_dtype(opname, R.same(ops, attrs))


def _with_ints(opname: str, n_ints: int, real_first: bool = False) -> Any:
    """(the input's dtype [or its real dtype], int32 x n_ints): factor + pivots/info."""
    def rule(ops: Sequence[Any], attrs: dict) -> tuple:
        d = lapack_dtype(opname, R.same(ops, attrs))
        return (D.to_real(d) if real_first else d,) + (D.int32,) * n_ints
    return rule


def matrices(shape: Shape | None, opname: str, square: bool = False) -> Shape | None:
    """Check that ``shape`` is a stack of (square) matrices; return it."""
    if shape is None:
        return None
    if len(shape) < 2:
        raise ShapeError(f"{opname}: The input tensor A must have at least 2 dimensions.")
    if square and SD.compare("!=", shape[-2], shape[-1]):
        raise ShapeError(f"{opname}: A must be batches of square matrices, but they are "
                         f"{shape[-2]} by {shape[-1]} matrices")
    return tuple(shape)


def _square(opname: str) -> Any:
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
        return matrices(ops[0][1], opname, square=True)
    return rule


def _batch_of_square(opname: str) -> Any:
    """(..., n, n) -> (...): one number per matrix."""
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
        a = matrices(ops[0][1], opname, square=True)
        return None if a is None else a[:-2]
    return rule


def _common_batch(a: Shape, b: Shape) -> tuple[Dim, ...]:
    return tuple(R.broadcast_shapes(a[:-2], b[:-2]) or ())


# ---- factorizations ---------------------------------------------------------------------
def _cholesky(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "linalg.cholesky", square=True)
    return a, None if a is None else a[:-2]


op("linalg_cholesky_ex(Tensor A, *, bool upper=False, bool check_errors=False) -> (Tensor, Tensor)",
   _with_ints("linalg.cholesky", 1), _cholesky, ANY_RANK,
   doc="(L, info): the Cholesky factor of the Hermitian positive-definite matrices (their "
       "lower triangle read), info 0 or the order of the first non-positive leading minor.")


def _qr(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "linalg.qr")
    if a is None:
        return None, None
    mode = attrs["mode"]
    if mode not in ("reduced", "complete", "r"):
        raise ShapeError(f"qr received unrecognized mode '{mode}' but expected one of "
                         f"'reduced' (default), 'r', or 'complete'")
    m, n = a[-2], a[-1]
    k = m if mode == "complete" else SD.minimum(m, n)
    batch = tuple(a[:-2])
    q = batch + ((0,) if mode == "r" else (m, k))
    return q, batch + (k, n)


op("linalg_qr(Tensor A, *, str mode='reduced') -> (Tensor, Tensor)",
   lambda ops, attrs: (_same("linalg.qr")(ops, attrs),) * 2, _qr, ANY_RANK,
   doc="(Q, R) with LAPACK's signs; mode 'r' returns an empty Q.")


def _svd(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "linalg.svd")
    if a is None:
        return None, None, None
    m, n, batch = a[-2], a[-1], tuple(a[:-2])
    k = SD.minimum(m, n)
    if attrs["full_matrices"]:
        return batch + (m, m), batch + (k,), batch + (n, n)
    return batch + (m, k), batch + (k,), batch + (k, n)


def _svd_dtype(ops: Sequence[Any], attrs: dict) -> tuple:
    d = lapack_dtype("linalg.svd", R.same(ops, attrs))
    return d, D.to_real(d), d


op("linalg_svd(Tensor A, *, bool full_matrices=True) -> (Tensor, Tensor, Tensor)",
   _svd_dtype, _svd, ANY_RANK, doc="(U, S, Vh): S real and descending, LAPACK's gesdd.")


def _eig_shapes(opname: str) -> Any:
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
        a = matrices(ops[0][1], opname, square=True)
        return (None, None) if a is None else (a[:-1], a)
    return rule


def _eigh_dtype(ops: Sequence[Any], attrs: dict) -> tuple:
    if attrs["UPLO"] not in ("L", "U"):
        raise ShapeError(f"Expected UPLO argument to be 'L' or 'U', but got {attrs['UPLO']}")
    d = lapack_dtype("linalg.eigh", R.same(ops, attrs))
    return D.to_real(d), d


def _eig_dtype(ops: Sequence[Any], attrs: dict) -> tuple:
    d = lapack_dtype("linalg.eig", R.same(ops, attrs))
    c = D.complex64 if d in (D.float32, D.complex64) else D.complex128
    return c, c


op("linalg_eigh(Tensor A, *, str UPLO='L') -> (Tensor, Tensor)", _eigh_dtype,
   _eig_shapes("linalg.eigh"), ANY_RANK,
   doc="(eigenvalues ascending, eigenvectors) of the Hermitian matrices (one triangle read).")
op("linalg_eig(Tensor A) -> (Tensor, Tensor)", _eig_dtype, _eig_shapes("linalg.eig"), ANY_RANK,
   doc="(eigenvalues, eigenvectors of unit norm), complex, as LAPACK's geev orders them.")


def _lu_factor(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "linalg.lu_factor")
    if a is None:
        return None, None, None
    batch = tuple(a[:-2])
    return a, batch + (SD.minimum(a[-2], a[-1]),), batch


op("linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> "
   "(Tensor, Tensor, Tensor)", _with_ints("linalg.lu_factor", 2), _lu_factor, ANY_RANK,
   doc="(LU, pivots, info): L below the diagonal (unit diagonal implied), U on and above; "
       "pivots 1-based as LAPACK's getrf; info the first zero of U's diagonal (1-based) or 0.")


def _permutation(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    p = ops[0][1]
    return None if p is None else tuple(p[:-1]) + (attrs["m"],)


op("linalg_lu_permutation(Tensor pivots, *, int m) -> Tensor", R.to_int64, _permutation,
   ANY_RANK, NONDIFF,
   doc="LAPACK's row interchanges as a permutation: A = P L U with P[perm[i], i] = 1.")


def _ldl_factor(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "linalg.ldl_factor", square=True)
    return (None, None, None) if a is None else (a, a[:-1], a[:-2])


op("linalg_ldl_factor_ex(Tensor A, *, bool hermitian=False, bool check_errors=False) -> "
   "(Tensor, Tensor, Tensor)", _with_ints("linalg.ldl_factor", 2), _ldl_factor, ANY_RANK,
   NONDIFF, doc="(LD, pivots, info) as LAPACK's sytrf/hetrf (lower triangle).")


def _geqrf(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a = matrices(ops[0][1], "geqrf")
    return (None, None) if a is None else (a, tuple(a[:-2]) + (SD.minimum(a[-2], a[-1]),))


op("linalg_geqrf(Tensor A) -> (Tensor, Tensor)",
   lambda ops, attrs: (_same("geqrf")(ops, attrs),) * 2, _geqrf, ANY_RANK, NONDIFF,
   doc="(a, tau): LAPACK's geqrf, R above the diagonal and the Householder vectors below.")


# ---- solvers ----------------------------------------------------------------------------
def _solve_dtype(opname: str, n_ints: int = 0) -> Any:
    def rule(ops: Sequence[Any], attrs: dict) -> Any:
        a, b = (t[0] for t in R.tensors(ops)[:2])
        if a != b:
            raise DTypeError(f"{opname}: Expected A and B to have the same dtype, but found "
                             f"A of type {a.name} and B of type {b.name} instead")
        d = lapack_dtype(opname, a)
        return d if not n_ints else (d,) + (D.int32,) * n_ints
    return rule


def _rhs(ops: Sequence[Any], opname: str) -> tuple[Shape | None, Shape | None]:
    """A (square, ..., n, n) and B (..., n, k) with the same batch dims."""
    a = matrices(ops[0][1], opname, square=True)
    b = matrices(ops[1][1], opname)
    if a is not None and b is not None and SD.compare("!=", a[-1], b[-2]):
        raise ShapeError(f"{opname}: Incompatible shapes of A and B for the equation AX = B "
                         f"({a[-2]}x{a[-1]} and {b[-2]}x{b[-1]})")
    return a, b


def _solve(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    a, b = _rhs(ops, "linalg.solve")
    return b, None if a is None else a[:-2]


op("linalg_solve_ex(Tensor A, Tensor B, *, str? check=None) -> (Tensor, Tensor)",
   _solve_dtype("linalg.solve", 1), _solve, ANY_RANK,
   doc="(X, info) with A X = B; A and B share their batch dims (the caller broadcasts). "
       "check: None, or whose message a singular A raises ('torch.linalg.solve', 'linalg.inv').")


def _triangular(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    a = matrices(ops[0][1], "linalg.solve_triangular", square=True)
    b = matrices(ops[1][1], "linalg.solve_triangular")
    return b if a is None or b is None else _common_batch(a, b) + b[-2:]


op("linalg_solve_triangular(Tensor A, Tensor B, *, bool upper, bool unitriangular=False) -> Tensor",
   _solve_dtype("linalg.solve_triangular"), _triangular, ANY_RANK,
   doc="X with A X = B, reading one triangle of A (its diagonal taken as 1 if unitriangular).")


def _ldl_solve(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return matrices(ops[2][1], "linalg.ldl_solve")


op("linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor",
   lambda ops, attrs: lapack_dtype("linalg.ldl_solve", ops[0][0]), _ldl_solve, ANY_RANK,
   NONDIFF, doc="X with A X = B from sytrf's factors (LAPACK's sytrs/hetrs).")


def _lstsq(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    """solution (..., n, k); residuals (..., k) for gels when m > n, sized by the ranks for
    gelsd/gelss (unknown here), else empty; rank (...) but for gels; singular values
    (..., min(m, n)) for gelsd/gelss."""
    a, b = matrices(ops[0][1], "linalg.lstsq"), matrices(ops[1][1], "linalg.lstsq")
    if a is None or b is None:
        return None, None, None, None
    batch, driver = _common_batch(a, b), attrs["driver"]
    m, n = a[-2], a[-1]
    tall = SD.compare(">", m, n)
    residuals: Shape | None = (0,)
    if driver == "gels":
        residuals = None if tall is None else batch + (b[-1],) if tall else (0,)
    elif driver in ("gelsd", "gelss"):
        residuals = None
    rank = (0,) if driver == "gels" else batch
    sv = batch + (SD.minimum(m, n),) if driver in ("gelsd", "gelss") else (0,)
    return batch + (n, b[-1]), residuals, rank, sv


def _lstsq_dtype(ops: Sequence[Any], attrs: dict) -> tuple:
    d = _solve_dtype("linalg.lstsq")(ops, attrs)
    return d, D.to_real(d), D.int64, D.to_real(d)


op("linalg_lstsq(Tensor A, Tensor B, *, float? rcond=None, str driver='gelsy') -> "
   "(Tensor, Tensor, Tensor, Tensor)", _lstsq_dtype, _lstsq, ANY_RANK,
   doc="(solution, residuals, rank, singular_values) with torch's driver semantics.")


# ---- determinants and functions of a matrix ----------------------------------------------
op("linalg_det(Tensor A) -> Tensor", _same("linalg.det"), _batch_of_square("linalg.det"),
   ANY_RANK)


def _slogdet_dtype(ops: Sequence[Any], attrs: dict) -> tuple:
    d = lapack_dtype("linalg.slogdet", R.same(ops, attrs))
    return d, D.to_real(d)


op("linalg_slogdet(Tensor A) -> (Tensor, Tensor)", _slogdet_dtype,
   lambda ops, attrs, values: (_batch_of_square("linalg.slogdet")(ops, attrs, values),) * 2,
   ANY_RANK)
op("linalg_matrix_exp(Tensor A) -> Tensor", _same("linalg.matrix_exp"),
   _square("linalg.matrix_exp"), ANY_RANK)



def _pinv(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    a = matrices(ops[0][1], "linalg.pinv")
    return None if a is None else tuple(a[:-2]) + (a[-1], a[-2])


op("linalg_pinv(Tensor A, Tensor atol, Tensor rtol, *, bool hermitian=False) -> Tensor",
   _same("linalg.pinv"), _pinv, ANY_RANK,
   doc="The pseudo-inverse over the singular values (|eigenvalues| with hermitian) above "
       "max(atol, rtol * largest); atol and rtol broadcast against the batch dims.")
