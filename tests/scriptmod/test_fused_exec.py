"""Traced modules run fused (native kernels per fusion group) and unfused give the same
outputs as eager from the first call; the fuser switch, the thread setting, kernel
inspection, re-specialization and buffer safety at the module level."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.ir.graph import Prim
from scriptmod.runtime import llvm_jit
from scriptmod.bench.workloads import MLP, ActivationZoo
from scriptmod import jit, nn
from scriptmod.jit._fuser import (fuser, fusion_enabled, get_num_threads, kernels_for,
                                     set_num_threads)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION", raising=False)


def Block() -> nn.Module:
    """Linear -> GELU(tanh) -> Linear, plus the residual (W3's model, small)."""
    return MLP(24, 40)


Zoo = ActivationZoo   # the W2 activation chain


def _groups(g: Any) -> int:
    return sum(n.kind == Prim.FUSION_GROUP for n in g.walk())


def _traced(model: nn.Module, *shape: int) -> tuple[Any, nn.Module, sm.Tensor]:
    sm.manual_seed(0)
    x = sm.randn(*shape)
    return jit.trace(model, x), model, x


@pytest.mark.parametrize("make,shape", [(Block, (5, 24)), (Zoo, (7, 33)), (Zoo, (1, 4097))])
def test_fused_unfused_and_eager_agree_from_the_first_call(make: Any, shape: tuple) -> None:
    traced, model, x = _traced(make(), *shape)
    with sm.no_grad():
        fused = traced(x).numpy().copy()
        with fuser(False):
            unfused = traced(x).numpy().copy()
        eager = model(x).numpy()
    np.testing.assert_allclose(fused, eager, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(fused, unfused, rtol=2e-5, atol=2e-6)
    assert _groups(traced.graph_for(x)) >= 1
    with fuser(False):
        assert _groups(traced.graph_for(x)) == 0


def test_fuser_switch_keeps_separate_specializations() -> None:
    traced, _, x = _traced(Block(), 3, 24)
    ex = traced.executor("forward")
    with sm.no_grad():
        traced(x)
        with fuser(False):
            assert not fusion_enabled()
            traced(x)
        traced(x)
    assert ex.stats["specializations"] == 2 and fusion_enabled()
    setting = fuser(False)                      # the global setter form
    try:
        assert not fusion_enabled() and _groups(traced.graph_for(x)) == 0
    finally:
        setting.restore()
    assert fusion_enabled() and _groups(traced.graph_for(x)) >= 1


def test_env_var_disables_fusion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_DISABLE_FUSION", "1")
    traced, model, x = _traced(Block(), 2, 24)
    assert _groups(traced.graph_for(x)) == 0
    with sm.no_grad():
        np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=2e-5, atol=2e-6)
    with fuser(True):
        assert _groups(traced.graph_for(x)) >= 1


def test_second_call_compiles_nothing() -> None:
    traced, _, x = _traced(Block(), 4, 24)
    with sm.no_grad():
        traced(x)
        before = llvm_jit.CACHE.stats()["compiles"]
        for _ in range(3):
            traced(sm.randn(4, 24))
    assert llvm_jit.CACHE.stats()["compiles"] == before
    assert traced.executor("forward").stats["specializations"] == 1


def test_kernels_for_exposes_ir_and_asm() -> None:
    traced, _, x = _traced(Block(), 3, 24)
    ks = kernels_for(traced, x)
    assert len(ks) == 2                        # bias+GELU epilogue, bias+residual
    for k in ks:
        assert "define void" in k.llvm_ir and k.kernel.name in k.asm
    assert any(s.kind == "strided" and s.inner == 1 for s in ks[0].spec.inputs)   # bias row


def test_new_batch_and_dtype_respecialize() -> None:
    traced, model, x = _traced(Block(), 4, 24)
    with sm.no_grad():
        traced(x)
        x7 = sm.randn(7, 24)
        np.testing.assert_allclose(traced(x7).numpy(), model(x7).numpy(), rtol=2e-5, atol=2e-6)
        m64 = Block().to(sm.float64)
        t64 = jit.trace(m64, x.to(sm.float64))
        y = t64(x7.to(sm.float64))
        assert y.dtype == sm.float64
        np.testing.assert_allclose(y.numpy(), m64(x7.to(sm.float64)).numpy(), rtol=1e-12)


def test_mismatching_input_gets_a_clear_error() -> None:
    traced, model, x = _traced(Block(), 4, 24)
    with sm.no_grad():
        traced(x)
        x1 = sm.randn(24)               # another rank: the MLP's ops all follow it, as eager
        np.testing.assert_allclose(traced(x1).numpy(), model(x1).numpy(), rtol=2e-5, atol=2e-6)
        with pytest.raises(TypeError, match="argument 'x'"):
            traced(sm.ones(4, 24, dtype=sm.int64))


def test_results_held_by_the_user_are_never_overwritten() -> None:
    traced, model, x = _traced(Zoo(), 16, 64)
    with sm.no_grad():
        xs = [sm.randn(16, 64) for _ in range(4)]
        ys = [traced(xi) for xi in xs]
        for xi, yi in zip(xs, ys):
            np.testing.assert_allclose(yi.numpy(), model(xi).numpy(), rtol=2e-5, atol=2e-6)


def test_num_threads_setting_gives_identical_results() -> None:
    traced, _, _ = _traced(Zoo(), 1, 8)
    x = sm.randn(3, 70001)
    before = get_num_threads()
    try:
        with sm.no_grad():
            set_num_threads(1)
            assert get_num_threads() == 1
            one = traced(x).numpy().copy()
            set_num_threads(2)
            two = traced(x).numpy()
        np.testing.assert_array_equal(one, two)
    finally:
        set_num_threads(before)


def test_autograd_path_still_works_with_fusion_on() -> None:
    traced, model, x = _traced(Block(), 3, 24)
    y = traced(x)
    y.sum().backward()
    g_traced = model.fc1.weight.grad.numpy().copy()
    model.zero_grad()
    model(x).sum().backward()
    np.testing.assert_allclose(g_traced, model.fc1.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_warm_calls_read_attributes_without_getattr_fallback(monkeypatch: pytest.MonkeyPatch,
                                                             fused: bool) -> None:
    """Parameter reads are most of a tiny model's call (W4): a warm call finds them in the
    module's registries directly and never falls back to ``__getattr__`` (a subclass
    ``__getattr__`` once turned that fast path off and cost W4 a third of its time)."""
    from scriptmod.jit._script_module import ScriptModule
    from scriptmod.nn.module import Module
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    x = sm.randn(1, 8)
    with sm.no_grad(), fuser(fused):
        traced = jit.trace(model, x)
        traced(x)
        calls = []
        for cls in (Module, ScriptModule):
            original = cls.__dict__["__getattr__"]
            monkeypatch.setattr(cls, "__getattr__",
                                lambda self, name, _o=original: calls.append(name) or _o(self, name))
        out = traced(x)
    monkeypatch.undo()
    assert calls == []
    np.testing.assert_allclose(out.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_traced_integer_division_by_zero_raises_as_eager(fused: bool) -> None:
    """A native kernel cannot raise, so integer // and % stay out of fusion groups and the
    checked reference kernel runs: a zero divisor raises (as torch and eager do) instead of
    giving the formula's (a, 0)."""
    class IntDiv(nn.Module):
        def forward(self, a: sm.Tensor, b: sm.Tensor) -> sm.Tensor:
            return (a // b + a % b) * 2

    a, b = sm.tensor([7, 8, 9]), sm.tensor([2, 3, 4])
    with sm.no_grad(), fuser(fused):
        traced = jit.trace(IntDiv(), (a, b))
        assert traced(a, b).tolist() == IntDiv()(a, b).tolist() == [8, 8, 6]
        kinds = [n.kind for n in traced.graph_for(a, b).walk()]
        assert "sm::floor_divide" in kinds and "sm::remainder" in kinds   # not inside a group
        zero = sm.tensor([2, 0, 4])
        with pytest.raises(RuntimeError, match="by zero"):
            IntDiv()(a, zero)
        with pytest.raises(RuntimeError, match="by zero"):
            traced(a, zero)
