"""Each node of an inlined graph records the module path it came from (``Node.scope``),
printed after its source as ``# model.py:12, scope: blocks.0.fc1`` (TorchScript's
``scope:``): for traced and scripted modules, through Sequential, ModuleList and
ModuleDict, kept by fusion and by the backward, read back by the parser and archives."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.ir import parse
from scriptmod.ir.graph import Graph, Prim


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.act(self.fc1(x)) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.blocks = nn.ModuleList([Block(), Block()])
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 4)})

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.heads["cls"](x).tanh()


# the module each op of Net runs in, by the op's kind (the ops of a Linear, of a GELU...)
_OP_PATHS = {
    "sm::matmul": {"stem.0", "blocks.0.fc1", "blocks.1.fc1", "heads.cls"},
    "sm::relu": {"stem.1"},
    "sm::erfc": {"blocks.0.act", "blocks.1.act"},
    "sm::tanh": {None},
}


def _ops(g: Graph) -> list:
    """Op nodes of ``g`` and of its fusion subgraphs."""
    graphs = [g] + [n.attrs["subgraph"] for n in g.walk() if n.kind == Prim.FUSION_GROUP]
    return [n for sub in graphs for n in sub.walk() if n.is_op]


def _paths_by_kind(g: Graph) -> dict[str, set]:
    out: dict[str, set] = {}
    for n in _ops(g):
        out.setdefault(n.kind, set()).add(n.scope)
    return out


@pytest.fixture(scope="module")
def model_and_input() -> tuple[Net, sm.Tensor]:
    sm.manual_seed(0)
    return Net().eval(), sm.randn(3, 8)


def test_traced_inlined_graph_names_each_ops_module(model_and_input) -> None:
    model, x = model_and_input
    g = sm.jit.trace(model, x).inlined_graph
    paths = _paths_by_kind(g)
    for kind, want in _OP_PATHS.items():
        assert paths[kind] == want, (kind, paths[kind])
    assert paths["sm::add"] == {"stem.0", "blocks.0.fc1", "blocks.1.fc1", "heads.cls",
                                "blocks.0", "blocks.1"}        # biases, then each residual
    text = str(g)
    assert "sm::erfc(" in text and "scope: blocks.1.act" in text
    line = next(ln for ln in text.splitlines() if "sm::tanh(" in ln)
    assert "scope:" not in line and "test_module_paths.py:" in line   # the top module's own op


def test_per_method_graph_keeps_calls_and_its_own_nodes_unscoped(model_and_input) -> None:
    model, x = model_and_input
    traced = sm.jit.trace(model, x)
    assert all(n.scope is None for n in traced.graph.walk())       # calls are not inlined
    block = traced.blocks[0].inlined_graph                          # paths from that module
    assert {n.scope for n in _ops(block)} == {"fc1", "act", None}


def test_scripted_module_paths_match_the_traced_ones(model_and_input) -> None:
    model, x = model_and_input
    scripted = sm.jit.script(model)
    calls = [n for n in scripted.inlined_graph.walk() if n.kind == Prim.CALL_FUNCTION]
    # a built-in layer's call is made from the module whose forward calls it
    assert [n.scope for n in calls] == [None, None, "blocks.0", "blocks.0", "blocks.1",
                                        "blocks.1", None]
    run = scripted.graph_for(x)        # the layers expanded, optimized and fused
    paths = _paths_by_kind(run)
    for kind, want in _OP_PATHS.items():
        assert paths[kind] == want, (kind, paths[kind])
    with sm.no_grad():
        np.testing.assert_allclose(scripted(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_paths_survive_fusion(model_and_input) -> None:
    model, x = model_and_input
    run = sm.jit.trace(model, x).graph_for(x)
    groups = [n for n in run.walk() if n.kind == Prim.FUSION_GROUP]
    assert groups
    for group in groups:                 # the innermost module holding all its members
        members = [n.scope or "" for n in group.attrs["subgraph"].walk() if n.is_op]
        assert all(m.startswith(group.scope or "") for m in members)
    by_scope = {g.scope for g in groups}
    assert {"stem", "blocks.0", "blocks.1"} <= by_scope   # bias+relu; fc1 bias+GELU+residual
    assert _paths_by_kind(run)["sm::erfc"] == {"blocks.0.act", "blocks.1.act"}


def test_backward_nodes_keep_the_forwards_paths(model_and_input) -> None:
    model, x = model_and_input
    traced = sm.jit.trace(model, x)
    bw = traced.graph_for(x.requires_grad_(), backward=True)
    x.requires_grad_(False)
    scopes = {n.scope for n in _ops(bw)}
    assert {"blocks.0.act", "blocks.1.act", "stem.1"} <= scopes


def test_printed_paths_round_trip_through_the_parser(model_and_input) -> None:
    model, x = model_and_input
    for g in (sm.jit.trace(model, x).inlined_graph, sm.jit.trace(model, x).graph_for(x)):
        text = str(g)
        again = parse(text)
        assert str(again) == text
        assert [n.scope for n in _ops(again)] == [n.scope for n in _ops(g)]
        assert [n.source for n in _ops(again)] == [n.source for n in _ops(g)]


def test_comments_without_a_path_parse_as_before() -> None:
    g = parse('''graph(%x : Float(4)):
  %a : Float(4) = sm::relu(%x)  # model.py:3
  %b : Float(4) = sm::neg(%a)  # scope: enc.layers.0
  %c : Float(4) = sm::exp(%b)
  return (%c)
''')
    relu, neg, exp = g.nodes
    assert (relu.source, relu.scope) == ("model.py:3", None)
    assert (neg.source, neg.scope) == (None, "enc.layers.0")
    assert (exp.source, exp.scope) == (None, None)


def test_loaded_archive_shows_the_same_paths(model_and_input, tmp_path) -> None:
    model, x = model_and_input
    traced = sm.jit.trace(model, x)
    path = tmp_path / "net.smod"
    traced.save(str(path))
    loaded = sm.jit.load(str(path))
    assert _paths_by_kind(loaded.inlined_graph) == _paths_by_kind(traced.inlined_graph)
    with sm.no_grad():
        np.testing.assert_allclose(loaded(x).numpy(), traced(x).numpy(), rtol=1e-6)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        hidden = self.act(self.fc1(x))
        return self.fc2(hidden) + x


def test_fusion_log_names_groups_by_module_path_and_variable(caplog) -> None:
    """A scripted module's variables name its values (``%hidden``); each group says which
    modules its ops came from."""
    import logging
    scripted = sm.jit.script(Mlp().eval())
    x = sm.randn(4, 8)
    with caplog.at_level(logging.DEBUG, logger="scriptmod.fusion"), sm.no_grad():
        scripted(x)
    fused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fused ")]
    want = " from fc1, act: act.mul (%hidden) at test_module_paths.py:"
    assert any(want in m for m in fused), fused
    assert any(" from fc2, (top level): add (%" in m for m in fused), fused
    assert "%hidden : Tensor = prim::CallFunction" in str(scripted.graph)   # in .graph too
