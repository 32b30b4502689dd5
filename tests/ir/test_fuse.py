"""fuse_elementwise: group structure (golden text), legality (cycles, blocks, escaping values,
impure ops, types, shapes), verify() after the pass, unchanged numbers, determinism."""
import numpy as np
import pytest
from hypothesis import given

from scriptmod.ir import dtypes as D
from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.parser import parse
from scriptmod.ir.passes import fuse_elementwise, run_pipeline
from scriptmod.ir.passes.fuse import why_not_fusible
from scriptmod.ir.types import TensorType
from scriptmod.ir.verify import verify
from irsamples import (assert_golden, control_flow, fusion_graphs, mlp_gelu, random_graphs, t,
                       w1, w2)
from scriptmod.runtime.interpreter import Interpreter

RNG = np.random.default_rng(0)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _graph(build, *types):
    g = Graph()
    b = Builder(g, source="f.py:1")
    xs = [b.input(ty, f"x{i}") for i, ty in enumerate(types)]
    b.ret(*build(b, *xs))
    return g


def _fused(g, **kw):
    """Fuse a copy of ``g``; check verify, round trip, determinism and the shape invariant."""
    before = g.copy()
    fuse_elementwise(g, **kw)
    verify(g)
    text = str(g)
    assert str(parse(text)) == text
    assert str(fuse_elementwise(before.copy(), **kw)) == text
    for n in _groups(g):
        assert len({o.type.shape for o in n.outputs}) == 1, "outputs share one iteration shape"
        for m in n.attrs["subgraph"].nodes:
            assert m.kind == Prim.CONSTANT or S.get(m.kind).has(S.ELEMENTWISE)
    return g


def _groups(g):
    return [n for n in g.walk() if n.kind == Prim.FUSION_GROUP]


def _top(g):
    """Kinds of the nodes of a graph or block, constants left out."""
    return [n.kind for n in g.nodes if n.kind != Prim.CONSTANT]


def _kinds(sub):
    return [n.kind.split("::")[1] for n in sub.nodes if n.kind != Prim.CONSTANT]


def _same_numbers(before, after, *args):
    a, b = Interpreter(before).run(*args), Interpreter(after).run(*args)
    for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        if hasattr(u, "dtype"):
            np.testing.assert_array_equal(u, v)
        else:
            assert repr(u) == repr(v)


# ---- the workloads ----------------------------------------------------------------------------

def test_w1_is_exactly_one_group():
    g = _fused(w1(4))
    assert_golden(str(g), """
        graph(%x : Float(B, 4), %a : Float(4), %b : Float(4)):
          %0 : Float(B, 4) = prim::FusionGroup_0(%x, %a, %b)  # w1.py:3
          return (%0)
        with prim::FusionGroup_0 = graph(%x : Float(B, 4), %a : Float(4), %b : Float(4)):
          %0 : Float(B, 4) = sm::mul(%x, %a)  # w1.py:3
          %1 : Float(B, 4) = sm::add(%0, %b)  # w1.py:3
          %2 : Float(B, 4) = sm::mul(%1, %1)  # w1.py:3
          %3 : Float(B, 4) = sm::mul(%2, %1)  # w1.py:3
          %4 : float = prim::Constant[value=0.044715]()  # w1.py:3
          %5 : Float(B, 4) = sm::mul(%3, %4)  # w1.py:3
          %6 : Float(B, 4) = sm::add(%1, %5)  # w1.py:3
          %7 : float = prim::Constant[value=0.7978845608028654]()  # w1.py:3
          %8 : Float(B, 4) = sm::mul(%6, %7)  # w1.py:3
          %9 : float = prim::Constant[value=-2.0]()  # w1.py:3
          %10 : Float(B, 4) = sm::mul(%8, %9)  # w1.py:3
          %11 : Float(B, 4) = sm::exp(%10)  # w1.py:3
          %12 : float = prim::Constant[value=1.0]()  # w1.py:3
          %13 : Float(B, 4) = sm::add(%11, %12)  # w1.py:3
          %14 : Float(B, 4) = sm::div(%1, %13)  # w1.py:3
          %15 : Float(B, 4) = sm::add(%14, %x)  # w1.py:3
          return (%15)
        """)
    _same_numbers(w1(4), g, _x(3, 4), _x(4), _x(4))


