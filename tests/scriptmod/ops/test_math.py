"""The elementwise math family against PyTorch: values across dtypes and special values,
gradients, in-place and ``out=`` forms, error messages, and fusion of traced chains.

Registry ops (tan, asinh, copysign, fmod, hypot, nextafter, the shifts, gcd, lcm, frexp) and
decompositions (frac, lerp, logaddexp, xlogy, nan_to_num, fmax, round(decimals), ...) are
checked alike, through ``scriptmod``'s public functions and methods.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit

torch = pytest.importorskip("torch")

NAN, INF = math.nan, math.inf
SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 30.0, -30.0, 1e-30, INF, -INF, NAN]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]


def _pair(values: Any, dtype: str) -> tuple[Any, Any]:
    """The same data as a scriptmod tensor and a torch tensor of ``dtype``."""
    t = torch.tensor(values, dtype=getattr(torch, dtype))
    return sm.tensor(t.float().numpy() if dtype == "bfloat16" else t.numpy()).to(
        getattr(sm, dtype)), t


def _same(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same dtype, shape and values (NaN where NaN; exact for ints and bools)."""
    if isinstance(want, (bool, int, float)):
        assert got == want
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    w = want.resolve_conj()
    if w.dtype in (torch.float16, torch.bfloat16):
        rtol, atol = max(rtol, 8e-3), max(atol, 1e-3)
        w = w.float()
    g = got.float() if got.dtype in (sm.float16, sm.bfloat16) else got
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol, equal_nan=True)


# ---- unary ops over dtypes -------------------------------------------------------------------
UNARY = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log10",
         "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "frac", "deg2rad",
         "rad2deg", "sgn", "signbit", "isfinite", "isposinf", "isneginf", "isreal", "sinc",
         "logit", "nan_to_num", "positive", "square"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_torch_on_special_values(name: str, dtype: str) -> None:
    x, t = _pair(SPECIAL, dtype)
    _same(getattr(sm, name)(x), getattr(torch, name)(t))
    _same(getattr(x, name)(), getattr(t, name)())


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
@pytest.mark.parametrize("name", ["tan", "asinh", "atanh", "log10", "deg2rad", "sgn",
                                  "signbit", "isfinite", "isposinf", "isneginf", "isreal",
                                  "sinc", "logit", "nan_to_num", "square"])
def test_unary_on_integers_and_bools_matches_torch(name: str, dtype: str) -> None:
    x, t = _pair([0, 1, 3, 0, 1], dtype)
    if name == "square" and dtype == "bool":
        pytest.skip("torch.square(bool) is pow, refused for two bools")
    _same(getattr(sm, name)(x), getattr(torch, name)(t))


@pytest.mark.parametrize("name", ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                  "acosh", "atanh", "sgn", "isfinite", "isreal", "sinc",
                                  "nan_to_num"])
def test_unary_on_complex_matches_torch(name: str) -> None:
    data = [0.5 + 0.25j, -1.5 + 2j, 0j, complex(INF, 1.0), complex(NAN, 0.0), 3 - 0.5j]
    if name not in ("isfinite", "isreal", "nan_to_num"):
        data = data[:2] + data[5:]
    t = torch.tensor(data, dtype=torch.complex128)
    x = sm.tensor(t.numpy())
    _same(getattr(sm, name)(x), getattr(torch, name)(t), rtol=1e-10)


def test_nan_to_num_replacements_and_logit_eps() -> None:
    for dtype in FLOAT_DTYPES:
        x, t = _pair(SPECIAL, dtype)
        _same(sm.nan_to_num(x, nan=1.5, posinf=7.0), torch.nan_to_num(t, nan=1.5, posinf=7.0))
        _same(sm.nan_to_num(x, neginf=-2.0), torch.nan_to_num(t, neginf=-2.0))
    x, t = _pair([0.0, 0.1, 0.3, 0.5, 0.9, 1.0], "float64")
    _same(sm.logit(x, eps=0.2), torch.logit(t, eps=0.2))
    _same(sm.logit(x, 1e-6), torch.logit(t, 1e-6))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("decimals", [0, 1, 3, -1, -3])
def test_round_decimals_matches_torch(decimals: int, dtype: str) -> None:
    x, t = _pair([1234.5678, -0.125, 2.5, 0.0449, -987.65, 1e-3], dtype)
    _same(sm.round(x, decimals=decimals), torch.round(t, decimals=decimals))
    _same(x.round(decimals=decimals), t.round(decimals=decimals))
    y, u = x.clone(), t.clone()
    y.round_(decimals=decimals), u.round_(decimals=decimals)
    _same(y, u)


