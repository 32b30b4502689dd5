"""Saving a compiled module whose tensors changed after it was traced or scripted (issue 35).

``.double()``, ``.half()``, ``.bfloat16()``, ``.float()``, ``.to(dtype)``,
``load_state_dict`` (copying, or ``assign=True`` with another dtype), an assigned parameter of
another dtype and a buffer replaced by one of another dtype or shape each change the module's
tensors; the module runs (it re-specializes), and ``save`` must write the graphs as they run
now: ``load`` accepts the archive and the loaded module gives what the module in memory gives,
and what eager gives on a copy of the original model changed the same way. A change that no
input can run with is refused at save time, not at load.
"""
from __future__ import annotations

import copy
import io
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit import ArchiveError


class Net(nn.Module):
    """Nested submodules, a float buffer and BatchNorm's integer one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("scale", sm.arange(3, dtype=sm.float32) + 1)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.bn(self.fc(x)) * self.scale


class Outer(nn.Module):
    """Two levels of submodules: a Net inside, a Sequential after it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Net()
        self.head = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.head(self.inner(x)) + 1


class Tokens(nn.Module):
    """An integer input next to floating ones (a cast leaves it integer) and a tuple one."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 4)

    def forward(self, tokens: sm.Tensor, pair: tuple[sm.Tensor, sm.Tensor]) -> sm.Tensor:
        return self.fc(self.emb(tokens)) * pair[0] + pair[1]


def _normal(seed: int, *shape: int) -> sm.Tensor:
    return sm.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _net_inputs(dtype: Any) -> tuple:
    return (_normal(1, 5, 4).to(dtype),)


def _token_inputs(dtype: Any) -> tuple:
    pair = (_normal(2, 6, 4).to(dtype), _normal(3, 6, 4).to(dtype))
    return (sm.tensor([1, 3, 5, 7, 9, 0]), pair)


class Projected(nn.Module):
    """Parameters used directly: a matmul (its operands must share a dtype) and a gain
    (promoted elementwise), so that one can be given another dtype alone."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Parameter(_normal(4, 4, 3))
        self.gain = nn.Parameter(sm.ones(3) * 1.5)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return sm.matmul(x, self.proj) * self.gain


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[Any], tuple]]] = {
    "linear": (lambda: nn.Linear(4, 2), _net_inputs),
    "nested": (Net, _net_inputs),
    "two_levels": (Outer, _net_inputs),
    "tokens": (Tokens, _token_inputs),
    "projected": (Projected, _net_inputs),
}


def _first_linear(m: nn.Module) -> Any:
    return next(s for s in m.modules() if "weight" in s._parameters and "bias" in s._parameters
                and s.weight.dim() == 2)


def _assign_linear(m: nn.Module) -> None:
    """A new Parameter of another dtype for a Linear's weight and bias (they must agree)."""
    lin = _first_linear(m)
    lin.weight = nn.Parameter(lin.weight.detach().double() * 2)
    lin.bias = nn.Parameter(lin.bias.detach().double() - 1)


def _assign_proj(m: nn.Module) -> None:
    m.proj = nn.Parameter(m.proj.detach().double())     # the input must follow: float64


def _assign_gain(m: nn.Module) -> None:
    m.gain = nn.Parameter(m.gain.detach().double())     # float32 inputs, float64 result


def _load_state_dict_assign(m: nn.Module) -> None:
    sd = {k: v.double() if v.is_floating_point() else v for k, v in m.state_dict().items()}
    m.load_state_dict(sd, assign=True)


def _load_state_dict_copy(m: nn.Module) -> None:
    sd = {k: (v * 3).double() if v.is_floating_point() else v
          for k, v in m.state_dict().items()}
    m.load_state_dict(sd)          # copies into the tensors: their dtype stays (as torch's)


def _scale_owner(m: nn.Module) -> nn.Module:
    return next(s for s in m.modules() if "scale" in s._buffers)