def test_w2_activation_zoo_is_one_group():
    g = _fused(w2(16))
    groups = _groups(g)
    assert len(groups) == 1 and [n.kind for n in g.nodes] == [Prim.FUSION_GROUP]
    assert _kinds(groups[0].attrs["subgraph"]) == [
        "mul", "neg", "div", "erfc", "mul", "ge", "mul", "where", "sigmoid", "tanh", "mul",
        "gt", "where", "add", "relu"]
    _same_numbers(w2(16), g, _x(5, 16), _x(16))


class _MLP:
    w1, b1, w2, b2 = _x(8, 32), _x(32), _x(32, 8), _x(8)


def test_mlp_epilogues_are_one_group_per_matmul():
    g = _fused(mlp_gelu())
    main = str(g).split("with ")[0]
    assert_golden(main, """
        graph(%self : __module__.MLP, %x : Float(B, 8)):
          %0 : Float(8, 32) = prim::GetAttr[name="w1"](%self)  # mlp.py:20
          %1 : Float(32) = prim::GetAttr[name="b1"](%self)  # mlp.py:20
          %2 : Float(32, 8) = prim::GetAttr[name="w2"](%self)  # mlp.py:20
          %3 : Float(8) = prim::GetAttr[name="b2"](%self)  # mlp.py:20
          %4 : Float(B, 32) = sm::matmul(%x, %0)  # mlp.py:21
          %5 : Float(B, 32) = prim::FusionGroup_0(%4, %1)  # mlp.py:21
          %6 : Float(B, 8) = sm::matmul(%5, %2)  # mlp.py:23
          %7 : Float(B, 8) = prim::FusionGroup_1(%6, %3, %x)  # mlp.py:23
          return (%7)
        """)
    bias_gelu, bias_residual = (n.attrs["subgraph"] for n in _groups(g))
    assert _kinds(bias_gelu) == ["add", "mul", "mul", "mul", "add", "mul", "mul", "exp", "add",
                                 "div"]
    assert _kinds(bias_residual) == ["add", "add"]
    _same_numbers(mlp_gelu(), g, _MLP(), _x(5, 8))


# ---- legality ---------------------------------------------------------------------------------

def test_escaping_values_become_group_outputs():
    def build(b, x):
        h = b.op("exp", x)
        y = b.op("neg", h)
        return b.op("sum", h, dim=[1]), y, b.op("mul", y, 2.0)
    g = _fused(_graph(build, t(2, 3)))
    grp, = _groups(g)
    assert len(grp.outputs) == 3 and _kinds(grp.attrs["subgraph"]) == ["exp", "neg", "mul"]
    assert grp.outputs[0].uses[0].user.kind == "sm::sum"
    _same_numbers(_graph(build, t(2, 3)), g, _x(2, 3))


def test_cycle_through_a_reduction_keeps_groups_apart(monkeypatch, capsys):
    def build(b, x):
        e = b.op("exp", x)
        return [b.op("div", e, b.op("sum", e, dim=[1], keepdim=True))]
    monkeypatch.setenv("SCRIPTMOD_LOG", "fusion")
    g = _fused(_graph(build, t(2, 3)))
    assert _top(g) == [Prim.FUSION_GROUP, "sm::sum", Prim.FUSION_GROUP]
    err = capsys.readouterr().err
    assert "kept apart: exp (%0) -> div (%2): would create a cycle" in err
    assert "fused 1 op(s) over Float(2, 3) (sm::div)" in err
    _same_numbers(_graph(build, t(2, 3)), g, _x(2, 3))


