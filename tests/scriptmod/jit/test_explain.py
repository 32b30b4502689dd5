"""``scriptmod.jit.explain`` and ``Specialization.explain`` (issue 36): the key, the guards,
one plan line per node of the optimized graph (its step, target and reason), the generated
sources and the grad plans, on the bench workloads W3 (MLP), W5 (transformer block) and W6
(scripted GRU with a loop)."""
from __future__ import annotations

import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.bench.runner import compile_model
from scriptmod.cli import main as cli_main
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.ir.graph import Node


def _compiled(wid: str) -> tuple:
    w = WORKLOADS[wid]
    model, x = w.build(quick=True)
    return compile_model(w, model, x), x


def _section(text: str, title: str) -> list[str]:
    """The indented lines under ``title:`` in an explanation."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    out = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


@pytest.mark.parametrize("wid", ["W3", "W5", "W6"])
def test_every_node_has_a_plan_line_with_step_target_and_reason(wid: str) -> None:
    compiled, x = _compiled(wid)
    with sm.no_grad():
        text = jit.explain(compiled, x)
        spec = compiled.executor("forward").specialize((x,))
    ex = spec.executable
    nodes = list(spec.graph.walk())
    rows = {d.node: d for d in ex.plan_rows}
    assert set(nodes) <= set(rows)                   # every node, nested blocks included
    assert len(ex.plan_rows) == len(nodes)          # once each
    for node in nodes:
        d = rows[node]
        assert isinstance(d.node, Node) and d.step and d.target and d.reason, (node, d)
    plan = "\n".join(_section(text, "plan:"))
    assert ex.explain().splitlines()[0] in plan
    assert all(d.reason in plan for d in ex.plan_rows)
    program = ex.sources()["program"].rstrip().splitlines()
    assert "\n".join("  " + line for line in program) in "\n".join(_section(text, "plan:"))


@pytest.mark.parametrize("wid", ["W3", "W5", "W6"])
def test_the_key_and_guards_name_each_argument(wid: str) -> None:
    compiled, x = _compiled(wid)
    with sm.no_grad():
        text = jit.explain(compiled, x)
    first = text.splitlines()[0]
    assert first.startswith("specialization of ") and "(concrete, fused)" in first
    key = "\n".join(_section(text, "key:"))
    dims = ", ".join(str(d) for d in x.shape)
    assert f"Tensor float32 ({dims}) on cpu" in key and "fusion: fused" in key
    assert "a Tensor of exactly this dtype" in "\n".join(_section(text, "guards:"))


def test_explain_compiles_the_specialization_only_once() -> None:
    traced = jit.trace(nn.Linear(4, 2), sm.ones(3, 4))
    ex = traced.executor("forward")
    with sm.no_grad():
        traced(sm.ones(3, 4))
        n = ex.stats["specializations"]
        before = jit.explain(traced, sm.ones(3, 4))      # the one the call built
        assert ex.stats["specializations"] == n
        jit.explain(traced, sm.ones(5, 4))                # a new size: built for explain
    assert ex.stats["specializations"] == n + 1
    assert "fast path (the guard function a warm call runs first):" in before
    assert "def fast(args):" in before


def test_a_fast_path_is_shown_before_any_call_installs_it() -> None:
    traced = jit.trace(nn.Linear(4, 2), sm.ones(3, 4))
    ex = traced.executor("forward")
    installed = ex.fast
    with sm.no_grad():
        text = jit.explain(traced, sm.ones(7, 4))               # a size no call used
        spec = ex.specialize((sm.ones(7, 4),))
    assert spec.fast is None and "def fast(args):" in text       # explain installs nothing
    assert ex.fast is installed


def test_grad_plans_appear_once_built() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    traced = jit.trace(model, sm.ones(3, 4))
    traced(sm.ones(3, 4)).sum().backward()
    text = jit.explain(traced, sm.ones(3, 4))
    grads = _section(text, "grad plans:")
    assert len(grads) == 1 and "compiled backward" in grads[0] and "1111" in grads[0]


def test_a_method_and_a_function_explain_too() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return self.fc(x).relu()

        def encode(self, x: sm.Tensor) -> sm.Tensor:
            return self.fc(x) * 2

    x = sm.ones(2, 4)
    traced = jit.trace_module(Net(), {"forward": x, "encode": x})
    assert jit.explain(traced.encode, x).startswith("specialization of Net.encode")
    fn = jit.trace(lambda a: a * 2 + 1, x)
    assert "plan:" in jit.explain(fn, x)


def test_explain_refuses_what_is_not_compiled() -> None:
    with pytest.raises(TypeError, match="jit.explain: expected a compiled module"):
        jit.explain(nn.Linear(4, 2), sm.ones(3, 4))


def test_inspect_explain_compiles_the_archive_for_given_or_traced_shapes(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.smod"
    jit.save(jit.trace(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), sm.ones(3, 4)), str(path))
    assert cli_main(["inspect", str(path), "--explain", "5x4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("specialization of Sequential.forward") and "(5, 4)" in out
    assert cli_main(["inspect", str(path), "--explain"]) == 0       # B (traced symbolic): 2
    assert "Tensor float32 (2, 4) on cpu" in capsys.readouterr().out
    assert cli_main(["inspect", str(path), "--explain", "5x4", "3"]) == 1
    assert "forward takes 1 input(s), got 2 shape(s)" in capsys.readouterr().err
