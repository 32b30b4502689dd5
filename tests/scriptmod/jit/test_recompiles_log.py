"""``SCRIPTMOD_LOG=recompiles``: every new specialization of a compiled method is one line
naming the method, how many it holds, whether it is concrete or the shared symbolic one,
and why (the argument, dim and both sizes; a dtype, rank or requires_grad change; hooks;
the module state), found against its nearest existing specialization; LRU evictions are
lines too; cache hits and warm calls log nothing, and nothing is formatted when the topic
is off. The profiler's compile event of a specialization names the same cause."""
from __future__ import annotations

import logging
from typing import Any

import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir import log as irlog
from scriptmod.jit import _executor, _recompiles
from scriptmod.profiler import profile

LOGGER = "scriptmod.recompiles"


pytestmark = pytest.mark.usefixtures("logs_off")     # tests/conftest.py


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture):
    """The ``recompiles`` messages logged since the test began (or since the last clear)."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    def messages(clear: bool = True) -> list[str]:
        out = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        if clear:
            caplog.clear()
        return out
    return messages


class Seq(nn.Module):
    """Dim 1 of ``idx`` is a sequence length (dim 0, the batch, becomes symbolic)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, idx: Any) -> Any:
        return self.head(self.emb(idx).relu())


class Pair(nn.Module):
    def forward(self, x, y):                 # unannotated: scripted, both are Tensors
        return (x * 2.0 + y).tanh()


def test_first_call_then_a_new_size_at_dim_1_names_argument_dim_and_both_sizes(lines) -> None:
    with sm.no_grad():
        traced = jit.trace(Seq().eval(), sm.ones(2, 8, 16))
        traced(sm.ones(2, 8, 16))
        assert lines() == ["Seq.forward: compiling a concrete specialization, 1 held; "
                           "because: first call"]
        traced(sm.ones(2, 9, 16))
        assert lines() == ["Seq.forward: compiling the shared symbolic specialization (every "
                           "size of its batch class but the first, B = 2, s0 = 8), 2 held; "
                           "because: argument 'idx': size 9 at dim 1, was 8 (automatic dynamic "
                           "shapes: dim 1 of 'idx' is now symbolic (s0))"]
        traced(sm.ones(2, 8, 16))
        traced(sm.ones(2, 9, 16))                          # cache hits and warm calls: silent
        traced(sm.ones(2, 10, 16))                         # the shared one serves it
    assert lines() == []


def test_without_automatic_dynamic_shapes_each_size_is_concrete(lines) -> None:
    with sm.no_grad():
        traced = jit.trace(Seq().eval(), sm.ones(2, 8, 16), dynamic=False)
        traced(sm.ones(2, 8, 16))
        traced(sm.ones(2, 9, 16))
    assert lines()[-1] == ("Seq.forward: compiling a concrete specialization, 2 held; "
                           "because: argument 'idx': size 9 at dim 1, was 8")


def test_several_differences_are_all_listed_against_the_nearest(lines) -> None:
    with sm.no_grad():
        traced = jit.trace(Pair(), (sm.ones(3, 4), sm.ones(3, 4)))
        traced(sm.ones(3, 4), sm.ones(3, 4))
        traced(sm.ones(3, 5), sm.ones(3, 5))
        traced(sm.ones(3, 4, dtype=sm.float64), sm.ones(3, 4, dtype=sm.float64))
        traced(sm.ones(3, 4), sm.ones(4))
    reasons = [m.split("because: ")[1] for m in lines()]
    assert reasons == ["first call",
                       "argument 'x': size 5 at dim 1, was 4; argument 'y': size 5 at dim 1, "
                       "was 4 (automatic dynamic shapes: dim 1 of 'x' is now symbolic (s0), "
                       "dim 1 of 'y' is now symbolic (s0))",
                       "argument 'x': float64, was float32; argument 'y': float64, was float32",
                       "argument 'y': rank 1 (4), was rank 2 (B, s0)"]


def test_requires_grad_and_module_state_changes(lines) -> None:
    traced = jit.trace(Pair(), (sm.ones(3, 4), sm.ones(3, 4)))
    traced(sm.ones(3, 4), sm.ones(3, 4))
    traced(sm.ones(3, 4, requires_grad=True), sm.ones(3, 4))
    assert lines()[-1].endswith("because: argument 'x': requires grad, was not")
    model = jit.trace(Seq().eval(), sm.ones(2, 8, 16))
    with sm.no_grad():
        model(sm.ones(2, 8, 16))
        model.double()
        model(sm.ones(2, 8, 16, dtype=sm.float64))
    assert lines()[-1].endswith("because: argument 'idx': float64, was float32; module state "
                                "layout changed (a parameter or buffer replaced, cast or moved)")