def test_broadcast_producer_joins_only_when_it_stays_internal(monkeypatch, capsys):
    def internal(b, x, a):
        return [b.op("add", b.op("mul", x, b.op("mul", a, 2.0)), 1.0)]

    def escaping(b, x, a):
        a2 = b.op("mul", a, 2.0)
        return b.op("add", b.op("mul", x, a2), 1.0), a2
    g = _fused(_graph(internal, t(2, 3), t(3)))
    assert len(_groups(g)) == 1
    monkeypatch.setenv("SCRIPTMOD_LOG", "fusion")
    g = _fused(_graph(escaping, t(2, 3), t(3)))
    shapes = [n.outputs[0].type.shape for n in _groups(g)]
    assert shapes == [(3,), (2, 3)]
    assert "different shape (Float(3) vs Float(2, 3))" in capsys.readouterr().err
    _same_numbers(_graph(escaping, t(2, 3), t(3)), g, _x(2, 3), _x(3))


def test_unknown_dims_merge_only_where_shapes_provably_agree():
    def build(b, x, w):
        e = b.op("exp", x)
        n = b.op("neg", e)               # unary: same run-time shape as e
        return e, n, b.op("add", n, w)   # (None, 4) + (None, 4): may broadcast at run time
    g = _fused(_graph(build, t(None, 4), t(None, 4)))
    assert [len(n.outputs) for n in _groups(g)] == [2, 1]


def test_blocks_are_fused_separately():
    g = _fused(control_flow())
    assert _top(g) == ["sm::sum", Prim.FUSION_GROUP, Prim.IF, Prim.LOOP]   # gt(sum, 0)
    if_node, loop = (n for n in g.nodes if n.blocks)
    assert [_top(b) for b in if_node.blocks + loop.blocks] == [[Prim.FUSION_GROUP]] * 3
    _same_numbers(control_flow(), g, _x(2, 3))


def test_values_defined_outside_a_block_are_group_inputs():
    def build(b, x):
        e = b.op("exp", x)
        c = b.op("gt", b.op("sum", x), 0.0)
        return b.if_(c, lambda: b.op("neg", e), lambda: [b.op("mul", e, 2.0)])
    g = _fused(_graph(build, t(2, 3)))
    outer = [n for n in g.nodes if n.kind == Prim.FUSION_GROUP]
    assert len(outer) == 2 and len(_groups(g)) == 4   # exp; gt; one per branch
    _same_numbers(_graph(build, t(2, 3)), g, _x(2, 3))


def test_impure_ops_are_left_alone(monkeypatch, capsys):
    def build(b, x):
        return [b.op("neg", b.op("dropout", b.op("exp", x), False, p=0.5))]
    monkeypatch.setenv("SCRIPTMOD_LOG", "fusion")
    g = _fused(_graph(build, t(2, 3)))
    assert _top(g) == [Prim.FUSION_GROUP, "sm::dropout", Prim.FUSION_GROUP]
    assert "not fused: impure" in capsys.readouterr().err
    noisy = S.OpSchema("noisy", S.get("neg").inputs, (), ("Tensor",),
                       frozenset({S.ELEMENTWISE, S.IMPURE}), S.get("neg").dtype_rule,
                       S.get("neg").shape_rule)
    monkeypatch.setitem(S.REGISTRY, "noisy", noisy)
    g = _graph(lambda b, x: [b.op("exp", b.op("noisy", b.op("exp", x)))], t(2, 3))
    fuse_elementwise(g)
    assert _top(g) == [Prim.FUSION_GROUP, "sm::noisy", Prim.FUSION_GROUP]


def test_side_effects_keep_their_order_when_nodes_move(capsys):
    def build(b, x):
        e = b.op("exp", x)
        b.print_(e)
        s = b.op("sum", x, dim=[1], keepdim=True)
        b.print_(s)
        return [b.op("add", e, s)]
    g = _fused(_graph(build, t(2, 3)))
    assert _top(g) == ["sm::sum", Prim.FUSION_GROUP, Prim.PRINT, Prim.PRINT]
    x = _x(2, 3)
    Interpreter(_graph(build, t(2, 3))).run(x)
    expected = capsys.readouterr().out
    Interpreter(g).run(x)
    assert capsys.readouterr().out == expected


