"""``F.normalize`` for every p (negative, fractional, 0, inf): x / max(||x||_p, eps), against a
float64 NumPy reference and against torch (values and gradients, a zero row included; issue
38's p=-1 result was off by 10^11)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import assert_close_lists, run_both

_PS = [-1.0, -2.5, 0.5, 1.0, 2.0, 3.0, math.inf, -math.inf, 0.0]


def _reference(x: np.ndarray, p: float, dim: int, eps: float = 1e-12) -> np.ndarray:
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        norm = (np.max(a, dim, keepdims=True) if p == math.inf else
                np.min(a, dim, keepdims=True) if p == -math.inf else
                np.sum(a != 0, dim, keepdims=True).astype(x.dtype) if p == 0 else
                np.sum(a ** p, dim, keepdims=True) ** (1 / p))
    return x / np.maximum(norm, eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", _PS)
def test_matches_numpy(p: float, dtype: type) -> None:
    x = np.random.default_rng(0).standard_normal((3, 5, 2)).astype(dtype)
    ours = F.normalize(sm.tensor(x), p=p, dim=1).numpy()
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours, _reference(x.astype(np.float64), p, 1),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("p", _PS)
def test_values_and_gradients_against_torch(p: float) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((3, 4))
    x[1] = 0.0                               # a zero row: the eps clamp, no NaN gradient
    x[2, 1] = 0.0
    ours, theirs = run_both(lambda t: F.normalize(t, p=p),
                            lambda t: torch.nn.functional.normalize(t, p=p), [x])
    assert_close_lists(ours, theirs, atol=1e-9, rtol=1e-7)


def test_traced_at_another_batch_size() -> None:
    traced = sm.jit.trace(lambda t: F.normalize(t, p=-1.0, dim=-1), sm.randn(2, 4))
    x = sm.randn(5, 4)
    np.testing.assert_allclose(traced(x).numpy(), F.normalize(x, p=-1.0, dim=-1).numpy(),
                               rtol=1e-6)
