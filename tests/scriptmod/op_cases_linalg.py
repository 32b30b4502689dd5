"""``op_cases`` rows of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy,
batched) (imported by ``op_cases`` at its end; build rows with its ``case`` and sample
builders).

References compute in float64 (complex128) with NumPy/SciPy. Samples are small, well
conditioned matrices (a multiple of the identity added where a factorization needs it), so
that float32 and float64 make the same pivoting and sign choices; sign-free invariants are
checked where LAPACK's choice is the result (the eigenvectors of ``eig`` up to phase: their
reconstruction ``A V = V diag(L)``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg as sl
from op_cases import COMPLEX, Gen, Sample, case

LAPACK = ("float32", "float64") + COMPLEX


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _square(g: Gen, shape: tuple[int, ...], shift: float = 3.0) -> np.ndarray:
    """A random matrix plus ``shift`` times the identity (well conditioned)."""
    a = g.arr(shape)
    return (a + shift * np.eye(shape[-2], shape[-1])).astype(a.dtype)


def _spd(g: Gen, shape: tuple[int, ...]) -> np.ndarray:
    a = g.arr(shape)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(a.dtype)


def _per_matrix(fn: Any) -> Any:
    """A reference applied to every matrix of a stack, outputs stacked back."""
    def ref(a: np.ndarray, *rest: Any) -> Any:
        batch = a.shape[:-2]
        outs = [fn(a[i], *(r[i] for r in rest)) for i in np.ndindex(*batch)] if batch else None
        if outs is None:
            return fn(a, *rest)
        first = outs[0] if isinstance(outs[0], tuple) else (outs[0],)
        stacked = tuple(np.stack([o[k] if isinstance(o, tuple) else o for o in outs]).reshape(
            batch + np.shape(first[k])) for k in range(len(first)))
        return stacked if isinstance(outs[0], tuple) else stacked[0]
    return ref


def _one(g: Gen, make: Any, grad: bool = True, empty: bool = True) -> list[Sample]:
    """A matrix, a batch of them, an empty batch."""
    gr = g.grad_of(0) if grad else ()
    return [Sample("3x3", (make(g, (3, 3)),), {}, gr),
            Sample("batched", (make(g, (2, 3, 3)),), {}, gr)] + (
        [Sample("empty", (make(g, (0, 2, 2)),), {})] if empty else [])


# ---- factorizations -------------------------------------------------------------------
def _cholesky_ref(a: np.ndarray, upper: bool = False, check_errors: bool = False) -> tuple:
    L = np.linalg.cholesky(_wide(a)) if a.size else _wide(a)
    return (np.conj(np.swapaxes(L, -1, -2)) if upper else L), np.zeros(a.shape[:-2], np.int32)


def _cholesky_samples(g: Gen) -> list[Sample]:
    return _one(g, _spd) + [Sample("upper", (_spd(g, (3, 3)),), {"upper": True})]


case("linalg_cholesky_ex", _cholesky_samples, _cholesky_ref, LAPACK, grad=False)


def _rect(g: Gen, grad: bool = True) -> list[Sample]:
    gr = g.grad_of(0) if grad else ()
    return [Sample("tall", (_square(g, (4, 3)),), {}, gr),
            Sample("wide", (_square(g, (3, 4)),), {}, gr),
            Sample("batched", (_square(g, (2, 3, 3)),), {}, gr)]


case("linalg_qr", lambda g: _rect(g) + [
    Sample("complete", (_square(g, (4, 3)),), {"mode": "complete"}),
    Sample("r", (_square(g, (4, 3)),), {"mode": "r"})],
    lambda a, mode="reduced": (np.zeros(0), np.linalg.qr(_wide(a), mode="r")) if mode == "r"
    else tuple(np.linalg.qr(_wide(a), mode=mode)), LAPACK)
case("linalg_svd", lambda g: _rect(g, grad=False) + [
    Sample("thin", (_square(g, (4, 3)),), {"full_matrices": False}, g.grad_of(0))],
    lambda a, full_matrices=True: tuple(np.linalg.svd(_wide(a), full_matrices=full_matrices)),
    LAPACK)


def _hermitian(g: Gen, shape: tuple[int, ...]) -> np.ndarray:
    a = g.arr(shape)
    return (a + np.conj(np.swapaxes(a, -1, -2))).astype(a.dtype)


case("linalg_eigh", lambda g: _one(g, _hermitian) + [
    Sample("upper", (_hermitian(g, (3, 3)),), {"UPLO": "U"})],
    lambda a, UPLO="L": tuple(np.linalg.eigh(_wide(a), UPLO=UPLO)), LAPACK, grad=False)


def _eig_check(s: Sample, values: Any) -> None:
    """The eigenvalues (the first output) as a set: LAPACK orders them itself."""
    want = np.sort_complex(np.linalg.eigvals(_wide(s.inputs[0])).reshape(-1))
    got = np.sort_complex(np.asarray(values).astype(np.complex128).reshape(-1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


case("linalg_eig", lambda g: _one(g, _square), None, LAPACK, grad=False, check=_eig_check)


def _lu_ref(a: np.ndarray, pivot: bool = True, check_errors: bool = False) -> tuple:
    def one(m: np.ndarray) -> tuple:
        lu, piv = sl.lu_factor(m)
        return lu, (piv + 1).astype(np.int32), np.int32(0)
    return _per_matrix(one)(_wide(a))


case("linalg_lu_factor_ex", lambda g: _rect(g), _lu_ref, LAPACK)


def _permutation_ref(pivots: np.ndarray, m: int) -> np.ndarray:
    perm = np.broadcast_to(np.arange(m), pivots.shape[:-1] + (m,)).copy()
    for idx in np.ndindex(*pivots.shape[:-1]):
        for i, p in enumerate(pivots[idx] - 1):
            perm[idx][[i, p]] = perm[idx][[p, i]]
    return perm


case("linalg_lu_permutation", lambda g: [
    Sample("swaps", (np.array([3, 2, 3], np.int32),), {"m": 3}),
    Sample("batched", (np.array([[2, 2], [1, 3]], np.int32),), {"m": 3})],
    _permutation_ref, ("int32",), grad=False)


def _ldl_ref(a: np.ndarray, hermitian: bool = False, check_errors: bool = False) -> tuple:
    def one(m: np.ndarray) -> tuple:
        f = sl.get_lapack_funcs("hetrf" if hermitian and m.dtype.kind == "c" else "sytrf", (m,))
        ld, piv, info = f(m, lower=1)
        return np.tril(ld), piv.astype(np.int32), np.int32(info)
    return _per_matrix(one)(_wide(a))


case("linalg_ldl_factor_ex", lambda g: _one(g, _spd, grad=False, empty=False), _ldl_ref, LAPACK, grad=False)
case("linalg_geqrf", lambda g: _rect(g, grad=False),
     _per_matrix(lambda m: tuple(sl.get_lapack_funcs("geqrf", (m,))(m)[:2])),
     LAPACK, grad=False)


# ---- solvers --------------------------------------------------------------------------
def _pair(g: Gen, make: Any, k: int = 2) -> list[Sample]:
    gr = g.grad_of(0, 1)
    return [Sample("3x3", (make(g, (3, 3)), g.arr((3, k))), {}, gr),
            Sample("batched", (make(g, (2, 3, 3)), g.arr((2, 3, k))), {}, gr),
            Sample("empty", (make(g, (0, 3, 3)), g.arr((0, 3, k))), {})]


case("linalg_solve_ex", lambda g: _pair(g, _square),
     lambda a, b, check=None: (np.linalg.solve(_wide(a), _wide(b)),
                               np.zeros(a.shape[:-2], np.int32)), LAPACK)


def _triangular_ref(a: np.ndarray, b: np.ndarray, upper: bool, unitriangular: bool = False) -> Any:
    t = np.triu(_wide(a)) if upper else np.tril(_wide(a))
    if unitriangular:
        idx = np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    return np.linalg.solve(t, _wide(b))


case("linalg_solve_triangular", lambda g: [
    Sample(s.label + tag, s.inputs, attrs, s.grad)
    for s in _pair(g, _square) for tag, attrs in (
        ("-upper", {"upper": True}), ("-unit-lower", {"upper": False, "unitriangular": True}))],
    _triangular_ref, LAPACK)


def _ldl_solve_samples(g: Gen) -> list[Sample]:
    out = []
    for label, shape in (("3x3", (3, 3)), ("batched", (2, 3, 3))):
        ld, piv, _ = _ldl_ref(_spd(g, shape))
        dt = g.arr(()).dtype
        out.append(Sample(label, (ld.astype(dt), piv, g.arr(shape[:-1] + (2,))), {}))
    return out


def _ldl_solve_ref(ld: np.ndarray, piv: np.ndarray, b: np.ndarray, hermitian: bool = False) -> Any:
    def one(l_: np.ndarray, p: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        return sl.get_lapack_funcs("sytrs", (l_,))(l_, p, rhs, lower=1)[0]
    return _per_matrix(one)(_wide(ld), piv, _wide(b))


case("linalg_ldl_solve", _ldl_solve_samples, _ldl_solve_ref, LAPACK, grad=False)


def _lstsq_ref(a: np.ndarray, b: np.ndarray, rcond: Any = None, driver: str = "gelsy") -> tuple:
    x = _per_matrix(lambda m, r: np.linalg.lstsq(m, r, rcond=None)[0])(_wide(a), _wide(b))
    m, n = a.shape[-2:]
    real = np.float64
    rank = np.full(a.shape[:-2], min(m, n), np.int64)
    residuals = np.zeros((0,), real)
    if driver == "gelsd" and m > n:
        r = _wide(a) @ x - _wide(b)
        residuals = (np.abs(r) ** 2).sum(-2)
    sv = np.linalg.svd(_wide(a), compute_uv=False) if driver == "gelsd" else np.zeros((0,), real)
    return x, residuals, rank, sv


case("linalg_lstsq", lambda g: [
    Sample("tall", (_square(g, (4, 3)), g.arr((4, 2))), {}, g.grad_of(0, 1)),
    Sample("gelsd", (_square(g, (2, 4, 3)), g.arr((2, 4, 2))), {"driver": "gelsd"})],
    _lstsq_ref, LAPACK)


# ---- determinants, functions of a matrix -----------------------------------------------
case("linalg_det", lambda g: _one(g, _square), lambda a: np.linalg.det(_wide(a)), LAPACK)
case("linalg_slogdet", lambda g: _one(g, _square),
     lambda a: tuple(np.linalg.slogdet(_wide(a))), LAPACK)
case("linalg_matrix_exp", lambda g: _one(g, lambda g_, s: g_.arr(s, -1, 1)),
     lambda a: sl.expm(_wide(a)) if a.size else _wide(a), LAPACK)


def _pinv_samples(g: Gen) -> list[Sample]:
    real = {"complex64": "float32", "complex128": "float64"}.get(g.dtype, g.dtype)
    tol = lambda v: np.asarray(v, dtype=real)
    return [Sample("tall", (_square(g, (4, 3)), tol(0.0), tol(1e-6)), {}, g.grad_of(0)),
            Sample("hermitian", (_hermitian(g, (3, 3)), tol(0.0), tol(1e-6)),
                   {"hermitian": True}),
            Sample("batched", (_square(g, (2, 3, 3)), tol(0.0), tol(1e-6)), {}, g.grad_of(0))]


case("linalg_pinv", _pinv_samples,
     lambda a, atol, rtol, hermitian=False: np.linalg.pinv(_wide(a), hermitian=hermitian),
     LAPACK)
