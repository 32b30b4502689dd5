"""networkx views (dependences, fusion cycles, DOT) and the SCRIPTMOD_LOG helper."""
from scriptmod.ir import log
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph
from scriptmod.ir.nxview import to_dot, to_networkx, would_create_cycle
from irsamples import control_flow, t


def test_dependences_and_cycles():
    g = Graph()
    b = Builder(g)
    x = b.input(t(2), "x")
    a = b.op("exp", x)
    m = b.op("matmul", a, a)      # not fusible: sits between a and c
    c = b.op("add", a, m)
    d = b.op("neg", x)
    b.ret(c, d)
    dg = to_networkx(g)
    assert dg.has_edge(a.node, m.node) and dg.has_edge(m.node, c.node)
    assert would_create_cycle(g, [a.node, c.node])
    assert not would_create_cycle(g, [m.node, c.node])
    assert not would_create_cycle(g, [a.node, d.node])


def test_nested_uses_count_for_the_enclosing_node():
    g = control_flow()
    dg = to_networkx(g)
    if_node = next(n for n in g.nodes if n.kind == "prim::If")
    loop = next(n for n in g.nodes if n.kind == "prim::Loop")
    assert dg.has_edge(if_node, loop)


def test_dot_text():
    dot = to_dot(control_flow())
    assert dot.startswith("digraph G {") and dot.rstrip().endswith("}")
    assert '"in_x"' in dot and "prim::Loop" in dot and '-> "return"' in dot


def test_log_topics(monkeypatch, capsys):
    monkeypatch.setenv("SCRIPTMOD_LOG", "fusion, Passes")
    assert log.enabled("passes") and log.enabled("fusion") and not log.enabled("codegen")
    log.log("codegen", "hidden")
    log.log("passes", "shown")
    assert capsys.readouterr().err == "[scriptmod:passes] shown\n"
    monkeypatch.setenv("SCRIPTMOD_LOG", "all")
    assert log.enabled("codegen")
