"""W6 of ``scriptmod bench``: the scripted GRU with an adaptive-computation early exit.

The model against a NumPy float64 reference (and its cell against ``torch.nn.GRUCell`` where
torch is importable), the loop really running and exiting early on the bench inputs, the
scripted module keeping its control flow, the bench code path (jit.script, not jit.trace)
matching eager, and the PyTorch side's ``torch.jit.script`` column. No timing is asserted.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.bench import report, runner, torch_ref
from scriptmod.bench.workloads import WORKLOADS, PonderingGRU

W6 = WORKLOADS["W6"]


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def reference(model: PonderingGRU, x: np.ndarray) -> tuple[np.ndarray, int]:
    """PonderingGRU in float64 NumPy, written from the GRUCell and ACT equations: the final
    state and the number of steps read."""
    p = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    k = model.hidden_size
    h, budget = np.zeros((x.shape[0], k)), np.zeros((x.shape[0], 1))
    for t in range(x.shape[1]):
        gx = x[:, t] @ p["cell.x2h.weight"].T + p["cell.x2h.bias"]
        gh = h @ p["cell.h2h.weight"].T + p["cell.h2h.bias"]
        r, z = _sigmoid(gx[:, :k] + gh[:, :k]), _sigmoid(gx[:, k:2 * k] + gh[:, k:2 * k])
        n = np.tanh(gx[:, 2 * k:] + r * gh[:, 2 * k:])
        running = budget < model.threshold
        h = np.where(running, (1 - z) * n + z * h, h)
        halt = _sigmoid(h @ p["halt.weight"].T + p["halt.bias"])
        budget = np.where(running, budget + halt, budget)
        if budget.min() >= model.threshold:
            return h, t + 1
    return h, x.shape[1]


@pytest.mark.parametrize("quick", [True, False])
def test_eager_model_matches_numpy_and_exits_after_many_steps(quick: bool) -> None:
    model, x = W6.build(quick=quick)
    ref, steps = reference(model, x.numpy().astype(np.float64))
    with sm.no_grad():
        got = model(x)
    assert runner.compare(got, ref, "float32").ok
    time_steps = x.shape[1]
    assert model.steps_taken(x) == steps
    assert time_steps // 2 < steps < time_steps          # the loop runs, then exits early


def test_scripted_model_keeps_its_loop_and_matches_eager() -> None:
    model, x = W6.build(quick=True)
    scripted = runner.compile_model(W6, model, x)
    code = str(scripted.graph)
    assert "prim::Loop" in code and "prim::If" in code
    with sm.no_grad():
        for inp in (x, x[:, :5], x[:2]):          # shorter: no early exit; a smaller batch
            for fused in (False, True):
                with runner.fusion(fused):
                    got = scripted(inp)
                assert runner.compare(got, runner.host64(model(inp)), "float32").ok, \
                    (tuple(inp.shape), fused)


def test_scripted_model_float64() -> None:
    model, x = W6.build(quick=True, dtype=sm.float64)
    ref, _ = reference(model, x.numpy())
    with sm.no_grad():
        got = runner.compile_model(W6, model, x)(x)
    assert got.dtype == sm.float64
    assert runner.compare(got, ref, "float64").ok


def test_bench_path_scripts_w6_and_matches_eager() -> None:
    opts = runner.BenchOptions(workloads=["W6"], quick=True, repeat=1, startup=False)
    res = runner.run_workload(W6, opts)
    assert res.ok, res.matches
    assert res.matches["fused"].ok and res.matches["unfused"].ok
    assert res.compile["compiler"] == "jit.script"
    assert all(res.times[v] is not None for v in ("eager", "unfused", "fused"))
    model, x = W6.build(quick=True)
    steps = model.steps_taken(x)
    assert any(f"exits after {steps} of {x.shape[1]} steps" in n for n in res.notes), res.notes


def test_report_names_the_scripted_columns() -> None:
    res = runner.WorkloadResult(W6, (4, 32, 16), (4, 32, 16), "float32")
    t = runner.Timing(1e-3, 1e-3, 2e-3, 3, 1)
    res.times.update({"eager": t, "unfused": t, "fused": t, "torch_eager": t,
                      "torch_script": t, "torch_compile": None})
    machine = {"cpu": "test", "usable_cpus": 1,
               "threads": {"scriptmod": 1, "blas": 1, "blas_set_by": "default"}}
    rep = runner.BenchReport(runner.BenchOptions(), machine, None, [res])  # type: ignore[arg-type]
    head = report.results_table(rep).splitlines()[0]
    assert "torch eager  torch.jit.script  torch.compile" in head
    assert "trace+freeze" not in head


def test_startup_children_script_w6() -> None:
    from scriptmod.bench import startup
    got = startup.measure_startup(startup.StartupSpec("W6", quick=True, threads=1))
    cold, warm = got["cold"], got["warm"]
    assert "error" not in cold and "error" not in warm, got
    assert cold["match"]["ok"] and warm["match"]["ok"]
    assert cold["cache"]["compiles"] >= 1 and warm["cache"]["compiles"] == 0



def test_scripted_w6_saves_and_loads() -> None:
    import io
    from scriptmod import jit
    model, x = W6.build(quick=True)
    scripted = runner.compile_model(W6, model, x)
    buf = io.BytesIO()
    jit.save(scripted, buf)
    buf.seek(0)
    loaded = jit.load(buf)
    assert str(loaded.graph) == str(scripted.graph)
    with sm.no_grad():
        for inp in (x, sm.randn(3, 20, 16)):
            np.testing.assert_array_equal(loaded(inp).numpy(), scripted(inp).numpy())

# ---- the PyTorch side (skipped without torch) ------------------------------------------------

def _torch() -> Any:
    return pytest.importorskip("torch")


def test_twin_and_torch_jit_script_match_eager_scriptmod() -> None:
    torch = _torch()
    model, x = W6.build(quick=True)
    with sm.no_grad():
        ref = runner.host64(model(x))
    twin = torch_ref.build_twin("W6", torch_ref.dims_of("W6", model), torch_ref.weights_of(model))
    xt = torch.from_numpy(x.numpy())
    with torch.no_grad():
        scripted = torch_ref.torchscript_scripted(twin)
        assert isinstance(scripted, torch.jit.ScriptModule)
        assert "prim::Loop" in str(scripted.graph)
        for m in (twin, scripted):
            assert runner.compare(m(xt), ref, "float32").ok


def test_cell_is_torch_gru_cell() -> None:
    torch = _torch()
    model, x = W6.build(quick=True)
    cell = model.cell
    ref = torch.nn.GRUCell(cell.x2h.in_features, cell.hidden_size)
    w = {k: torch.from_numpy(v.numpy().copy()) for k, v in cell.state_dict().items()}
    ref.load_state_dict({"weight_ih": w["x2h.weight"], "weight_hh": w["h2h.weight"],
                         "bias_ih": w["x2h.bias"], "bias_hh": w["h2h.bias"]})
    h = sm.randn(x.shape[0], cell.hidden_size)
    with sm.no_grad(), torch.no_grad():
        got = cell(x[:, 0], h)
        want = ref(torch.from_numpy(x[:, 0].numpy().copy()), torch.from_numpy(h.numpy()))
    assert runner.compare(got, want.numpy().astype(np.float64), "float32").ok


def test_child_writes_the_torch_jit_script_column(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _torch()
    model, x = W6.build(quick=True)
    with sm.no_grad():
        ref = runner.host64(model(x))
    np.savez(tmp_path / "weights.npz", **torch_ref.weights_of(model))
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "ref.npy", ref)
    (tmp_path / "job.json").write_text(json.dumps(
        {"wid": "W6", "grad": False, "script": True, "dims": torch_ref.dims_of("W6", model),
         "threads": None, "dtype": "float32", "budget": 0.001, "repeat": 1, "min_reps": 1}))
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    out = torch_ref._child_main(str(tmp_path))
    assert "error" not in out, out
    assert set(out) == set(torch_ref.SCRIPT_COLUMNS) and "torch_jit" not in out
    for name in torch_ref.SCRIPT_COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])