# ---- binary ops ----------------------------------------------------------------------------
A = [0.0, -0.0, 1.5, -2.5, 7.0, -7.0, INF, -INF, NAN, 3.0, 1e-30, 5.0]
B = [1.0, -2.0, 0.0, -0.0, 2.0, -3.0, 1.0, INF, 2.0, NAN, -INF, INF]
BINARY = ["copysign", "fmod", "remainder", "hypot", "nextafter", "logaddexp", "logaddexp2",
          "fmax", "fmin", "xlogy", "atan2", "arctan2", "float_power", "true_divide", "ldexp"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_torch_on_special_values(name: str, dtype: str) -> None:
    (a, ta), (b, tb) = _pair(A, dtype), _pair(B, dtype)
    if name == "ldexp":
        b, tb = _pair([1, -2, 0, 3, 2, -3, 1, 4, 2, 5, 0, 1], "int64")
    _same(getattr(sm, name)(a, b), getattr(torch, name)(ta, tb))
    _same(getattr(a, name)(b), getattr(ta, name)(tb))


@pytest.mark.parametrize("name", ["copysign", "fmod", "remainder", "xlogy", "float_power"])
def test_binary_with_python_scalars_matches_torch(name: str) -> None:
    a, ta = _pair(A, "float32")
    for s in (2, -1.5, 0.0):
        _same(getattr(sm, name)(a, s), getattr(torch, name)(ta, s))
    if name in ("xlogy", "float_power"):
        _same(getattr(sm, name)(2.0, a), getattr(torch, name)(2.0, ta))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_binary_ops_match_torch(dtype: str) -> None:
    (a, ta) = _pair([12, 7, 0, 9, 100, 3, 0, 5], dtype)
    (b, tb) = _pair([8, 3, 5, 0, 7, 1, 0, 9], dtype)
    for name in ("gcd", "lcm", "bitwise_left_shift", "bitwise_right_shift", "copysign",
                 "float_power", "heaviside"):
        _same(getattr(sm, name)(a, b), getattr(torch, name)(ta, tb))
    nz = tb.clone()
    nz[nz == 0] = 1
    _same(sm.fmod(a, sm.tensor(nz.numpy())), torch.fmod(ta, nz))
    if dtype != "uint8":
        (n, tn) = _pair([-12, 7, -1, 9, -100, 3, 0, -5], dtype)
        (s, ts) = _pair([1, 9, 70, -1, 3, 64, 2, 0], dtype)
        for name in ("bitwise_left_shift", "bitwise_right_shift", "gcd", "fmod"):
            if name == "fmod":
                s, ts = s.abs() + 1, ts.abs() + 1
            _same(getattr(sm, name)(n, s), getattr(torch, name)(tn, ts))
        _same(n << 2, tn << 2)
        _same(n >> s.clamp(0, 7), tn >> ts.clamp(0, 7))


def test_integer_division_by_zero_raises_as_in_torch() -> None:
    a = sm.tensor([5, -5])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        sm.fmod(a, 0)


def test_fmax_fmin_ignore_nan_where_maximum_propagates_it() -> None:
    a, ta = _pair([NAN, 1.0, NAN, 2.0], "float32")
    b, tb = _pair([1.0, NAN, NAN, 3.0], "float32")
    _same(sm.fmax(a, b), torch.fmax(ta, tb))
    _same(sm.fmin(a, b), torch.fmin(ta, tb))
    assert math.isnan(sm.maximum(a, b)[1].item())


def test_ternary_and_weighted_ops_match_torch() -> None:
    rng = np.random.default_rng(0)
    x, y, z = (rng.uniform(-2, 2, (3, 4)) for _ in range(3))
    w = rng.uniform(-1, 2, (3, 4))
    for dtype in FLOAT_DTYPES:
        (a, ta), (b, tb), (c, tc), (v, tv) = (_pair(d.tolist(), dtype) for d in (x, y, z, w))
        _same(sm.lerp(a, b, 0.3), torch.lerp(ta, tb, 0.3))
        _same(sm.lerp(a, b, 0.8), torch.lerp(ta, tb, 0.8))
        _same(sm.lerp(a, b, v), torch.lerp(ta, tb, tv))
        _same(sm.addcmul(a, b, c, value=-0.5), torch.addcmul(ta, tb, tc, value=-0.5))
        _same(sm.addcdiv(a, b, c, value=2), torch.addcdiv(ta, tb, tc, value=2))
        _same(sm.rsub(a, b, alpha=2), torch.rsub(ta, tb, alpha=2))
        _same(sm.rsub(a, 3.0), torch.rsub(ta, 3.0))
        _same(a.__rdiv__(2.0), ta.__rdiv__(2.0))
    (i, ti) = _pair([[1, 2], [3, 4]], "int64")
    _same(sm.addcmul(i, i, i, value=2.5), torch.addcmul(ti, ti, ti, value=2.5))


def test_whole_tensor_helpers_match_torch() -> None:
    a, ta = _pair([[1.0, NAN], [3.0, 4.0]], "float32")
    _same(sm.fill(a, 2.5), torch.fill(ta, 2.5))
    (i, ti) = _pair([1, 2, 3], "int64")
    _same(sm.fill(i, 2.7), torch.fill(ti, 2.7))
    _same(sm.fill(a.expand(3, 2, 2), 1.0), torch.fill(ta.expand(3, 2, 2), 1.0))
    assert sm.equal(i, i.double()) and not sm.equal(a, a) and not sm.equal(i, i[:2])
    assert i.equal(i.clone())
    m, e = sm.frexp(a)
    tm, te = torch.frexp(ta)
    _same(m, tm), _same(e, te)
    assert sm.frexp(a).exponent is not None
    _same(sm.clamp_min(i, 2), torch.clamp_min(ti, 2))
    _same(sm.clamp_max(a, 2.0), torch.clamp_max(ta, 2.0))
    _same(sm.heaviside(a, sm.tensor([0.5])), torch.heaviside(ta, torch.tensor([0.5])))


# ---- in-place and out= ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tan", "asinh", "frac", "sinc", "logit", "deg2rad", "sgn",
                                  "nan_to_num", "arctanh"])
