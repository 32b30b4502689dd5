"""The executor's per-call key: module state (dtype/shape/array type of every parameter and
buffer, including replaced buffer objects and submodules) and the fusion switch."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit import _fuser as _compiled


class Scaled(nn.Module):
    """Buffers only: ``.double()`` replaces the buffer objects (parameters keep theirs)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", sm.ones(4) * 2)
        self.register_buffer("shift", sm.ones(4))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return x * self.scale + self.shift


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION", raising=False)


def test_replaced_buffers_respecialize() -> None:
    model, x = Scaled(), sm.randn(3, 4)
    traced = jit.trace(model, x)
    ex = traced.executor("forward")
    with sm.no_grad():
        traced(x)
        traced(x)
        assert ex.stats["specializations"] == 1
        traced.double()                                  # new buffer objects, float64
        y = traced(x)
        model.double()
        np.testing.assert_allclose(y.numpy(), model(x).numpy(), rtol=1e-12)
    assert y.dtype is sm.float64 and ex.stats["specializations"] == 2


def test_replaced_submodule_and_resized_buffer_respecialize() -> None:
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Scaled()

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return self.inner(x) + 1

    model, x = Outer(), sm.randn(2, 4)
    traced = jit.trace(model, x)
    ex = traced.executor("forward")
    with sm.no_grad():
        traced(x)
        traced.inner.scale = sm.ones(1) * 3              # a buffer of another shape
        np.testing.assert_allclose(traced(x).numpy(), (x * 3 + 1 + 1).numpy(), rtol=1e-6)
        assert ex.stats["specializations"] == 2
        traced(x)
        assert ex.stats["specializations"] == 2          # and the key is stable again


def test_state_key_is_reused_while_nothing_changes() -> None:
    model, x = Scaled(), sm.randn(3, 4)
    traced = jit.trace(model, x)
    ex = traced.executor("forward")
    k1 = ex._state_key()
    assert ex._state_key() is k1                         # same arrays: the cached key


def test_env_var_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _compiled.variant() == "fused"
    monkeypatch.setenv("SCRIPTMOD_DISABLE_FUSION", "1")
    assert _compiled.variant() == "unfused" and not _compiled.fusion_enabled()
    monkeypatch.setenv("SCRIPTMOD_DISABLE_FUSION", "0")
    assert _compiled.variant() == "fused"
    with _compiled.fuser(False):
        assert _compiled.variant() == "unfused"
    assert _compiled.variant() == "fused"
