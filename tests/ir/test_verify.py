"""The verifier accepts good graphs and rejects each kind of broken one, citing the node."""
import pytest

from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim, Use
from scriptmod.ir.verify import IRVerifyError, verify
from irsamples import control_flow, mlp, t


def _fails(g, *fragments):
    with pytest.raises(IRVerifyError) as info:
        verify(g)
    for f in fragments:
        assert f in str(info.value), str(info.value)
    return str(info.value)


def test_good_graphs_pass():
    verify(mlp())
    verify(control_flow())


def test_use_before_definition():
    g = mlp()
    relu = next(n for n in g.nodes if n.kind == "sm::relu")
    relu.move_before(g.nodes[0])
    _fails(g, "not defined before it", "model.py:12: ", "= sm::relu(%h)  # model.py:12")


def test_value_escaping_its_block():
    g = control_flow()
    if_node = next(n for n in g.nodes if n.kind == Prim.IF)
    inner = if_node.blocks[0].nodes[0].output
    g.nodes[-1].replace_input(2, inner)   # the loop's initial value comes from inside the If
    _fails(g, "dominance/scoping", "prim::Loop")


def test_op_output_type_disagrees_with_schema():
    g = mlp()
    relu = next(n for n in g.nodes if n.kind == "sm::relu")
    relu.output.type = t("B", 8, dtype=D.int64)
    _fails(g, "output 0 is typed Long(B, 8) but relu() gives Float(B, 8)", "model.py:12")


def test_op_rank_disagrees():
    g = mlp()
    relu = next(n for n in g.nodes if n.kind == "sm::relu")
    relu.output.type = t("B")
    _fails(g, "relu() gives")


def test_if_blocks_must_match_outputs():
    g = control_flow()
    if_node = next(n for n in g.nodes if n.kind == Prim.IF)
    if_node.blocks[1].remove_output(0)
    _fails(g, "block1 returns 0 value(s), prim::If expects 1", "cf.py:1")


def test_loop_carried_types_must_agree():
    g = control_flow()
    loop = next(n for n in g.nodes if n.kind == Prim.LOOP)
    loop.blocks[0].params[1].type = t(2, 3, dtype=D.int32)
    _fails(g, "carried value 0", "prim::Loop")


def test_dangling_use_is_reported():
    g = mlp()
    x = g.inputs[1]
    ghost = g.create("sm::neg", [x], [t("B", 4)])   # never placed
    assert ghost.owning_block is None
    _fails(g, "dangling use")


def test_inconsistent_use_list():
    g = mlp()
    relu = next(n for n in g.nodes if n.kind == "sm::relu")
    relu.inputs[0].uses.append(Use(relu, 0))
    _fails(g, "use list", "sm::relu")


def test_unknown_kind_and_bad_attributes():
    g = Graph()
    b = Builder(g, source="k.py:1")
    x = b.input(t(2), "x")
    n = b.node("foo::bar", [x], [t(2)])
    _fails(g, "unknown node kind 'foo::bar'", "k.py:1")
    n.output.replace_all_uses_with(x)
    n.destroy()
    s = b.op("sum", x)
    del s.node.attrs["keepdim"]
    _fails(g, "attributes are ['dim', 'dtype', 'keepdim']")


def test_structural_prims_are_checked():
    g = Graph()
    b = Builder(g)
    x = b.input(t(2), "x")
    tup = b.tuple_([x, x])
    idx = b.tuple_index(tup, 1)
    idx.node.attrs["index"] = 5
    _fails(g, "index 5 is not valid")
    idx.node.attrs["index"] = 0
    c = b.constant(3)
    c.type = t(2)
    _fails(g, "constant 3 does not fit")


def test_fusion_subgraph_is_verified():
    sub = Graph()
    sb = Builder(sub)
    a = sb.input(t(2), "a")
    e = sb.op("exp", a)
    sb.ret(e)
    g = Graph()
    b = Builder(g, source="f.py:9")
    b.ret(*b.fusion_group(sub, [b.input(t(2), "x")]))
    verify(g)
    e.type = t(3)
    _fails(g, "fusion subgraph is invalid", "f.py:9")
