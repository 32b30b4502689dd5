"""runtime.steps: the registry of how a node runs outside native segments. Each row applies
to a graph built to need it, with a reason that says why; the plan (``Executable.plan_rows``)
covers every node of every block, native ones too; ``Executable.explain`` prints one line per
node with its step and target, then every generated source; and the generated program calls
the step of the row the plan names (it decides nothing itself)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Node, Prim
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.ir.types import TensorType
from scriptmod.runtime import steps
from scriptmod.runtime.executable import ArrayOps, Executable
from scriptmod.runtime.interpreter import OpHandler


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


def f32(*shape: int) -> TensorType:
    return TensorType(D.float32, shape)


def node_of(g: Graph, kind: str) -> Node:
    """The first node of ``kind`` (a fusion group: ``prim::FusionGroup``)."""
    return next(n for n in g.walk() if n.kind == kind)


MLP = """graph(%x : Float(256, 256), %w : Float(256, 256), %b : Float(256)):
  %m : Float(256, 256) = sm::matmul(%x, %w)
  %a : Float(256, 256) = sm::add(%m, %b)
  %y : Float(256, 256) = sm::relu(%a)
  return (%y)
"""

VIEW_INDEX = """graph(%x : Float(4, 8), %w : Float(8, 8), %b : Float(8)):
  %m : Float(4, 8) = sm::matmul(%x, %w)
  %a : Float(4, 8) = sm::add(%m, %b)
  %y : Float(4, 8) = sm::relu(%a)
  %t : Float(8, 4) = sm::transpose[dim0=0, dim1=1](%y)
  %i : Float(4) = sm::index[spec=[("int", 1), ("slice", None, None, None)]](%t)
  return (%i)
"""

MODULE = """graph(%self : __module__.M, %x : Float(4, 8)):
  %w : Float(8, 8) = prim::GetAttr[name="w"](%self)
  %t : Float(8, 8) = sm::transpose[dim0=0, dim1=1](%w)
  %y : Float(4, 8) = sm::matmul(%x, %t)
  %l : Float(4, 8)[] = prim::ListConstruct(%y)
  %n : int = sm::numel(%x)
  %c : float = prim::Constant[value=2.0]()
  %z : Float(4, 8) = sm::mul(%y, %c)
  return (%z, %l, %n)