def test_unary_inplace_forms(name: str) -> None:
    x, t = _pair([0.25, -0.5, 0.75], "float32")
    out = getattr(x, name + "_")()
    assert out is x
    getattr(t, name + "_")()
    _same(x, t)


@pytest.mark.parametrize("name", ["copysign", "fmod", "hypot", "nextafter", "addcmul",
                                  "xlogy", "ldexp", "heaviside", "lerp_half", "gcd",
                                  "bitwise_left_shift"])
def test_binary_inplace_and_out_forms(name: str) -> None:
    ints = name in ("gcd", "bitwise_left_shift")
    a, ta = _pair([6, 4, 9] if ints else [0.25, -0.5, 0.75], "int64" if ints else "float32")
    b, tb = _pair([4, 2, 3] if ints else [2.0, 3.0, -1.0], "int64" if ints else "float32")
    op, args, targs = name, (b,), (tb,)
    if name == "lerp_half":
        op, args, targs = "lerp", (b, 0.5), (tb, 0.5)
    if name == "ldexp":
        args, targs = (b.long(),), (tb.long(),)
    if name == "addcmul":
        args, targs = (b, b), (tb, tb)
    out, tout = sm.empty(3, dtype=a.dtype), torch.empty(3, dtype=ta.dtype)
    assert getattr(sm, op)(a, *args, out=out) is out
    getattr(torch, op)(ta, *targs, out=tout)
    _same(out, tout)
    assert getattr(a, op + "_")(*args) is a
    getattr(ta, op + "_")(*targs)
    _same(a, ta)


def test_float_power_inplace_needs_a_double_base() -> None:
    x = sm.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="requires dtype Double"):
        x.float_power_(2)
    y = x.double()
    y.float_power_(2)
    assert y.tolist() == [1.0, 4.0]


