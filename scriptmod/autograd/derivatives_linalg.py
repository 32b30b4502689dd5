"""Derivatives of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy,
batched) (rows of ``autograd.derivatives``' table).

Each rule is PyTorch's formula (``torch/csrc/autograd/FunctionsManual.cpp``: ``svd_backward``,
``linalg_eig_backward``, ``linalg_qr_backward``, ``cholesky_backward``, ``linalg_lu_backward``,
``linalg_det_backward``, ...), written with differentiable ops (matmul, the solvers
themselves, masks), so that double backward works where PyTorch's does. An output whose
gradient is ``None`` (not used by the loss) contributes nothing. Singular and eigen vectors
are defined up to sign (phase), so only gauge-invariant losses have a meaningful gradient, as
in PyTorch.
"""
from __future__ import annotations

from typing import Any

from scriptmod._creation import zeros
from scriptmod._shape_ops import cat
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


def _la() -> Any:
    """The namespace's helpers (``scriptmod.linalg``, a lazy submodule: imported on use)."""
    from scriptmod import linalg
    return linalg


def _mH(x: Tensor) -> Tensor:
    return x.mT.conj() if x.is_complex() else x.mT


def _tri(x: Tensor, lower: bool, diagonal: int = 0) -> Tensor:
    return x.tril(diagonal) if lower else x.triu(diagonal)


def _solve_tri(A: Tensor, B: Tensor, upper: bool, left: bool = True,
               unitriangular: bool = False) -> Tensor:
    return _la().solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)


def _solve_unchecked(A: Tensor, B: Tensor) -> Tensor:
    """A^-1 B without the singularity check (the IR's autodiff runs rules on zeros)."""
    return _la().solve_ex(A, B).result


def _real(x: Tensor) -> Tensor:
    return x.real if x.is_complex() else x


def _zero_diagonal_to(x: Tensor, value: float) -> Tensor:
    """``x`` with its (square) diagonal replaced by ``value``."""
    eye = _la().identity(x.shape[-1], x)
    return x * (1 - eye) + value * eye


# ---- Cholesky, QR -------------------------------------------------------------------------
@derivative("linalg_cholesky_ex", output=True)
def _cholesky(ctx: Any, gs: list) -> tuple:
    gL, L = gs[0], ctx.outputs[0]
    if gL is None:
        return (None,)
    if ctx.attrs["upper"]:
        L, gL = _mH(L), _mH(gL)
    gA = (_mH(L) @ gL).tril()
    gA = 0.5 * (gA + _mH(gA.tril(-1)))
    gA = _solve_tri(_mH(L), gA, upper=True)
    return (_solve_tri(L, gA, upper=False, left=False),)


@derivative("linalg_qr", output=True)
def _qr(ctx: Any, gs: list) -> tuple:
    gQ, gR = gs
    Q, R = ctx.outputs
    mode = ctx.attrs["mode"]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when "
                           "mode='r'. Please use linalg.qr(A, mode='reduced') if you are going "
                           "to differentiate through linalg.qr.")
    m, n = Q.shape[-2], R.shape[-1]
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                           "and nrows > ncols.")
    if gQ is None and gR is None:
        return (None,)
    gA = -(_mH(Q) @ gQ) if gQ is not None else None
    if gR is not None:
        gA = gR @ _mH(R) + (gA if gA is not None else 0)
    if m >= n:
        sym = gA.triu()
        sym = sym + _mH(sym)            # PyTorch's syminvadj: real part of the diagonal halved
        gA = Q @ (sym - 0.5 * _la().diag_embed(_real(_la().diagonal_of(sym)).to(sym.dtype)))
        if gQ is not None:
            gA = gA + gQ
        return (_solve_tri(_mH(R), gA, upper=False, left=False),)
    skew = -gA - _mH(-gA)
    gA = Q @ skew.tril()
    gA = _solve_tri(_mH(R.narrow(-1, 0, m)), gA, upper=False, left=False)
    gA = cat([gA, zeros(list(gA.shape[:-1]) + [n - m], dtype=gA.dtype, device=gA.device)], -1)
    if gR is not None:
        gA = gA + Q @ gR
    return (gA,)