"""


def decision(ex: Executable, node: Node) -> steps.Decision:
    return ex.steps.decisions[node]


def mlp_inputs(n: int = 256) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, n), dtype=np.float32) / 16,
            rng.standard_normal((n, n), dtype=np.float32) / 16,
            rng.standard_normal(n, dtype=np.float32)]


# ---- each row, on a graph that needs it -------------------------------------------------------

@pytest.mark.parametrize("kind, step, why", [
    (Prim.GET_ATTR, "get-attr", "attribute callback"),
    ("sm::transpose", "view-memo", "view of module attribute 'w'"),
    ("sm::matmul", "matmul", "np.matmul"),
    (Prim.LIST_CONSTRUCT, "interpreter", "Interpreter.list_construct"),
    ("sm::numel", "scalar-kernel", "int result"),
    (Prim.CONSTANT, "constant", "bound once"),
    ("sm::mul", "op", "run_kernel: an elementwise op"),
])
def test_rows_of_a_module_graph(kind: str, step: str, why: str) -> None:
    g = parse(MODULE)
    ex = Executable(g, native=False)
    d = decision(ex, node_of(g, kind))
    assert (d.step, d.row.name) == (step, step) and why in d.reason, d


def test_view_memo_names_the_step_it_wraps_and_runs() -> None:
    g = parse(MODULE)
    ex = Executable(g, native=False)
    assert decision(ex, node_of(g, "sm::transpose")).reason.endswith("else kernel")
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = np.ones((4, 8), np.float32)
    z, lst, n = ex.run(SimpleNamespace(w=w), x)
    np.testing.assert_allclose(z, 2 * x @ w.T)
    assert n == 32 and len(lst) == 1


def test_rows_of_fused_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    g = fuse_elementwise(parse(VIEW_INDEX))
    ex = Executable(g, native=False)
    rows = {n.kind: decision(ex, n) for n in g.nodes}
    assert rows[Prim.FUSION_GROUP].step == "fusion-group"
    assert "generated kernel" in rows[Prim.FUSION_GROUP].reason
    assert rows[Prim.FUSION_GROUP].target == "LLVM"
    assert rows["sm::transpose"].step == "kernel" and "called directly" in rows["sm::transpose"].reason
    assert rows["sm::index"].step == "basic-index" and "basic indexing" in rows["sm::index"].reason
    assert rows["sm::matmul"].target == "NumPy"


@pytest.mark.parametrize("text, step, kind, why", [
    (MLP, "epilogue", Prim.FUSION_GROUP, "epilogue of our GEMM"),
    (MLP, "epilogue", "sm::matmul", "deferred to its epilogue group"),
    (MLP.replace("  %a : Float(256, 256) = sm::add(%m, %b)\n  %y : Float(256, 256) = "
                 "sm::relu(%a)\n  return (%y)", "  return (%m)"), "own-gemm", "sm::matmul",
     "our GEMM"),
])
def test_gemm_rows(monkeypatch: pytest.MonkeyPatch, text: str, step: str, kind: str,
                   why: str) -> None:
    monkeypatch.setenv("SCRIPTMOD_GEMM", "own")
    g = fuse_elementwise(parse(text))
    ex = Executable(g, native=False)
    d = decision(ex, node_of(g, kind))
    assert d.step == step and why in d.reason and d.target == "LLVM", d
    x, w, b = mlp_inputs()
    want = x @ w if step == "own-gemm" else np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(ex.run(x, w, b), want, rtol=1e-4, atol=1e-4)


def test_gemm_rows_follow_the_gemm_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_GEMM", "blas")
    g = fuse_elementwise(parse(MLP))
    ex = Executable(g, native=False)
    assert [decision(ex, n).step for n in g.nodes] == ["matmul", "fusion-group"]


def test_attention_row() -> None:
    g = Graph()
    b = Builder(g)
    q, k, v = (b.input(f32(2, 4, 16, 8), name) for name in "qkv")
    b.ret(b.op("attention", q, k, v, None, scale=0.5))
    d = decision(Executable(g, native=False), node_of(g, "sm::attention"))
    assert d.step == "attention" and "fused attention kernel" in d.reason and d.target == "LLVM"


def test_reference_kernel_row_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise NotImplementedError("sm::mul has no lowering here")
    monkeypatch.setattr(steps, "FusedKernel", refuse)
    g = fuse_elementwise(parse(VIEW_INDEX))
    ex = Executable(g, native=False)
    d = decision(ex, node_of(g, Prim.FUSION_GROUP))
    assert d.step == "reference-kernel" and "no lowering here" in d.reason and d.target == "NumPy"
    x, w, b = mlp_inputs(8)
    want = np.maximum(x[:4] @ w + b, 0).T[1, :]
    np.testing.assert_allclose(ex.run(x[:4], w, b), want, rtol=1e-5, atol=1e-6)


class Counting(OpHandler):
    """A handler with a fast step of its own for ops."""

    def step(self, node: Node) -> Any:
        return (lambda a: self.call_op(node, a)[0]) if node.is_op else None


def test_handler_and_call_rows() -> None:
    g = parse(MODULE)
    ex = Executable(g, Counting(), native=False)
    assert decision(ex, node_of(g, "sm::matmul")).step == "handler-step"
    assert decision(ex, node_of(g, Prim.GET_ATTR)).step == "interpreter"
    call = parse("""graph(%self : __module__.M, %x : Float(4, 8)):
      %y : Float(4, 8) = prim::CallMethod[name="forward"](%self, %x)
      return (%y)
    """)
    d = decision(Executable(call, ArrayOps(), native=False), node_of(call, Prim.CALL_METHOD))
    assert d.step == "call-method" and "call_method" in d.reason


def test_op_step_is_the_registry() -> None:
    """``ArrayOps.step`` of an op is the step its registry row builds."""
    g = parse(VIEW_INDEX)
    for n in g.nodes:
        row, _ = steps.choose(n, steps.ARRAYS)
        assert row.name in ("matmul", "op", "kernel", "basic-index")
        x = np.ones((8, 8), np.float32)
        if n.op_name == "transpose":
            np.testing.assert_array_equal(ArrayOps().step(n)([x[:4]]), x[:4].T)


# ---- the plan covers every node ---------------------------------------------------------------

def loop_graph() -> Graph:
    g = Graph()
    b = Builder(g)
    x = b.input(f32(2, 3), "x")
    y, = b.loop(3, [x], lambda i, acc: [b.op("relu", b.op("add", acc, x))])
    b.ret(b.op("mul", y, y))
    return g


@pytest.mark.parametrize("native", [True, False])
def test_plan_rows_cover_every_node(native: bool) -> None:
    for g in (loop_graph(), fuse_elementwise(parse(VIEW_INDEX)), parse(MODULE)):
        ex = Executable(g, native=native)
        assert [d.node for d in ex.plan_rows] == list(g.walk())
        assert all(d.step and d.target and d.reason for d in ex.plan_rows)
        for d in ex.plan_rows:
            assert (d.row is None) == (d.step in ("native", "skipped", "state-read", "if",
                                                  "loop")), d
            if d.step == "native":
                assert d.target == "LLVM" and d.reason


def test_native_rows_name_their_segment() -> None:
    g = fuse_elementwise(parse(VIEW_INDEX))
    ex = Executable(g, native=True)
    native = [d for d in ex.plan_rows if d.step == "native"]
    assert native and all("segment" in d.reason or d.reason for d in native)
    assert {d.node for d in native} == set(ex.plan.native_nodes)


# ---- explain ----------------------------------------------------------------------------------

@pytest.mark.parametrize("native", [False, True])
def test_explain_lines_and_sources(native: bool) -> None:
    g = fuse_elementwise(parse(VIEW_INDEX))
    ex = Executable(g, native=native)
    x, w, b = mlp_inputs(8)
    ex.run(x[:4], w, b)                     # launchers and key functions are made per call
    text = ex.explain()
    lines = text.splitlines()
    assert lines[0] == repr(ex) and lines[1].startswith("inputs: v0 : Float(4, 8)")
    assert lines[2].split() == ["outputs", "=", "kind", "step", "target", "reason"]
    table = lines[3:3 + len(g.nodes)]
    for line, d in zip(table, ex.plan_rows):
        cells = line.split()
        assert cells[0] == ex._program.name[d.node.output] and cells[1] == "="
        assert f" {d.step} " in line and f" {d.target} " in line and line.endswith(d.reason)
    starts = {line.index(" = ") for line in table}
    assert len(starts) == 1                  # aligned columns
    sources = ex.sources()
    assert sources["program"] == ex._program.source and f"---- program\n{ex._program.source}" in text
    assert any(t.startswith("<scriptmod index> index (sm::index)") for t in sources)
    if native:
        assert "native segment 0: steps" in sources and "native segment 0: runner" in sources
    else:
        assert any(t.startswith("<scriptmod layout key>") for t in sources)
        assert any(t.startswith("<scriptmod launcher>") for t in sources)
    for title, src in sources.items():
        assert f"---- {title}\n{src.rstrip()}" in text


def test_explain_indents_blocks() -> None:
    ex = Executable(loop_graph(), native=False)
    table = ex.explain().splitlines()[3:]
    loop = next(line for line in table if "prim::Loop" in line)
    body = table[table.index(loop) + 1]
    assert " loop " in loop and "while loop" in loop
    assert len(body) - len(body.lstrip()) == len(loop) - len(loop.lstrip()) + 2


# ---- the program obeys the plan ---------------------------------------------------------------

@pytest.mark.parametrize("native", [False, True])
def test_program_builds_the_step_the_plan_names(monkeypatch: pytest.MonkeyPatch,
                                                native: bool) -> None:
    monkeypatch.setenv("SCRIPTMOD_GEMM", "own")
    built: list[tuple[Node, str]] = []

    def counting(row: steps.Row) -> steps.Row:
        def build(node: Node, site: steps.Site) -> steps.Built:
            built.append((node, row.name))
            return row.build(node, site)
        return steps.Row(row.name, row.applies, build, row.compiled)
    monkeypatch.setattr(steps, "ROWS", [counting(r) for r in steps.ROWS])
    for g in (fuse_elementwise(parse(MLP)), fuse_elementwise(parse(VIEW_INDEX)),
              loop_graph(), parse(MODULE)):
        built.clear()
        ex = Executable(g, native=native)
        prog = ex._program
        python = {d.node: d.step for d in ex.plan_rows
                  if d.row is not None and d.step != "constant" and d.node not in ex.steps.deferred}
        assert prog.built == {**python, **{d.node: "constant" for d in ex.plan_rows
                                           if d.step == "constant"}}
        assert set(prog.step_of) == set(python)
        first: dict[Node, str] = {}          # (a view-memo row builds the row it wraps next)
        for n, s in built:
            first.setdefault(n, s)
        assert {n: s for n, s in first.items() if n in python} == python
