"""Top-level functions and Tensor methods of torch.linalg's decompositions and solvers (LAPACK
through NumPy/SciPy, batched): ``scriptmod.cholesky``, ``Tensor.svd``, ``scriptmod.lu``, ...
with PyTorch's older signatures (``upper=``, ``some=``, ``compute_uv=``, ``get_infos=``; the
solution first in ``cholesky_solve``/``triangular_solve``/``lu_solve``), each written over
``scriptmod.linalg``.

    >>> import scriptmod as sm
    >>> A = sm.tensor([[4.0, 2.0], [2.0, 5.0]])
    >>> A.det()
    tensor(16.)
    >>> sm.cholesky_solve(sm.tensor([[6.0], [7.0]]), sm.linalg.cholesky(A))
    tensor([[1.],
            [1.]])
"""
from __future__ import annotations

import math
import warnings
from collections import namedtuple
from typing import Any

from scriptmod import linalg as LA
from scriptmod._creation import randn, zeros
from scriptmod._dispatch import dispatch
from scriptmod._public import public
from scriptmod.tensor import Tensor

RETURN_TYPES = {name: namedtuple(name, fields.split()) for name, fields in (
    ("slogdet", "sign logabsdet"), ("qr", "Q R"), ("svd", "U S V"), ("geqrf", "a tau"),
    ("triangular_solve", "solution cloned_coefficient"), ("lu_unpack", "P L U"))}


# PyTorch's deprecation notes (each warned once per process, as its TORCH_WARN_ONCE)
_DEPRECATED = {
    "cholesky": "torch.linalg.cholesky and will be removed in a future PyTorch release.\n"
                "L = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)"
                "\nand\nU = torch.cholesky(A, upper=True)\nshould be replaced with\n"
                "U = torch.linalg.cholesky(A).mH",
    "qr": "torch.linalg.qr and will be removed in a future PyTorch release.\nThe boolean "
          "parameter 'some' has been replaced with a string parameter 'mode'.\nQ, R = "
          "torch.qr(A, some)\nshould be replaced with\nQ, R = torch.linalg.qr(A, 'reduced' "
          "if some else 'complete')",
    "lu": "torch.linalg.lu_factor / torch.linalg.lu_factor_ex and will be removed in a future "
          "PyTorch release.\nLU, pivots = torch.lu(A, compute_pivots)\nshould be replaced "
          "with\nLU, pivots = torch.linalg.lu_factor(A, compute_pivots)",
    "lu_solve": "torch.linalg.lu_solve and will be removed in a future PyTorch release.\nNote "
                "that torch.linalg.lu_solve has its arguments reversed.\nX = torch.lu_solve(B, "
                "LU, pivots)\nshould be replaced with\nX = torch.linalg.lu_solve(LU, pivots, B)",
    "triangular_solve": "torch.linalg.solve_triangular and will be removed in a future PyTorch "
                        "release.\ntorch.linalg.solve_triangular has its arguments reversed and "
                        "does not return a copy of one of the inputs.\nX = torch.triangular_"
                        "solve(B, A).solution\nshould be replaced with\nX = torch.linalg."
                        "solve_triangular(A, B).",
}
_WARNED: set[str] = set()