def _replace_buffer(m: nn.Module) -> None:
    """``register_buffer`` on the eager model; a compiled module's members are fixed, so
    there the buffer's tensor is assigned (both replace the tensor under the same name)."""
    owner, new = _scale_owner(m), _scale_owner(m).scale.double() * 2
    if isinstance(owner, jit.ScriptModule):
        owner.scale = new
    else:
        owner.register_buffer("scale", new)


def _resize_buffer(m: nn.Module) -> None:
    _scale_owner(m).scale = sm.full((1,), 0.5)


WHOLE = ("linear", "nested", "two_levels", "tokens", "projected")
# change -> (the change, the input dtype the changed module takes, models it applies to)
CHANGES: dict[str, tuple[Callable[[nn.Module], Any], Any, tuple[str, ...]]] = {
    "double": (lambda m: m.double(), sm.float64, WHOLE),
    "half": (lambda m: m.half(), sm.float16, WHOLE),
    "bfloat16": (lambda m: m.bfloat16(), sm.bfloat16, WHOLE),
    "float": (lambda m: m.float(), sm.float32, WHOLE),      # of a model compiled in float64
    "to_float64": (lambda m: m.to(sm.float64), sm.float64, WHOLE),
    "to_float16": (lambda m: m.to(dtype=sm.float16), sm.float16, WHOLE),
    "load_state_dict_copy": (_load_state_dict_copy, sm.float32, WHOLE),
    "load_state_dict_assign": (_load_state_dict_assign, sm.float64, WHOLE),
    "assign_linear": (_assign_linear, sm.float64, ("linear",)),
    "assign_proj": (_assign_proj, sm.float64, ("projected",)),
    "assign_gain": (_assign_gain, sm.float32, ("projected",)),
    "replace_buffer": (_replace_buffer, sm.float32, ("nested",)),
    "resize_buffer": (_resize_buffer, sm.float32, ("nested", "two_levels")),
}

START = {"float": sm.float64}       # the dtype a change's model is compiled in (float32)

# jit.script of a bare built-in layer is not supported (a scripted model's layers are)
CASES = [pytest.param(model, change, how, id=f"{model}-{change}-{how}")
         for change, (_, _, models) in CHANGES.items() for model in models
         for how in ("trace", "script") if not (model == "linear" and how == "script")]

TOLERANCE = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}


def _round_trip(m: Any) -> Any:
    buf = io.BytesIO()
    jit.save(m, buf)
    buf.seek(0)
    return jit.load(buf)


def _same(got: sm.Tensor, want: sm.Tensor, computed_in: Any = None) -> None:
    """Equal dtypes and shapes, values within the tolerance of the output's dtype or of
    ``computed_in`` (a float32 input promoted to a float64 result), the looser one."""
    assert got.dtype is want.dtype and tuple(got.shape) == tuple(want.shape)
    tol = max(TOLERANCE[want.dtype.name], TOLERANCE[(computed_in or want.dtype).name])
    np.testing.assert_allclose(got.numpy().astype(np.float64),
                               want.numpy().astype(np.float64), rtol=tol, atol=tol)


def _compiled(model: nn.Module, how: str, inputs: tuple) -> Any:
    return jit.trace(model, inputs) if how == "trace" else jit.script(model)


def _check(model_name: str, change: str, how: str, freeze_after: bool = False) -> Any:
    make, inputs_of = MODELS[model_name]
    fn, dtype, _ = CHANGES[change]
    start = START.get(change, sm.float32)
    sm.manual_seed(0)
    model = make().eval().to(start)
    eager = copy.deepcopy(model)
    with sm.no_grad():
        compiled = _compiled(model, how, inputs_of(start))
        compiled(*inputs_of(start))
        fn(compiled)
        fn(eager)
        if freeze_after:
            compiled = jit.freeze(compiled)
        x = inputs_of(dtype)
        want = eager(*x)
        now = compiled(*x)
        loaded = _round_trip(compiled)
        _same(now, want, dtype)
        _same(loaded(*x), want, dtype)
        _same(_round_trip(loaded)(*x), want, dtype)     # and again from the loaded module
    return loaded


