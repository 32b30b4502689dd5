"""A compiled module's parameters, buffers and submodules are fixed once it is traced,
scripted, frozen or loaded (issue 35): its graphs read them by name. Registering new ones
raises what PyTorch raises (AttributeError for buffers and parameters, RuntimeError for
modules); replacing a parameter's or buffer's tensor still works, as in PyTorch. Calling a
traced submodule directly is allowed on purpose (PyTorch: 'Trace submodules cannot be
called.'): it runs the submodule's own compiled graph."""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


def _net_class(lib: Any) -> type:
    class Net(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = lib.nn.Linear(4, 4)
            self.register_buffer("b", lib.zeros(4))

        def forward(self, x):
            return self.fc(x) + self.b
    return Net


Net = _net_class(sm)


def _traced() -> Any:
    return jit.trace(Net().eval(), sm.randn(2, 4))


def _loaded() -> Any:
    buf = io.BytesIO()
    jit.save(_traced(), buf)
    buf.seek(0)
    return jit.load(buf)


BUILDS: dict[str, Callable[[], Any]] = {
    "traced": _traced,
    "scripted": lambda: jit.script(Net().eval()),
    "loaded": _loaded,
    "frozen": lambda: jit.freeze(_traced()),
}

ADDITIONS: dict[str, tuple[Callable[[Any, Any], Any], type]] = {
    "register_buffer": (lambda m, L: m.register_buffer("nb", L.zeros(2)), AttributeError),
    "register_parameter": (lambda m, L: m.register_parameter("p", L.nn.Parameter(L.zeros(2))),
                           AttributeError),
    "register_module": (lambda m, L: m.register_module("m", L.nn.ReLU()), RuntimeError),
    "add_module": (lambda m, L: m.add_module("m", L.nn.ReLU()), RuntimeError),
    "setattr_new_parameter": (lambda m, L: setattr(m, "np", L.nn.Parameter(L.zeros(2))),
                              RuntimeError),
    "setattr_new_module": (lambda m, L: setattr(m, "nm", L.nn.ReLU()), RuntimeError),
    "setattr_other_module": (lambda m, L: setattr(m, "fc", L.nn.Linear(4, 4)), RuntimeError),
}


@pytest.mark.parametrize("how", sorted(ADDITIONS))
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_new_members_are_refused(build: str, how: str) -> None:
    module = BUILDS[build]()
    add, error = ADDITIONS[how]
    before = sorted(module.state_dict())
    with pytest.raises(error, match="compiled ScriptModule|after ScriptModule construction"):
        add(module, sm)
    assert sorted(module.state_dict()) == before
    x = sm.randn(3, 4)
    with sm.no_grad():
        assert tuple(module(x).shape) == (3, 4)


@pytest.mark.parametrize("how", sorted(ADDITIONS))
def test_torch_raises_the_same_class(how: str) -> None:
    torch = pytest.importorskip("torch")
    add, error = ADDITIONS[how]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(_net_class(torch)().eval(), torch.randn(2, 4))
    with pytest.raises(error):
        add(traced, torch)


def test_a_submodule_is_closed_too() -> None:
    traced = _traced()
    with pytest.raises(AttributeError, match="register buffer 'nb' on Linear"):
        traced.fc.register_buffer("nb", sm.zeros(2))


def test_deleting_a_member_is_refused() -> None:
    traced = _traced()
    with pytest.raises(RuntimeError, match="cannot delete 'b'"):
        del traced.b
    assert "b" in dict(traced.named_buffers())


def test_replacing_a_tensor_works_as_in_torch() -> None:
    traced = _traced()
    x = sm.randn(3, 4)
    traced.b = sm.ones(4)
    traced.fc.weight = nn.Parameter(sm.eye(4))
    traced.fc.bias = nn.Parameter(sm.zeros(4))
    traced.note = "a plain attribute"                # not a member: allowed, as in torch
    with sm.no_grad():
        np.testing.assert_allclose(traced(x).numpy(), x.numpy() + 1, rtol=1e-6, atol=1e-6)
    copy = __import__("copy").deepcopy(traced)
    with pytest.raises(AttributeError):
        copy.register_buffer("nb", sm.zeros(2))


def test_calling_a_traced_submodule_runs_its_graph() -> None:
    """Deliberately more than PyTorch, which raises 'Trace submodules cannot be called.'."""
    model = Net().eval()
    traced = jit.trace(model, sm.randn(2, 4))
    x = sm.randn(5, 4)
    with sm.no_grad():
        np.testing.assert_allclose(traced.fc(x).numpy(), model.fc(x).numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_torch_refuses_calling_a_traced_submodule() -> None:
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(_net_class(torch)().eval(), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="Trace submodules cannot be called"):
        traced.fc(torch.randn(2, 4))
