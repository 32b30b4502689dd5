"""The dropout variants of issue 38 (Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout):
random, so their statistics, the channel structure of the mask, eval identity, the rank rules
and errors of PyTorch, gradients, and train/eval after tracing."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn as nn
import scriptmod.nn.functional as F

from nn_testutil import arr

CHANNELWISE = [(F.dropout1d, (40, 50, 3)), (F.dropout2d, (40, 50, 2, 2)),
               (F.dropout3d, (40, 50, 2, 1, 2))]


@pytest.mark.parametrize("fn, shape", CHANNELWISE)
def test_channelwise_dropout_zeroes_whole_channels_with_probability_p(fn, shape) -> None:
    y = arr(fn(sm.ones(*shape), 0.3, True))
    planes = y.reshape(shape[0], shape[1], -1)
    assert np.all(planes == planes[..., :1])                  # one draw per (sample, channel)
    assert set(np.unique(planes)) <= {0.0, float(np.float32(1 / 0.7))}
    assert abs((planes[..., 0] == 0).mean() - 0.3) < 0.04    # 2000 draws: 5 sigma is 0.05


@pytest.mark.parametrize("fn, shape", CHANNELWISE)
def test_eval_is_the_identity_and_gradients_follow_the_mask(fn, shape) -> None:
    x = sm.randn(*shape)
    assert fn(x, 0.5, False) is x
    leaf = sm.randn(*shape, requires_grad=True)
    y = fn(leaf, 0.5, True)
    y.sum().backward()
    kept = arr(y) != 0
    np.testing.assert_allclose(arr(leaf.grad), np.where(kept, 2.0, 0.0))


def test_unbatched_inputs_and_the_rank_rules() -> None:
    y = arr(F.dropout1d(sm.ones(30, 4), 0.5, True))           # (C, L): channels are rows
    assert np.all(y == y[:, :1])
    y = arr(F.dropout3d(sm.ones(30, 2, 2, 2), 0.5, True))     # (C, D, H, W)
    assert np.all(y.reshape(30, -1) == y.reshape(30, -1)[:, :1])
    with pytest.raises(Exception, match="Expected 2D or 3D input"):
        F.dropout1d(sm.ones(2, 3, 4, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        F.dropout2d(sm.ones(2, 3, 4), 0.5, True)              # taken as (N, C, L)
        F.dropout2d(sm.ones(2, 3), 0.5, True)
    messages = " ".join(str(w.message) for w in caught)
    assert "assuming that channel-wise 1D dropout" in messages and "deprecated" in messages
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout2d(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.alpha_dropout(sm.ones(3), -0.1, True)


def test_p_one_zeroes_everything_and_inplace_writes_back() -> None:
    assert not arr(F.dropout2d(sm.ones(2, 3, 2, 2), 1.0, True)).any()
    x = sm.ones(4, 6, 5)
    assert F.dropout1d(x, 0.5, True, inplace=True) is x
    assert set(np.unique(arr(x))) <= {0.0, 2.0}


@pytest.mark.parametrize("fn, shape", [(F.alpha_dropout, (400, 250)),
                                       (F.feature_alpha_dropout, (400, 250, 2))])
def test_alpha_dropout_keeps_zero_mean_and_unit_variance(fn, shape) -> None:
    x = sm.randn(*shape)
    y = arr(fn(x, 0.2, True))
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1.0) < 0.02
    assert fn(x, 0.2, False) is x and fn(x, 0.0, True) is x
    alpha, p = 1.7580993408473766, 0.2
    a = 1 / np.sqrt((alpha ** 2 * p + 1) * (1 - p))
    dropped = y[np.isclose(y, -alpha * a * (1 - p))]
    assert abs(dropped.size / y.size - 0.2) < 0.02             # dropped units sit at one value
    if fn is F.feature_alpha_dropout:
        assert np.all((y[..., 0] == -alpha * a * (1 - p)) == (y[..., 1] == -alpha * a * (1 - p)))


def test_modules_reprs_and_train_eval_after_tracing() -> None:
    assert repr(nn.Dropout1d()) == "Dropout1d(p=0.5, inplace=False)"
    assert repr(nn.FeatureAlphaDropout(0.2)) == "FeatureAlphaDropout(p=0.2, inplace=False)"
    m = nn.Dropout2d(0.5)
    traced = sm.jit.trace(m, (sm.ones(2, 8, 2, 2),), check_trace=False)
    assert not np.all(arr(traced(sm.ones(16, 8, 2, 2))) == 1)
    traced.eval()
    np.testing.assert_array_equal(arr(traced(sm.ones(3, 8, 2, 2))), np.ones((3, 8, 2, 2)))
    m = nn.AlphaDropout(0.5)
    m.eval()
    x = sm.randn(4, 3)
    np.testing.assert_array_equal(arr(m(x)), arr(x))


def test_onnx_export_in_eval_runs_the_norm_and_dropout_layers() -> None:
    ort = pytest.importorskip("onnxruntime")
    model = nn.Sequential(nn.GroupNorm(2, 4), nn.Dropout1d(), nn.InstanceNorm1d(4),
                          nn.LocalResponseNorm(3), nn.RMSNorm(3), nn.Mish(), nn.GLU(1))
    model.eval()
    x = sm.randn(2, 4, 3)
    buf = io.BytesIO()
    sm.onnx.export(model, buf, (x,), input_names=["x"])
    got = ort.InferenceSession(buf.getvalue()).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, arr(model(x)), rtol=1e-5, atol=1e-6)
    model.train()
    with pytest.raises(Exception, match="call model.eval"):
        sm.onnx.export(model, io.BytesIO(), (x,))
