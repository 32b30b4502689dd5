"""Layers: forward against float64 NumPy references, backward against finite differences,
default initialization, running statistics, in-place flags, error messages; and, when
PyTorch is installed, identical state-dict keys, reprs, outputs and gradients."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest
from scipy import special

import scriptmod as sm
from scriptmod import nn
from scriptmod.autograd.gradcheck import gradcheck
from nn_testutil import arr, copy_state_to_torch, leaf, param_grads, torch_or_none
from scriptmod.nn import functional as F

RNG = np.random.default_rng(5)


def _w(m: nn.Module, name: str) -> np.ndarray:
    return arr(m.state_dict()[name])


# name -> (make(nn), input array, NumPy reference(module, x))
CASES: dict[str, tuple[Callable[[Any], Any], np.ndarray, Callable[[Any, np.ndarray], np.ndarray]]] = {
    "Linear": (lambda n: n.Linear(5, 3), RNG.standard_normal((2, 4, 5)),
               lambda m, x: x @ _w(m, "weight").T + _w(m, "bias")),
    "Linear_nobias": (lambda n: n.Linear(5, 3, bias=False), RNG.standard_normal((2, 5)),
                      lambda m, x: x @ _w(m, "weight").T),
    "Conv2d": (lambda n: n.Conv2d(2, 4, 3, stride=2, padding=1), RNG.standard_normal((2, 2, 5, 6)), None),
    "Conv2d_reflect": (lambda n: n.Conv2d(2, 2, (3, 2), padding="same", padding_mode="reflect",
                                          groups=2, bias=False),
                       RNG.standard_normal((1, 2, 5, 4)), None),
    "MaxPool2d": (lambda n: n.MaxPool2d(2), RNG.standard_normal((1, 2, 4, 6)),
                  lambda m, x: x.reshape(1, 2, 2, 2, 3, 2).max(axis=(3, 5))),
    "AvgPool2d": (lambda n: n.AvgPool2d(2), RNG.standard_normal((2, 4, 6)),
                  lambda m, x: x.reshape(2, 2, 2, 3, 2).mean(axis=(2, 4))),
    "Flatten": (lambda n: n.Flatten(), RNG.standard_normal((2, 3, 4)),
                lambda m, x: x.reshape(2, 12)),
    "Unflatten": (lambda n: n.Unflatten(1, (2, 3)), RNG.standard_normal((4, 6)),
                  lambda m, x: x.reshape(4, 2, 3)),
    "LayerNorm": (lambda n: n.LayerNorm(6), RNG.standard_normal((3, 6)),
                  lambda m, x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
    "BatchNorm1d": (lambda n: n.BatchNorm1d(3), RNG.standard_normal((5, 3)),
                    lambda m, x: (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)),
    "BatchNorm2d": (lambda n: n.BatchNorm2d(2, affine=False), RNG.standard_normal((3, 2, 2, 2)),
                    lambda m, x: (x - x.mean((0, 2, 3), keepdims=True))
                    / np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5)),
    "PReLU": (lambda n: n.PReLU(3, init=0.1), RNG.standard_normal((2, 3, 2)),
              lambda m, x: np.where(x > 0, x, _w(m, "weight")[:, None] * x)),
    "GELU": (lambda n: n.GELU(), RNG.standard_normal((3, 4)),
             lambda m, x: 0.5 * x * (1 + special.erf(x / math.sqrt(2)))),
    "GELU_tanh": (lambda n: n.GELU("tanh"), RNG.standard_normal((3, 4)),
                  lambda m, x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "ReLU": (lambda n: n.ReLU(), RNG.standard_normal((3, 4)), lambda m, x: np.maximum(x, 0)),
    "ReLU6": (lambda n: n.ReLU6(), RNG.standard_normal((3, 4)) * 5, lambda m, x: np.clip(x, 0, 6)),
    "Sigmoid": (lambda n: n.Sigmoid(), RNG.standard_normal((3, 4)), lambda m, x: special.expit(x)),
    "Tanh": (lambda n: n.Tanh(), RNG.standard_normal((3, 4)), lambda m, x: np.tanh(x)),
    "Threshold": (lambda n: n.Threshold(0.1, 20.0), RNG.standard_normal((3, 4)),
                  lambda m, x: np.where(x > 0.1, x, 20.0)),
    "LeakyReLU": (lambda n: n.LeakyReLU(0.2), RNG.standard_normal((3, 4)),
                  lambda m, x: np.where(x > 0, x, 0.2 * x)),
    "SiLU": (lambda n: n.SiLU(), RNG.standard_normal((3, 4)), lambda m, x: x * special.expit(x)),
    "ELU": (lambda n: n.ELU(0.5), RNG.standard_normal((3, 4)),
            lambda m, x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "Softplus": (lambda n: n.Softplus(), RNG.standard_normal((3, 4)), lambda m, x: np.logaddexp(0, x)),
    "Softmax": (lambda n: n.Softmax(dim=-1), RNG.standard_normal((3, 4)),
                lambda m, x: special.softmax(x, axis=-1)),
    "LogSoftmax": (lambda n: n.LogSoftmax(dim=0), RNG.standard_normal((3, 4)),
                   lambda m, x: special.log_softmax(x, axis=0)),
    "Identity": (lambda n: n.Identity(3, k=1), RNG.standard_normal((3, 4)), lambda m, x: x),
    "Dropout_eval": (lambda n: n.Dropout(0.3).eval(), RNG.standard_normal((3, 4)), lambda m, x: x),
}


def _np_conv(m: nn.Module, x: np.ndarray) -> np.ndarray:
    """Direct correlation over the padded input (the reference for both Conv2d cases)."""
    w = _w(m, "weight")
    b = _w(m, "bias") if m.bias is not None else np.zeros(w.shape[0])
    left, right, top, bottom = m._reversed_padding_repeated_twice
    mode = {"zeros": "constant", "reflect": "reflect"}[m.padding_mode]
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), mode=mode)
    s, g, (kh, kw) = m.stride, m.groups, m.kernel_size
    oh, ow = (xp.shape[2] - kh) // s[0] + 1, (xp.shape[3] - kw) // s[1] + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    cg, og = w.shape[1], w.shape[0] // g
    for o in range(w.shape[0]):
        gi = o // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * s[0]:i * s[0] + kh, j * s[1]:j * s[1] + kw]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + b[o]
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_numpy_and_backward_matches_finite_differences(name: str) -> None:
    make, x, ref = CASES[name]
    sm.manual_seed(0)
    m = make(nn).double()
    y = m(leaf(x))
    expected = (ref or _np_conv)(m, x)
    np.testing.assert_allclose(arr(y), expected, atol=1e-10, rtol=1e-10)
    if name not in ("Threshold", "MaxPool2d"):     # kinks; covered against torch below
        assert gradcheck(lambda t: m(t), (leaf(x),))
    params = tuple(m.parameters())
    if params:
        assert gradcheck(lambda *ps: _call_with(m, ps, x), params)


def _call_with(m: nn.Module, ps: tuple, x: np.ndarray) -> sm.Tensor:
    """Run ``m`` with the parameters ``ps`` (what gradcheck perturbs) in place of its own."""
    names = [n for n, _ in m.named_parameters()]
    old = {n: p for n, p in m.named_parameters()}
    for n, p in zip(names, ps):
        m.get_submodule(n.rpartition(".")[0]).__dict__["_parameters"][n.rpartition(".")[2]] = p
    try:
        return m(sm.tensor(x))
    finally:
        for n, p in old.items():
            m.get_submodule(n.rpartition(".")[0]).__dict__["_parameters"][n.rpartition(".")[2]] = p


# ---- default initialization -------------------------------------------------------------
def test_default_initialization_follows_pytorch() -> None:
    sm.manual_seed(1)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)      # kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(fan_in), ...)
    w, b = arr(lin.weight), arr(lin.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(b).max() <= bound
    conv = nn.Conv2d(8, 16, 3)
    assert np.abs(arr(conv.weight)).max() <= 1 / math.sqrt(72)
    emb = nn.Embedding(300, 200, padding_idx=-1)
    e = arr(emb.weight)
    assert emb.padding_idx == 299 and not np.any(e[299])
    assert abs(e[:299].std() - 1) < 0.02
    bn = nn.BatchNorm2d(4)
    assert np.all(arr(bn.weight) == 1) and np.all(arr(bn.bias) == 0)
    assert np.all(arr(bn.running_var) == 1) and bn.num_batches_tracked.item() == 0
    assert bn.num_batches_tracked.dtype is sm.int64
    assert np.all(arr(nn.PReLU(3).weight) == 0.25)


def test_dtype_and_device_arguments() -> None:
    assert nn.Linear(2, 3, dtype=sm.float64).weight.dtype is sm.float64
    assert nn.Conv2d(1, 2, 1, device="cpu").weight.device.type == "cpu"
    assert nn.LayerNorm(4, dtype=sm.float64).bias.dtype is sm.float64


# ---- stateful and flag behaviour ----------------------------------------------------------
def test_batchnorm_running_stats_momentum_and_eval() -> None:
    bn = nn.BatchNorm1d(3, momentum=None).double()
    xs = [RNG.standard_normal((6, 3, 4)) for _ in range(3)]
    for x in xs:
        bn(sm.tensor(x))
    assert bn.num_batches_tracked.item() == 3
    # momentum=None: a cumulative average of the batch statistics
    np.testing.assert_allclose(arr(bn.running_mean), np.mean([x.mean((0, 2)) for x in xs], 0))
    np.testing.assert_allclose(arr(bn.running_var), np.mean([x.var((0, 2), ddof=1) for x in xs], 0))
    bn.eval()
    x = RNG.standard_normal((2, 3, 4))
    expected = (x - arr(bn.running_mean)[:, None]) / np.sqrt(arr(bn.running_var)[:, None] + 1e-5)
    np.testing.assert_allclose(arr(bn(sm.tensor(x))), expected, atol=1e-12)
    assert bn.num_batches_tracked.item() == 3
    plain = nn.BatchNorm2d(2, track_running_stats=False)
    assert list(plain.state_dict()) == ["weight", "bias"]
    assert plain.eval()(sm.randn(3, 2, 2, 2)).shape == (3, 2, 2, 2)


def test_dropout_module_honours_train_and_eval() -> None:
    d = nn.Dropout(0.5)
    x = sm.ones(200, 100)
    assert 0.4 < float((d(x) == 0).float().mean()) < 0.6
    d.eval()
    assert np.all(arr(d(x)) == 1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(-0.1)


@pytest.mark.parametrize("make", [lambda: nn.ReLU(inplace=True), lambda: nn.Threshold(0., -1., True),
                                  lambda: nn.LeakyReLU(inplace=True), lambda: nn.SiLU(inplace=True),
                                  lambda: nn.ELU(inplace=True), lambda: nn.ReLU6(inplace=True),
                                  lambda: nn.Dropout(0.5, inplace=True)])
def test_inplace_layers_return_their_input(make: Callable[[], nn.Module]) -> None:
    x = sm.tensor(RNG.standard_normal((3, 4)).astype(np.float32))
    ptr = x.data_ptr()
    y = make()(x)
    assert y is x and x.data_ptr() == ptr


def test_lazy_linear_materializes_on_first_call() -> None:
    m = nn.LazyLinear(4)
    assert m.in_features == 0 and repr(m) == "LazyLinear(in_features=0, out_features=4, bias=True)"
    y = m(sm.randn(2, 7))
    assert tuple(y.shape) == (2, 4) and type(m) is nn.Linear and m.in_features == 7
    assert tuple(m.weight.shape) == (4, 7) and isinstance(m.weight, nn.Parameter)
    assert np.abs(arr(m.weight)).max() <= 1 / math.sqrt(7)
    assert list(m.state_dict()) == ["weight", "bias"]


def test_embedding_from_pretrained_and_padding_gradient() -> None:
    table = sm.tensor(RNG.standard_normal((4, 2)))
    emb = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=1)
    out = emb(sm.tensor([[1, 2], [2, 3]]))
    np.testing.assert_allclose(arr(out), arr(table)[[[1, 2], [2, 3]]])
    out.sum().backward()
    np.testing.assert_allclose(arr(emb.weight.grad)[:, 0], [0, 0, 2, 1])
    assert not nn.Embedding.from_pretrained(table).weight.requires_grad


# ---- error messages -----------------------------------------------------------------------
@pytest.mark.parametrize("layer,x,pattern", [
    (lambda: nn.Linear(1024, 8), sm.zeros(2, 512),
     r"Linear: expected input with last dimension 1024 \(in_features\), got shape \(2, 512\)"),
    (lambda: nn.Conv2d(3, 8, 3), sm.zeros(2, 4, 8, 8),
     r"Conv2d: expected 3-D or 4-D input \(C, H, W\) / \(N, C, H, W\) with C=3, got shape \(2, 4, 8, 8\)"),
    (lambda: nn.BatchNorm2d(3), sm.zeros(2, 3, 4),
     r"BatchNorm2d: expected 4-D \(N, C, H, W\) input with C=3, got shape \(2, 3, 4\)"),
    (lambda: nn.BatchNorm1d(3), sm.zeros(2, 4),
     r"BatchNorm1d: expected 2-D or 3-D .* with C=3, got shape \(2, 4\)"),
    (lambda: nn.LayerNorm((3, 4)), sm.zeros(2, 4, 3),
     r"LayerNorm: expected input with shape \[\*, 3, 4\] \(normalized_shape\), got shape \(2, 4, 3\)"),
    (lambda: nn.MaxPool2d(2), sm.zeros(4, 4), r"MaxPool2d: expected 3-D or 4-D input"),
    (lambda: nn.PReLU(3), sm.zeros(2, 4),
     r"Mismatch of parameter numbers and input channel size. Found parameter numbers = 3 and "
     r"channel size = 4."),
    (lambda: nn.LazyLinear(2), sm.zeros(()), r"LazyLinear: expected input with at least 1 dimension"),
])
def test_wrong_input_shapes_name_the_layer(layer: Callable[[], nn.Module], x: sm.Tensor,
                                           pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        layer()(x)


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(3, 6, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        nn.Conv2d(3, 6, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(3, 6, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="GELU: approximate"):
        nn.GELU("fast")
    with pytest.raises(ValueError, match="padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(TypeError, match="Embedding: expected indices of an integer dtype"):
        nn.Embedding(3, 2)(sm.zeros(2))


# ---- the PyTorch oracle -------------------------------------------------------------------
TORCH_ONLY = {
    "BatchNorm2d_affine_train": (lambda n: n.BatchNorm2d(3, momentum=0.3), RNG.standard_normal((4, 3, 2, 3))),
    "LayerNorm_nobias": (lambda n: n.LayerNorm((2, 3), eps=1e-3, bias=False), RNG.standard_normal((4, 2, 3))),
    "Embedding": (lambda n: n.Embedding(6, 3, padding_idx=2), np.array([[0, 2, 5], [2, 2, 1]])),
    "MaxPool2d_ceil": (lambda n: n.MaxPool2d(3, 2, padding=1, ceil_mode=True), RNG.standard_normal((1, 2, 6, 7))),
    "AvgPool2d_nopad": (lambda n: n.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                        RNG.standard_normal((1, 2, 6, 7))),
    "Conv2d_dil": (lambda n: n.Conv2d(2, 4, 3, dilation=2, padding=2, padding_mode="circular"),
                   RNG.standard_normal((1, 2, 6, 5))),
    "Conv2d_replicate": (lambda n: n.Conv2d(2, 2, 2, padding="same", padding_mode="replicate"),
                         RNG.standard_normal((2, 5, 4))),
}


@pytest.mark.parametrize("name", sorted(set(CASES) | set(TORCH_ONLY)))
def test_against_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    make, x = (CASES[name][:2] if name in CASES else TORCH_ONLY[name])
    ours, theirs = make(nn).double(), make(torch.nn).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    copy_state_to_torch(ours, theirs)
    xs, xt = leaf(x), torch.tensor(x, requires_grad=x.dtype.kind == "f")
    y, yt = ours(xs), theirs(xt)
    np.testing.assert_allclose(arr(y), yt.detach().numpy(), atol=1e-10, rtol=1e-8)
    g = RNG.standard_normal(tuple(yt.shape))
    y.backward(sm.tensor(g))
    yt.backward(torch.tensor(g))
    if xt.grad is not None:
        np.testing.assert_allclose(arr(xs.grad), xt.grad.numpy(), atol=1e-10, rtol=1e-8)
    theirs_grads = {n: p.grad.numpy() for n, p in theirs.named_parameters() if p.grad is not None}
    for n, gr in param_grads(ours).items():
        np.testing.assert_allclose(gr, theirs_grads[n], atol=1e-10, rtol=1e-8, err_msg=n)
    for n, b in theirs.named_buffers():
        np.testing.assert_allclose(arr(ours.get_buffer(n)), b.numpy(), rtol=1e-10, err_msg=n)


def test_reprs_match_torch_for_non_default_arguments() -> None:
    torch = pytest.importorskip("torch")
    for make in (lambda n: n.Conv2d(3, 6, (3, 1), stride=(2, 1), padding=(1, 0), dilation=2,
                                    groups=3, bias=False, padding_mode="reflect"),
                 lambda n: n.Conv2d(3, 6, 3, padding="same"),
                 lambda n: n.ReLU(inplace=True), lambda n: n.Threshold(0.5, 1.0, inplace=True),
                 lambda n: n.ELU(alpha=0.5, inplace=True), lambda n: n.SiLU(inplace=True),
                 lambda n: n.LeakyReLU(0.3, True), lambda n: n.Hardtanh(-2.0, 2.0),
                 lambda n: n.Softmax(), lambda n: n.PReLU(4), lambda n: n.Dropout(0.2, True),
                 lambda n: n.BatchNorm1d(5, eps=1e-3, momentum=None, affine=False),
                 lambda n: n.LayerNorm([2, 3], elementwise_affine=False),
                 lambda n: n.Embedding(5, 2, max_norm=1.0, norm_type=3.0),
                 lambda n: n.AvgPool2d((2, 3), stride=1, padding=1),
                 lambda n: n.MaxPool2d((2, 2), (1, 2), dilation=2),
                 lambda n: n.Flatten(0, 2), lambda n: n.Unflatten(1, (2, 2)),
                 lambda n: n.CrossEntropyLoss(label_smoothing=0.1),
                 lambda n: n.MultiheadAttention(8, 2, kdim=3, vdim=5, add_bias_kv=True)):
        assert repr(make(nn)) == repr(make(torch.nn))


# ---- PReLU on 1-D input: one channel, as PyTorch documents --------------------------------
@pytest.mark.parametrize("n,shape", [(3, (3,)), (5, (5,)), (3, (5,)), (1, (3,)), (1, ()),
                                     (3, ()), (3, (2, 3)), (3, (2, 4)), (3, (4, 3, 2))])
def test_prelu_channels_match_torch(n: int, shape: tuple) -> None:
    x = -np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)

    def outcome(lib: Any) -> Any:
        try:
            return lib.nn.PReLU(n)(lib.tensor(x)).detach().numpy().tolist()
        except RuntimeError as e:
            return str(e)
    ours = outcome(sm)
    if n != 1 and (len(shape) < 2 or shape[1] != n):
        channels = shape[1] if len(shape) >= 2 else 1
        assert ours == ("Not allow zero-dim input tensor." if not shape else
                        "Mismatch of parameter numbers and input channel size. Found parameter "
                        f"numbers = {n} and channel size = {channels}.")
        with pytest.raises(sm.ShapeError):
            nn.PReLU(n)(sm.tensor(x))
    else:
        np.testing.assert_allclose(ours, np.where(x > 0, x, 0.25 * x))
    torch = torch_or_none()
    if torch is not None:
        assert ours == outcome(torch)


def test_prelu_weight_must_be_scalar_or_1d() -> None:
    with pytest.raises(RuntimeError, match="Expected `weight` to be a scalar or 1D tensor, but "
                                           "got: ndim = 2"):
        F.prelu(sm.zeros(2, 3), sm.ones(1, 1))
