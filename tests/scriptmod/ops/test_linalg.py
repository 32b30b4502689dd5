"""``scriptmod.linalg``'s factorizations and solvers and the top-level LAPACK functions
(``scriptmod/linalg.py``, ``scriptmod/_ops_linalg.py``): NumPy/SciPy references (factors
reconstruct A; sign-free invariants where LAPACK chooses signs), batched and empty inputs,
singular matrices (``LinAlgError`` and the ``_ex`` infos), ``gradcheck`` of every
differentiable function in float64, ``out=``, result names, a traced module calling
solve/inv at two batch sizes, and PyTorch's values and messages where torch is installed."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.linalg as sl

import scriptmod as sm
from scriptmod import nn
from scriptmod.autograd import gradcheck

L = sm.linalg
RNG = np.random.default_rng(7)
# torch.cholesky/qr/lu/lu_solve/triangular_solve warn (once) as PyTorch's do; checked below
pytestmark = pytest.mark.filterwarnings(r"ignore:torch\.\w+ is deprecated:UserWarning")
TOL = {"float32": 1e-4, "float64": 1e-10, "complex64": 1e-4, "complex128": 1e-10}


def _mat(shape: tuple[int, ...], dtype: str = "float64", shift: float = 0.0) -> np.ndarray:
    x = RNG.uniform(-1, 1, shape)
    if dtype.startswith("complex"):
        x = x + 1j * RNG.uniform(-1, 1, shape)
    if shift:
        x = x + shift * np.eye(shape[-2], shape[-1])
    return x.astype(dtype)


def _spd(shape: tuple[int, ...], dtype: str = "float64") -> np.ndarray:
    a = _mat(shape, dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _close(got: Any, want: Any, dtype: str = "float64") -> None:
    got = got.detach().numpy() if isinstance(got, sm.Tensor) else np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


def _mH(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


# ---- factorizations reconstruct their input ---------------------------------------------------
DTYPES = ["float32", "float64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3), (2, 1, 4, 2)])
def test_qr_and_svd_reconstruct_batched_inputs(dtype: str, shape: tuple) -> None:
    a = _mat(shape, dtype)
    Q, R = L.qr(sm.tensor(a))
    _close(Q @ R, a, dtype)
    k = min(shape[-2:])
    _close(_mH(Q.numpy()) @ Q.numpy(), np.broadcast_to(np.eye(k), Q.shape[:-2] + (k, k)), dtype)
    assert np.allclose(np.tril(R.numpy(), -1), 0)
    U, S, Vh = L.svd(sm.tensor(a), full_matrices=False)
    _close((U * S.to(U.dtype).unsqueeze(-2)) @ Vh, a, dtype)
    _close(S, np.linalg.svd(a, compute_uv=False), dtype)
    assert L.svd(sm.tensor(a)).U.shape[-1] == shape[-2]          # full_matrices by default


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_and_eig_reconstruct(dtype: str) -> None:
    a = _mat((2, 4, 4), dtype)
    h = a + _mH(a)
    w, v = L.eigh(sm.tensor(h))
    assert w.dtype == (sm.float32 if dtype == "float32" else sm.float64)
    vn = v.numpy()
    _close((vn * w.numpy()[..., None, :]) @ _mH(vn), h, dtype)
    _close(L.eigvalsh(sm.tensor(h), UPLO="U"), np.linalg.eigvalsh(h, UPLO="U"), dtype)
    lam, V = L.eig(sm.tensor(a))
    assert lam.is_complex() and V.is_complex()
    _close(sm.tensor(a.astype(V.numpy().dtype)) @ V, V.numpy() * lam.numpy()[..., None, :], dtype)
    np.testing.assert_allclose(np.linalg.norm(V.numpy(), axis=-2), 1, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_lu_and_ldl_reconstruct(dtype: str) -> None:
    s = _spd((2, 3, 3), dtype)
    Lc = L.cholesky(sm.tensor(s))
    _close(Lc.numpy() @ _mH(Lc.numpy()), s, dtype)
    U = sm.cholesky(sm.tensor(s), upper=True)
    _close(U.numpy(), _mH(Lc.numpy()), dtype)
    a = _mat((2, 4, 3), dtype)
    P, Lf, Uf = L.lu(sm.tensor(a))
    _close(P @ Lf @ Uf, a, dtype)
    LU, piv = L.lu_factor(sm.tensor(a[0, :3]))
    want_lu, want_piv = sl.lu_factor(a[0, :3])
    _close(LU, want_lu, dtype)
    assert piv.dtype == sm.int32 and list(piv.numpy()) == list(want_piv + 1)
    P2, L2, U2 = sm.lu_unpack(*sm.lu(sm.tensor(a)))
    _close(P2 @ L2 @ U2, a, dtype)
    ld, pivots = L.ldl_factor(sm.tensor(s))
    x = L.ldl_solve(ld, pivots, sm.tensor(s[..., :1]))
    _close(x, np.linalg.solve(s, s[..., :1]), dtype)


def test_geqrf_ormqr_and_householder_product_give_q() -> None:
    a = _mat((5, 3))
    qr_, tau = sm.geqrf(sm.tensor(a))
    Q = L.householder_product(qr_, tau)
    _close(Q @ qr_.triu()[:3], a)
    c = _mat((5, 2))
    full_q = np.linalg.qr(a, mode="complete")[0]
    got = sm.ormqr(qr_, tau, sm.tensor(c), left=True, transpose=True)
    _close(np.abs(got.numpy()[:3]), np.abs((full_q.T @ c)[:3]))


# ---- solvers --------------------------------------------------------------------------------
def test_solvers_broadcast_and_match_numpy() -> None:
    a, b = _mat((2, 1, 3, 3), shift=3), _mat((4, 3, 2))
    want = np.linalg.solve(a, b)
    _close(L.solve(sm.tensor(a), sm.tensor(b)), want)
    _close(L.solve(sm.tensor(a[0, 0]), sm.tensor(b[0, :, 0])), want[0, 0, :, 0])   # a vector
    _close(L.solve(sm.tensor(a[0, 0]), sm.tensor(b[0].T), left=False),
           np.linalg.solve(a[0, 0].T, b[0]).T)
    _close(L.inv(sm.tensor(a)), np.linalg.inv(a))
    _close(sm.inverse(sm.tensor(a)), np.linalg.inv(a))
    _close(L.solve_triangular(sm.tensor(a), sm.tensor(b), upper=True),
           np.linalg.solve(np.triu(a), b))
    x, coeff = sm.triangular_solve(sm.tensor(b), sm.tensor(a), upper=False, transpose=True)
    _close(x, np.linalg.solve(np.swapaxes(np.tril(a), -1, -2), b))
    assert coeff.shape == (2, 4, 3, 3)
    LU, piv = L.lu_factor(sm.tensor(a[0, 0]))
    _close(L.lu_solve(LU, piv, sm.tensor(b[0]), adjoint=True), np.linalg.solve(a[0, 0].T, b[0]))
    s = _spd((3, 3))
    _close(sm.cholesky_solve(sm.tensor(b[0]), L.cholesky(sm.tensor(s))), np.linalg.solve(s, b[0]))
    _close(sm.cholesky_inverse(L.cholesky(sm.tensor(s), upper=True), upper=True), np.linalg.inv(s))


def test_lstsq_drivers_follow_torch_semantics() -> None:
    a, b = _mat((2, 5, 3)), _mat((2, 5, 2))
    want = np.linalg.lstsq(a[0], b[0], rcond=None)[0]
    out = L.lstsq(sm.tensor(a), sm.tensor(b))
    _close(out.solution[0], want)
    assert out.residuals.shape == (0,) and out.rank.tolist() == [3, 3]   # gelsy
    out = L.lstsq(sm.tensor(a), sm.tensor(b), driver="gelsd")
    _close(out.residuals[0], ((a[0] @ want - b[0]) ** 2).sum(0))
    _close(out.singular_values, np.linalg.svd(a, compute_uv=False))
    out = L.lstsq(sm.tensor(a), sm.tensor(b), driver="gels")
    assert out.rank.shape == (0,) and out.singular_values.shape == (0,)
    with pytest.raises(ValueError, match="driver"):
        L.lstsq(sm.tensor(a), sm.tensor(b), driver="gesv")


def test_det_slogdet_logdet_matrix_exp_pinv_rank_cond() -> None:
    a = _mat((2, 3, 3), shift=1)
    _close(L.det(sm.tensor(a)), np.linalg.det(a))
    sign, logabs = L.slogdet(sm.tensor(a))
    _close(sign, np.linalg.slogdet(a)[0])
    _close(logabs, np.linalg.slogdet(a)[1])
    neg = np.diag([-1.0, 2.0, 3.0])
    assert np.isnan(sm.logdet(sm.tensor(neg)).item())
    assert sm.logdet(sm.zeros(3, 3, dtype=sm.float64)).item() == -np.inf
    _close(L.matrix_exp(sm.tensor(a)), sl.expm(a))
    _close(L.pinv(sm.tensor(a[..., :2])), np.linalg.pinv(a[..., :2]))
    _close(sm.pinverse(sm.tensor(a)), np.linalg.pinv(a))
    assert L.matrix_rank(sm.tensor(np.ones((3, 3)))).item() == 1
    assert L.matrix_rank(sm.tensor(np.eye(3)), hermitian=True).item() == 3
    assert L.matrix_rank(sm.tensor(np.diag([1.0, 1e-3, 0])), atol=1e-2).item() == 1
    _close(L.cond(sm.tensor(a)), np.linalg.cond(a))
    _close(L.cond(sm.tensor(a), "fro"), np.linalg.cond(a, "fro"))
    assert L.cond(sm.zeros(3, 3, dtype=sm.float64), 1).item() == np.inf
    t = _mat((6, 2, 3), shift=0) + np.eye(6).reshape(6, 2, 3)
    _close(L.tensorinv(sm.tensor(t), ind=1), np.linalg.tensorinv(t, ind=1))
    rhs = _mat((6,))
    _close(L.tensorsolve(sm.tensor(t), sm.tensor(rhs)), np.linalg.tensorsolve(t, rhs))


def test_empty_and_zero_sized_matrices() -> None:
    assert L.det(sm.zeros(2, 0, 0)).tolist() == [1.0, 1.0]
    assert L.inv(sm.zeros(0, 3, 3)).shape == (0, 3, 3)
    assert L.pinv(sm.zeros(0, 3)).shape == (3, 0)
    assert L.svd(sm.zeros(2, 0, 3)).S.shape == (2, 0)
    assert L.eigh(sm.zeros(0, 0)).eigenvalues.shape == (0,)


# ---- singular matrices ----------------------------------------------------------------------
def test_singular_matrices_raise_linalg_error_with_torch_messages() -> None:
    singular = sm.zeros(2, 3, 3, dtype=sm.float64)
    singular[0] = sm.eye(3, dtype=sm.float64)
    assert issubclass(L.LinAlgError, RuntimeError)
    with pytest.raises(L.LinAlgError, match=r"^linalg.inv: \(Batch element 1\): The diagonal "
                                            r"element 1 is zero"):
        L.inv(singular)
    with pytest.raises(L.LinAlgError, match=r"^torch.linalg.solve: The solver failed because "
                                            r"the input matrix is singular."):
        L.solve(singular[1], sm.ones(3, dtype=sm.float64))
    with pytest.raises(L.LinAlgError, match=r"leading minor of order 1 is not positive-definite"):
        L.cholesky(-sm.eye(3))
    with pytest.raises(RuntimeError, match=r"U\[1,1\] is zero"):
        L.lu_factor(singular[1])
    _, info = L.inv_ex(singular)
    assert info.tolist() == [0, 1] and info.dtype == sm.int32
    assert L.cholesky_ex(-sm.eye(3)).info.item() == 1
    assert L.lu_factor_ex(singular).info.tolist() == [0, 1]
    assert L.solve_ex(singular, sm.ones(2, 3, 1, dtype=sm.float64)).info.tolist() == [0, 1]
    with pytest.raises(L.LinAlgError, match="non-finite"):
        L.svd(sm.tensor([[float("nan"), 1.0], [0.0, 1.0]]))


def test_bad_arguments_name_what_was_expected() -> None:
    with pytest.raises(RuntimeError, match="A must be batches of square matrices, but they are "
                                           "2 by 3 matrices"):
        L.inv(sm.ones(2, 3))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        L.det(sm.ones(3))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as "
                                           "input. Got Long"):
        L.inv(sm.ones(3, 3, dtype=sm.int64))
    with pytest.raises(RuntimeError, match="Low precision dtypes not supported. Got Half"):
        L.inv(sm.ones(3, 3, dtype=sm.float16))
    with pytest.raises(RuntimeError, match="same dtype"):
        L.solve(sm.eye(3), sm.ones(3, dtype=sm.float64))


# ---- result types and out= ------------------------------------------------------------------
def test_results_are_named_and_out_writes_them() -> None:
    a = sm.tensor(_mat((3, 3), shift=2))
    assert type(L.qr(a)).__name__ == "linalg_qr" and L.qr(a)._fields == ("Q", "R")
    assert L.svd(a)._fields == ("U", "S", "Vh") and sm.svd(a)._fields == ("U", "S", "V")
    assert L.lu_factor_ex(a)._fields == ("LU", "pivots", "info")
    assert L.lstsq(a, a)._fields == ("solution", "residuals", "rank", "singular_values")
    assert L.slogdet(a)._fields == ("sign", "logabsdet")
    out = sm.empty(0, dtype=sm.float64)
    assert L.inv(a, out=out) is out
    _close(out, np.linalg.inv(a.numpy()))
    q, r = sm.empty(0, dtype=sm.float64), sm.empty(0, dtype=sm.float64)
    L.qr(a, out=(q, r))
    _close(q @ r, a.numpy())
    U, _, V = sm.svd(a, compute_uv=False)
    assert U.abs().sum().item() == 0 and V.shape == (3, 3)
    _close(a.svd().V, L.svd(a).Vh.mT.numpy())
    _close(a.det(), np.linalg.det(a.numpy()))


# ---- gradients ------------------------------------------------------------------------------
def _t(*shape: int) -> sm.Tensor:
    return sm.tensor(RNG.standard_normal(shape), requires_grad=True)


def _spd_of(x: sm.Tensor) -> sm.Tensor:
    return x @ x.mT + 3 * sm.eye(x.shape[-1], dtype=x.dtype)


def _svd_loss(full: bool) -> Callable[[sm.Tensor], sm.Tensor]:
    def loss(a: sm.Tensor) -> sm.Tensor:
        U, S, Vh = L.svd(a, full_matrices=full)
        k = S.shape[-1]
        return (U[..., :k] @ Vh[..., :k, :]).pow(2).sum() + S.sum()      # gauge-invariant
    return loss


def _eigh_loss(w: sm.Tensor, v: sm.Tensor, a: sm.Tensor) -> sm.Tensor:
    return w.sum() + (v @ v.mT * a).sum()                            # gauge-invariant


GRADS: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "cholesky": (lambda a: L.cholesky(_spd_of(a)), ((2, 3, 3),)),
    "cholesky_upper": (lambda a: sm.cholesky(_spd_of(a), upper=True), ((3, 3),)),
    "inv": (L.inv, ((2, 2, 2),)),
    "solve": (L.solve, ((2, 2, 2), (2, 1))),
    "solve_vector": (L.solve, ((3, 3), (3,))),
    "solve_right": (lambda a, b: L.solve(a, b, left=False), ((2, 2), (1, 2))),
    "det": (L.det, ((2, 3, 3),)),
    "det_singular": (lambda a: L.det(a.narrow(-1, 0, 1).expand(3, 3) * a), ((3, 3),)),
    "slogdet": (lambda a: L.slogdet(a).logabsdet, ((2, 3, 3),)),
    "logdet": (lambda a: sm.logdet(_spd_of(a)), ((3, 3),)),
    "qr_tall": (lambda a: L.qr(a), ((4, 3),)),
    "qr_wide": (lambda a: L.qr(a), ((3, 4),)),
    "svd_tall": (_svd_loss(False), ((4, 3),)),
    "svd_wide": (_svd_loss(False), ((3, 4),)),
    "svd_full": (_svd_loss(True), ((3, 3),)),
    "svdvals": (L.svdvals, ((4, 3),)),
    "eigh": (lambda a: _eigh_loss(*L.eigh(a + a.mT), a), ((3, 3),)),
    "eigvalsh": (lambda a: L.eigvalsh(a + a.mT), ((2, 3, 3),)),
    "lu_factor": (lambda a: L.lu_factor(a).LU, ((2, 3, 3),)),
    "lu_tall": (lambda a: L.lu(a)[1:], ((4, 3),)),
    "lu_wide": (lambda a: L.lu(a)[1:], ((3, 4),)),
    "lu_solve": (lambda a, b: L.lu_solve(*L.lu_factor(a), b), ((3, 3), (3, 2))),
    "lu_solve_adjoint_right": (lambda a, b: L.lu_solve(*L.lu_factor(a), b, adjoint=True,
                                                       left=False), ((3, 3), (2, 3))),
    "solve_triangular": (lambda a, b: L.solve_triangular(a, b, upper=True), ((3, 3), (3, 2))),
    "triangular_solve_unit": (lambda b, a: sm.triangular_solve(b, a, upper=False,
                                                               unitriangular=True)[0],
                              ((3, 2), (3, 3))),
    "cholesky_solve": (lambda b, a: sm.cholesky_solve(b, L.cholesky(_spd_of(a))),
                       ((3, 2), (3, 3))),
    "lstsq": (lambda a, b: L.lstsq(a, b).solution, ((4, 3), (4, 2))),
    "lstsq_residuals": (lambda a, b: L.lstsq(a, b, driver="gelsd").residuals, ((4, 3), (4, 2))),
    "pinv": (L.pinv, ((4, 3),)),
    "pinv_hermitian": (lambda a: L.pinv(a + a.mT, hermitian=True), ((3, 3),)),
    "matrix_exp": (L.matrix_exp, ((2, 2, 2),)),
    "householder_product": (L.householder_product, ((4, 3), (2,))),
    "ormqr": (lambda a, t, c: sm.ormqr(a, t, c, left=False), ((4, 3), (2,), (2, 4))),
    "cond": (L.cond, ((3, 3),)),
    "tensorinv": (lambda a: L.tensorinv(a + sm.eye(4).reshape(4, 2, 2), ind=1), ((4, 2, 2),)),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradcheck(name: str) -> None:
    fn, shapes = GRADS[name]
    inputs = tuple(_t(*s) for s in shapes)
    if name in ("inv", "solve", "solve_right", "det", "slogdet", "lu_factor", "lu_solve",
                "lu_solve_adjoint_right", "solve_triangular", "matrix_exp", "cond"):
        n = shapes[0][-1]
        inputs = (sm.tensor(inputs[0].detach().numpy() + n * np.eye(n), requires_grad=True),
                  ) + inputs[1:]
    assert gradcheck(fn, inputs)


def test_double_backward_through_solve_and_det() -> None:
    """d/dA sum(grad^2) equals its finite difference along a direction."""
    a0, direction = _mat((3, 3), shift=3), _mat((3, 3))

    def grad_norm(x: np.ndarray, fn: Callable[..., Any], create: bool) -> Any:
        a = sm.tensor(x, requires_grad=True)
        (g,) = sm.autograd.grad(fn(a), a, create_graph=create)
        return a, (g * g).sum()

    for fn in (L.det, lambda x: L.inv(x).sum(), lambda x: L.solve(x, sm.ones(3, 1, dtype=sm.float64)).sum()):
        a, total = grad_norm(a0, fn, True)
        (h,) = sm.autograd.grad(total, a)
        eps = 1e-6
        plus = grad_norm(a0 + eps * direction, fn, False)[1].item()
        minus = grad_norm(a0 - eps * direction, fn, False)[1].item()
        np.testing.assert_allclose((h.numpy() * direction).sum(), (plus - minus) / (2 * eps),
                                   rtol=1e-5, atol=1e-8)


# ---- traced -----------------------------------------------------------------------------------
class _Solver(nn.Module):
    def forward(self, a: sm.Tensor, b: sm.Tensor) -> sm.Tensor:
        return L.solve(a, b) + L.inv(a) @ b


def test_traced_solve_and_inv_equal_eager_at_two_batch_sizes() -> None:
    model = _Solver()
    a, b = sm.tensor(_mat((2, 3, 3), shift=3)), sm.tensor(_mat((2, 3, 2)))
    traced = sm.jit.trace(model, (a, b))
    for batch in (2, 5):
        a, b = sm.tensor(_mat((batch, 3, 3), shift=3)), sm.tensor(_mat((batch, 3, 2)))
        np.testing.assert_allclose(traced(a, b).numpy(), model(a, b).numpy(), rtol=1e-12)
        np.testing.assert_allclose(traced(a, b).numpy(), 2 * np.linalg.solve(a.numpy(),
                                                                             b.numpy()),
                                   rtol=1e-10)


# ---- against PyTorch ------------------------------------------------------------------------
def test_values_and_messages_equal_torch() -> None:
    torch = pytest.importorskip("torch")
    a = _mat((2, 4, 4), shift=2)
    s = _spd((2, 4, 4))
    ta, ts = torch.tensor(a), torch.tensor(s)
    pairs = [
        (L.cholesky(sm.tensor(s)), torch.linalg.cholesky(ts)),
        (L.inv(sm.tensor(a)), torch.linalg.inv(ta)),
        (L.det(sm.tensor(a)), torch.linalg.det(ta)),
        (L.lu_factor(sm.tensor(a)).LU, torch.linalg.lu_factor(ta).LU),
        (L.lu(sm.tensor(a)).P, torch.linalg.lu(ta).P),
        (L.qr(sm.tensor(a)).R, torch.linalg.qr(ta).R),
        (L.svd(sm.tensor(a)).S, torch.linalg.svd(ta).S),
        (L.eigvalsh(sm.tensor(s)), torch.linalg.eigvalsh(ts)),
        (L.pinv(sm.tensor(a[..., :3])), torch.linalg.pinv(ta[..., :3])),
        (L.matrix_exp(sm.tensor(a)), torch.linalg.matrix_exp(ta)),
        (L.ldl_factor(sm.tensor(s)).LD, torch.linalg.ldl_factor(ts).LD),
        (L.householder_product(*sm.geqrf(sm.tensor(a))), torch.linalg.householder_product(
            *torch.geqrf(ta))),
    ]
    for got, want in pairs:
        _close(got, want.numpy())
    singular = torch.zeros(2, 3, 3, dtype=torch.float64)
    for fn in (lambda m: m.linalg.inv(m.zeros(2, 3, 3, dtype=m.float64)),
               lambda m: m.linalg.cholesky(-m.eye(3)),
               lambda m: m.linalg.solve(m.zeros(3, 3), m.ones(3))):
        with pytest.raises(RuntimeError) as want:
            fn(torch)
        with pytest.raises(RuntimeError) as got:
            fn(sm)
        assert str(got.value) == str(want.value)
    assert singular.shape == (2, 3, 3)


def test_gradients_equal_torch() -> None:
    torch = pytest.importorskip("torch")
    a = _mat((3, 3), shift=2)
    for fn in (lambda m, x: m.linalg.det(x), lambda m, x: m.linalg.inv(x).sum(),
               lambda m, x: m.linalg.pinv(x, hermitian=True).sum(),
               lambda m, x: m.linalg.lu_factor(x).LU.sum(),
               lambda m, x: m.linalg.qr(x).Q.sum() + m.linalg.qr(x).R.sum(),
               lambda m, x: m.linalg.matrix_exp(x).sum(),
               lambda m, x: m.linalg.cholesky(x @ x.mT + 3 * m.eye(3, dtype=x.dtype)).sum()):
        t = torch.tensor(a, requires_grad=True)
        fn(torch, t).backward()
        s = sm.tensor(a, requires_grad=True)
        fn(sm, s).backward()
        _close(s.grad, t.grad.numpy())


class _Det(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return L.det(x) * 2


def test_det_exports_to_onnx_det(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    x = sm.tensor(_mat((2, 3, 3), "float32", shift=1))
    path = str(tmp_path / "det.onnx")
    sm.onnx.export(_Det(), path, (x,))
    session = ort.InferenceSession(path)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, 2 * np.linalg.det(x.numpy()), rtol=1e-5)


def test_low_rank_svd_and_pca_recover_a_low_rank_matrix() -> None:
    a = _mat((8, 2)) @ _mat((2, 5))                       # rank 2
    U, S, V = sm.svd_lowrank(sm.tensor(a), q=3)
    assert (U.shape, S.shape, V.shape) == ((8, 3), (3,), (5, 3))
    _close((U * S.unsqueeze(-2)) @ V.mT, a)
    U, S, V = sm.pca_lowrank(sm.tensor(a), center=False)
    assert S.shape == (5,)
    _close(S[:2], np.linalg.svd(a, compute_uv=False)[:2])
    with pytest.raises(ValueError, match="q"):
        sm.pca_lowrank(sm.tensor(a), q=6)


def test_deprecated_top_level_forms_warn_once(monkeypatch: Any) -> None:
    from scriptmod import _ops_linalg
    monkeypatch.setattr(_ops_linalg, "_WARNED", set())
    a = sm.eye(3, dtype=sm.float64)
    with pytest.warns(UserWarning, match=r"torch.cholesky is deprecated in favor of "
                                         r"torch.linalg.cholesky"):
        sm.cholesky(a)
    with pytest.warns(UserWarning, match="torch.triangular_solve is deprecated"):
        sm.triangular_solve(a, a)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.cholesky(a)                  # once per process


def test_the_products_family_is_published_under_linalg() -> None:
    a = _mat((3, 3), shift=2)
    _close(L.matrix_power(sm.tensor(a), -2), np.linalg.matrix_power(a, -2))
    _close(L.multi_dot([sm.tensor(a), sm.tensor(a), sm.tensor(a)]), a @ a @ a)
    _close(L.cross(sm.tensor(a), sm.tensor(a[::-1].copy())), np.cross(a, a[::-1]))
    _close(L.vecdot(sm.tensor(a), sm.tensor(a)), (a * a).sum(-1))
    _close(L.vander(sm.tensor(a[0])), np.vander(a[0], increasing=True))
    out = sm.empty(0, dtype=sm.float64)
    assert L.matrix_power(sm.tensor(a), 2, out=out) is out
