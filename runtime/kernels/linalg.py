"""Reference kernels of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy,
batched).

NumPy's ``linalg`` is batched over leading dims (qr, svd, eigh, eig, det, slogdet); the
routines that report per-matrix status (getrf's pivots and info, potrf's info, sytrf) or that
NumPy lacks (triangular solves, expm, geqrf, lstsq's drivers) call SciPy's LAPACK wrappers one
matrix at a time. SciPy is imported on first use. CuPy arrays are brought to the host for the
per-matrix routines (this is the reference executor, not a fast path).

A failed factorization raises ``LinAlgError`` (a ``RuntimeError``) with PyTorch's message when
the op was asked to check (``check_errors``); otherwise its info output says what failed.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.runtime.arrays import device_of, to_device

from . import kernel


class LinAlgError(RuntimeError):
    """A matrix the factorization or solver could not handle (singular, not positive-definite,
    no convergence): ``torch.linalg.LinAlgError``."""


def _lapack(name: str, *arrays: Any) -> Callable[..., Any]:
    from scipy.linalg import get_lapack_funcs
    return get_lapack_funcs(name, arrays)


def _host(xp: Any, a: Any) -> np.ndarray:
    return a if xp is np else to_device(a, "cpu")


def _back(xp: Any, like: Any, out: np.ndarray) -> Any:
    return out if xp is np else to_device(out, device_of(like))


def _batches(shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(d) for d in shape))


def _where(index: tuple[int, ...], batched: bool) -> str:
    """PyTorch's ``(Batch element i): `` prefix (the flat index of the matrix)."""
    return f"(Batch element {index}): " if batched else ""


def raise_infos(info: np.ndarray, message: Callable[[int], str], opname: str) -> None:
    """Raise ``LinAlgError`` for the first non-zero ``info`` (PyTorch's message)."""
    flat = np.asarray(info).reshape(-1)
    bad = np.flatnonzero(flat)
    if bad.size:
        i = int(bad[0])
        prefix = _where(i, np.ndim(info) > 0)  # type: ignore[arg-type]
        raise LinAlgError(f"{opname}: {prefix}{message(int(flat[i]))}")


# ---- factorizations ---------------------------------------------------------------------
def _not_pd(order: int) -> str:
    return (f"The factorization could not be completed because the input is not "
            f"positive-definite (the leading minor of order {order} is not positive-definite).")


@kernel("linalg_cholesky_ex")
def _cholesky(xp: Any, a: Any, *, upper: bool, check_errors: bool) -> tuple:
    h = _host(xp, a)
    out = np.zeros_like(h)
    info = np.zeros(h.shape[:-2], np.int32)
    if h.shape[-1]:
        potrf = _lapack("potrf", h)
        for i in _batches(h.shape[:-2]):
            c, info[i] = potrf(h[i], lower=not upper, clean=True)
            out[i] = c
    if check_errors:
        raise_infos(info, _not_pd, "linalg.cholesky")
    return _back(xp, a, out), _back(xp, a, info)


@kernel("linalg_qr")
def _qr(xp: Any, a: Any, *, mode: str) -> tuple:
    if mode == "r":
        return xp.zeros((0,), a.dtype), xp.linalg.qr(a, mode="r")
    if 0 in a.shape[-2:]:
        m, n = a.shape[-2:]
        k = m if mode == "complete" else min(m, n)
        q = xp.broadcast_to(xp.eye(m, k, dtype=a.dtype), a.shape[:-2] + (m, k)).copy()
        return q, xp.zeros(a.shape[:-2] + (k, n), a.dtype)
    return tuple(xp.linalg.qr(a, mode=mode))


@kernel("linalg_svd")
def _svd(xp: Any, a: Any, *, full_matrices: bool) -> tuple:
    m, n = a.shape[-2:]
    if 0 in (m, n):
        batch, k = a.shape[:-2], min(m, n)
        um, vn = (m, n) if full_matrices else (k, k)
        u = xp.broadcast_to(xp.eye(m, um, dtype=a.dtype), batch + (m, um)).copy()
        vh = xp.broadcast_to(xp.eye(vn, n, dtype=a.dtype), batch + (vn, n)).copy()
        return u, xp.zeros(batch + (k,), a.real.dtype), vh
    _finite(xp, a, "linalg.svd")
    return tuple(xp.linalg.svd(a, full_matrices=full_matrices))