# ---- SVD, eigendecompositions --------------------------------------------------------------
def _gap(values: Tensor) -> Tensor:
    """E[j, k] = values[k] - values[j] off the diagonal, 1 on it."""
    return _zero_diagonal_to(values.unsqueeze(-2) - values.unsqueeze(-1), 1.0)


@derivative("linalg_svd", output=True)
def _svd(ctx: Any, gs: list) -> tuple:
    gU, gS, gVh = gs
    U, S, Vh = ctx.outputs
    k = S.shape[-1]
    if ctx.attrs["full_matrices"]:
        U, Vh = U.narrow(-1, 0, k), Vh.narrow(-2, 0, k)
        gU = None if gU is None else gU.narrow(-1, 0, k)
        gVh = None if gVh is None else gVh.narrow(-2, 0, k)
    return (svd_backward(gU, gS, gVh, U, S, Vh),)


def svd_backward(gU: Any, gS: Any, gVh: Any, U: Tensor, S: Tensor, Vh: Tensor) -> Any:
    """PyTorch's ``svd_backward`` for the thin U (m, k), S (k), Vh (k, n)."""
    m, n = U.shape[-2], Vh.shape[-1]
    if gU is None and gVh is None:
        if gS is None:
            return None
        return U @ (gS.unsqueeze(-1).to(U.dtype) * Vh)
    skew = lambda x: x - _mH(x)
    UhgU = skew(_mH(U) @ gU) if gU is not None else None
    VhgV = skew(Vh @ _mH(gVh)) if gVh is not None else None
    E = _gap(S * S)
    Sc = S.to(U.dtype)
    if UhgU is not None and VhgV is not None:
        gA = (UhgU * Sc.unsqueeze(-2) + Sc.unsqueeze(-1) * VhgV) / E
    elif UhgU is not None:
        gA = (UhgU / E) * Sc.unsqueeze(-2)
    else:
        gA = Sc.unsqueeze(-1) * (VhgV / E)
    if gS is not None:
        gA = gA + _la().diag_embed(gS.to(U.dtype))
    if U.is_complex() and UhgU is not None and VhgV is not None:
        gA = gA + _la().diag_embed(_la().diagonal_of(UhgU) / (2 * Sc))
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / Sc.unsqueeze(-2)
        gA = gA + gUSinv - U @ (_mH(U) @ gUSinv)
        return gA @ Vh
    if m < n and gVh is not None:
        gA = gA @ Vh
        SinvgVh = gVh / Sc.unsqueeze(-1)
        gA = gA + SinvgVh - (SinvgVh @ _mH(Vh)) @ Vh
        return U @ gA
    return U @ (gA @ Vh)


def eig_backward(gL: Any, gV: Any, L: Tensor, V: Tensor, hermitian: bool) -> Any:
    """PyTorch's ``linalg_eig_backward`` (``hermitian``: eigh's)."""
    la = _la()
    if gL is None and gV is None:
        return None
    if gV is None:
        if hermitian:
            return (V * gL.to(V.dtype).unsqueeze(-2)) @ _mH(V)
        return _solve_unchecked(_mH(V), gL.unsqueeze(-1) * _mH(V))
    VhgV = _mH(V) @ gV
    if hermitian:
        VhgV = 0.5 * (VhgV - _mH(VhgV))
    else:
        VhgV = VhgV - _mH(V) @ (V * _real(la.diagonal_of(VhgV)).to(V.dtype).unsqueeze(-2))
    Lc = L.conj() if L.is_complex() else L
    gA = VhgV / _gap(Lc).to(V.dtype)
    if gL is not None:
        gA = _zero_diagonal_to(gA, 0) + la.diag_embed(gL.to(V.dtype))
    if hermitian:
        return V @ (gA @ _mH(V))
    return _solve_unchecked(_mH(V), gA @ _mH(V))


