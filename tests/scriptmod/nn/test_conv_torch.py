"""The convolution family against PyTorch: every layer (Conv1d/2d/3d, ConvTranspose1d/2d/3d,
their Lazy forms, Fold, Unfold) with torch's weights loaded by ``load_state_dict(strict=True)``
gives torch's output, input gradient and parameter gradients (float32 and float64), the same
repr, and a ``jit.trace`` that follows a second batch size."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

torch = pytest.importorskip("torch")

# (class, constructor args, constructor kwargs, input shape, forward kwargs)
LAYERS: list[tuple[str, tuple, dict, tuple, dict]] = [
    ("Conv1d", (4, 6, 3), dict(stride=2, padding=1, dilation=2, groups=2), (2, 4, 11), {}),
    ("Conv1d", (3, 2, 4), dict(padding="same", padding_mode="circular"), (2, 3, 9), {}),
    ("Conv1d", (3, 2, 2), dict(bias=False), (3, 7), {}),
    ("Conv2d", (2, 4, (3, 2)), dict(padding="same", dilation=(2, 1), padding_mode="reflect"),
     (2, 2, 7, 6), {}),
    ("Conv2d", (4, 4, 3), dict(padding=2, padding_mode="replicate", groups=4, bias=False),
     (2, 4, 5, 5), {}),
    ("Conv3d", (2, 4, (2, 3, 2)), dict(stride=(2, 1, 1), padding=(1, 0, 1), groups=2),
     (2, 2, 5, 4, 4), {}),
    ("Conv3d", (2, 2, 3), dict(padding="valid", padding_mode="zeros"), (2, 4, 4, 4), {}),
    ("ConvTranspose1d", (4, 6, 3), dict(stride=2, padding=1, output_padding=1, groups=2),
     (2, 4, 5), {}),
    ("ConvTranspose1d", (2, 3, 3), dict(stride=3), (2, 4), {"output_size": [12]}),
    ("ConvTranspose2d", (3, 2, (3, 2)), dict(stride=(2, 3), padding=(1, 0),
                                            output_padding=(1, 2)), (2, 3, 4, 3), {}),
    # output_padding >= stride, allowed by the dilation: one output row no input reaches
    ("ConvTranspose2d", (2, 4, 3), dict(dilation=2, output_padding=1), (1, 2, 4, 4), {}),
    ("ConvTranspose2d", (2, 2, 2), dict(stride=2), (2, 3, 3), {"output_size": (2, 7, 6)}),
    ("ConvTranspose3d", (2, 2, 2), dict(stride=2, bias=False, groups=2), (1, 2, 2, 3, 2), {}),
    ("Fold", (), dict(output_size=(5, 4), kernel_size=(2, 3), padding=(1, 0), stride=(2, 1)),
     (2, 12, 6), {}),
    ("Fold", (), dict(output_size=4, kernel_size=2, dilation=2), (8, 4), {}),
    ("Unfold", (), dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
     (2, 3, 6, 7), {}),
    ("Unfold", (), dict(kernel_size=2), (2, 3, 3), {}),
]
IDS = [f"{c}-{i}" for i, (c, *_) in enumerate(LAYERS)]


def _pair(cls: str, args: tuple, kwargs: dict, dtype: Any) -> tuple[Any, Any]:
    """torch's layer and ours with torch's state loaded (strict), both in ``dtype``."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(*args, **kwargs).to(getattr(torch, dtype))
    ours = getattr(nn, cls)(*args, **kwargs).to(getattr(sm, dtype))
    ours.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()}, strict=True)
    return theirs, ours