# ---- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("call, exc, words", [
    (lambda: sm.frac(sm.tensor([1, 2])), NotImplementedError, "frac_cpu"),
    (lambda: sm.hypot(sm.tensor([1, 2]), sm.tensor([1, 2])), NotImplementedError, "hypot"),
    (lambda: sm.tensor([1.5]) << 2, NotImplementedError, "lshift"),
    (lambda: sm.gcd(sm.tensor([1.5]), sm.tensor([2.5])), NotImplementedError, "gcd"),
    (lambda: sm.lerp(sm.tensor([1.0]), sm.tensor([2.0], dtype=sm.float64), 0.5),
     RuntimeError, "expected dtype float for `end`"),
    (lambda: sm.addcdiv(sm.tensor([1]), sm.tensor([1]), sm.tensor([2])), RuntimeError,
     "Integer division with addcdiv"),
    (lambda: sm.heaviside(sm.tensor([1.0]), sm.tensor([1.0], dtype=sm.float64)),
     RuntimeError, "different dtypes"),
    (lambda: sm.positive(sm.tensor([True])), RuntimeError, "bool tensor"),
    (lambda: sm.frexp(sm.tensor([1, 2])), RuntimeError, "floating-point"),
    (lambda: sm.round(sm.tensor([1, 2]), decimals=1), NotImplementedError, "round_cpu"),
    (lambda: sm.logaddexp(sm.tensor([1]), sm.tensor([2])), NotImplementedError, "logaddexp"),
])
def test_errors_match_torch_types_and_name_the_problem(call: Callable, exc: type,
                                                       words: str) -> None:
    with pytest.raises(exc, match=words):
        call()


