"""Lists (and dicts) built while a scripted program runs, then handed to a library call
(issue 35): ``xs = []; xs.append(x); sm.cat(xs)`` raised "cat(): expected a non-empty list of
Tensors", because the call's expansion read the list's items from the literal it started as
(``[]``), before the appends ran. Every model of runtime_list_models.py runs scripted against
eager, under no_grad and with grad (outputs, input and parameter gradients), at two batch
sizes, and against torch.jit.script of the same source where torch is installed; the graph
tests check which calls are expanded when the specialization is built (the list's items are
fixed by the graph) and which run when reached (a loop or a branch fills it)."""
from __future__ import annotations

from typing import Dict, List

import pytest

import scriptmod as sm
from scriptmod import Tensor, nn

from . import runtime_list_models
from .script_util import (assert_same, check_table_against_torch, check_table_gradients,
                          check_table_no_grad, table_model, tensor)

MODELS = runtime_list_models.build(sm)
NAMES = sorted(MODELS)


def _model(name: str) -> nn.Module:
    return table_model(MODELS, name)


@pytest.mark.parametrize("name", NAMES)
def test_scripted_equals_eager_under_no_grad(name: str) -> None:
    check_table_no_grad(MODELS, name, again=True)


@pytest.mark.parametrize("name", NAMES)
def test_scripted_gradients_equal_eager(name: str) -> None:
    check_table_gradients(MODELS, name)


@pytest.mark.parametrize("name", NAMES)
def test_same_as_torch_jit_script(name: str) -> None:
    check_table_against_torch(MODELS, runtime_list_models.build, name)


def test_issue_repro() -> None:
    class M(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            xs: List[Tensor] = []
            xs.append(x)
            xs.append(x * 2)
            return sm.cat(xs, 0)
    x = sm.randn(3, 4)
    assert_same(sm.jit.script(M())(x), sm.cat([x, x * 2], 0))


def _calls(fn: object, *args: object) -> list[str]:
    """The library calls left in ``fn``'s specialization for ``args`` (those that run as
    Python calls when reached)."""
    scripted = sm.jit.script(fn)
    with sm.no_grad():
        scripted(*args)
    graph = scripted.graph_for(*args)
    return [n.attrs["name"] for n in graph.walk() if n.kind == "prim::CallFunction"]


def _straight(x: Tensor) -> Tensor:
    xs: List[Tensor] = [x]
    a = sm.cat(xs, 0)                 # reads [x]
    xs.append(x * 2.0)
    xs.append(x * 3.0)
    return sm.cat(xs, 0) + sm.cat([a, a, a], 0)    # reads [x, 2x, 3x]


def _looped(x: Tensor, n: int) -> Tensor:
    xs: List[Tensor] = []
    for i in range(n):
        xs.append(x * float(i))
    return sm.cat(xs, 0)


def test_appends_in_straight_line_code_expand_when_the_specialization_is_built() -> None:
    """The items a call reads are fixed by the graph: each call sees the appends before
    it, none after, and nothing is left to run as a Python call."""
    x = tensor(2, 3)
    assert _calls(_straight, x) == []
    with sm.no_grad():
        assert_same(sm.jit.script(_straight)(x), _straight(x))


def test_appends_in_a_loop_run_the_call_when_reached() -> None:
    x = tensor(2, 3)
    assert _calls(_looped, x, 3) == ["scriptmod.cat"]
    scripted = sm.jit.script(_looped)
    for n in (1, 4, 2):
        with sm.no_grad():
            assert_same(scripted(x, n), _looped(x, n), f"n={n}")


def test_list_of_a_list_copies_and_of_a_dict_gives_its_keys() -> None:
    def f(x: Tensor) -> Tensor:
        xs: List[Tensor] = [x]
        ys = list(xs)
        ys.append(x * 2.0)
        d: Dict[str, Tensor] = {"a": x, "b": x + 1.0}
        keys = list(d)
        return sm.cat(xs + ys + [d[k] for k in keys], 0)
    x = tensor(2, 3)
    with sm.no_grad():
        assert_same(sm.jit.script(f)(x), f(x))


def test_local_annotations_resolve_through_the_closure() -> None:
    """As TorchScript: ``List[lib.Tensor]`` in a function that closes over ``lib``."""
    def make(lib: object) -> object:
        def f(x: "lib.Tensor") -> "lib.Tensor":      # type: ignore[name-defined]
            xs: List[lib.Tensor] = [x]                # type: ignore[name-defined]
            return lib.cat(xs, 0)                     # type: ignore[attr-defined]
        return f
    x = tensor(2, 3)
    with sm.no_grad():
        assert_same(sm.jit.script(make(sm))(x), sm.cat([x], 0))