@derivative("linalg_eigh", output=True)
def _eigh(ctx: Any, gs: list) -> tuple:
    L, V = ctx.outputs
    return (eig_backward(gs[0], gs[1], L, V, hermitian=True),)


@derivative("linalg_eig", output=True)
def _eig(ctx: Any, gs: list) -> tuple:
    L, V = ctx.outputs
    gA = eig_backward(gs[0], gs[1], L, V, hermitian=False)
    meta = ctx.input_meta[0]
    if gA is not None and meta is not None and not meta[1].is_complex:
        gA = gA.real              # a real input's gradient: the real part (handle_r_to_c)
    return (gA,)


# ---- LU ------------------------------------------------------------------------------------
@derivative("linalg_lu_factor_ex", output=True)
def _lu_factor(ctx: Any, gs: list) -> tuple:
    g, (LU, pivots, _) = gs[0], ctx.outputs
    if g is None:
        return (None,)
    m, n = LU.shape[-2], LU.shape[-1]
    k = min(m, n)
    P, L, U = _la().unpack(LU, pivots)
    return (lu_backward(g.narrow(-1, 0, k), g.narrow(-2, 0, k), P, L, U),)


def lu_backward(gL: Tensor, gU: Tensor, P: Tensor, L: Tensor, U: Tensor) -> Tensor:
    """PyTorch's ``linalg_lu_backward`` (A = P L U; gL and gU both given)."""
    m, n = L.shape[-2], U.shape[-1]
    k = min(m, n)
    if m == n:
        gA = (_mH(L) @ gL).tril(-1) + (gU @ _mH(U)).triu()
        gA = _solve_tri(_mH(U), gA, upper=False, left=False)
        gA = _solve_tri(_mH(L), gA, upper=True, unitriangular=True)
    elif m < n:
        U1 = U.narrow(-1, 0, k)
        gA = _mH(L) @ gL - gU.triu() @ _mH(U)
        gA = _solve_tri(_mH(U1), gA.tril(-1), upper=False, left=False)
        gA = cat([gA + gU.narrow(-1, 0, k).triu(), gU.narrow(-1, k, n - k)], -1)
        gA = _solve_tri(_mH(L), gA, upper=True, unitriangular=True)
    else:
        L1 = L.narrow(-2, 0, k)
        gA = gU @ _mH(U) - _mH(L) @ gL.tril(-1)
        gA = _solve_tri(_mH(L1), gA.triu(), upper=True, unitriangular=True)
        gA = cat([gA + gL.narrow(-2, 0, k).tril(-1), gL.narrow(-2, k, m - k)], -2)
        gA = _solve_tri(_mH(U), gA, upper=False, left=False)
    return P @ gA


# ---- solvers -------------------------------------------------------------------------------
@derivative("linalg_solve_ex", saves=(0,), output=True)
def _solve(ctx: Any, gs: list) -> tuple:
    gX, A, X = gs[0], ctx.inputs[0], ctx.outputs[0]
    if gX is None:
        return None, None
    gB = _solve_unchecked(_mH(A), gX)
    return -(gB @ _mH(X)), gB


@derivative("linalg_solve_triangular", saves=(0,), output=True)
def _solve_triangular(ctx: Any, g: Tensor) -> tuple:
    A, X = ctx.inputs[0], ctx.output
    upper, unit = ctx.attrs["upper"], ctx.attrs["unitriangular"]
    gB = _solve_tri(_mH(A), g, upper=not upper, unitriangular=unit)
    gA = _tri(-(gB @ _mH(X)), lower=not upper, diagonal=(1 if upper else -1) * int(unit))
    return gA, gB


@derivative("linalg_lstsq", saves=(0, 1), output=True)
def _lstsq(ctx: Any, gs: list) -> tuple:
    gX, gRes = gs[0], gs[1]
    A, B = ctx.inputs
    X = ctx.outputs[0]
    gA = gB = None
    if gX is not None:
        pinvA = _la().pinv(A)
        gA = pinv_backward(gX @ _mH(B), pinvA, A)
        gB = _mH(pinvA) @ gX
    if gRes is not None and gRes.numel():
        r = A @ X - B
        gL = gRes.unsqueeze(-2).to(r.dtype)
        gA_res, gB_res = 2 * (gL * r) @ _mH(X), -2 * gL * r
        gA = gA_res if gA is None else gA + gA_res
        gB = gB_res if gB is None else gB + gB_res
    return gA, gB


