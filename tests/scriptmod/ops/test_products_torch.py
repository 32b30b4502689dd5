"""Tensor products against PyTorch across dtypes (float32/64, float16, bfloat16, int64,
complex64) and shapes (broadcast, batched, empty): the same values, dtype and shape, or both
libraries refusing the call."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import _ops_products as P

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "complex64"]
TOL = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-4, "complex64": 1e-4}


def _pair(shape: tuple[int, ...], dtype: str, seed: int) -> tuple[sm.Tensor, Any]:
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        t = torch.tensor(rng.integers(-3, 4, shape))
    elif dtype == "complex64":
        t = torch.tensor(rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape))
    else:
        t = torch.tensor(rng.uniform(-1, 1, shape))
    t = t.to(getattr(torch, dtype))
    ours = sm.tensor(t.to(torch.float32).numpy() if dtype == "bfloat16" else t.numpy())
    return ours.to(getattr(sm, dtype)), t


def _values(x: Any) -> np.ndarray:
    if isinstance(x, sm.Tensor):
        return x.numpy().astype(np.complex128 if x.dtype.is_complex else np.float64)
    return x.to(torch.complex128 if x.is_complex() else torch.float64).numpy()


# name -> (scriptmod call, torch call, operand shapes)
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list]] = {
    "einsum_attention": (lambda a, b: sm.einsum("bqd,bkd->bqk", a, b),
                         lambda a, b: torch.einsum("bqd,bkd->bqk", a, b), [(2, 3, 4), (2, 5, 4)]),
    "einsum_bilinear": (lambda a, b, c: sm.einsum("bi,oij,bj->bo", a, b, c),
                        lambda a, b, c: torch.einsum("bi,oij,bj->bo", a, b, c),
                        [(3, 4), (2, 4, 5), (3, 5)]),
    "einsum_trace": (lambda a: sm.einsum("ii", a), lambda a: torch.einsum("ii", a), [(3, 3)]),
    "tensordot": (lambda a, b: sm.tensordot(a, b, 2), lambda a, b: torch.tensordot(a, b, 2),
                  [(2, 3, 4), (3, 4, 5)]),
    "tensordot_broadcast": (lambda a, b: sm.tensordot(a, b, ([0, 1], [2, 0])),
                            lambda a, b: torch.tensordot(a, b, ([0, 1], [2, 0])),
                            [(1, 1, 1), (2, 1, 2)]),
    "addmm": (lambda i, a, b: sm.addmm(i, a, b, beta=2), lambda i, a, b: torch.addmm(
        i, a, b, beta=2), [(1, 4), (3, 5), (5, 4)]),
    "addbmm": (lambda i, a, b: sm.addbmm(i, a, b, alpha=2), lambda i, a, b: torch.addbmm(
        i, a, b, alpha=2), [(3, 4), (2, 3, 5), (2, 5, 4)]),
    "baddbmm": (lambda i, a, b: sm.baddbmm(i, a, b, beta=0), lambda i, a, b: torch.baddbmm(
        i, a, b, beta=0), [(4,), (2, 3, 5), (2, 5, 4)]),
    "addmv": (sm.addmv, torch.addmv, [(1,), (3, 5), (5,)]),
    "addr": (lambda i, a, b: sm.addr(i, a, b, beta=2), lambda i, a, b: torch.addr(
        i, a, b, beta=2), [(3, 4), (3,), (4,)]),
    "mv": (sm.mv, torch.mv, [(3, 5), (5,)]),
    "vdot": (sm.vdot, torch.vdot, [(5,), (5,)]),
    "inner": (sm.inner, torch.inner, [(2, 5), (3, 5)]),
    "inner_scalar": (sm.inner, torch.inner, [(2, 5), ()]),
    "kron": (sm.kron, torch.kron, [(2, 3), (3, 1, 2)]),
    "cdist": (sm.cdist, torch.cdist, [(2, 3, 4), (1, 5, 4)]),
    "cdist_mm": (lambda a, b: sm.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
                 lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
                 [(30, 4), (3, 4)]),
    "cdist_p0": (lambda a, b: sm.cdist(a, b, p=0), lambda a, b: torch.cdist(a, b, p=0),
                 [(3, 4), (5, 4)]),
    "cdist_pinf": (lambda a, b: sm.cdist(a, b, p=float("inf")),
                   lambda a, b: torch.cdist(a, b, p=float("inf")), [(3, 4), (5, 4)]),
    "cross": (lambda a, b: sm.cross(a, b, dim=0), lambda a, b: torch.cross(a, b, dim=0),
              [(3, 2), (3, 1)]),
    "linalg_cross": (P.linalg_cross, torch.linalg.cross, [(4, 3), (1, 3)]),
    "trace": (sm.trace, torch.trace, [(3, 4)]),
    "matrix_power": (lambda a: sm.matrix_power(a, 3), lambda a: torch.matrix_power(a, 3),
                     [(2, 3, 3)]),
    "matrix_power_0": (lambda a: sm.matrix_power(a, 0), lambda a: torch.matrix_power(a, 0),
                       [(2, 3, 3)]),
    "multi_dot": (lambda *m: P.multi_dot(m), lambda *m: torch.linalg.multi_dot(m),
                  [(3,), (3, 6), (6, 2), (2, 4)]),
    "vander": (lambda a: P.vander(a, N=4), lambda a: torch.linalg.vander(a, N=4), [(2, 3)]),
    "vecdot": (lambda a, b: P.vecdot(a, b, dim=0), lambda a, b: torch.linalg.vecdot(a, b, dim=0),
               [(3, 2), (3, 1)]),
    "empty_mm": (sm.mv, torch.mv, [(0, 3), (3,)]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name: str, dtype: str) -> None:
    ours_fn, torch_fn, shapes = CASES[name]
    if dtype == "complex64" and name in ("vdot", "vecdot") and not hasattr(sm.Tensor, "conj"):
        pytest.skip("Tensor.conj (the views family's) is not built yet")
    pairs = [_pair(s, dtype, seed) for seed, s in enumerate(shapes)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = torch_fn(*[t for _, t in pairs])
        except NotImplementedError:
            if dtype not in ("float16", "bfloat16"):
                raise
            # torch's CPU build lacks this half kernel (its CUDA one has it): we compute it,
            # and agree with torch's float32 result rounded to the half dtype
            want = torch_fn(*[t.float() for _, t in pairs]).to(getattr(torch, dtype))
        except RuntimeError:
            with pytest.raises((RuntimeError, NotImplementedError, TypeError)):
                ours_fn(*[o for o, _ in pairs])
            return
        got = ours_fn(*[o for o, _ in pairs])
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    tol = TOL.get(dtype, 1e-10)
    np.testing.assert_allclose(_values(got), _values(want), rtol=tol, atol=tol)


def test_zero_distance_gradients_match_torch() -> None:
    x = np.array([[0.0, 0.0], [1.0, 2.0]])
    y = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    for p, mode in [(2.0, "use_mm_for_euclid_dist"), (2.0, "donot_use_mm_for_euclid_dist"),
                    (0.5, None), (1.0, None), (3.0, None), (0.0, None)]:
        kw = {} if mode is None else {"compute_mode": mode}
        a, b = sm.tensor(x, requires_grad=True), sm.tensor(y, requires_grad=True)
        sm.cdist(a, b, p=p, **kw).sum().backward()
        ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        torch.cdist(ta, tb, p=p, **kw).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), err_msg=f"p={p} {mode}")
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), err_msg=f"p={p} {mode}")


def test_integer_results_truncate_float_scales_as_torch() -> None:
    i, b1, b2 = (torch.ones(*s, dtype=torch.int64) for s in ((2, 3), (2, 2, 2), (2, 2, 3)))
    ours = [sm.tensor(x.numpy()) for x in (i, b1, b2)]
    for beta, alpha in [(0.5, 1.5), (2.7, -1.2)]:
        want = torch.baddbmm(i, b1, b2, beta=beta, alpha=alpha)
        assert sm.baddbmm(*ours, beta=beta, alpha=alpha).tolist() == want.tolist()
        want = torch.addbmm(i, b1, b2, beta=beta, alpha=alpha)
        assert sm.addbmm(*ours, beta=beta, alpha=alpha).tolist() == want.tolist()


def test_bool_addr_matches_torch() -> None:
    i = torch.tensor([[True, False, False], [False, False, True]])
    v1, v2 = torch.tensor([True, False]), torch.tensor([True, False, True])
    for beta, alpha in [(True, True), (False, True), (True, False)]:
        want = torch.addr(i, v1, v2, beta=beta, alpha=alpha)
        got = sm.addr(sm.tensor(i.numpy()), sm.tensor(v1.numpy()), sm.tensor(v2.numpy()),
                      beta=beta, alpha=alpha)
        assert got.tolist() == want.tolist()
