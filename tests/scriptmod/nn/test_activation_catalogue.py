"""The activations of issue 38 (Hardswish ... RReLU, gumbel_softmax, the in-place variants):
forward and gradient against float64 NumPy formulas, at the kinks too, against PyTorch
where it is installed, and traced at two batch sizes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn as nn
import scriptmod.nn.functional as F
from scriptmod.ir.errors import DTypeError

from nn_testutil import arr, assert_close_lists, run_both, torch_or_none

SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805
# the kinks and both sides of them, then a spread of values
POINTS = np.array([-25.0, -4.0, -3.0, -2.5, -0.5, -0.25, 0.0, 0.25, 0.5, 0.7, 2.9, 3.0, 3.5, 25.0])


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# name -> (call on scriptmod's F, NumPy forward, NumPy derivative)
REFERENCE: dict[str, tuple[Callable[[Any], Any], Callable, Callable]] = {
    "hardswish": (lambda x: F.hardswish(x), lambda x: x * np.clip(x + 3, 0, 6) / 6,
                  lambda x: np.where(x <= -3, 0, np.where(x >= 3, 1, (2 * x + 3) / 6))),
    "hardsigmoid": (lambda x: F.hardsigmoid(x), lambda x: np.clip(x + 3, 0, 6) / 6,
                    lambda x: np.where((x > -3) & (x < 3), 1 / 6, 0)),
    "mish": (lambda x: F.mish(x), lambda x: x * np.tanh(np.logaddexp(0, x)),
             lambda x: np.tanh(np.logaddexp(0, x))
             + x * _sig(x) * (1 - np.tanh(np.logaddexp(0, x)) ** 2)),
    "selu": (lambda x: F.selu(x), lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)),
             lambda x: SELU_S * np.where(x > 0, 1, SELU_A * np.exp(x))),
    "celu": (lambda x: F.celu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5)),
             lambda x: np.where(x > 0, 1, np.exp(x / 0.5))),
    "softsign": (lambda x: F.softsign(x), lambda x: x / (1 + np.abs(x)),
                 lambda x: 1 / (1 + np.abs(x)) ** 2),
    "softshrink": (lambda x: F.softshrink(x, 0.5),
                   lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
                   lambda x: np.where(np.abs(x) <= 0.5, 0, 1)),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), lambda x: np.where(np.abs(x) <= 0.5, 0, x),
                   lambda x: np.where(np.abs(x) <= 0.5, 0, 1)),
    "tanhshrink": (lambda x: F.tanhshrink(x), lambda x: x - np.tanh(x),
                   lambda x: np.tanh(x) ** 2),
    "rrelu_eval": (lambda x: F.rrelu(x, 0.1, 0.3), lambda x: np.where(x > 0, x, 0.2 * x),
                   lambda x: np.where(x > 0, 1, 0.2)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_forward_and_gradient_match_the_formula(name: str, dtype: str) -> None:
    call, fwd, dfdx = REFERENCE[name]
    x = sm.tensor(POINTS, dtype=getattr(sm, dtype), requires_grad=True)
    y = call(x)
    y.sum().backward()
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(arr(y), fwd(POINTS), rtol=tol, atol=tol)
    np.testing.assert_allclose(arr(x.grad), dfdx(POINTS), rtol=tol, atol=tol)


def test_glu_softmin_and_softmax2d_match_the_formula() -> None:
    a = np.random.default_rng(0).standard_normal((2, 4, 3, 2))
    x = sm.tensor(a)
    np.testing.assert_allclose(arr(F.glu(x, 1)), a[:, :2] * _sig(a[:, 2:]), rtol=1e-12)
    e = np.exp(-a - (-a).max(axis=1, keepdims=True))
    np.testing.assert_allclose(arr(nn.Softmin(1)(x)), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-12)
    e = np.exp(a[0] - a[0].max(axis=0, keepdims=True))
    np.testing.assert_allclose(arr(nn.Softmax2d()(x[0])), e / e.sum(axis=0, keepdims=True),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="3D or 4D"):
        nn.Softmax2d()(x[0, 0])
    with pytest.raises(Exception, match="Halving dimension must be even"):
        F.glu(sm.ones(2, 3))


TORCH_CASES = {
    "hardswish": ("hardswish", {}), "hardsigmoid": ("hardsigmoid", {}), "mish": ("mish", {}),
    "selu": ("selu", {}), "celu": ("celu", {"alpha": 0.7}), "softsign": ("softsign", {}),
    "softshrink": ("softshrink", {"lambd": 0.5}), "hardshrink": ("hardshrink", {"lambd": 0.5}),
    "tanhshrink": ("tanhshrink", {}), "logsigmoid": ("logsigmoid", {}),
    "glu": ("glu", {"dim": 0}), "softmin": ("softmin", {"dim": 1}),
    "rrelu": ("rrelu", {"lower": 0.2, "upper": 0.4}),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_against_torch_forward_and_backward(name: str) -> None:
    torch = torch_or_none()
    if torch is None:
        pytest.skip("torch not installed")
    fn, kw = TORCH_CASES[name]
    a = np.concatenate([POINTS, np.random.default_rng(1).standard_normal(10) * 4]).reshape(4, 6)
    ours, theirs = run_both(lambda x: getattr(F, fn)(x, **kw),
                            lambda x: getattr(torch.nn.functional, fn)(x, **kw), [a])
    assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-6)   # torch: float32 scalars


@pytest.mark.parametrize("name", ["elu", "celu", "selu", "leaky_relu", "hardtanh", "rrelu"])
def test_in_place_variants_write_back_into_the_input(name: str) -> None:
    x = sm.tensor(POINTS)
    expected = getattr(F, name)(x.clone())
    out = getattr(F, name + "_")(x)
    assert out is x
    np.testing.assert_array_equal(arr(x), arr(expected))


@pytest.mark.parametrize("name", ["hardswish", "hardsigmoid", "mish", "selu", "celu"])
def test_inplace_argument_keeps_the_gradient(name: str) -> None:
    leaf = sm.tensor(POINTS, requires_grad=True)
    x = leaf * 1.0
    y = getattr(F, name)(x, inplace=True)
    assert y is x
    y.sum().backward()
    ref = sm.tensor(POINTS, requires_grad=True)
    getattr(F, name)(ref).sum().backward()
    np.testing.assert_allclose(arr(leaf.grad), arr(ref.grad), rtol=1e-12)


def test_rrelu_training_draws_a_slope_per_element_and_uses_it_as_the_gradient() -> None:
    x = sm.tensor(-np.ones(2000), requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    slopes = -arr(y)
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.03
    assert abs(slopes.mean() - 0.2) < 0.01
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), slopes, rtol=1e-6)
    m = nn.RReLU(0.1, 0.3)
    m.eval()
    np.testing.assert_allclose(arr(m(sm.tensor([-1.0, 2.0]))), [-0.2, 2.0], rtol=1e-7)


def test_gumbel_softmax_is_a_distribution_and_hard_is_one_hot_straight_through() -> None:
    logits = sm.tensor(np.random.default_rng(2).standard_normal((64, 5)), requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(arr(soft.sum(-1)), np.ones(64), rtol=1e-12)
    hard = F.gumbel_softmax(logits, hard=True, dim=-1)
    h = arr(hard)
    assert set(np.unique(h)) <= {0.0, 1.0} and np.all(h.sum(-1) == 1)
    (hard * sm.arange(5.0, dtype=sm.float64)).sum().backward()
    assert logits.grad is not None and np.abs(arr(logits.grad)).sum() > 0


def test_integer_inputs_are_refused_as_torch_refuses_them() -> None:
    for fn in (F.hardswish, F.hardsigmoid, F.mish, F.selu, F.celu, F.softshrink, F.hardshrink,
               F.glu):
        with pytest.raises(DTypeError, match="not implemented for 'Long'"):
            fn(sm.tensor([1, -2, 4, 0]))
    assert F.softsign(sm.tensor([1, -3])).dtype is sm.float32      # true division
    with pytest.raises(ValueError, match="lambda must be greater or equal to 0"):
        F.softshrink(sm.ones(2), -1.0)


def test_half_inputs_are_computed_in_float32_and_rounded_once() -> None:
    a = np.array([-20.3, -3.1, -0.4, 0.2, 2.5], dtype=np.float16).astype(np.float32)
    for fn in (F.hardswish, F.mish, F.selu, F.celu):
        out = fn(sm.tensor(a).half())
        assert out.dtype is sm.float16
        np.testing.assert_array_equal(arr(out), arr(fn(sm.tensor(a)).half()))


def test_reprs_are_torchs() -> None:
    assert repr(nn.Hardswish(inplace=True)) == "Hardswish()"
    assert repr(nn.Mish(inplace=True)) == "Mish(inplace=True)"
    assert repr(nn.SELU()) == "SELU()"
    assert repr(nn.CELU(0.5, True)) == "CELU(alpha=0.5, inplace=True)"
    assert repr(nn.GLU()) == "GLU(dim=-1)"
    assert repr(nn.Softmin(1)) == "Softmin(dim=1)"
    assert repr(nn.Softshrink()) == "Softshrink(0.5)"
    assert repr(nn.Hardshrink(0.25)) == "Hardshrink(0.25)"
    assert repr(nn.RReLU(0.1, 0.3)) == "RReLU(lower=0.1, upper=0.3)"


def test_a_traced_chain_serves_two_batch_sizes_and_gets_gradients() -> None:
    model = nn.Sequential(nn.Hardswish(), nn.Mish(), nn.SELU(), nn.Softshrink(0.1), nn.GLU(),
                          nn.Hardsigmoid())
    traced = sm.jit.trace(model, (sm.randn(2, 8),))
    for batch in (3, 5):
        x = sm.randn(batch, 8, requires_grad=True)
        np.testing.assert_allclose(arr(traced(x)), arr(model(x)), rtol=1e-5, atol=1e-6)
        traced(x).sum().backward()
        grad = arr(x.grad)
        x.grad = None
        model(x).sum().backward()
        np.testing.assert_allclose(grad, arr(x.grad), rtol=1e-5, atol=1e-6)
