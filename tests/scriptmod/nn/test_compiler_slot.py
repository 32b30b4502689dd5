"""nn reaches the tracing compiler through ``nn._compiler``, which ``scriptmod.jit`` fills."""
from __future__ import annotations

import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.nn import _compiler


def test_jit_registers_itself_on_import():
    c = _compiler.compiler("test")
    assert c.trace is jit.trace and c.script_module is jit.ScriptModule


@pytest.mark.parametrize("what, call", [
    ("Module.compile", lambda m: m.compile()),
    ("trace_graph", lambda m: m.trace_graph(sm.ones(1, 3))),
    ("show_graph", lambda m: m.show_graph(sm.ones(1, 3))),
])
def test_an_empty_slot_names_what_is_missing(monkeypatch, what, call):
    monkeypatch.setattr(_compiler, "_registered", None)
    with pytest.raises(RuntimeError, match=f"{what} needs scriptmod.jit, which has not "
                                           "registered its compiler"):
        call(nn.Linear(3, 2))


def test_register_compiler_checks_its_argument():
    with pytest.raises(TypeError, match="expected a Compiler, got function"):
        _compiler.register_compiler(jit.trace)  # type: ignore[arg-type]
    assert _compiler.compiler("test").trace is jit.trace       # the slot is unchanged
