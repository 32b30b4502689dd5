"""``Bilinear``/``F.bilinear``: y = x1^T A x2 + b against a float64 einsum (float32 and
float64), against torch where it is installed (values, input and parameter gradients, repr,
errors), traced at one batch size then run at another, and scripted."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import (arr, assert_close_lists, copy_state_to_torch,
                                            param_grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_einsum(dtype: type) -> None:
    rng = np.random.default_rng(0)
    x1, x2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 5))
    w, b = rng.standard_normal((6, 4, 5)), rng.standard_normal(6)
    got = F.bilinear(*(sm.tensor(a.astype(dtype)) for a in (x1, x2, w, b))).numpy()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, np.einsum("...i,oij,...j->...o", x1, w, x2) + b,
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lead", [(3,), (), (2, 2)], ids=["batched", "unbatched", "2-lead"])
def test_module_against_torch(bias: bool, lead: tuple) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = nn.Bilinear(4, 5, 3, bias=bias).double(), \
        torch.nn.Bilinear(4, 5, 3, bias=bias).double()
    assert repr(ours) == repr(theirs)
    copy_state_to_torch(ours, theirs)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(lead + (4,)), rng.standard_normal(lead + (5,))
    xa, xb = sm.tensor(a, requires_grad=True), sm.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y, ty = ours(xa, xb), theirs(ta, tb)
    g = rng.standard_normal(tuple(ty.shape))
    y.backward(sm.tensor(g))
    ty.backward(torch.tensor(g))
    assert_close_lists([arr(y), arr(xa.grad), arr(xb.grad)],
                       [arr(ty), arr(ta.grad), arr(tb.grad)], atol=1e-10)
    theirs_grads = {n: arr(p.grad) for n, p in theirs.named_parameters()}
    for name, grad in param_grads(ours).items():
        np.testing.assert_allclose(grad, theirs_grads[name], atol=1e-10)


def test_init_bounds_and_errors() -> None:
    m = nn.Bilinear(16, 3, 2)
    assert np.abs(m.weight.detach().numpy()).max() <= 0.25     # 1 / sqrt(in1_features)
    with pytest.raises(RuntimeError, match="input2 size does not match weight size"):
        m(sm.randn(2, 16), sm.randn(2, 4))
    with pytest.raises(RuntimeError, match="batch dimensions do not match"):
        m(sm.randn(2, 16), sm.randn(3, 3))
    with pytest.raises(RuntimeError, match="input dimensions do not match"):
        m(sm.randn(2, 1, 16), sm.randn(2, 3))
    with pytest.raises(ValueError, match="in1_features must be > 0"):
        nn.Bilinear(0, 3, 2)


def test_traced_at_another_batch_size_and_scripted() -> None:
    m = nn.Bilinear(4, 5, 3)
    traced = sm.jit.trace(m, (sm.randn(2, 4), sm.randn(2, 5)))
    a, b = sm.randn(7, 4), sm.randn(7, 5)
    np.testing.assert_allclose(traced(a, b).detach().numpy(), m(a, b).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    traced(a, b).sum().backward()
    assert m.weight.grad is not None and tuple(m.weight.grad.shape) == (3, 4, 5)
    np.testing.assert_allclose(sm.jit.script(m)(a, b).detach().numpy(),
                               m(a, b).detach().numpy(), rtol=1e-5, atol=1e-6)