# ---- gradients ----------------------------------------------------------------------------
def _r(*shape: int, lo: float = -0.9, hi: float = 0.9, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return sm.tensor(rng.uniform(lo, hi, shape), dtype=sm.float64, requires_grad=True)


@pytest.mark.parametrize("fn, inputs", [
    (sm.tan, lambda: [_r(5)]), (sm.asin, lambda: [_r(5)]), (sm.acos, lambda: [_r(5)]),
    (sm.atan, lambda: [_r(5)]), (sm.sinh, lambda: [_r(5)]), (sm.cosh, lambda: [_r(5)]),
    (sm.asinh, lambda: [_r(5)]), (sm.acosh, lambda: [_r(5, lo=1.2, hi=3)]),
    (sm.atanh, lambda: [_r(5)]), (sm.log10, lambda: [_r(5, lo=0.2, hi=3)]),
    (sm.sinc, lambda: [_r(5)]), (sm.logit, lambda: [_r(5, lo=0.1, hi=0.9)]),
    (lambda a, b: sm.copysign(a, b), lambda: [_r(4), _r(4, seed=1)]),
    (lambda a, b: sm.fmod(a, b), lambda: [_r(4, lo=1, hi=5), _r(4, lo=0.7, hi=1.3, seed=1)]),
    (lambda a, b: sm.hypot(a, b), lambda: [_r(4), _r(4, seed=1)]),
    (lambda a, b: sm.logaddexp(a, b), lambda: [_r(4), _r(4, seed=1)]),
    (lambda a, b: sm.logaddexp2(a, b), lambda: [_r(4), _r(4, seed=1)]),
    (lambda a, b: sm.xlogy(a, b), lambda: [_r(4), _r(4, lo=0.2, hi=2, seed=1)]),
    (lambda a, b, w: sm.lerp(a, b, w), lambda: [_r(4), _r(4, seed=1), _r(4, seed=2)]),
    (lambda a, b, c: sm.addcmul(a, b, c, value=0.5),
     lambda: [_r(4), _r(4, seed=1), _r(4, seed=2)]),
    (lambda a, b, c: sm.addcdiv(a, b, c, value=0.5),
     lambda: [_r(4), _r(4, seed=1), _r(4, lo=1, hi=2, seed=2)]),
    (lambda a, b: sm.fmax(a, b), lambda: [_r(4), _r(4, seed=1)]),
    (lambda a: sm.frexp(a).mantissa, lambda: [_r(4, lo=1, hi=9)]),
    (lambda a, b: sm.nextafter(a, b), lambda: [_r(4), _r(4, seed=1)]),
])
def test_gradcheck(fn: Callable, inputs: Callable) -> None:
    assert sm.autograd.gradcheck(fn, tuple(inputs()))


def _grads(fn: Callable, values: list, lib: Any) -> list:
    ts = [lib.tensor(v, dtype=lib.float64, requires_grad=True) for v in values]
    out = fn(lib, *ts)
    out.sum().backward()
    return [v for t in ts for v in (t.grad.tolist() if t.grad is not None else [None])]


@pytest.mark.parametrize("fn, values", [
    (lambda m, a, b: m.div(a, b, rounding_mode="floor"), [[3.0, -7.0], [2.0, 2.0]]),
    (lambda m, a, b: m.div(a, b, rounding_mode="trunc"), [[3.0, -7.0], [2.0, 2.0]]),
    (lambda m, a, b: m.xlogy(a, b), [[0.0, 0.0, 2.0], [0.25, 3.0, 0.5]]),
    (lambda m, a, b: m.fmax(a, b), [[1.0, 2.0, NAN], [1.0, 1.0, 3.0]]),
    (lambda m, a, b: m.logaddexp(a, b), [[1.0, -2.0], [1.0, 3.0]]),
    (lambda m, a: m.sinc(a), [[0.0, 0.5]]),
    (lambda m, a: m.copysign(a, -1.0), [[0.0, 2.0, -3.0]]),
    (lambda m, a: m.logit(a, eps=0.2), [[0.1, 0.5, 0.95]]),
    (lambda m, a: m.nan_to_num(a), [[1.0, INF, NAN]]),
])
def test_gradients_match_torch_at_the_edges(fn: Callable, values: list) -> None:
    assert _grads(fn, values, sm) == pytest.approx(_grads(fn, values, torch), nan_ok=True)


# ---- tracing and fusion ------------------------------------------------------------------------
def _chain(x: Any, y: Any) -> Any:
    a = x.tan() + y.asinh() * x.atan() - x.sinh().abs().log10()
    b = sm.hypot(x, y) + sm.copysign(x.cosh(), y) + sm.fmod(x, 1.5) + x.frac()
    c = sm.logaddexp(x, y) + sm.xlogy(x.abs(), y.abs() + 0.5) + sm.lerp(x, y, 0.25)
    d = sm.fmax(x, y) + sm.nan_to_num(x.atanh()) + x.sinc() + sm.deg2rad(y) + x.sgn()
    return a + b + c + d + sm.addcmul(x, x, y, value=0.5) + sm.logit(x.sigmoid(), eps=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_traced_chain_is_one_fusion_group_and_matches_eager(dtype: str) -> None:
    rng = np.random.default_rng(3)
    x, y = (sm.tensor(rng.uniform(-0.95, 0.95, (6, 5))).to(getattr(sm, dtype)) for _ in range(2))
    traced = jit.trace(_chain, (x, y))
    with sm.no_grad():
        got, want = traced(x, y), _chain(x, y)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)
    assert len(jit.kernels_for(traced, x, y)) == 1


def test_traced_integer_shifts_and_round_decimals_fuse() -> None:
    def f(a: Any, b: Any) -> Any:
        return ((a << 2) + (a >> b) + sm.bitwise_left_shift(b, a)).float().round(decimals=2)
    a = sm.tensor([[1, -8, 3], [100, 0, -1]])
    b = sm.tensor([[1, 70, -1], [2, 3, 63]])
    traced = jit.trace(f, (a, b))
    assert sm.equal(traced(a, b), f(a, b))
    assert len(jit.kernels_for(traced, a, b)) == 1


# ---- core elementwise details fixed with the family --------------------------------------------
def test_integer_trunc_division_is_exact_and_refuses_zero() -> None:
    big = sm.tensor([2 ** 62 + 1, -(2 ** 62) - 3, -7, 7])
    d = sm.tensor([3, 3, 2, -2])
    want = torch.div(torch.tensor(big.tolist()), torch.tensor(d.tolist()), rounding_mode="trunc")
    assert sm.div(big, d, rounding_mode="trunc").tolist() == want.tolist()
    i8, f = sm.tensor([7, -7], dtype=sm.int8), sm.tensor([2.0, 2.0])
    assert sm.div(i8, f, rounding_mode="trunc").dtype is sm.float32
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        sm.div(i8, sm.tensor([0, 1], dtype=sm.int8), rounding_mode="trunc")


def test_square_of_bool_is_int64_and_clamp_refuses_complex() -> None:
    b, tb = _pair([True, False], "bool")
    _same(sm.square(b), torch.square(tb))
    with pytest.raises(RuntimeError, match="complex"):
        sm.tensor([1 + 1j]).clamp(min=0)


def test_logaddexp_promotes_mixed_operands_and_takes_complex() -> None:
    (a, ta), (i, ti) = _pair([0.5, -1.0, 3.0], "float32"), _pair([1, 0, 5], "int64")
    _same(sm.logaddexp(a, i), torch.logaddexp(ta, ti))
    _same(sm.logaddexp2(i.bool(), a), torch.logaddexp2(ti.bool(), ta))
    c = torch.tensor([0 - 2j, 1 - 0.5j, 30 + 1j])
    _same(sm.logaddexp(sm.tensor(c.numpy()), a), torch.logaddexp(c, ta))


def test_onnx_export_of_the_family_matches_eager() -> None:
    import io
    ort = pytest.importorskip("onnxruntime")

    class Model(sm.nn.Module):
        def forward(self, x: Any) -> Any:
            return (x.tan() + x.asin() + sm.atanh(x * 0.5) + sm.log10(x.abs() + 1)
                    + sm.fmod(x, 0.7) + sm.hypot(x, x) + x.acosh().nan_to_num()
                    + sm.logaddexp(x, x * 2) + x.cosh() + x.sinh() + x.atan() + x.acos())
    x = sm.tensor(np.random.default_rng(5).uniform(-0.9, 0.9, (3, 4)).astype(np.float32))
    buf = io.BytesIO()
    sm.onnx.export(Model(), buf, (x,))
    sess = ort.InferenceSession(buf.getvalue())
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, Model()(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", [
    lambda m, x: m.hypot(x, 2.0), lambda m, x: m.nextafter(x, 2.0),
    lambda m, x: m.gcd(x.long(), 2), lambda m, x: m.fmax(x, 2.0),
    lambda m, x: m.logit(x, eps="a"), lambda m, x: m.heaviside(x, 1.0),
])
def test_non_tensor_arguments_get_torchs_type_error(call: Callable) -> None:
    with pytest.raises(TypeError) as theirs:
        call(torch, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError) as ours:
        call(sm, sm.tensor([1.0, 2.0]))
    assert str(ours.value) == str(theirs.value)


