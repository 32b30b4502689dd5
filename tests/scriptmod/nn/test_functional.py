"""``scriptmod.nn.functional``: forward against float64 NumPy references, backward against
finite differences (and both against PyTorch when it is installed), in-place semantics,
numerically hard inputs and error messages."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.autograd.gradcheck import gradcheck
from nn_testutil import arr, assert_close_lists, leaf, run_both, torch_or_none

RNG = np.random.default_rng(1234)
# away from the kinks at 0 and at the threshold used below, for finite differences
X = np.concatenate([RNG.uniform(-4, -0.05, 12), RNG.uniform(0.05, 4, 12)]).reshape(4, 6)


def _np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + special.erf(x / math.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), _np_gelu_tanh),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "threshold": (lambda x: F.threshold(x, 0.5, -3.0), lambda x: np.where(x > 0.5, x, -3.0)),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (F.tanh, np.tanh),
    "relu6": (lambda x: F.relu6(x * 2), lambda x: np.clip(x * 2, 0, 6)),
    "softplus": (F.softplus, lambda x: np.log1p(np.exp(x))),
    "logsigmoid": (F.logsigmoid, lambda x: -np.log1p(np.exp(-x))),
    "prelu": (lambda x: F.prelu(x, sm.tensor(np.linspace(0.1, 0.6, 6), dtype=x.dtype)),
              lambda x: np.where(x > 0, x, np.linspace(0.1, 0.6, 6) * x)),
    "softmax": (lambda x: F.softmax(x, dim=1), lambda x: special.softmax(x, axis=1)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0), lambda x: special.log_softmax(x, axis=0)),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_forward_and_backward(name: str) -> None:
    fn, ref = ACTIVATIONS[name]
    x = leaf(X)
    np.testing.assert_allclose(arr(fn(x)), ref(X), rtol=1e-12, atol=1e-12)
    if name != "threshold":
        assert gradcheck(fn, (leaf(X),))


def test_prelu_gradient_reaches_the_weight() -> None:
    w = sm.tensor(np.array([0.25, 0.5, 0.75]), requires_grad=True)
    x = sm.tensor(-np.ones((2, 3, 4)), requires_grad=True)
    assert gradcheck(lambda a, b: F.prelu(a, b), (x, w))
    F.prelu(x, w).sum().backward()
    np.testing.assert_allclose(arr(w.grad), [-8.0, -8.0, -8.0])


def test_activations_in_float32_keep_dtype() -> None:
    x = sm.tensor(X.astype(np.float32))
    for name, (fn, ref) in ACTIVATIONS.items():
        y = fn(x)
        assert y.dtype is sm.float32, name
        np.testing.assert_allclose(arr(y), ref(X), rtol=2e-5, atol=2e-6, err_msg=name)


def test_numerically_hard_inputs_stay_finite() -> None:
    x = sm.tensor(np.array([-1000.0, -40.0, -1e-8, 0.0, 1e-8, 40.0, 1000.0]), requires_grad=True)
    for name in ("gelu", "gelu_tanh", "silu", "elu", "softplus", "logsigmoid"):
        xx = x.detach().requires_grad_()
        y = ACTIVATIONS[name][0](xx)
        y.sum().backward()
        assert np.all(np.isfinite(arr(y))), name
        assert np.all(np.isfinite(arr(xx.grad))), name
    # the erfc form keeps the tail's digits: gelu(-10) ~ -7.6e-23, not 0
    g = arr(F.gelu(sm.tensor([-10.0], dtype=sm.float64)))[0]
    assert g == pytest.approx(0.5 * -10 * special.erfc(10 / math.sqrt(2)), rel=1e-12)


def test_softplus_gradient_at_zero_is_one_half() -> None:
    x = sm.tensor([0.0], requires_grad=True)
    F.softplus(x).backward(sm.ones(1))
    assert arr(x.grad)[0] == pytest.approx(0.5)


# ---- in place -----------------------------------------------------------------------------
INPLACE = {
    "relu": lambda x: F.relu(x, inplace=True),
    "relu6": lambda x: F.relu6(x, inplace=True),
    "threshold": lambda x: F.threshold(x, 0.5, -3.0, inplace=True),
    "silu": lambda x: F.silu(x, inplace=True),
    "elu": lambda x: F.elu(x, inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1, inplace=True),
    "dropout_eval": lambda x: F.dropout(x, 0.5, training=False, inplace=True),
}
OUT_OF_PLACE = {
    "relu": F.relu, "relu6": F.relu6, "threshold": lambda x: F.threshold(x, 0.5, -3.0),
    "silu": F.silu, "elu": F.elu, "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "dropout_eval": lambda x: F.dropout(x, 0.5, training=False),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_writes_into_the_input_and_returns_it(name: str) -> None:
    x = sm.tensor(X.copy())
    before = x.data_ptr()
    out = INPLACE[name](x)
    assert out is x and x.data_ptr() == before
    np.testing.assert_allclose(arr(x), arr(OUT_OF_PLACE[name](sm.tensor(X))))


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_a_non_leaf_has_the_out_of_place_gradient(name: str) -> None:
    a = leaf(X)
    INPLACE[name](a * 1.0).sum().backward()
    b = leaf(X)
    OUT_OF_PLACE[name](b * 1.0).sum().backward()
    np.testing.assert_allclose(arr(a.grad), arr(b.grad), atol=1e-12)


def test_inplace_on_a_leaf_that_requires_grad_is_refused() -> None:
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.relu(leaf(X), inplace=True)


# ---- linear, conv, pooling -----------------------------------------------------------------
def _np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int, d: int,
               g: int) -> np.ndarray:
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    out = np.zeros((n, o, oh, ow))
    for oc in range(o):
        gi = oc // (o // g)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * s:i * s + d * (kh - 1) + 1:d,
                           j * s:j * s + d * (kw - 1) + 1:d]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3)) + b[oc]
    return out


@pytest.mark.parametrize("s,p,d,g", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), (2, 1, 1, 4)])
def test_conv2d_matches_a_direct_loop_and_finite_differences(s: int, p: int, d: int, g: int) -> None:
    x, w, b = RNG.standard_normal((2, 4, 6, 7)), RNG.standard_normal((4, 4 // g, 3, 2)), RNG.standard_normal(4)
    y = F.conv2d(leaf(x), leaf(w), leaf(b), stride=s, padding=p, dilation=d, groups=g)
    np.testing.assert_allclose(arr(y), _np_conv2d(x, w, b, s, p, d, g), atol=1e-12)
    small = (RNG.standard_normal((1, 4, 4, 4)), RNG.standard_normal((4, 4 // g, 2, 2)), b)
    assert gradcheck(lambda *t: F.conv2d(*t, stride=s, padding=p, dilation=d, groups=g),
                     tuple(leaf(a) for a in small))


def test_conv2d_same_and_valid_padding_and_unbatched_input() -> None:
    x, w = RNG.standard_normal((3, 5, 6)), RNG.standard_normal((2, 3, 4, 3))
    same = F.conv2d(sm.tensor(x), sm.tensor(w), padding="same")
    assert tuple(same.shape) == (2, 5, 6)
    # even kernel: the extra row of padding goes to the bottom, as in PyTorch
    xp = np.pad(x[None], ((0, 0), (0, 0), (1, 2), (1, 1)))
    np.testing.assert_allclose(arr(same), _np_conv2d(xp, w, np.zeros(2), 1, 0, 1, 1)[0], atol=1e-12)
    valid = F.conv2d(sm.tensor(x), sm.tensor(w), padding="valid")
    assert tuple(valid.shape) == (2, 2, 4)


def _np_pool(x: np.ndarray, k: int, s: int, op: str) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = win.max(axis=(2, 3)) if op == "max" else win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("op", ["max", "avg"])
def test_pooling_matches_numpy_and_finite_differences(op: str) -> None:
    x = RNG.standard_normal((2, 3, 7, 6))
    fn = F.max_pool2d if op == "max" else F.avg_pool2d
    np.testing.assert_allclose(arr(fn(leaf(x), 3, 2)), _np_pool(x, 3, 2, op), atol=1e-12)
    assert gradcheck(lambda t: fn(t, 2, 1, 1), (leaf(RNG.standard_normal((1, 2, 4, 4))),))


def test_linear_matches_numpy_and_finite_differences() -> None:
    x, w, b = RNG.standard_normal((2, 3, 5)), RNG.standard_normal((4, 5)), RNG.standard_normal(4)
    np.testing.assert_allclose(arr(F.linear(leaf(x), leaf(w), leaf(b))), x @ w.T + b, atol=1e-12)
    assert gradcheck(F.linear, (leaf(x), leaf(w), leaf(b)))


# ---- normalization, dropout, embedding, padding -------------------------------------------
def test_layer_norm_matches_numpy_and_finite_differences() -> None:
    x, w, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    mu = x.mean(axis=(1, 2), keepdims=True)
    ref = (x - mu) / np.sqrt(x.var(axis=(1, 2), keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(arr(F.layer_norm(leaf(x), (4, 5), leaf(w), leaf(b))), ref, atol=1e-12)
    assert gradcheck(lambda *t: F.layer_norm(t[0], (4, 5), t[1], t[2]), (leaf(x), leaf(w), leaf(b)))


def test_batch_norm_training_updates_running_stats() -> None:
    x = RNG.standard_normal((6, 3, 2))
    rm, rv = sm.zeros(3, dtype=sm.float64), sm.ones(3, dtype=sm.float64)
    y = F.batch_norm(sm.tensor(x), rm, rv, training=True, momentum=0.5)
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(arr(y), (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5), atol=1e-12)
    np.testing.assert_allclose(arr(rm), 0.5 * mean)
    np.testing.assert_allclose(arr(rv), 0.5 + 0.5 * x.var(axis=(0, 2), ddof=1))
    assert gradcheck(lambda t: F.batch_norm(t, None, None, training=True), (leaf(x),))


def test_dropout_scales_kept_values_and_replays_its_mask_in_backward() -> None:
    sm.manual_seed(0)
    x = sm.ones(400, 50, dtype=sm.float64, requires_grad=True)
    y = F.dropout(x, 0.3, training=True)
    kept = arr(y) != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(arr(y)[kept], 1 / 0.7)
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), arr(y))
    assert F.dropout(x, 0.3, training=False) is not None
    np.testing.assert_array_equal(arr(F.dropout(x, 0.3, training=False)), 1.0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_embedding_rows_padding_idx_and_max_norm() -> None:
    w = leaf(RNG.standard_normal((5, 3)))
    idx = sm.tensor([[0, 2], [2, 4]])
    out = F.embedding(idx, w, padding_idx=2)
    np.testing.assert_allclose(arr(out), arr(w)[[[0, 2], [2, 4]]])
    out.sum().backward()
    np.testing.assert_allclose(arr(w.grad), [[1] * 3, [0] * 3, [0] * 3, [0] * 3, [1] * 3])
    table = sm.tensor(np.full((4, 2), 3.0))
    F.embedding(sm.tensor([1]), table, max_norm=1.0)
    assert np.linalg.norm(arr(table)[1]) == pytest.approx(1.0, rel=1e-5)
    assert np.linalg.norm(arr(table)[0]) == pytest.approx(math.sqrt(18))


@pytest.mark.parametrize("mode,np_mode", [("constant", "constant"), ("reflect", "reflect"),
                                          ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes_match_numpy(mode: str, np_mode: str) -> None:
    x = RNG.standard_normal((2, 3, 4, 5))
    y = F.pad(leaf(x), (2, 1, 0, 3), mode=mode)
    np.testing.assert_allclose(arr(y), np.pad(x, ((0, 0), (0, 0), (0, 3), (2, 1)), mode=np_mode))
    assert gradcheck(lambda t: F.pad(t, (1, 2), mode=mode), (leaf(RNG.standard_normal((2, 4))),))


def test_pad_constant_value_and_negative_padding_crops() -> None:
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(arr(F.pad(sm.tensor(x), (1, 0), value=-1.0))[:, 0], -1.0)
    np.testing.assert_allclose(arr(F.pad(sm.tensor(x), (-1, -1, 1, -1))),
                               np.pad(x[:2, 1:3], ((1, 0), (0, 0))))


def test_normalize_has_unit_norm_and_finite_gradient_at_zero() -> None:
    x = leaf(np.vstack([RNG.standard_normal((2, 4)), np.zeros((1, 4))]))
    y = F.normalize(x, dim=1)
    np.testing.assert_allclose(np.linalg.norm(arr(y)[:2], axis=1), 1.0)
    y.sum().backward()
    assert np.all(np.isfinite(arr(x.grad)))


def test_scaled_dot_product_attention_matches_numpy() -> None:
    q, k, v = (RNG.standard_normal((2, 3, n, 4)) for n in (5, 6, 6))
    mask = RNG.random((5, 6)) > 0.3
    mask[:, 0] = True
    scores = q @ k.swapaxes(-1, -2) / 2.0 + np.where(mask, 0, -np.inf)
    ref = special.softmax(scores, axis=-1) @ v
    y = F.scaled_dot_product_attention(leaf(q), leaf(k), leaf(v), attn_mask=sm.tensor(mask))
    np.testing.assert_allclose(arr(y), ref, atol=1e-12)
    causal = F.scaled_dot_product_attention(leaf(q), leaf(k[..., :5, :]), leaf(v[..., :5, :]),
                                            is_causal=True)
    s = q @ k[..., :5, :].swapaxes(-1, -2) / 2.0 + np.triu(np.full((5, 5), -np.inf), 1)
    np.testing.assert_allclose(arr(causal), special.softmax(s, axis=-1) @ v[..., :5, :], atol=1e-12)


# ---- errors ---------------------------------------------------------------------------------
def test_shape_errors_name_the_function_and_the_shapes() -> None:
    with pytest.raises(ValueError, match=r"linear: expected input with last dimension 5.*\(2, 4\)"):
        F.linear(sm.zeros(2, 4), sm.zeros(3, 5))
    with pytest.raises(ValueError, match=r"conv2d: expected 3-D .* or 4-D .*got shape \(2, 3\)"):
        F.conv2d(sm.zeros(2, 3), sm.zeros(1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"layer_norm: .*normalized_shape=\[4\]"):
        F.layer_norm(sm.zeros(2, 3), (4,))
    with pytest.raises(ValueError, match="gelu: approximate"):
        F.gelu(sm.zeros(2), approximate="fast")
    with pytest.raises(ValueError, match="pad should be at most half"):
        F.max_pool2d(sm.zeros(1, 1, 4, 4), 2, padding=2)
    with pytest.raises(RuntimeError, match="Found parameter numbers = 4 and channel size = 3"):
        F.prelu(sm.zeros(2, 3), sm.zeros(4))


# ---- the PyTorch oracle ----------------------------------------------------------------------
def _torch_cases(torch):  # noqa: ANN001, ANN202
    TF = torch.nn.functional
    x4 = RNG.standard_normal((2, 3, 7, 6))
    return {
        "gelu": (F.gelu, TF.gelu, [X]),
        "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), lambda a: TF.gelu(a, approximate="tanh"), [X]),
        "elu": (F.elu, TF.elu, [X]),
        "hardtanh_edges": (lambda a: F.relu6(a * 0 + 6), lambda a: TF.relu6(a * 0 + 6), [X]),
        "prelu": (F.prelu, TF.prelu, [x4, np.array([0.1, 0.2, 0.3])]),
        "conv_same": (lambda a, w: F.conv2d(a, w, padding="same", dilation=(1, 2)),
                      lambda a, w: TF.conv2d(a, w, padding="same", dilation=(1, 2)),
                      [x4, RNG.standard_normal((4, 3, 4, 3))]),
        "max_pool_ceil": (lambda a: F.max_pool2d(a, 3, 2, 1, ceil_mode=True),
                          lambda a: TF.max_pool2d(a, 3, 2, 1, ceil_mode=True), [x4]),
        "avg_pool_ceil": (lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                          lambda a: TF.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), [x4]),
        "layer_norm": (lambda a: F.layer_norm(a, (7, 6)), lambda a: TF.layer_norm(a, (7, 6)), [x4]),
        "pad_reflect": (lambda a: F.pad(a, (2, 1, 1, 2), mode="reflect"),
                        lambda a: TF.pad(a, (2, 1, 1, 2), mode="reflect"), [x4]),
        "normalize": (lambda a: F.normalize(a, p=3, dim=0), lambda a: TF.normalize(a, p=3, dim=0), [X]),
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                 lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                 [RNG.standard_normal((2, 4, 3)) for _ in range(3)]),
    }


@pytest.mark.filterwarnings("ignore:Using padding=.same.")
def test_against_torch() -> None:
    torch = pytest.importorskip("torch")
    for name, (ours, theirs, arrays) in _torch_cases(torch).items():
        a, b = run_both(ours, theirs, arrays)
        try:
            assert_close_lists(a, b, atol=1e-10, rtol=1e-8)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_torch_oracle_helper_is_optional() -> None:
    assert torch_or_none() is None or hasattr(torch_or_none(), "nn")
