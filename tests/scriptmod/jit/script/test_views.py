"""What a scripted function or module shows: ``.graph`` prints text that parses back to the
same text (and a graph that verifies), ``.code`` is Python that compiles and states the
program's control flow, ``.code_with_constants`` and ``.inlined_graph`` of a module."""
from __future__ import annotations

import ast
from typing import Any, Callable

import pytest

import scriptmod as sm
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.verify import verify

from . import programs as P

FUNCTIONS = [fn for fn, _ in P.CASES]


def _scripted(fn: Callable) -> Any:
    return sm.jit.script(fn)


def _assert_round_trip(g: Graph) -> None:
    text = str(g)
    again = sm.ir.parse(text)
    assert str(again) == text, f"printed, parsed and printed again differs:\n{text}\n---\n" \
                               f"{again}"


def _control_flow(g: Graph) -> set[str]:
    return {n.kind for n in g.walk() if n.kind in (Prim.IF, Prim.LOOP)}


@pytest.mark.parametrize("fn", FUNCTIONS, ids=[f.__name__ for f in FUNCTIONS])
def test_graph_prints_and_parses_back(fn: Callable) -> None:
    _assert_round_trip(_scripted(fn).graph)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=[f.__name__ for f in FUNCTIONS])
def test_graph_verifies(fn: Callable) -> None:
    """ir.verify holds on the graph and its parsed text (a return on one path only used to
    fill the other path with a None constant typed Tensor; prim::Uninitialized now)."""
    g = _scripted(fn).graph
    verify(g)
    verify(sm.ir.parse(str(g)))


@pytest.mark.parametrize("fn", FUNCTIONS, ids=[f.__name__ for f in FUNCTIONS])
def test_code_compiles_as_python(fn: Callable) -> None:
    s = _scripted(fn)
    code = s.code
    compile(code, f"<{fn.__name__}.code>", "exec")
    tree = ast.parse(code)
    (fdef,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert fdef.name == fn.__name__
    assert [a.arg for a in fdef.args.args] == list(fn.__code__.co_varnames[
        :fn.__code__.co_argcount])
    kinds = _control_flow(s.graph)
    stmts = {type(n) for n in ast.walk(fdef)}
    if Prim.LOOP in kinds:
        assert stmts & {ast.For, ast.While}, code
    if Prim.IF in kinds:
        assert stmts & {ast.If, ast.IfExp}, code


@pytest.mark.parametrize("fn", [P.halve_until, P.nested_break_continue, P.early_return],
                         ids=lambda f: f.__name__)
def test_code_with_constants_is_the_code_and_a_constmap(fn: Callable) -> None:
    s = _scripted(fn)
    code, consts = s.code_with_constants
    assert code == s.code
    assert isinstance(consts, dict) and not consts       # scripted code has no tensor constants
    compile(code, "<code_with_constants>", "exec")


@pytest.fixture(scope="module")
def loop_net() -> Any:
    return sm.jit.script(P._seeded(P.LoopNet)())


def test_module_graph_and_methods_round_trip(loop_net: Any) -> None:
    _assert_round_trip(loop_net.graph)
    _assert_round_trip(loop_net.shrink.graph)
    assert Prim.LOOP in _control_flow(loop_net.shrink.graph)
    for block in loop_net.blocks:
        _assert_round_trip(block.graph)


def test_module_code_and_code_with_constants(loop_net: Any) -> None:
    code = loop_net.code
    compile(code, "<LoopNet.code>", "exec")
    assert code.startswith("def forward(self, x: Tensor, k: int) -> Tensor:")
    assert "self.shrink(" in code
    shrink = loop_net.shrink.code
    compile(shrink, "<LoopNet.shrink.code>", "exec")
    assert shrink.startswith("def shrink(self, x: Tensor, k: int) -> Tensor:")
    assert "for " in shrink or "while " in shrink
    code2, consts = loop_net.code_with_constants
    assert code2 == code and isinstance(consts, dict)


def test_inlined_graph_of_a_scripted_module(loop_net: Any) -> None:
    """User submodules and methods are inlined (no prim::CallMethod left), the loops stay,
    and the text parses back; the plain graph still calls them."""
    g = loop_net.graph
    assert any(n.kind == Prim.CALL_METHOD for n in g.walk())
    inlined = loop_net.inlined_graph
    verify(inlined)
    assert not any(n.kind == Prim.CALL_METHOD for n in inlined.walk())
    loops = [n for n in inlined.walk() if n.kind == Prim.LOOP]
    assert len(loops) >= 2                 # the repeats loop and shrink's loop
    _assert_round_trip(inlined)
    assert [v.type for v in inlined.inputs] == [v.type for v in g.inputs]


def test_views_of_a_scripted_module_run_the_same_after_printing(loop_net: Any) -> None:
    """Reading the views changes nothing: the module still gives eager's result."""
    model = P._seeded(P.LoopNet)()
    _ = loop_net.code, loop_net.graph, loop_net.inlined_graph, loop_net.code_with_constants
    x = P.X34
    with sm.no_grad():
        want = model(x, 2)
        got = loop_net(x, 2)
    assert (got - want).abs().max().item() < 1e-5
