"""runtime.executable.Executable on graphs with blocks: ``prim::If`` and ``prim::Loop`` run
as structured Python in the one generated program (not through the reference interpreter),
compared with ``runtime.interpreter.run_graph`` on the same inputs, with native=True and
native=False, unfused and fused (fusion groups inside blocks run their kernels). Covers
loops of 0, 1 and many trips, a condition false at entry, data-dependent exits, carried
tensors and ints, swapped carried values, nesting both ways, outputs that are carried
values, values defined before a loop and read in and after it, error mapping inside blocks,
``direct()``, ``SCRIPTMOD_LOG=codegen``, and hypothesis-generated nested programs."""
from __future__ import annotations

import ast
from typing import Any, Callable, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim, Value
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.ir.types import BoolType, IntType, TensorType
from scriptmod.ir.verify import verify
from scriptmod.runtime import steps as E      # where Python steps make their Interpreter
from scriptmod.runtime import interpreter as I
from scriptmod.runtime.executable import Executable
from scriptmod.runtime.interpreter import InterpreterError, RaisedException, run_graph

F32 = D.float32
T23 = TensorType(F32, (2, 3))
NATIVE = [pytest.param(True, id="native"), pytest.param(False, id="python")]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


class _NoBlocks(I.Interpreter):
    """An interpreter that refuses If and Loop nodes."""

    def if_(self, node: Any, args: Any) -> Any:
        raise AssertionError(f"{node.kind} ran in the reference interpreter")

    loop = if_


