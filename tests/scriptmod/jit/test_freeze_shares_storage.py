"""``jit.freeze`` shares the original's tensors as ``torch.jit.freeze`` does: an in-place edit
of a parameter or buffer (of the eager original or of the traced/scripted module, which hold
the same Parameters) reaches the frozen module, except where freezing folded a new value
from it; and a frozen module has no ``training`` flag (torch raises ``AttributeError``)."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


def _model() -> nn.Module:
    sm.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval()


def _compile(model: nn.Module, how: str) -> jit.ScriptModule:
    return jit.script(model) if how == "script" else jit.trace(model, sm.ones(2, 3))


def _edit(model: nn.Module, compiled: jit.ScriptModule, how: str) -> None:
    if how == "data.add_":
        model[0].weight.data.add_(1.0)
    elif how == "no_grad add_":
        with sm.no_grad():
            model[2].bias.add_(1.0)
    elif how == "copy_":
        with sm.no_grad():
            model[0].weight.copy_(sm.zeros(4, 3))
    else:                                   # through the compiled module's own parameter
        with sm.no_grad():
            getattr(compiled, "0").weight.mul_(-1.0)


def _out(m: nn.Module, x: sm.Tensor) -> np.ndarray:
    with sm.no_grad():
        return m(x).numpy().copy()


@pytest.mark.parametrize("compile_how", ["trace", "script"])
@pytest.mark.parametrize("edit", ["data.add_", "no_grad add_", "copy_", "compiled module"])
@pytest.mark.parametrize("freezer", ["freeze", "optimize_for_inference"])
def test_an_in_place_edit_of_the_original_reaches_the_frozen_module(compile_how, edit, freezer):
    model = _model()
    compiled = _compile(model, compile_how)
    frozen = getattr(jit, freezer)(compiled)
    x = sm.randn(5, 3)
    before = _out(frozen, x)
    _edit(model, compiled, edit)
    after = _out(frozen, x)
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, _out(model, x), rtol=1e-5, atol=1e-5)


def test_assigning_a_new_tensor_does_not_reach_the_frozen_module():
    model = _model()
    frozen = jit.freeze(jit.trace(model, sm.ones(2, 3)))
    x = sm.randn(5, 3)
    before = _out(frozen, x)
    model[0].weight.data = sm.zeros(4, 3)           # a new array: the constant keeps the old
    np.testing.assert_array_equal(_out(frozen, x), before)


@pytest.mark.parametrize("optimize_numerics", [True, False])
def test_a_value_folded_at_freeze_time_keeps_its_inputs_as_they_were(optimize_numerics):
    sm.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3)).eval()
    frozen = jit.freeze(jit.trace(model, sm.ones(1, 2, 4, 4)),
                        optimize_numerics=optimize_numerics)
    x = sm.randn(1, 2, 4, 4)
    before = _out(frozen, x)
    with sm.no_grad():
        model[0].weight.add_(1.0)
    # folded into the convolution's weight: a new array (torch: the same)
    assert np.allclose(_out(frozen, x), before) == optimize_numerics


def test_a_preserved_attribute_is_the_original_tensor():
    model = _model()
    frozen = jit.freeze(jit.trace(model, sm.ones(2, 3)), preserved_attrs=["2.bias"])
    assert getattr(frozen, "2").bias is model[2].bias


@pytest.mark.parametrize("freezer", ["freeze", "optimize_for_inference"])
def test_a_frozen_module_has_no_training_flag_until_train_or_eval(freezer, tmp_path):
    frozen = getattr(jit, freezer)(jit.trace(_model(), sm.ones(2, 3)))
    with pytest.raises(AttributeError) as info:
        frozen.training
    assert str(info.value) == "'RecursiveScriptModule' object has no attribute 'training'"
    assert not hasattr(frozen, "training")
    assert repr(frozen).startswith("RecursiveScriptModule(")         # as torch's
    x = sm.randn(2, 3)
    before = _out(frozen, x)
    frozen.train()
    assert frozen.training is True
    np.testing.assert_array_equal(_out(frozen, x), before)      # its graphs are frozen
    frozen.eval()
    assert frozen.training is False
    frozen.save(tmp_path / "f.smod")
    np.testing.assert_array_equal(_out(jit.load(tmp_path / "f.smod"), x), before)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")     # torch.jit is deprecated
def test_torch_behaves_the_same():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()).eval()
    frozen = torch.jit.freeze(torch.jit.script(model))
    x = torch.randn(5, 3)
    before = frozen(x).clone()
    model[0].weight.data.add_(1.0)
    assert not torch.equal(frozen(x), before)
    with pytest.raises(AttributeError) as info:
        frozen.training
    assert str(info.value) == "'RecursiveScriptModule' object has no attribute 'training'"
    assert repr(frozen).startswith("RecursiveScriptModule(")
