"""The fast paths behind W5: stacked-by-matrix matmul, row softmax/log_softmax, trailing-dim
mean (against float64 references, NaN/inf rows included), and MultiheadAttention's dropout
following train/eval after tracing."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.runtime.kernels import run_kernel
from scriptmod.runtime.kernels.nn import matmul_rows
from scriptmod import nn

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("shape,perm", [((4, 6, 8), (1, 0, 2)), ((2, 3, 4, 8), (2, 0, 1, 3)),
                                        ((2, 3, 4, 8), (0, 1, 2, 3)), ((0, 3, 8), (1, 0, 2)),
                                        ((3, 5, 8), (0, 1, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_rows_matches_numpy_and_is_contiguous(shape: tuple, perm: tuple,
                                                     dtype: type) -> None:
    a = RNG.standard_normal(shape).astype(dtype).transpose(perm)
    b = RNG.standard_normal((8, 5)).astype(dtype).T.copy().T      # a transposed view
    got = matmul_rows(a, b)
    assert got.flags.c_contiguous and got.dtype == dtype
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-5)
    strided = RNG.standard_normal((4, 12, 8)).astype(dtype)[:, ::2]
    np.testing.assert_allclose(matmul_rows(strided, b), strided @ b, rtol=1e-6, atol=1e-6)


def _ref(op: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        s = x - x.max(-1, keepdims=True)
        lse = np.log(np.exp(s).sum(-1, keepdims=True))
        return np.exp(s - lse) if op == "softmax" else s - lse


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("scale", [1.0, 30.0, 100.0])
def test_row_softmax_matches_float64(op: str, scale: float) -> None:
    x = (RNG.standard_normal((4, 3, 64, 128)) * scale).astype(np.float32)
    got = run_kernel(op, [x], {"dim": -1})
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, _ref(op, x), rtol=2e-5, atol=2e-5 * max(1.0, scale / 10))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_row_softmax_special_values(op: str) -> None:
    x = np.array([[np.nan, 1, 2], [-np.inf] * 3, [np.inf, 1, 2], [0, 0, 0], [-80, -81, -79],
                  [70, 71, 69]], np.float32)
    got, want = run_kernel(op, [x], {"dim": -1}), _ref(op, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim,keepdim", [([-1], True), ([-1], False), ([1, 2], False),
                                         ([-1, -2], True), (None, False), ([0], True)])
def test_mean_trailing_dims(dim: list | None, keepdim: bool) -> None:
    x = RNG.standard_normal((3, 8, 16)).astype(np.float32)
    got = run_kernel("mean", [x], {"dim": dim, "keepdim": keepdim})
    want = np.mean(x.astype(np.float64), axis=None if dim is None else tuple(dim),
                   keepdims=keepdim)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_attention_dropout_follows_train_eval_after_tracing() -> None:
    sm.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    block = Block().eval()
    x = sm.randn(3, 5, 8)
    traced = sm.jit.trace(block, x, check_trace=False)
    with sm.no_grad():
        evals = traced(x).numpy()
        np.testing.assert_allclose(evals, block(x).numpy(), rtol=1e-5, atol=1e-6)
        traced.train()
        assert not np.allclose(traced(x).numpy(), evals)
        traced.eval()
        np.testing.assert_allclose(traced(x).numpy(), evals, rtol=1e-6, atol=1e-7)