def _finite(xp: Any, a: Any, opname: str) -> None:
    if not bool(xp.isfinite(a).all()):
        raise LinAlgError(f"{opname}: The algorithm failed to converge because the input "
                          f"matrix contained non-finite values.")


@kernel("linalg_eigh")
def _eigh(xp: Any, a: Any, *, UPLO: str) -> tuple:
    if a.shape[-1] == 0:
        return xp.zeros(a.shape[:-1], a.real.dtype), a.copy()
    _finite(xp, a, "linalg.eigh")
    return tuple(xp.linalg.eigh(a, UPLO=UPLO))


@kernel("linalg_eig")
def _eig(xp: Any, a: Any) -> tuple:
    c = np.result_type(a.dtype, np.complex64)
    if a.shape[-1] == 0:
        return xp.zeros(a.shape[:-1], c), a.astype(c)
    _finite(xp, a, "linalg.eig")
    h = _host(xp, a)
    w, v = np.linalg.eig(h)
    return _back(xp, a, w.astype(c)), _back(xp, a, v.astype(c))


def _zero_pivot(info: int) -> str:
    return (f"U[{info},{info}] is zero and using it on lu_solve would result in a division by "
            f"zero. If you still want to perform the factorization, consider calling "
            f"linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")


def lu_factor(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """getrf on every matrix of ``h``: (LU, 1-based int32 pivots, int32 info)."""
    m, n = h.shape[-2:]
    lu = h.copy()
    piv = np.broadcast_to(np.arange(1, min(m, n) + 1, dtype=np.int32),
                          h.shape[:-2] + (min(m, n),)).copy()
    info = np.zeros(h.shape[:-2], np.int32)
    if m and n:
        getrf = _lapack("getrf", h)
        for i in _batches(h.shape[:-2]):
            lu[i], p, info[i] = getrf(h[i])
            piv[i] = p + 1
    return lu, piv, info


@kernel("linalg_lu_factor_ex")
def _lu_factor(xp: Any, a: Any, *, pivot: bool, check_errors: bool) -> tuple:
    if not pivot:
        raise ArgumentValueError("linalg.lu_factor: LU without pivoting is not implemented on "
                                 "the CPU")
    lu, piv, info = lu_factor(_host(xp, a))
    if check_errors:
        raise_infos(info, _zero_pivot, "torch.linalg.lu_factor")
    return _back(xp, a, lu), _back(xp, a, piv), _back(xp, a, info)


@kernel("linalg_lu_permutation")
def _permutation(xp: Any, pivots: Any, *, m: int) -> Any:
    """Apply LAPACK's interchanges (row i <-> row pivots[i] - 1, in order) to 0..m-1; a
    pivot outside [1, m] swaps nothing (the IR's autodiff builds rules on zero pivots)."""
    piv = _host(xp, pivots).astype(np.int64) - 1
    perm = np.broadcast_to(np.arange(m, dtype=np.int64), piv.shape[:-1] + (m,)).copy()
    rows = np.arange(perm[..., 0].size)
    flat, fpiv = perm.reshape(-1, m), piv.reshape(-1, piv.shape[-1])
    for i in range(fpiv.shape[-1]):
        j = np.where((fpiv[:, i] >= 0) & (fpiv[:, i] < m), fpiv[:, i], i)
        a, b = flat[rows, i].copy(), flat[rows, j].copy()
        flat[rows, i], flat[rows, j] = b, a
    return _back(xp, pivots, flat.reshape(perm.shape))


@kernel("linalg_ldl_factor_ex")
def _ldl_factor(xp: Any, a: Any, *, hermitian: bool, check_errors: bool) -> tuple:
    h = _host(xp, a)
    ld = np.zeros_like(h)
    piv = np.zeros(h.shape[:-1], np.int32)
    info = np.zeros(h.shape[:-2], np.int32)
    if h.shape[-1]:
        sytrf = _lapack("hetrf" if hermitian and h.dtype.kind == "c" else "sytrf", h)
        for i in _batches(h.shape[:-2]):
            out, p, info[i] = sytrf(h[i], lower=1)
            ld[i], piv[i] = np.tril(out), p
    if check_errors:
        raise_infos(info, lambda k: f"Unknown error code: {k}.", "torch.linalg.ldl_factor")
    return _back(xp, a, ld), _back(xp, a, piv), _back(xp, a, info)


@kernel("linalg_ldl_solve")
def _ldl_solve(xp: Any, ld: Any, pivots: Any, b: Any, *, hermitian: bool) -> Any:
    hl, hp, hb = _host(xp, ld), _host(xp, pivots), _host(xp, b)
    batch = np.broadcast_shapes(hl.shape[:-2], hb.shape[:-2])
    hl = np.broadcast_to(hl, batch + hl.shape[-2:])
    hp = np.broadcast_to(hp, batch + hp.shape[-1:])
    out = np.broadcast_to(hb, batch + hb.shape[-2:]).astype(hl.dtype)
    if out.size:
        sytrs = _lapack("hetrs" if hermitian and hl.dtype.kind == "c" else "sytrs", hl)
        for i in _batches(batch):
            out[i] = sytrs(hl[i], hp[i], out[i], lower=1)[0]
    return _back(xp, b, out)


@kernel("linalg_geqrf")
def _geqrf(xp: Any, a: Any) -> tuple:
    h = _host(xp, a)
    out = h.copy()
    tau = np.zeros(h.shape[:-2] + (min(h.shape[-2:]),), h.dtype)
    if out.size:
        geqrf = _lapack("geqrf", h)
        for i in _batches(h.shape[:-2]):
            out[i], tau[i] = geqrf(h[i])[:2]
    return _back(xp, a, out), _back(xp, a, tau)


# ---- solvers ----------------------------------------------------------------------------
_SINGULAR = {
    "torch.linalg.solve": lambda info: "The solver failed because the input matrix is singular.",
    "linalg.inv": lambda info: (f"The diagonal element {info} is zero, the inversion could not "
                                f"be completed because the input matrix is singular.")}


@kernel("linalg_solve_ex")
def _solve(xp: Any, a: Any, b: Any, *, check: str | None) -> tuple:
    lu, piv, info = lu_factor(_host(xp, a))
    x = _host(xp, b).astype(lu.dtype)
    if x.size:
        getrs = _lapack("getrs", lu)
        for i in _batches(lu.shape[:-2]):
            x[i] = getrs(lu[i], piv[i] - 1, x[i])[0]
    if check is not None:
        raise_infos(info, _SINGULAR[check], check)
    return _back(xp, b, x), _back(xp, a, info)


@kernel("linalg_solve_triangular")
def _solve_triangular(xp: Any, a: Any, b: Any, *, upper: bool, unitriangular: bool) -> Any:
    """BLAS trsm (no singularity check: a zero on the diagonal gives inf/nan, as PyTorch)."""
    ha, hb = _host(xp, a), _host(xp, b)
    batch = np.broadcast_shapes(ha.shape[:-2], hb.shape[:-2])
    ha = np.broadcast_to(ha, batch + ha.shape[-2:])
    x = np.broadcast_to(hb, batch + hb.shape[-2:]).astype(ha.dtype)
    if x.size:
        from scipy.linalg import get_blas_funcs
        trsm = get_blas_funcs("trsm", (ha,))
        with np.errstate(all="ignore"):
            for i in _batches(batch):
                x[i] = trsm(1.0, ha[i], x[i], lower=not upper, diag=int(unitriangular))
    return _back(xp, b, x)


@kernel("linalg_lstsq")
def _lstsq(xp: Any, a: Any, b: Any, *, rcond: float | None, driver: str) -> tuple:
    ha, hb = _host(xp, a), _host(xp, b)
    m, n = ha.shape[-2:]
    k = hb.shape[-1]
    batch = np.broadcast_shapes(ha.shape[:-2], hb.shape[:-2])
    ha = np.broadcast_to(ha, batch + (m, n))
    hb = np.broadcast_to(hb, batch + (m, k))
    real = ha.real.dtype
    x = np.zeros(batch + (n, k), ha.dtype)
    rank = np.zeros(batch, np.int64)
    sv = np.zeros(batch + (min(m, n),), real)
    cond = np.finfo(real).eps * max(m, n) if rcond is None else rcond
    for i in _batches(batch):
        x[i], rank[i], sv[i] = _lstsq_one(ha[i], hb[i], cond, driver)
    residuals = np.zeros(batch[:0] + (0,), real)
    full_rank = m > n and (driver == "gels" or bool((rank == n).all()))
    if driver != "gelsy" and full_rank and x.size:
        r = np.matmul(ha, x) - hb
        residuals = (r.real ** 2 + r.imag ** 2).sum(-2) if r.dtype.kind == "c" else (r ** 2).sum(-2)
    rank_out = np.zeros((0,), np.int64) if driver == "gels" else rank
    sv_out = sv if driver in ("gelsd", "gelss") else np.zeros((0,), real)
    return tuple(_back(xp, a, o) for o in (x, residuals, rank_out, sv_out))


def _lstsq_one(a: np.ndarray, b: np.ndarray, cond: float, driver: str) -> tuple:
    import scipy.linalg as sl
    n = a.shape[-1]
    if a.size == 0 or b.size == 0:
        return np.zeros((n, b.shape[-1]), a.dtype), 0, np.zeros(min(a.shape), a.real.dtype)
    if driver == "gels":
        gels = _lapack("gels", a)
        m = a.shape[0]
        rhs = np.zeros((max(m, n), b.shape[-1]), a.dtype)
        rhs[:m] = b
        x = gels(a, rhs)[1][:n]
        return x, n, np.zeros(min(a.shape), a.real.dtype)
    x, _, rank, sv = sl.lstsq(a, b, cond=cond, lapack_driver=driver, check_finite=False)
    return x, rank, (np.zeros(min(a.shape), a.real.dtype) if sv is None else sv)


# ---- determinants and functions of a matrix ----------------------------------------------
@kernel("linalg_det")
def _det(xp: Any, a: Any) -> Any:
    if a.shape[-1] == 0:
        return xp.ones(a.shape[:-2], a.dtype)
    return xp.linalg.det(a)


@kernel("linalg_slogdet")
def _slogdet(xp: Any, a: Any) -> tuple:
    if a.shape[-1] == 0:
        return xp.ones(a.shape[:-2], a.dtype), xp.zeros(a.shape[:-2], a.real.dtype)
    sign, logabs = xp.linalg.slogdet(a)
    return sign, logabs


@kernel("linalg_matrix_exp")
def _matrix_exp(xp: Any, a: Any) -> Any:
    if a.size == 0:
        return a.copy()
    if xp is np:
        from scipy.linalg import expm
    else:
        from cupyx.scipy.linalg import expm  # type: ignore
    wide = a.astype(xp.complex128 if a.dtype.kind == "c" else xp.float64)
    return expm(wide)       # in double precision: float32's Pade approximant loses digits


@kernel("linalg_pinv")
def _pinv(xp: Any, a: Any, atol: Any, rtol: Any, *, hermitian: bool) -> Any:
    m, n = a.shape[-2:]
    if 0 in (m, n):
        return xp.zeros(a.shape[:-2] + (n, m), a.dtype)
    if hermitian:
        s, u = xp.linalg.eigh(a)
        vh, size = xp.conj(xp.swapaxes(u, -1, -2)), xp.abs(s)
    else:
        u, s, vh = xp.linalg.svd(a, full_matrices=False)
        size = s
    tol = xp.maximum(xp.asarray(atol)[..., None],
                     xp.asarray(rtol)[..., None] * size.max(-1, keepdims=True))
    keep = size > tol
    inv_s = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(a.dtype)
    v, uh = xp.conj(xp.swapaxes(vh, -1, -2)), xp.conj(xp.swapaxes(u, -1, -2))
    return (v * inv_s[..., None, :]) @ uh