@pytest.mark.parametrize("model_name,change,how", CASES)
def test_changed_module_saves_as_it_runs(model_name: str, change: str, how: str) -> None:
    _check(model_name, change, how)


@pytest.mark.parametrize("how", ["trace", "script"])
@pytest.mark.parametrize("model_name,change", [
    ("two_levels", "double"), ("two_levels", "half"), ("tokens", "to_float64"),
    ("projected", "assign_proj"), ("nested", "replace_buffer"), ("two_levels", "resize_buffer")])
def test_frozen_after_the_change(model_name: str, change: str, how: str) -> None:
    """Freezing a module changed after it was compiled folds its tensors as they are now."""
    _check(model_name, change, how, freeze_after=True)


@pytest.mark.parametrize("how", ["trace", "script"])
def test_a_frozen_module_cast_afterwards(how: str) -> None:
    """A frozen traced module's tensors are constants: casting it changes nothing its graph
    reads, so it runs, saves and loads as before. A frozen scripted module keeps the
    built-in layers its calls expand against, with their tensors (torch's keeps none):
    casting it casts them, and it takes inputs of the new dtype as eager does."""
    sm.manual_seed(0)
    model, x = Outer().eval(), _net_inputs(sm.float32)
    eager = copy.deepcopy(model)
    with sm.no_grad():
        frozen = jit.freeze(_compiled(model, how, x))
        frozen(*x)
        frozen.double()
        if how == "script":
            eager.double()
            x = _net_inputs(sm.float64)
        want = eager(*x)
        _same(frozen(*x), want, sm.float32)
        _same(_round_trip(frozen)(*x), want, sm.float32)


def test_a_whole_cast_recasts_the_traced_inputs() -> None:
    """The archive of a traced module cast as a whole declares its floating inputs in the new
    dtype (integer ones stay), every method of every submodule typed for the new tensors."""
    loaded = _check("tokens", "double", "trace")
    assert repr(loaded.graph.inputs[1].type).startswith("Long(")
    assert repr(loaded.graph.inputs[2].type).startswith("(Double(")
    loaded = _check("two_levels", "double", "trace")
    for m in loaded.modules():
        for g in m._methods.values():
            assert "Float(" not in str(g), str(g)


def test_unchanged_modules_save_their_graphs_as_before() -> None:
    """No tensor changed: the archive holds the method graphs as compiled, byte for byte."""
    model, x = Outer().eval(), _net_inputs(sm.float32)
    traced = jit.trace(model, x)
    loaded = _round_trip(traced)
    for a, b in zip(traced.modules(), loaded.modules()):
        assert [str(g) for g in a._methods.values()] == [str(g) for g in b._methods.values()]


def test_a_change_no_input_can_run_is_refused_at_save() -> None:
    """A weight of another shape: the module cannot run any more, and save says so (the
    tensor, its types before and after, what to do) instead of writing what load refuses."""
    traced = jit.trace(Net().eval(), _net_inputs(sm.float32))
    traced.fc.weight = nn.Parameter(sm.randn(3, 7))
    with pytest.raises(ArchiveError) as info:
        jit.save(traced, io.BytesIO())
    msg = str(info.value)
    assert "fc.weight: Float(3, 4) -> Float(3, 7)" in msg
    assert "trace/script the module again" in msg


def test_save_is_deterministic_after_a_cast() -> None:
    traced = jit.trace(Outer().eval(), _net_inputs(sm.float32))
    traced.half()
    a, b = io.BytesIO(), io.BytesIO()
    jit.save(traced, a)
    jit.save(traced, b)
    assert a.getvalue() == b.getvalue()