@pytest.fixture
def no_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Executable never hands an If or a Loop to an interpreter: the program runs them
    itself (the reference ``run_graph`` the tests compare with is left alone)."""
    monkeypatch.setattr(E, "Interpreter", _NoBlocks)


def as_list(r: Any) -> list:
    return list(r) if isinstance(r, tuple) else [r]


def check(g: Graph, *args: Any, native: bool = True, fuse: bool = False) -> Executable:
    """Run ``g`` (fused first when ``fuse``) through a fresh Executable and compare every
    output with the reference interpreter on the unfused graph; twice, so a second call
    sees no state left by the first. Returns the Executable."""
    verify(g)
    want = as_list(run_graph(g, *args))
    run_g = fuse_elementwise(g.copy()) if fuse else g
    ex = Executable(run_g, native=native)
    if not native:
        assert not ex.plans and not ex.segments
    for frame in ex.frames():              # NaN everywhere: a read before a write shows
        frame.arena[:] = 0xFF
    kept: list = []
    for _ in range(2):
        got = ex(list(args))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                       rtol=1e-5, atol=1e-6, equal_nan=True)
            assert np.asarray(a).dtype == np.asarray(b).dtype
        if not kept:
            kept = [(a, np.array(a, copy=True)) for a in got]
    for a, copy in kept:                   # the second call left the first one's results
        np.testing.assert_array_equal(np.asarray(a), copy)
        assert not any(isinstance(a, np.ndarray) and np.shares_memory(a, f.arena)
                       for f in ex.frames())
    return ex


def xs(seed: int = 0, shape: tuple = (2, 3)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def graph(*types: Any) -> tuple[Graph, Builder, list[Value]]:
    g = Graph()
    b = Builder(g, source="model.py:1")
    return g, b, [b.input(t, f"a{i}") for i, t in enumerate(types)]


# ---- If ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_takes_each_branch(native: bool, sign: float, no_interpreter: None) -> None:
    g, b, (x,) = graph(T23)
    c = b.op("gt", b.op("sum", x), 0.0)
    y, z = b.if_(c, lambda: [b.op("neg", x), x], lambda: [b.op("mul", x, 2.0), b.op("exp", x)])
    b.ret(y, z)
    check(g, np.abs(xs()) * sign, native=native)


@pytest.mark.parametrize("native", NATIVE)
def test_if_without_outputs_and_empty_branches(native: bool, no_interpreter: None) -> None:
    g, b, (x, flag) = graph(T23, BoolType)
    b.if_(flag, lambda: None, lambda: None)
    b.ret(b.op("neg", x))
    for f in (True, False):
        check(g, xs(), f, native=native)


@pytest.mark.parametrize("native", NATIVE)
def test_raise_in_a_branch(native: bool) -> None:
    g, b, (x, flag) = graph(T23, BoolType)
    def fail() -> None:
        b.raise_("too big", "ValueError")
    b.if_(flag, fail, lambda: None)
    b.ret(b.op("neg", x))
    ex = check(g, xs(), False, native=native)
    with pytest.raises(ValueError, match="too big"):   # Python's own class, as in eager
        ex([xs(), True])


# ---- Loop ----------------------------------------------------------------------------------------

def _sum_loop() -> Graph:
    """acc = x; s = 0; for i in range(n): acc = acc * 0.5 + x; s += i  -> (acc, s, x)."""
    g, b, (x, n) = graph(T23, IntType)
    acc, s = b.loop(n, [x, 0], lambda i, a, s: [b.op("add", b.op("mul", a, 0.5), x),
                                                 b.op("int_add", s, i)])
    b.ret(acc, s, x)
    return g


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_loop_trip_counts_carry_tensors_and_ints(native: bool, trips: int,
                                                 no_interpreter: None) -> None:
    g = _sum_loop()
    ex = check(g, xs(), trips, native=native)
    assert ex([xs(), trips])[1] == trips * (trips - 1) // 2


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("fuse", [False, True])
def test_condition_false_at_entry(native: bool, fuse: bool, no_interpreter: None) -> None:
    g, b, (x, go) = graph(T23, BoolType)
    y, = b.while_loop(go, [x], lambda i, v: [True, b.op("add", b.op("tanh", v), 1.0)], 5)
    b.ret(y)
    check(g, xs(), False, native=native, fuse=fuse)
    check(g, xs(), True, native=native, fuse=fuse)


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("fuse", [False, True])
def test_data_dependent_early_exit(native: bool, fuse: bool, no_interpreter: None) -> None:
    """while (v.sum() < 40) for at most 64 trips: v = v * 1.5 + 1, counting the trips."""
    g, b, (x,) = graph(T23)

    def body(i: Value, v: Value, k: Value) -> list:
        w = b.op("add", b.op("mul", v, 1.5), 1.0)
        return [b.op("py_bool", b.op("lt", b.op("sum", w), 40.0)), w, b.op("int_add", k, 1)]
    v, k = b.while_loop(b.op("lt", b.op("sum", x), 40.0), [x, 0], body, 64)
    b.ret(v, k)
    ex = check(g, np.zeros((2, 3), np.float32), native=native, fuse=fuse)
    assert 1 < ex([np.zeros((2, 3), np.float32)])[1] < 64
    check(g, np.full((2, 3), 10.0, np.float32), native=native, fuse=fuse)  # 0 trips


@pytest.mark.parametrize("native", NATIVE)
def test_swapped_and_invariant_carried_values(native: bool, no_interpreter: None) -> None:
    """a, b = b, a each trip (a simultaneous rebind), and a carried value that is the
    loop-invariant input itself."""
    g, b, (x, y, n) = graph(T23, T23, IntType)
    p, q, r = b.loop(n, [x, y, x], lambda i, p, q, r: [q, p, x])
    b.ret(p, q, r)
    for trips in (0, 1, 2, 3):
        got = check(g, xs(1), xs(2), trips, native=native)([xs(1), xs(2), trips])
        np.testing.assert_array_equal(got[0], xs(1) if trips % 2 == 0 else xs(2))


@pytest.mark.parametrize("native", NATIVE)
def test_value_defined_before_the_loop_is_read_in_it_and_after(native: bool,
                                                               no_interpreter: None) -> None:
    g, b, (x, n) = graph(T23, IntType)
    h = b.op("exp", x)                                   # read in the body and after it
    y, = b.loop(n, [x], lambda i, v: [b.op("add", v, h)])
    b.ret(b.op("mul", y, h))
    ex = check(g, xs(), 4, native=native)
    loops = _while_bodies(ex)
    assert loops and all(ex._program.name[h] not in _deleted(w) for w in loops)
    check_deletes(ex)


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("fuse", [False, True])
def test_if_inside_a_loop_and_a_loop_inside_an_if(native: bool, fuse: bool,
                                                  no_interpreter: None) -> None:
    g, b, (x, n, flag) = graph(T23, IntType, BoolType)

    def body(i: Value, v: Value) -> list:
        big = b.op("gt", b.op("sum", v), 3.0)
        w, = b.if_(big, lambda: [b.op("mul", v, 0.25)], lambda: [b.op("add", b.op("exp", v), x)])
        return [w]

    def then() -> list:
        inner, = b.loop(n, [x], body)
        return [inner]
    y, = b.if_(flag, then, lambda: [b.op("neg", x)])
    b.ret(y)
    for f, trips in ((True, 0), (True, 1), (True, 5), (False, 5)):
        check(g, xs(), trips, f, native=native, fuse=fuse)


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("fuse", [False, True])
def test_nested_loops_three_deep(native: bool, fuse: bool, no_interpreter: None) -> None:
    """for i: for j: for k: acc = tanh(acc) + x, counting every inner trip."""
    g, b, (x, n, m) = graph(T23, IntType, IntType)

    def inner(k: Value, a: Value, c: Value) -> list:
        return [b.op("add", b.op("tanh", a), x), b.op("int_add", c, 1)]

    def middle(j: Value, a: Value, c: Value) -> list:
        return list(b.loop(2, [a, c], inner))

    def outer(i: Value, a: Value, c: Value) -> list:
        return list(b.loop(m, [a, c], middle))
    acc, count = b.loop(n, [x, 0], outer)
    b.ret(acc, count)
    ex = check(g, xs(), 3, 2, native=native, fuse=fuse)
    assert ex([xs(), 3, 2])[1] == 12
    check(g, xs(), 3, 0, native=native, fuse=fuse)


@pytest.mark.parametrize("native", NATIVE)
def test_fusion_group_inside_a_loop_runs_its_kernel(native: bool, no_interpreter: None) -> None:
    g, b, (x, n) = graph(T23, IntType)
    y, = b.loop(n, [x], lambda i, acc: [b.op("add", b.op("mul", acc, 2.0), x)])
    b.ret(y)
    fused = fuse_elementwise(g.copy())
    groups = [nd for nd in fused.walk() if nd.kind == Prim.FUSION_GROUP]
    assert len(groups) == 1 and groups[0].owning_block is not fused.block
    ex = Executable(fused, native=native)
    np.testing.assert_array_equal(ex.run(xs(), 3), as_list(run_graph(g, xs(), 3))[0])
    body = groups[0].owning_block
    if native:                                 # the loop body's own native segment
        assert groups[0] in ex.plans[body].native_nodes and len(ex.segments) == 1
        assert ex.segments[0].nodes == [groups[0]]
    else:
        fk = ex.fused_kernel(groups[0])
        assert fk is not None and fk.kernels             # launched, not the reference path
    assert "while" in ex._program.source


@pytest.mark.parametrize("native", NATIVE)
def test_parsed_graph_with_blocks(native: bool, no_interpreter: None) -> None:
    g = parse('''graph(%x : Float(2, 3), %n : int):
      %t : bool = prim::Constant[value=1]()
      %y : Float(2, 3), %c : int = prim::Loop(%n, %t, %x, %n)
        block0(%i : int, %v : Float(2, 3), %k : int):
          %s : Float() = sm::sum(%v)
          %p : Bool() = sm::gt(%s, %i)
          %w : Float(2, 3) = prim::If(%p)
            block0():
              %a : Float(2, 3) = sm::sub(%v, %x)
              -> (%a)
            block1():
              %b : Float(2, 3) = sm::add(%v, %x)
              -> (%b)
          %k2 : int = sm::int_sub(%k, %i)
          -> (%t, %w, %k2)
      return (%y, %c)
    ''')
    for trips in (0, 1, 6):
        check(g, xs(), trips, native=native)
        check(g, xs(), trips, native=native, fuse=True)


# ---- errors, direct(), the log ---------------------------------------------------------------------

@pytest.mark.parametrize("native", NATIVE)
def test_failing_node_inside_a_loop_is_named(native: bool) -> None:
    g = Graph()
    b = Builder(g, source="model.py:12")
    x = b.input(TensorType(F32, ("N", "K")), "x")
    w = b.input(TensorType(F32, ("K", "M")), "w")
    y, = b.loop(2, [x], lambda i, v: [b.op("relu", b.op("matmul", v, w))])
    b.ret(y)
    ex = Executable(g, native=native)
    with pytest.raises(InterpreterError, match=r"^matmul at model.py:12: shapes \(2, 3\)"):
        ex.run(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    fn, error = ex.direct()
    with pytest.raises(Exception) as info:
        fn(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), ())
    assert str(error(info.value)).startswith("matmul at model.py:12: ")


def test_direct_runs_a_graph_with_blocks() -> None:
    g = _sum_loop()
    fn, _ = Executable(g).direct()
    out = fn(xs(), 4, ())
    want = as_list(run_graph(g, xs(), 4))
    np.testing.assert_allclose(out[0], want[0], rtol=1e-6)
    assert out[1] == 6


def test_codegen_log_prints_the_structured_program(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("SCRIPTMOD_LOG", "codegen")
    g, b, (x, n) = graph(T23, IntType)
    c = b.op("gt", b.op("sum", x), 0.0)
    y, = b.if_(c, lambda: [b.op("neg", x)], lambda: [x])
    z, = b.loop(n, [y], lambda i, v: [b.op("add", v, 1.0)])
    b.ret(z)
    Executable(g, name="blocks")
    err = capsys.readouterr().err
    assert "blocks: Python program" in err
    src = err[err.index("def program"):]
    for text in ("    if v", "    else:", "    while go", " += 1"):
        assert text in src, src


# ---- last uses: structure of the generated source ----------------------------------------------

def _while_bodies(ex: Executable) -> list[ast.While]:
    return [n for n in ast.walk(ast.parse(ex._program.source)) if isinstance(n, ast.While)]


def _deleted(node: ast.AST) -> set[str]:
    return {t.id for d in ast.walk(node) if isinstance(d, ast.Delete)
            for t in d.targets if isinstance(t, ast.Name)}


def _assigned(node: ast.AST) -> set[str]:
    return {a.id for a in ast.walk(node) if isinstance(a, ast.Name) and isinstance(a.ctx, ast.Store)}


def check_deletes(ex: Executable) -> None:
    """Inside every ``while`` body, a deleted name is (re)bound inside that body: nothing
    defined outside a loop is dropped in it."""
    for w in _while_bodies(ex):
        inside = _assigned(ast.Module(body=w.body, type_ignores=[]))
        assert _deleted(w) <= inside, (sorted(_deleted(w) - inside), ex._program.source)


# ---- hypothesis: random nested programs ------------------------------------------------------------

UNARY = ["neg", "tanh", "sigmoid", "relu", "abs"]
BINARY = ["add", "mul", "sub", "maximum"]


class _Gen:
    """Draws one block's nodes into ``b``'s insertion point: tensors (2, 3) and ints."""

    def __init__(self, draw: Callable, b: Builder) -> None:
        self.draw, self.b = draw, b

    def fill(self, tensors: list[Value], ints: list[Value], depth: int) -> None:
        for _ in range(self.draw(st.integers(1, 4))):
            kind = self.draw(st.sampled_from(["unary", "binary", "int_op", "if_", "loop"]
                                             if depth else ["unary", "binary", "int_op"]))
            getattr(self, kind)(tensors, ints, depth)

    def pick(self, pool: Sequence[Value]) -> Value:
        return self.draw(st.sampled_from(list(pool)))

    def unary(self, tensors: list, ints: list, depth: int) -> None:
        tensors.append(self.b.op(self.draw(st.sampled_from(UNARY)), self.pick(tensors)))

    def binary(self, tensors: list, ints: list, depth: int) -> None:
        op = self.draw(st.sampled_from(BINARY))
        tensors.append(self.b.op(op, self.pick(tensors), self.pick(tensors)))

    def int_op(self, tensors: list, ints: list, depth: int) -> None:
        ints.append(self.b.op("int_add", self.pick(ints), self.draw(st.integers(-1, 2))))

    def _branch(self, tensors: list, ints: list, depth: int, n: int) -> list[Value]:
        t, i = list(tensors), list(ints)
        self.fill(t, i, depth - 1)
        return [self.pick(t) for _ in range(n)] + [self.pick(i)]

    def if_(self, tensors: list, ints: list, depth: int) -> None:
        b, n = self.b, self.draw(st.integers(1, 2))
        cond = (b.op("gt", b.op("sum", self.pick(tensors)), 0.0) if self.draw(st.booleans())
                else b.op("int_lt", self.pick(ints), 2))
        outs = b.if_(cond, lambda: self._branch(tensors, ints, depth, n),
                     lambda: self._branch(tensors, ints, depth, n))
        tensors.extend(outs[:n])
        ints.append(outs[n])

    def loop(self, tensors: list, ints: list, depth: int) -> None:
        b = self.b
        trips = self.draw(st.sampled_from([0, 1, 3, self.pick(ints)]))
        exit_early = self.draw(st.booleans())
        init = [self.pick(tensors), self.pick(ints)]

        def body(i: Value, v: Value, k: Value) -> list:
            t, n = tensors + [v], ints + [i, k]
            self.fill(t, n, depth - 1)
            w = b.op("tanh", self.pick(t))                   # bounded carried tensors
            cond = b.op("py_bool", b.op("lt", b.op("sum", w), 1.0)) if exit_early else True
            return [cond, w, b.op("int_add", self.pick(n), 1)]
        tensors_out = b.while_loop(self.draw(st.booleans()) or exit_early, init, body, trips)
        tensors.append(tensors_out[0])
        ints.append(tensors_out[1])


@st.composite
def block_programs(draw: Callable) -> Graph:
    g = Graph()
    b = Builder(g)
    tensors = [b.input(T23, "x"), b.input(T23, "y")]
    ints = [b.input(IntType, "n")]
    gen = _Gen(draw, b)
    gen.fill(tensors, ints, 2)
    gen.if_(tensors, ints, 2) if draw(st.booleans()) else gen.loop(tensors, ints, 2)
    outs = [tensors[-1]] + draw(st.lists(st.sampled_from(tensors + ints), max_size=2))
    b.ret(*outs)
    return g


@given(block_programs(), st.integers(0, 4), st.booleans())
def test_random_nested_programs(g: Graph, n: int, fuse: bool) -> None:
    for native in (True, False):
        ex = check(g, xs(3), xs(4), n, native=native, fuse=fuse)
        check_deletes(ex)
