"""Each pass: its structural effect, verify still passing, and unchanged numbers."""
import numpy as np
import pytest

from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import (canonicalize, eliminate_common_subexpressions, eliminate_dead_code,
                       fold_constants, inline_calls, propagate_shapes, run_pipeline)
from scriptmod.ir.passes.shapes import ShapePropagationError
from scriptmod.ir.types import ModuleType
from scriptmod.ir.verify import verify
from irsamples import assert_golden, control_flow, mlp, t
from scriptmod.runtime.interpreter import Interpreter, evaluate_node

RNG = np.random.default_rng(0)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _same_numbers(before, after, *args):
    a = Interpreter(before).run(*args)
    b = Interpreter(after).run(*args)
    for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(u, v, rtol=1e-6)


def _kinds(g):
    return [n.kind for n in g.walk()]


def _graph(build, *types):
    g = Graph()
    b = Builder(g, source="p.py:1")
    xs = [b.input(ty, f"x{i}") for i, ty in enumerate(types)]
    b.ret(*build(b, *xs))
    return g


def test_canonicalize_removes_identities_only_when_types_prove_it():
    def build(b, x, i):
        y = b.op("div", b.op("sub", b.op("add", b.op("mul", 1, x), 0), 0), 1)
        y = b.op("neg", b.op("neg", y))
        y = b.op("transpose", b.op("transpose", y, dim0=0, dim1=1), dim0=1, dim1=0)
        y = b.op("permute", b.op("permute", y, dims=[1, 0]), dims=[1, 0])
        y = b.op("reshape", b.op("cast", y, dtype=D.float32), [2, 3])
        promoted = b.op("mul", i, 1.0)            # int * float -> float: must stay
        broadcast = b.op("add", b.op("sum", x, dim=[1], keepdim=True), b.op("mul", x, 0))
        return y, promoted, broadcast
    g = _graph(build, t(2, 3), t(2, 3, dtype=D.int32))
    before = g.copy()
    run_pipeline(g, ["canonicalize", "eliminate_dead_code"], verify=True)
    assert _kinds(g).count("sm::mul") == 2 and "sm::neg" not in _kinds(g)
    assert "sm::transpose" not in _kinds(g) and "sm::permute" not in _kinds(g)
    assert "sm::reshape" not in _kinds(g) and "sm::cast" not in _kinds(g)
    assert g.outputs[0] is g.inputs[0]
    _same_numbers(before, g, _x(2, 3), np.arange(6, dtype=np.int32).reshape(2, 3))


def test_canonicalize_composes_permutes():
    g = _graph(lambda b, x: [b.op("permute", b.op("permute", x, dims=[1, 2, 0]), dims=[1, 2, 0])],
               t(2, 3, 4))
    before = g.copy()
    eliminate_dead_code(canonicalize(g))
    verify(g)
    perms = [n for n in g.walk() if n.kind == "sm::permute"]
    assert len(perms) == 1 and perms[0].attrs["dims"] == [2, 0, 1]
    _same_numbers(before, g, _x(2, 3, 4))


def test_canonicalize_folds_int_identities_of_a_range_index():
    """``start + i * step`` of ``range(n)`` (start 0, step 1) is ``i``; other constants, a
    float constant and ``0 - i`` stay."""
    from scriptmod.ir import parse
    g = parse('''graph(%i : int, %j : int):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %a : int = sm::int_mul(%i, %one)
      %b : int = sm::int_add(%zero, %a)
      %c : int = sm::int_sub(%b, %zero)
      %d : int = sm::int_mul(%two, %j)
      %e : int = sm::int_sub(%zero, %j)
      return (%c, %d, %e)
    ''')
    eliminate_dead_code(canonicalize(g))
    verify(g)
    assert g.outputs[0] is g.inputs[0]
    assert [n.kind for n in g.nodes if n.kind != "prim::Constant"] == ["sm::int_mul", "sm::int_sub"]


def test_cse_merges_equal_pure_nodes_respecting_blocks_and_commutativity():
    def build(b, x, c):
        a1 = b.op("add", x, b.op("exp", x))
        a2 = b.op("add", b.op("exp", x), x)       # commutative: same as a1
        s = b.op("sub", b.op("exp", x), x)
        s2 = b.op("sub", x, b.op("exp", x))       # not commutative: different
        r = b.op("rand", [2, 3])                  # impure: never merged
        r2 = b.op("rand", [2, 3])
        inner, = b.if_(c, lambda: b.op("exp", x), lambda: b.op("neg", x))
        return b.op("mul", a1, a2), s, s2, r, r2, inner
    g = _graph(build, t(2, 3), t(dtype=D.bool_))
    before = g.copy()
    eliminate_common_subexpressions(g)
    eliminate_dead_code(g)
    verify(g)
    top = [n.kind for n in g.nodes]
    assert top.count("sm::exp") == 1 and top.count("sm::add") == 1
    assert top.count("sm::sub") == 2 and top.count("sm::rand") == 2
    if_node = next(n for n in g.nodes if n.kind == Prim.IF)
    assert if_node.blocks[0].nodes == []          # reuses the dominating exp
    x, c = _x(2, 3), np.array(True)
    a, b = Interpreter(before).run(x, c), Interpreter(g).run(x, c)
    for i in (0, 1, 2, 5):
        np.testing.assert_allclose(a[i], b[i])


