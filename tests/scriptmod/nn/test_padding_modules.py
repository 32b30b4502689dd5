"""Padding layers and ``F.pad``: every mode against NumPy's ``np.pad`` (float32 and float64),
against torch where it is installed (values, gradients, negative amounts, errors, reprs), and
traced at one batch size then run at another."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import arr, assert_close_lists, run_both, torch_or_none

_NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
            "circular": "wrap"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", list(_NP_MODE))
def test_pad_matches_numpy(mode: str, dtype: type) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(dtype)
    pad = (2, 1, 0, 3)                    # last dim (2, 1), the one before (0, 3)
    ours = F.pad(sm.tensor(x), pad, mode).numpy()
    ref = np.pad(x, ((0, 0), (0, 0), (0, 3), (2, 1)), mode=_NP_MODE[mode])
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours, ref)


def test_constant_value_and_cropping() -> None:
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(F.pad(sm.tensor(x), (1, -2), value=7.5).numpy(),
                                  np.pad(x[:, :2], ((0, 0), (1, 0)), constant_values=7.5))
    # any rank for constant padding: here all three dims of a 3-D tensor
    assert tuple(F.pad(sm.zeros(1, 2, 3), (1, 1, 1, 1, 1, 1)).shape) == (3, 4, 5)


_LAYERS = [
    ("ZeroPad1d", (2, -1), (2, 3, 5)), ("ZeroPad2d", 1, (3, 4, 5)),
    ("ZeroPad3d", (1, 0, 0, 1, 2, 0), (1, 2, 3, 4, 2)),
    ("ConstantPad1d", 2, (3, 5)), ("ConstantPad2d", (1, 2, -1, 0), (2, 1, 4, 5)),
    ("ConstantPad3d", 1, (2, 3, 3, 3)),
    ("ReflectionPad1d", (3, 1), (2, 2, 5)), ("ReflectionPad2d", (1, 2, 2, 0), (3, 4, 5)),
    ("ReflectionPad3d", (-1, 2, 1, 1, 0, 1), (1, 2, 3, 4, 5)),
    ("ReplicationPad1d", (-2, 3), (2, 5)), ("ReplicationPad2d", 2, (1, 2, 3, 4)),
    ("ReplicationPad3d", (1, 0, 2, 1, 0, 1), (2, 3, 3, 4)),
    ("CircularPad1d", (1, 5), (2, 2, 5)), ("CircularPad2d", (-1, 1, -2, 1), (1, 3, 4, 4)),
    ("CircularPad3d", 1, (1, 2, 3, 3, 3)),
]


@pytest.mark.parametrize("name,padding,shape", _LAYERS, ids=[c[0] for c in _LAYERS])
def test_layers_against_torch(name: str, padding: object, shape: tuple) -> None:
    torch = pytest.importorskip("torch")
    args = (padding, 2.5) if name.startswith("Constant") else (padding,)
    ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    x = np.random.default_rng(1).standard_normal(shape)
    assert_close_lists(*run_both(ours, theirs, [x]))


def test_torch_errors() -> None:
    with pytest.raises(RuntimeError, match="less than the corresponding input dimension"):
        nn.ReflectionPad1d(5)(sm.zeros(1, 2, 5))
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        nn.CircularPad1d((6, 0))(sm.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="expected 3D or 4D input"):
        nn.CircularPad2d(1)(sm.zeros(5, 5))
    with pytest.raises(NotImplementedError, match="padding size 2 is not supported for 1D"):
        F.pad(sm.zeros(5), (1, 1), mode="replicate")
    with pytest.raises(RuntimeError, match="divisible by 2"):
        F.pad(sm.zeros(5), (1, 1, 1))
    with pytest.raises(ValueError, match="doesn't take in value"):
        F.pad(sm.zeros(2, 5), (1, 1), mode="reflect", value=1.0)
    with pytest.raises(RuntimeError, match="too small"):
        F.pad(sm.zeros(2, 3), (-2, -2), mode="replicate")


def test_reflection_reaching_into_the_cropped_part_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((2, 4))
    for mode, pad in (("reflect", (-3, 2)), ("replicate", (-4, 2)), ("circular", (-3, 1))):
        ours = F.pad(sm.tensor(x), pad, mode).numpy()
        np.testing.assert_array_equal(ours, torch.nn.functional.pad(torch.tensor(x), pad,
                                                                      mode).numpy())


@pytest.mark.parametrize("layer", [nn.ReflectionPad2d((1, 2, 0, 1)), nn.CircularPad2d(1),
                                   nn.ReplicationPad2d((0, 1, 2, 0)), nn.ZeroPad2d((1, -1, 2, 0))],
                         ids=lambda m: type(m).__name__)
def test_traced_at_another_batch_size_with_gradients(layer: nn.Module) -> None:
    traced = sm.jit.trace(layer, sm.randn(2, 3, 4, 5))
    x = np.random.default_rng(3).standard_normal((3, 3, 4, 5)).astype(np.float32)
    a, b = sm.tensor(x, requires_grad=True), sm.tensor(x, requires_grad=True)
    y, ref = traced(a), layer(b)
    np.testing.assert_array_equal(arr(y), arr(ref))
    g = sm.tensor(np.random.default_rng(4).standard_normal(tuple(ref.shape)).astype(np.float32))
    y.backward(g)
    ref.backward(g)
    np.testing.assert_allclose(arr(a.grad), arr(b.grad), rtol=1e-6)


def test_scripted_model_with_padding() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pad = nn.ReflectionPad1d(2)

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return self.pad(x) * 2.0

    net = Net()
    x = sm.randn(2, 3, 6)
    np.testing.assert_array_equal(sm.jit.script(net)(x).numpy(), net(x).numpy())


def test_reprs_without_torch() -> None:
    assert repr(nn.ConstantPad2d(1, 0.5)) == "ConstantPad2d(padding=(1, 1, 1, 1), value=0.5)"
    assert repr(nn.ZeroPad1d((2, 3))) == "ZeroPad1d((2, 3))"
    if torch_or_none() is not None:
        import torch
        assert repr(nn.ZeroPad3d(2)) == repr(torch.nn.ZeroPad3d(2))


def test_padding_computed_from_a_traced_size_follows_it() -> None:
    def pad_by_quarter(x: sm.Tensor) -> sm.Tensor:
        return F.pad(x, (x.shape[-1] // 4, 1), mode="reflect")

    traced = sm.jit.trace(pad_by_quarter, sm.randn(2, 3, 8))
    x = sm.randn(2, 3, 12)
    np.testing.assert_array_equal(traced(x).numpy(), pad_by_quarter(x).numpy())