def _grads(module: Any, x: Any, out: Any, g: np.ndarray, lib: Any) -> list[np.ndarray]:
    out.backward(lib.tensor(g))
    return [np.array(x.grad.numpy())] + [np.array(p.grad.numpy()) for p in module.parameters()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls,args,kwargs,shape,fkw", LAYERS, ids=IDS)
def test_layer_matches_torch(cls: str, args: tuple, kwargs: dict, shape: tuple, fkw: dict,
                             dtype: str) -> None:
    theirs, ours = _pair(cls, args, kwargs, dtype)
    assert repr(ours) == repr(theirs)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    tx, sx = torch.tensor(x, requires_grad=True), sm.tensor(x, requires_grad=True)
    ty, sy = theirs(tx, **fkw), ours(sx, **fkw)
    assert sy.dtype == getattr(sm, dtype) and tuple(sy.shape) == tuple(ty.shape)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sy.detach().numpy(), ty.detach().numpy(), **tol)
    g = np.random.default_rng(2).standard_normal(tuple(ty.shape)).astype(dtype)
    for a, b in zip(_grads(ours, sx, sy, g, sm), _grads(theirs, tx, ty, g, torch)):
        np.testing.assert_allclose(a, b, **tol)


# the first batched row of each class without forward arguments
TRACED = [i for i, (cls, _, _, shape, fkw) in enumerate(LAYERS) if not fkw and len(shape) == (
    3 if cls == "Fold" else 4 if cls == "Unfold" else int(cls[-2]) + 2)]
TRACED = [i for i in TRACED if LAYERS[i][0] not in {LAYERS[j][0] for j in TRACED if j < i}]


@pytest.mark.parametrize("cls,args,kwargs,shape,fkw", [LAYERS[i] for i in TRACED],
                         ids=[IDS[i] for i in TRACED])
def test_trace_follows_a_second_batch_size(cls: str, args: tuple, kwargs: dict, shape: tuple,
                                           fkw: dict) -> None:
    theirs, ours = _pair(cls, args, kwargs, "float32")
    traced = sm.jit.trace(ours, sm.randn(*shape))
    for batch in (shape[0], shape[0] + 2):
        x = np.random.default_rng(batch).standard_normal((batch, *shape[1:])).astype("float32")
        with sm.no_grad():
            got = traced(sm.tensor(x)).numpy()
        np.testing.assert_allclose(got, theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("cls,args,kwargs,shape", [
    ("LazyConv1d", (4, 3), dict(stride=2, groups=2), (2, 6, 9)),
    ("LazyConv3d", (2, 2), dict(bias=False), (3, 3, 3, 3)),
    ("LazyConvTranspose2d", (4, 3), dict(stride=2, output_padding=1), (2, 3, 4, 4)),
])
def test_lazy_layer_becomes_its_class_as_torch_does(cls: str, args: tuple, kwargs: dict,
                                                     shape: tuple) -> None:
    torch.manual_seed(0)
    theirs, ours = getattr(torch.nn, cls)(*args, **kwargs), getattr(nn, cls)(*args, **kwargs)
    assert ours.has_uninitialized_params() and ours.in_channels == 0
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    ty, sy = theirs(torch.tensor(x)), ours(sm.tensor(x))
    assert type(ours).__name__ == type(theirs).__name__ == cls[4:]
    assert repr(ours) == repr(theirs) and tuple(sy.shape) == tuple(ty.shape)
    ours.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()}, strict=True)
    np.testing.assert_allclose(ours(sm.tensor(x)).detach().numpy(), ty.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_lazy_layer_takes_the_dtype_given_before_its_first_call() -> None:
    m = nn.LazyConvTranspose1d(2, 3).to(sm.float64)
    assert m(sm.randn(1, 4, 5).double()).dtype == sm.float64 and m.weight.shape == (4, 2, 3)


def test_default_init_draws_within_torchs_bounds() -> None:
    """kaiming_uniform(a=sqrt(5)) on the weight and U(+-1/sqrt(fan_in)) on the bias, fan_in
    from the weight's dims 1.. (for a transposed layer: out_channels/groups * kernel)."""
    for m, fan_in in ((nn.Conv3d(4, 6, (2, 3, 1), groups=2), 2 * 6),
                      (nn.ConvTranspose1d(3, 8, 5, groups=1), 8 * 5)):
        bound = 1 / np.sqrt(fan_in)
        for p in (m.weight, m.bias):
            v = p.detach().numpy()
            assert np.abs(v).max() <= bound and np.abs(v).max() > bound / 2