def test_side_effect_order_can_forbid_a_merge():
    def build(b, x):
        e = b.op("exp", x)
        b.print_(e)
        d = b.op("dropout", x, False, p=0.5)   # impure: must stay after the print
        return [b.op("add", e, d)]
    g = _fused(_graph(build, t(2, 3)))
    assert _top(g) == [Prim.FUSION_GROUP, Prim.PRINT, "sm::dropout",
                                         Prim.FUSION_GROUP]


def test_types_devices_and_backend_veto(monkeypatch, capsys):
    monkeypatch.setenv("SCRIPTMOD_LOG", "fusion")
    g = _graph(lambda b, x, y: [b.op("neg", x), b.op("exp", y)],
               TensorType(None, (2,)), TensorType(D.float32))
    assert not _groups(_fused(g))
    cuda = TensorType(D.float32, (2,), "cuda")
    g = _fused(_graph(lambda b, x, s: [b.op("add", x, s)], cuda, t()))
    assert not _groups(g)
    g = _fused(_graph(lambda b, x: [b.op("neg", b.op("exp", b.op("neg", x)))], t(2)),
               supported=lambda n: n.op_name != "exp")
    assert _top(g) == [Prim.FUSION_GROUP, "sm::exp", Prim.FUSION_GROUP]
    err = capsys.readouterr().err
    for why in ("unknown type (input 0 is Tensor(2))", "unknown type (input 0 is Float)",
                "different devices (cpu, cuda)", "unsupported by the backend"):
        assert why in err


def test_scalar_inputs_must_be_constants():
    g = Graph()
    b = Builder(g)
    x, k = b.input(t(2), "x"), b.input(S.parse_type("float"), "k")
    b.ret(b.op("mul", x, k))
    assert why_not_fusible(g.nodes[0]) == ("unknown type (input 1 is float, not a tensor or "
                                           "scalar constant)")


def test_scalar_constants_are_moved_or_copied():
    def build(b, x):
        c = b.constant(2.0)
        return b.op("mul", x, c), b.op("add", x, c)
    g = _fused(_graph(build, t(2)))
    assert Prim.CONSTANT not in [n.kind for n in g.nodes]
    g = _fused(_graph(build, t(2)), supported=lambda n: n.op_name == "mul")
    assert [n.kind for n in g.nodes] == [Prim.CONSTANT, Prim.FUSION_GROUP, "sm::add"]
    assert g.nodes[1].attrs["subgraph"].nodes[0].kind == Prim.CONSTANT


def test_min_size_and_pipeline_registration():
    def build(b, x):
        e = b.op("exp", x)
        return [b.op("neg", b.op("sum", b.op("add", e, 1.0), dim=[0]))]
    g = run_pipeline(_graph(build, t(2, 3)), ["fuse_elementwise"], verify=True,
                     options={"fuse_elementwise": {"min_size": 2}}, log=lambda s: None)
    assert _top(g) == [Prim.FUSION_GROUP, "sm::sum", "sm::neg"]
    with pytest.raises(ValueError, match="min_size"):
        fuse_elementwise(g, min_size=0)


def test_fusing_twice_changes_nothing():
    g = _fused(mlp_gelu())
    assert str(fuse_elementwise(g.copy())) == str(g)


# ---- random graphs ------------------------------------------------------------------------------

def _args(g):
    shapes = [tuple(2 if isinstance(d, str) else d for d in v.type.shape) for v in g.inputs]
    return [np.linspace(-1.5, 2.0, int(np.prod(s))).reshape(s).astype(v.type.dtype.name)
            for s, v in zip(shapes, g.inputs)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # overflow/NaN alike in both runs
@given(fusion_graphs())
def test_random_fusion_graphs(g):
    before = g.copy()
    _fused(g)
    _same_numbers(before, g, *_args(before))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@given(random_graphs())
def test_random_graphs_fuse_without_cycles(g):
    before = g.copy()
    _fused(g, min_size=2)
    _same_numbers(before, g, *_args(before))
