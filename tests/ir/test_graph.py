"""Graph data structure: SSA use lists, placement, mutation, cloning."""
import pytest

from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, IRError, Prim, known_value
from scriptmod.ir.verify import verify
from irsamples import control_flow, mlp, t


def _uses(v):
    return [(u.user.kind, u.index) for u in v.uses]


def test_use_lists_follow_input_edits():
    g = Graph()
    b = Builder(g)
    x, y = b.input(t(2), "x"), b.input(t(2), "y")
    n = b.op("add", x, y).node
    n.insert_input(0, y)
    assert sorted(_uses(y)) == [("sm::add", 0), ("sm::add", 2)]
    assert _uses(x) == [("sm::add", 1)]
    n.remove_input(0)
    assert sorted(_uses(y)) == [("sm::add", 1)] and _uses(x) == [("sm::add", 0)]
    n.replace_input(1, x)
    assert sorted(_uses(x)) == [("sm::add", 0), ("sm::add", 1)] and y.uses == []


def test_replace_all_uses_and_destroy():
    g = mlp()
    relu = next(n for n in g.nodes if n.kind == "sm::relu")
    h = relu.inputs[0]
    relu.output.replace_all_uses_with(h)
    assert relu.output.uses == []
    relu.destroy()
    verify(g)
    assert "sm::relu" not in str(g)
    with pytest.raises(IRError, match="still has"):
        h.node.destroy()


def test_insert_and_move_keep_order():
    g = Graph()
    b = Builder(g)
    x = b.input(t(2), "x")
    a = b.op("neg", x).node
    c = b.op("exp", x).node
    with b.insert_before(c):
        m = b.op("tanh", x).node
    assert [n.kind for n in g.nodes] == ["sm::neg", "sm::tanh", "sm::exp"]
    a.move_after(c)
    assert [n.kind for n in g.nodes] == ["sm::tanh", "sm::exp", "sm::neg"]
    assert m.is_before(a) and not a.is_before(m)


def test_copy_is_deep_and_prints_the_same():
    g = control_flow()
    g2, env = g.copy_with_map()
    assert str(g2) == str(g)
    assert all(env[v] is not v for v in g.inputs)
    next(iter(g2.nodes)).source = "elsewhere.py:1"
    assert str(g2) != str(g)


def test_bad_kinds_names_and_attributes_are_rejected():
    g = Graph()
    with pytest.raises(IRError, match="namespace::name"):
        g.create("add")
    with pytest.raises(IRError, match="attribute values"):
        g.create("sm::add", attrs={"alpha": object()})
    with pytest.raises(IRError, match="debug name"):
        g.add_input(t(2), "1")


def test_known_value_sees_through_lists_and_sizes():
    g = Graph()
    b = Builder(g)
    x = b.input(t("B", 4), "x")
    lst = b.list_([b.op("size", x, dim=0), -1])
    assert known_value(lst) == ["B", -1]
    assert b.op("reshape", x, lst).type == t("B", 4)


def test_if_outputs_join_branch_types():
    g = Graph()
    b = Builder(g)
    x = b.input(t(2, 3), "x")
    c = b.input(t(dtype=__import__("scriptmod.ir").ir.dtypes.bool_), "c")
    y, = b.if_(c, lambda: x, lambda: b.op("sum", x, dim=[0], keepdim=True))
    assert y.type == t(None, 3)
    assert y.node.kind == Prim.IF