def _deprecated(name: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(f"torch.{name} is deprecated in favor of {_DEPRECATED[name]}",
                      UserWarning, stacklevel=3)


@public()
def cholesky(input: Tensor, upper: bool = False) -> Tensor:
    """The Cholesky factor (``upper``: U with ``A = U^H U``); see ``linalg.cholesky``."""
    _deprecated("cholesky")
    return LA.cholesky(input, upper=upper)


@public()
def cholesky_solve(input: Tensor, input2: Tensor, upper: bool = False) -> Tensor:
    """X with ``A X = input`` for ``A = L L^H`` given its Cholesky factor ``input2``
    (``upper``: ``A = U^H U``)."""
    factor = input2
    if upper:
        y = LA.solve_triangular(LA.adjoint(factor), input, upper=False)
        return LA.solve_triangular(factor, y, upper=True)
    y = LA.solve_triangular(factor, input, upper=False)
    return LA.solve_triangular(LA.adjoint(factor), y, upper=True)


@public()
def cholesky_inverse(input: Tensor, upper: bool = False) -> Tensor:
    """The inverse of ``A = L L^H`` (``upper``: ``U^H U``) from its Cholesky factor."""
    n = input.shape[-1]
    eye = LA.identity(n, input).expand(list(input.shape))
    return cholesky_solve(eye, input, upper)


@public()
def geqrf(input: Tensor) -> Any:
    """``(a, tau)``: LAPACK's geqrf (R on and above the diagonal, Householder vectors below;
    ``linalg.householder_product(a, tau)`` gives Q). Not differentiable, as in PyTorch."""
    LA._need_lapack_dtype(input, "geqrf")
    LA._need_matrices(input, "geqrf")
    return RETURN_TYPES["geqrf"](*dispatch("linalg_geqrf", (input,)))


@public()
def ormqr(input: Tensor, input2: Tensor, input3: Tensor, left: bool = True,
          transpose: bool = False) -> Tensor:
    """``op(Q) @ input3`` (``left=False``: ``input3 @ op(Q)``), Q the full (m, m) product of
    the Householder reflectors of ``geqrf``'s ``(input, input2)``, ``op`` the conjugate
    transpose if ``transpose``."""
    m, k = input.shape[-2], input2.shape[-1]
    square = input.narrow(-1, 0, k) @ LA.identity(k, input, m)    # (m, m): zero columns past k
    Q = LA.householder_product(square, input2)
    if transpose:
        Q = LA.adjoint(Q)
    return Q @ input3 if left else input3 @ Q


@public()
def det(input: Tensor) -> Tensor:
    """The determinant; see ``linalg.det``."""
    return LA.det(input)


@public()
def slogdet(input: Tensor) -> Any:
    """``(sign, logabsdet)``; see ``linalg.slogdet``."""
    return RETURN_TYPES["slogdet"](*LA.slogdet(input))


@public()
def logdet(input: Tensor) -> Tensor:
    """``log(det(input))``: NaN for a real matrix with a negative determinant, -inf for a
    singular one."""
    sign, logabs = LA.slogdet(input)
    if input.is_complex():
        return sign.log() + logabs
    return logabs.masked_fill(sign < 0, math.nan)


@public()
def inverse(input: Tensor) -> Tensor:
    """The inverse; see ``linalg.inv``."""
    return LA.inv(input)


@public()
def matrix_exp(input: Tensor) -> Tensor:
    """The matrix exponential; see ``linalg.matrix_exp``."""
    return LA.matrix_exp(input)


@public()
def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:
    """The pseudo-inverse with singular values below ``rcond * largest`` dropped."""
    return LA.pinv(input, rtol=rcond)


@public()
def qr(input: Tensor, some: bool = True) -> Any:
    """``(Q, R)``: ``some`` the reduced factorization, else the complete one."""
    _deprecated("qr")
    return RETURN_TYPES["qr"](*LA.qr(input, "reduced" if some else "complete"))


@public()
def svd(input: Tensor, some: bool = True, compute_uv: bool = True) -> Any:
    """``(U, S, V)`` with ``input = U diag(S) V^H`` (V, not Vh); ``some``: the thin U and V.
    ``compute_uv=False``: U and V zero-filled (m, m) and (n, n)."""
    if not compute_uv:
        m, n = input.shape[-2], input.shape[-1]
        batch = list(input.shape[:-2])
        S = LA.svdvals(input)
        return RETURN_TYPES["svd"](zeros(batch + [m, m], dtype=input.dtype, device=input.device),
                                   S, zeros(batch + [n, n], dtype=input.dtype,
                                            device=input.device))
    U, S, Vh = LA.svd(input, full_matrices=not some)
    return RETURN_TYPES["svd"](U, S, LA.adjoint(Vh))


@public()
def triangular_solve(input: Tensor, A: Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> Any:
    """``(solution, cloned_coefficient)``: X with ``A X = input`` (``transpose``: ``A^T X``)
    for triangular ``A``; batch dims broadcast."""
    _deprecated("triangular_solve")
    if transpose:
        x = LA.solve_triangular(A.mT, input, upper=not upper, unitriangular=unitriangular)
    else:
        x = LA.solve_triangular(A, input, upper=upper, unitriangular=unitriangular)
    batch = list(x.shape[:-2])
    return RETURN_TYPES["triangular_solve"](x, A.expand(batch + list(A.shape[-2:])).clone())


@public()
def lu(A: Tensor, pivot: bool = True, get_infos: bool = False) -> tuple:
    """``(LU, pivots)`` (and ``infos`` with ``get_infos``) of ``linalg.lu_factor_ex``."""
    _deprecated("lu")
    LU, pivots, infos = LA.lu_factor_ex(A, pivot=pivot, check_errors=not get_infos)
    return (LU, pivots, infos) if get_infos else (LU, pivots)


@public()
def lu_solve(input: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:
    """X with ``A X = input`` from ``lu``'s factors (the right-hand side first)."""
    _deprecated("lu_solve")
    return LA.lu_solve(LU_data, LU_pivots, input)


@public(method=False)
def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True) -> Any:
    """``(P, L, U)`` from ``lu``'s compact factors; the parts not asked for are empty."""
    P, L, U = LA.unpack(LU_data, LU_pivots if unpack_pivots else None)
    empty = zeros(0, dtype=LU_data.dtype, device=LU_data.device)
    return RETURN_TYPES["lu_unpack"](empty if P is None else P, L if unpack_data else empty,
                                     U if unpack_data else empty)


def _range_finder(A: Tensor, q: int, niter: int, M: Tensor | None) -> Tensor:
    """An orthonormal (m, q) basis of the range of ``A - M`` (Halko et al., algorithm 4.4)."""
    X = A if M is None else A - M
    R = randn(*(list(X.shape[:-2]) + [X.shape[-1], q]), dtype=X.dtype, device=X.device)
    Q = LA.qr(X @ R).Q
    for _ in range(niter):
        Q = LA.qr(LA.adjoint(X) @ Q).Q
        Q = LA.qr(X @ Q).Q
    return Q


@public(method=False, out=False)
def svd_lowrank(A: Tensor, q: int | None = 6, niter: int = 2, M: Tensor | None = None) -> tuple:
    """``(U, S, V)``: a randomized rank-``q`` SVD of ``A - M`` (its values depend on the
    random draws)."""
    q = 6 if q is None else q
    X = A if M is None else A - M
    Q = _range_finder(X, q, niter, None)
    U, S, Vh = LA.svd(LA.adjoint(Q) @ X, full_matrices=False)
    return Q @ U, S, LA.adjoint(Vh)


@public(method=False, out=False)
def pca_lowrank(A: Tensor, q: int | None = None, center: bool = True, niter: int = 2) -> tuple:
    """``(U, S, V)``: ``svd_lowrank`` of ``A`` with its column means removed (``center``);
    ``q`` defaults to min(6, m, n)."""
    m, n = A.shape[-2], A.shape[-1]
    q = min(6, m, n) if q is None else q
    if not 0 <= q <= min(m, n):
        raise ValueError(f"q(={q}) must be non-negative integer and not greater than "
                         f"min(m, n)={min(m, n)}")
    M = A.mean(-2, keepdim=True).expand(list(A.shape)) if center else None
    return svd_lowrank(A, q, niter, M)