def test_dce_keeps_side_effects_and_prunes_block_outputs():
    def build(b, x, c):
        b.op("exp", x)                                    # dead
        b.op("dropout", x, True)                          # impure: kept
        b.print_(x)                                       # side effect: kept
        _, unused = b.if_(c, lambda: [x, b.op("neg", x)], lambda: [x, b.op("tanh", x)])
        y, dead = b.loop(2, [x, x], lambda i, v, w: [b.op("add", v, 1.0), b.op("exp", w)])
        return [y]
    g = _graph(build, t(2, 3), t(dtype=D.bool_))
    before = g.copy()
    eliminate_dead_code(g)
    verify(g)
    kinds = _kinds(g)
    assert "sm::dropout" in kinds and Prim.PRINT in kinds
    assert "sm::exp" not in kinds and "sm::neg" not in kinds and Prim.IF not in kinds
    loop = next(n for n in g.nodes if n.kind == Prim.LOOP)
    assert len(loop.outputs) == 1 and len(loop.blocks[0].params) == 2
    x = _x(2, 3)
    np.testing.assert_allclose(Interpreter(before).run(x, np.array(True)),
                               Interpreter(g).run(x, np.array(True)))


def test_fold_constants_structural_and_with_evaluator():
    def build(b, x):
        k = b.op("add", b.constant(2.0), b.constant(3.0))     # folds with the evaluator
        shape = b.list_([b.op("size", x, dim=0), 3])
        y = b.op("reshape", x, shape)
        tup = b.tuple_([y, k])
        c = b.constant(True)
        z, = b.if_(c, lambda: b.op("mul", b.tuple_index(tup, 0), b.tuple_index(tup, 1)),
                   lambda: x)
        w, = b.loop(0, [z], lambda i, v: b.op("neg", v))
        return [w]
    g = _graph(build, t(2, 3))
    before = g.copy()
    fold_constants(g, evaluate=evaluate_node)
    eliminate_dead_code(g)
    verify(g)
    kinds = _kinds(g)
    for gone in (Prim.IF, Prim.LOOP, Prim.TUPLE_INDEX, "sm::size", Prim.LIST_CONSTRUCT):
        assert gone not in kinds
    reshape = next(n for n in g.nodes if n.kind == "sm::reshape")
    assert reshape.inputs[1].node.attrs["value"] == [2, 3]
    _same_numbers(before, g, _x(2, 3))


def test_inline_calls():
    callee = mlp()
    g = Graph()
    b = Builder(g, source="top.py:1")
    top = b.input(ModuleType("Top"), "self")
    x = b.input(t("B", 4), "x")
    sub = b.get_attr(top, "block", ModuleType("Block", (("w", t(4, 8)), ("b", t(8)))))
    y, = b.call_method(sub, "forward", [x], [t("B")])
    b.ret(b.op("neg", y))
    inline_calls(g, lambda call: callee if call.attrs["name"] == "forward" else None)
    verify(g)
    assert_golden(str(g), """
        graph(%self : __module__.Top, %x : Float(B, 4)):
          %0 : __module__.Block = prim::GetAttr[name="block"](%self)  # top.py:1
          %1 : Float(4, 8) = prim::GetAttr[name="w"](%0)  # model.py:10, scope: block
          %2 : Float(8) = prim::GetAttr[name="b"](%0)  # model.py:10, scope: block
          %3 : Float(B, 8) = sm::matmul(%x, %1)  # model.py:11, scope: block
          %h : Float(B, 8) = sm::add(%3, %2)  # model.py:11, scope: block
          %4 : Float(B, 8) = sm::relu(%h)  # model.py:12, scope: block
          %5 : Float(B) = sm::sum[dim=[1], keepdim=0](%4)  # model.py:12, scope: block
          %6 : Float(B) = sm::neg(%5)  # top.py:1
          return (%6)
        """)
    assert "prim::CallMethod" not in str(callee)

    class Block_:
        w, b = _x(4, 8), _x(8)

    class Top:
        block = Block_()
    out = Interpreter(g).run(Top(), _x(5, 4).copy())
    assert out.shape == (5,)


def test_propagate_shapes_through_blocks_and_loops():
    g = control_flow()
    propagate_shapes(g, [t("N", 7)])
    verify(g)
    assert g.outputs[0].type == t("N", 7)
    if_node = next(n for n in g.nodes if n.kind == Prim.IF)
    assert if_node.blocks[1].outputs[0].type == t("N", 7)
    g2 = mlp()
    propagate_shapes(g2, [None, t(16, 4)], keep_symbolic=True)
    assert g2.outputs[0].type == t("B")
    propagate_shapes(g2, [None, t(16, 4)])
    assert g2.outputs[0].type == t(16)
    with pytest.raises(ShapePropagationError, match="model.py:11"):
        propagate_shapes(g2, [None, t(16, 5)])


def test_propagate_shapes_loop_that_changes_shape_settles():
    g = _graph(lambda b, x: b.loop(3, [x], lambda i, v: b.op("add", v, 1.0)), t(2, 3))
    loop = g.nodes[-1]
    loop.blocks[0].nodes[-2].output.type = t(2, 3)
    propagate_shapes(g, [t(5, 1)])
    verify(g)
    assert g.outputs[0].type == t(5, 1)


def test_pipeline_verifies_logs_and_names_the_broken_pass(monkeypatch, capsys):
    g = control_flow()
    monkeypatch.setenv("SCRIPTMOD_LOG", "passes")
    run_pipeline(g, ["canonicalize", ("fold_constants", {"evaluate": evaluate_node})], verify=True)
    err = capsys.readouterr().err
    assert "[scriptmod:passes] after canonicalize" in err and "after fold_constants" in err

    def breaks(graph):
        graph.nodes[0].output.type = t(9, 9, dtype=D.int8)
        return graph
    with pytest.raises(Exception, match="after pass breaks"):
        run_pipeline(g, [breaks], verify=True, log=lambda s: None)
    with pytest.raises(KeyError, match="unknown pass"):
        run_pipeline(g, ["nope"])
