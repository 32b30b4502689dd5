"""``scriptmod.special`` and the top-level gamma/erfinv/Bessel functions: values against
PyTorch (where installed) across dtypes and edge values (poles, infinities, NaN), PyTorch's
dtype refusals, gradients (gradcheck in float64, PyTorch's refusals), in-place and ``out=``
forms, and a traced module."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.special as sps

import scriptmod as sm
from scriptmod.autograd import gradcheck

UNARY = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
         "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
         "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0",
         "i0e", "i1", "i1e", "erfcx", "log_ndtr", "ndtri", "ndtr", "entr", "i0", "erfinv",
         "gammaln", "digamma", "psi", "expit", "erf", "erfc", "exp2", "expm1", "log1p"]
POLYNOMIALS = [f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"] + [
    "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p"]
BINARY = ["zeta", "xlog1py", "gammainc", "gammaincc"]
# poles, zeros, infinities, NaN, signed zeros, and values past each function's branch points
EDGE = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, -3.0, 1e-30, 1e-8, 30.0, -30.0,
                 100.0, -100.0, 800.0, -800.0, np.inf, -np.inf, np.nan, 0.999, -0.999, 1.5,
                 -2.5, 7.3, -8.4, 0.1, 3.0, 2.09, -2.09, 103.0, 110.0])
TOL = {"float32": (1e-4, 1e-5), "float64": (1e-7, 1e-7)}


def _torch():
    return pytest.importorskip("torch")


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)


def _both(name: str, *args: np.ndarray, namespace: str = "special"):
    """(scriptmod's, torch's) result of ``<namespace>.name(*args)`` as NumPy arrays."""
    torch = _torch()
    ours = getattr(sm.special if namespace == "special" else sm, name)
    theirs = getattr(torch.special if namespace == "special" else torch, name)
    wrap = [sm.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
    twrap = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    return ours(*wrap).numpy(), theirs(*twrap).numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_torch_at_edges_and_inside(name: str, dtype: str) -> None:
    x = np.concatenate([EDGE, np.linspace(-9, 9, 37)]).astype(dtype)
    got, want = _both(name, x)
    assert got.dtype == want.dtype
    _close(got, want, dtype)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv", "i0"])
def test_top_level_functions_match_torch(name: str) -> None:
    x = np.concatenate([EDGE, np.linspace(-9, 9, 37)])
    for dtype in ("float32", "float64"):
        got, want = _both(name, x.astype(dtype), namespace="top")
        _close(got, want, dtype)


def test_polygamma_and_mvlgamma_match_torch() -> None:
    torch = _torch()
    x = np.concatenate([EDGE, np.linspace(-9, 9, 37)])
    for dtype in ("float32", "float64"):
        for n in range(5):
            got = sm.polygamma(n, sm.tensor(x.astype(dtype))).numpy()
            _close(got, torch.polygamma(n, torch.from_numpy(x.astype(dtype))).numpy(), dtype)
        for p in (1, 3, 5):
            got = sm.mvlgamma(sm.tensor(x.astype(dtype)), p).numpy()
            _close(got, torch.mvlgamma(torch.from_numpy(x.astype(dtype)), p).numpy(), dtype)


@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_torch_on_every_pair_of_edges(name: str) -> None:
    a, b = np.meshgrid(EDGE, EDGE)
    for dtype in ("float32", "float64"):
        got, want = _both(name, a.astype(dtype), b.astype(dtype))
        _close(got, want, dtype)
    if name in ("zeta", "xlog1py"):         # torch's gammainc(c) take tensors only
        got, want = _both(name, a[0].astype("float32"), 2.5)       # a Python number operand
        _close(got, want, "float32")


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_match_torch_beyond_one_and_at_large_degree(name: str) -> None:
    """PyTorch's recurrence, its closed forms at +-1 and its trigonometric form past its
    threshold; |x| > 1 with large n overflows, then turns NaN, where PyTorch's does. (At
    x = NaN and n >= 2 PyTorch returns an uninitialized variable; ours is NaN.)"""
    x = np.concatenate([EDGE[~np.isnan(EDGE)], np.linspace(-3, 3, 25)])
    n = np.array([-3, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50, 127, 129, 300, 513, 2.7,
                  np.nan, np.inf])
    xx, nn = np.meshgrid(x, n)
    got, want = _both(name, xx, nn)         # float64
    _close(got, want, "float64")
    got, want = _both(name, xx.astype("float32"), nn.astype("float32"))
    _close(got, want, "float32")
    got, want = _both(name, x.astype("float32"), 4)          # a Python int degree
    _close(got, want, "float32")


def test_dtypes_follow_torch() -> None:
    torch = _torch()
    for name in ("i0e", "entr", "ndtr", "bessel_j0", "erfcx", "chebyshev_polynomial_t"):
        for dt in ("int64", "bool", "float16", "bfloat16"):
            args = (1,) if "polynomial" in name else ()
            try:
                want = getattr(torch.special, name)(torch.ones(3, dtype=getattr(torch, dt)),
                                                    *args)
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match="not implemented for"):
                    getattr(sm.special, name)(sm.ones(3, dtype=getattr(sm, dt)), *args)
                assert "not implemented" in str(e)
                continue
            got = getattr(sm.special, name)(sm.ones(3, dtype=getattr(sm, dt)), *args)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (name, dt)
            np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1e-2)


def test_half_computes_in_float32_and_rounds_once() -> None:
    x = sm.tensor([0.3, 1.7, 4.2], dtype=sm.float16)
    for fn, ref in ((sm.lgamma, sps.gammaln), (sm.digamma, sps.psi), (sm.special.i1e, sps.i1e)):
        want = ref(x.numpy().astype(np.float32)).astype(np.float16)
        assert fn(x).dtype == sm.float16
        np.testing.assert_array_equal(fn(x).numpy(), want)


def test_half_entr_rounds_log_first_as_torch() -> None:
    torch = _torch()
    x = np.linspace(0.01, 6, 200)
    for dt in ("float16", "bfloat16"):
        t = torch.tensor(x).to(getattr(torch, dt))
        got = sm.special.entr(sm.tensor(t.float().numpy()).to(getattr(sm, dt)))
        np.testing.assert_array_equal(got.float().numpy(), torch.special.entr(t).float().numpy())


def test_complex_and_integer_refusals() -> None:
    z = sm.ones(2, dtype=sm.complex64)
    for fn in (sm.special.bessel_j0, sm.lgamma, sm.special.entr, sm.special.ndtr):
        with pytest.raises(NotImplementedError, match="ComplexFloat"):
            fn(z)
    with pytest.raises(NotImplementedError, match="igamma_cpu.*Long"):
        sm.igamma(sm.ones(2, dtype=sm.int64), sm.ones(2, dtype=sm.int64))
    with pytest.raises(RuntimeError, match="does not support negative n"):
        sm.polygamma(-1, sm.ones(2))
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        sm.mvlgamma(sm.ones(2), 0)
    with pytest.raises(TypeError, match="'input' must be Tensor"):
        sm.special.bessel_j0(1.0)


@pytest.mark.parametrize("fn", [
    sm.special.i0e, sm.special.i1, sm.special.i1e, sm.special.erfcx, sm.special.log_ndtr,
    sm.special.ndtr, sm.special.entr, sm.lgamma, sm.digamma, sm.i0,
    lambda x: sm.erfinv(x / 5), lambda x: sm.special.ndtri(x.sigmoid()),
    lambda x: sm.polygamma(2, x + 3), lambda x: sm.mvlgamma(x + 3, 3),
    lambda x: sm.special.xlog1py(x, x + 3), lambda x: sm.special.zeta(3.0, x + 3),
    lambda x: sm.igamma(2.0, x + 3), lambda x: sm.igammac(sm.full_like(x, 1.5), x + 3)])
def test_gradcheck(fn) -> None:
    x = sm.tensor([0.3, 1.2, 2.5, -0.7], dtype=sm.float64)
    x = (x.abs() + 0.1 if fn in (sm.special.entr, sm.lgamma, sm.digamma) else x).detach()
    # (sm.lgamma and sm.digamma take -0.7 too: away from their poles)
    assert gradcheck(fn, (x.requires_grad_(),), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradients_match_torch_including_zero() -> None:
    torch = _torch()
    x = np.array([0.0, 0.4, -1.3, 2.2])
    for name in ("i1", "i1e", "i0e", "erfcx", "log_ndtr", "entr"):
        t = torch.tensor(x, requires_grad=True)
        getattr(torch.special, name)(t).sum().backward()
        s = sm.tensor(x, requires_grad=True)
        getattr(sm.special, name)(s).sum().backward()
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_double_backward_of_lgamma() -> None:
    x = sm.tensor([1.5, 2.5], dtype=sm.float64, requires_grad=True)
    (g,) = sm.autograd.grad(sm.lgamma(x).sum(), x, create_graph=True)
    (gg,) = sm.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), sps.polygamma(1, [1.5, 2.5]), rtol=1e-9)


def test_undifferentiable_functions_as_in_torch() -> None:
    x = sm.tensor([0.5, 1.5], requires_grad=True)
    for y in (sm.special.bessel_j0(x), sm.special.airy_ai(x),
              sm.special.chebyshev_polynomial_t(x, 3), sm.special.modified_bessel_i0(x)):
        assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(NotImplementedError, match="the derivative for 'zeta' is not implemented"):
        sm.special.zeta(x + 2, x.detach()).sum().backward()
    with pytest.raises(NotImplementedError, match="'igamma: input' is not implemented"):
        sm.igamma(x, sm.ones(2)).sum().backward()


def test_traced_zeta_differentiates_q_and_refuses_x() -> None:
    fn = lambda x, q: sm.special.zeta(x, q)          # noqa: E731
    x = sm.tensor([2.5, 3.0], dtype=sm.float64)
    q = sm.tensor([1.5, 2.0], dtype=sm.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(fn, (x, q))
    (g,) = sm.autograd.grad(traced(x, q).sum(), q)
    want = -x.numpy() * sps.zeta(x.numpy() + 1, q.detach().numpy())
    np.testing.assert_allclose(g.numpy(), want)
    with pytest.raises(NotImplementedError, match="'zeta' is not implemented"):
        traced(x.requires_grad_(), q).sum().backward()


def test_inplace_and_out_forms() -> None:
    x = sm.tensor([0.5, 2.0, 3.5])
    want = sps.gammaln(x.numpy())
    y = x.clone()
    assert y.lgamma_() is y
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(x.clone().polygamma_(1).numpy(), sps.polygamma(1, x.numpy()),
                               rtol=1e-5)
    want = [sps.multigammaln(v, 2) for v in x.numpy() + 1]
    np.testing.assert_allclose((x + 1).mvlgamma_(2).numpy(), want, rtol=1e-5)
    out = sm.empty(3)
    assert sm.special.bessel_j0(x, out=out) is out
    np.testing.assert_allclose(out.numpy(), sps.j0(x.numpy()), rtol=1e-6)
    out = sm.empty(3, dtype=sm.float64)
    sm.special.chebyshev_polynomial_t(x, 2, out=out)
    assert out.dtype == sm.float64
    np.testing.assert_allclose(out.numpy(), 2 * x.numpy().astype(np.float64) ** 2 - 1, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.special.xlog1py(x, 1.0, out=sm.empty(0))      # an empty out resizes quietly
    with pytest.raises(RuntimeError, match="can't be cast"):
        sm.special.entr(x, out=sm.empty(3, dtype=sm.int64))


def test_aliases_are_torch_names() -> None:
    torch = _torch()
    public = {n for n in dir(torch.special) if not n.startswith("_")} - {
        "Tensor", "torch", "common_args", "multi_dim_common"}
    assert sorted(public - set(sm.special.__all__)) == []
    x = sm.tensor([0.5, 2.0])
    np.testing.assert_allclose(sm.special.gammaln(x).numpy(), sm.lgamma(x).numpy())
    np.testing.assert_allclose(sm.special.multigammaln(x + 2, 2).numpy(),
                               sm.mvlgamma(x + 2, 2).numpy())
    np.testing.assert_allclose(sm.special.softmax(x, 0).numpy(), sm.softmax(x, 0).numpy())
    assert math.isclose(float(sm.special.gammainc(x, 1.0)[0]), sps.gammainc(0.5, 1.0),
                        rel_tol=1e-6)
    v = np.array([0.2, 0.5, 0.9])
    for name, args in (("logit", (v,)), ("sinc", (v,)), ("xlogy", (v, v + 1)), ("expit", (v,)),
                       ("exp2", (v,)), ("polygamma", (2, v)), ("logsumexp", (v, 0)),
                       ("log_softmax", (v, 0)), ("psi", (v,)), ("round", (v,))):
        got, want = _both(name, *args)
        _close(got, want, "float64")


class _Special(sm.nn.Module):
    def forward(self, x):
        return (sm.special.i1e(x) + sm.lgamma(x.abs() + 1) * sm.special.ndtr(x)
                + sm.special.xlog1py(x, x.abs()) + sm.special.chebyshev_polynomial_t(x, 3)
                + x.polygamma(1).clamp(max=5.0) + sm.special.entr(x.abs()))


def test_traced_module_equals_eager_at_other_shapes() -> None:
    m = _Special()
    x = sm.randn(4, 5)
    traced = sm.jit.trace(m, x)
    for shape in ((4, 5), (2, 3, 7)):
        x = sm.randn(*shape)
        np.testing.assert_allclose(traced(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
    assert "polygamma" in str(traced.graph)
