"""Activations on integer and bool tensors raise what PyTorch raises (issue 35): the ones
PyTorch has float kernels only for (gelu, silu, elu, leaky_relu, softplus, logsigmoid, prelu,
softmax, log_softmax) a NotImplementedError '"gelu" not implemented for 'Long'' (still a
DTypeError); relu/hardtanh refuse bool; the rest compute with torch's result dtype."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.ir.errors import DTypeError

ACTIVATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "relu": lambda f, x: f.relu(x),
    "relu6": lambda f, x: f.relu6(x),
    "hardtanh": lambda f, x: f.hardtanh(x),
    "hardtanh_0_6": lambda f, x: f.hardtanh(x, 0.0, 6.0),
    "gelu": lambda f, x: f.gelu(x),
    "gelu_tanh": lambda f, x: f.gelu(x, approximate="tanh"),
    "silu": lambda f, x: f.silu(x),
    "silu_inplace": lambda f, x: f.silu(x, inplace=True),
    "sigmoid": lambda f, x: f.sigmoid(x),
    "tanh": lambda f, x: f.tanh(x),
    "elu": lambda f, x: f.elu(x),
    "leaky_relu": lambda f, x: f.leaky_relu(x, 0.1),
    "softplus": lambda f, x: f.softplus(x),
    "logsigmoid": lambda f, x: f.logsigmoid(x),
    "threshold": lambda f, x: f.threshold(x, 0.5, 2.0),
    "softmax": lambda f, x: f.softmax(x, dim=-1),
    "log_softmax": lambda f, x: f.log_softmax(x, dim=-1),
    "prelu": lambda f, x: f.prelu(x, (sm if f is F else _torch()).ones(1, dtype=x.dtype)),
}
DTYPES = ["int64", "int32", "int16", "int8", "uint8", "bool"]


def _torch() -> Any:
    import torch
    return torch


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:                                   # noqa: BLE001
        return "error", e


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_integer_inputs_behave_as_in_torch(name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    vals = [[1, -2, 0], [3, 0, 5]]
    kind_t, want = _outcome(lambda: ACTIVATIONS[name](TF, torch.tensor(vals).to(
        getattr(torch, dtype))))
    kind_s, got = _outcome(lambda: ACTIVATIONS[name](F, sm.tensor(vals).to(getattr(sm, dtype))))
    assert kind_s == kind_t, f"torch: {want!r}, ours: {got!r}"
    if kind_t == "error":
        assert isinstance(got, type(want)), f"torch raises {type(want).__name__}: {want}; ours " \
                                            f"{type(got).__name__}: {got}"
        if isinstance(want, NotImplementedError):
            assert isinstance(got, DTypeError)
            assert f"not implemented for '{str(want).split(chr(39))[1]}'" in str(got)
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy().astype(np.float64),
                               want.numpy().astype(np.float64), rtol=1e-6, atol=1e-6)


def test_the_issue_repro_gelu_on_int64() -> None:
    with pytest.raises(NotImplementedError, match="\"gelu\" not implemented for 'Long'"):
        F.gelu(sm.tensor([1, 2, 3]))
    assert F.gelu(sm.tensor([1, 2, 3]).float()).dtype is sm.float32


def test_layers_and_traces_refuse_too() -> None:
    from scriptmod import nn
    with pytest.raises(NotImplementedError):
        nn.GELU()(sm.tensor([1, 2]))
    with pytest.raises(NotImplementedError):
        nn.Softmax(dim=0)(sm.tensor([1, 2]))
    with pytest.raises(NotImplementedError):
        sm.jit.trace(nn.SiLU(), sm.tensor([1, 2]))