# ---- compiled accuracy ---------------------------------------------------------------------------
_REFS = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
         "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
         "atanh": np.arctanh, "log10": np.log10}


def _sweep(dtype: Any, n: int = 4000) -> np.ndarray:
    """Log-spaced magnitudes of both signs over the dtype's range, a dense [-3, 3] band,
    points near +-1, and the special values."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(7)
    mags = np.exp2(rng.uniform(np.log2(info.tiny), np.log2(info.max), n))
    near1 = 1 + rng.uniform(-1e-3, 1e-3, n // 4)
    x = np.concatenate([mags, -mags, rng.uniform(-3, 3, n), near1, -near1,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 710.0, 89.0]])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_fused_formulas_are_accurate_over_the_whole_range(dtype: Any) -> None:
    """The traced (fused, native) forms against float64 NumPy: relative error <= 4e-6
    (float32) / 1e-13 (float64) where the result is a normal number; the same NaNs,
    infinities and signed zeros."""
    x = _sweep(dtype)
    names = list(_REFS)
    traced = jit.trace(lambda t: tuple(getattr(t, n)() for n in names), (sm.tensor(x),))
    outs = traced(sm.tensor(x))
    assert len(jit.kernels_for(traced, sm.tensor(x))) == len(names)     # each one native
    info = np.finfo(dtype)
    for name, got in zip(names, outs):
        with np.errstate(all="ignore"):
            want = _REFS[name](x.astype(np.float64))
        g = got.numpy().astype(np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(want)), name
        big = np.abs(want) > info.max
        assert np.array_equal(np.isinf(g), np.isinf(want) | big), name
        normal = np.isfinite(want) & (np.abs(want) >= info.tiny) & ~big
        rel = np.abs(g[normal] - want[normal]) / np.abs(want[normal])
        assert rel.max() <= (4e-6 if dtype is np.float32 else 1e-13), (name, rel.max())
        zeros = want == 0
        assert np.array_equal(np.signbit(g[zeros]), np.signbit(want[zeros])), name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_fused_binary_ops_match_torch_on_every_special_pair(dtype: str) -> None:
    grid = np.array(A + B + [0.75, -1e6], np.float64)   # (torch: fmod(-1e30, 1e-30) NaN)
    a_np, b_np = np.meshgrid(grid, grid)
    (a, ta), (b, tb) = _pair(a_np.tolist(), dtype), _pair(b_np.tolist(), dtype)

    def f(lib: Any, x: Any, y: Any) -> tuple:
        return (lib.hypot(x, y), lib.fmod(x, y), lib.copysign(x, y), lib.fmod(x, 1.5),
                lib.copysign(y * 0 + 2.0, y), lib.atan(x), lib.asinh(y))
    traced = jit.trace(lambda x, y: f(sm, x, y), (a, b))
    for got, want in zip(traced(a, b), f(torch, ta, tb)):
        _same(got, want)