def test_a_registered_hook(lines) -> None:
    with sm.no_grad():
        traced = jit.trace(Seq().eval(), sm.ones(2, 8, 16))
        traced(sm.ones(2, 8, 16))
        handle = traced.head.register_forward_hook(lambda *a: None)
        traced(sm.ones(2, 8, 16))
        assert "Seq.forward: compiling a concrete specialization, 2 held; because: hooks " \
               "registered on head" in lines()
        handle.remove()
        traced(sm.ones(2, 8, 16))                          # the hook-free one again: a hit
    assert not [m for m in lines() if m.startswith("Seq.forward")]


def test_batch_class_second_size_is_the_shared_symbolic_one_third_compiles_nothing(
        lines) -> None:
    with sm.no_grad():
        traced = jit.trace(nn.Linear(4, 3), sm.ones(5, 4))
        traced(sm.ones(5, 4))
        lines()
        traced(sm.ones(6, 4))
        assert lines() == [
            "Linear.forward: compiling the shared symbolic specialization (every size of its "
            "batch class but the first, B = 5), 2 held; because: argument 'input': size 6 at "
            "dim 0, was 5"]
        traced(sm.ones(7, 4))
        assert lines() == []
        traced(sm.ones(1, 4))                              # size 1: concrete, not the class
        traced(sm.ones(6, 4, requires_grad=True))          # nearest: the symbolic one
    assert [m.split("because: ")[1] for m in lines()] == [
        "argument 'input': size 1 at dim 0, was any size >= 2 (B; sizes 0 and 1 specialize "
        "concretely)", "argument 'input': requires grad, was not"]


def test_a_scripted_module(lines) -> None:
    scripted = jit.script(Pair())
    with sm.no_grad():
        scripted(sm.ones(3, 4), sm.ones(3, 4))
        scripted(sm.ones(2, 4), sm.ones(2, 4))
    got = lines()
    assert got[0] == "Pair.forward: compiling a concrete specialization, 1 held; because: " \
                     "first call"
    assert got[1].endswith("because: argument 'x': size 2 at dim 0, was 3; argument 'y': "
                           "size 2 at dim 0, was 3 (automatic dynamic shapes: dim 0 of 'x' is "
                           "now symbolic (s0), dim 0 of 'y' is now symbolic (s0))")


def test_eviction_names_the_key_and_the_limit(lines, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_executor, "MAX_SPECIALIZATIONS", 2)
    scripted = jit.script(Pair())
    with sm.no_grad():
        for dtype in (sm.float32, sm.float64, sm.int64):
            scripted(sm.ones(2, 3, dtype=dtype), sm.ones(2, 3, dtype=dtype))
    got = lines()
    assert got[2].startswith("Pair.forward: compiling a concrete specialization, 2 held; "
                             "because: argument 'x': int64, was float64")
    assert got[3] == ("Pair.forward: evicted the least recently used specialization ('x': "
                      "Tensor float32 (2, 3) on cpu, 'y': Tensor float32 (2, 3) on cpu): the "
                      "limit of 2 specializations per method (MAX_SPECIALIZATIONS) was reached")


def test_topic_off_formats_nothing(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a recompiles message was built with the topic off")
    for name in ("why", "new_spec_line", "evicted_line"):
        monkeypatch.setattr(_recompiles, name, boom)
    monkeypatch.setattr(_executor, "MAX_SPECIALIZATIONS", 1)
    with sm.no_grad():
        traced = jit.trace(Seq().eval(), sm.ones(2, 8, 16))
        for t in (8, 9, 10):
            assert traced(sm.ones(2, t, 16)).shape == (2, t, 4)
    assert capsys.readouterr().err == ""


def test_env_variable_prints_the_lines(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(irlog.ENV_VAR, "recompiles")
    scripted = jit.script(Pair())
    with sm.no_grad():
        scripted(sm.ones(3, 4), sm.ones(3, 4))
    assert capsys.readouterr().err == ("[scriptmod:recompiles] Pair.forward: compiling a "
                                       "concrete specialization, 1 held; because: first call\n")


def test_profiler_compile_event_names_the_cause() -> None:
    traced = jit.trace(nn.Linear(4, 3), sm.ones(5, 4))
    x, y = sm.ones(5, 4), sm.ones(6, 4)
    with sm.no_grad(), profile() as prof:
        traced(x)
        traced(y)
    compiles = [e for e in prof.events() if e.name.startswith("Linear.forward: specialize")]
    assert [e.name for e in compiles] == [
        "Linear.forward: specialize (argument 'input': size 6 at dim 0, was 5)"]
    assert compiles[0].category == "compile"
    assert compiles[0].args == {"reason": "argument 'input': size 6 at dim 0, was 5",
                                "specialization": "symbolic"}