def pinv_backward(g: Tensor, pinvA: Tensor, A: Tensor) -> Tensor:
    """PyTorch's ``pinv_backward``: the gradient of A -> pinv(A) (Golub and Pereyra)."""
    m, n = A.shape[-2], A.shape[-1]
    pinvAh, gh = _mH(pinvA), _mH(g)
    if m <= n:
        K = gh @ pinvA
        KpinvAh = K @ pinvAh
        return (-_mH(pinvA @ K) + KpinvAh - (A @ pinvA) @ KpinvAh
                + (pinvAh @ pinvA) @ (gh - K @ A))
    K = pinvA @ gh
    pinvAhK = pinvAh @ K
    return (-_mH(K @ pinvA) + (gh - A @ K) @ pinvA @ pinvAh + pinvAhK
            - pinvAhK @ pinvA @ A)


# ---- determinants and the matrix exponential -------------------------------------------------
@derivative("linalg_det", saves=(0,), output=True)
def _det(ctx: Any, g: Tensor) -> tuple:
    """g * conj(cofactor(A)): the cofactor matrix from the SVD (Higham's adjugate), defined
    for singular A too, so one formula serves every matrix without reading its values."""
    A = ctx.inputs[0]
    if A.numel() == 0:
        return (A * 0,)
    la = _la()
    U, S, Vh = la.svd(A)
    alpha = la.det(U) * la.det(Vh)
    alpha = (alpha.conj() if alpha.is_complex() else alpha) * g
    return ((U * (alpha.unsqueeze(-1) * _products_but_one(S)).to(U.dtype).unsqueeze(-2)) @ Vh,)


def _products_but_one(S: Tensor) -> Tensor:
    """out[i] = prod_{j != i} S[j], without dividing (S may hold zeros)."""
    ones = S.narrow(-1, 0, 1) * 0 + 1
    before = cat([ones, S.narrow(-1, 0, S.shape[-1] - 1)], -1).cumprod(-1)
    after = cat([S.narrow(-1, 1, S.shape[-1] - 1), ones], -1).flip([-1]).cumprod(-1).flip([-1])
    return before * after


@derivative("linalg_slogdet", saves=(0,), output=True)
def _slogdet(ctx: Any, gs: list) -> tuple:
    g_sign, g_logabs = gs
    A, sign = ctx.inputs[0], ctx.outputs[0]
    if A.is_complex():
        g = zeros([], dtype=A.dtype, device=A.device) if g_logabs is None else g_logabs.to(A.dtype)
        if g_sign is not None:
            g = g - 1j * (g_sign.conj() * sign).imag
    elif g_logabs is None:
        return (None,)
    else:
        g = g_logabs
    la = _la()
    return (_solve_unchecked(_mH(A), g.unsqueeze(-1).unsqueeze(-1) * la.identity(A.shape[-1], A)),)


@derivative("linalg_matrix_exp", saves=(0,))
def _matrix_exp(ctx: Any, g: Tensor) -> tuple:
    """The top-right block of exp([[A^H, g], [0, A^H]]) (Mathias' chain rule)."""
    Ah = _mH(ctx.inputs[0])
    n = Ah.shape[-1]
    top = cat([Ah, g], -1)
    bottom = cat([Ah * 0, Ah], -1)
    big = _op("linalg_matrix_exp", cat([top, bottom], -2))
    return (big.narrow(-2, 0, n).narrow(-1, n, n),)


@derivative("linalg_pinv", saves=(0,), output=True)
def _pinv(ctx: Any, g: Tensor) -> tuple:
    return pinv_backward(g, ctx.output, ctx.inputs[0]), None, None
