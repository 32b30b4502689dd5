"""The PyTorch columns of ``scriptmod bench --compare torch``: the twins hold scriptmod's
weights, TorchScript is trace+freeze of the eval twin, and the child writes every column
it finished. In-process, tiny workloads, torch.compile replaced by the identity (its
compile takes seconds); skipped without torch. No timing is asserted."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from scriptmod.bench import report, runner, torch_ref  # noqa: E402
from scriptmod.bench.workloads import WORKLOADS  # noqa: E402


def _workload(wid: str) -> tuple[object, np.ndarray, np.ndarray, dict]:
    model, x = WORKLOADS[wid].build(quick=True)
    with sm.no_grad():
        ref = runner.host64(model(x))
    return model, x.numpy(), ref, torch_ref.weights_of(model)


@pytest.mark.parametrize("wid", ["W3", "W4"])
def test_torchscript_twin_is_frozen_and_matches_eager_scriptmod(wid: str) -> None:
    model, x, ref, weights = _workload(wid)
    twin = torch_ref.build_twin(wid, torch_ref.dims_of(wid, model), weights)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        ts = torch_ref.torchscript(twin, xt)
        got = ts(xt)
    assert isinstance(ts, torch.jit.ScriptModule)
    assert list(ts.parameters()) == []                     # frozen: weights are constants
    match = runner.compare(got, ref, "float32")
    assert match.ok, match.detail


def test_child_writes_all_three_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, x, ref, weights = _workload("W4")
    np.savez(tmp_path / "weights.npz", **weights)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", ref)
    spec = {"wid": "W4", "dims": {}, "threads": None, "dtype": "float32", "budget": 0.001,
            "repeat": 1, "min_reps": 1}
    (tmp_path / "job.json").write_text(json.dumps(spec))
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    out = torch_ref._child_main(str(tmp_path))
    assert "error" not in out, out
    for name in torch_ref.COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])
        assert out[name]["timing"]["reps"] == 1 and out[name]["build_s"] >= 0
        assert json.loads((tmp_path / f"{name}.json").read_text()) == out[name]


def test_a_failing_column_is_na_and_the_others_stay(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model, x, ref, weights = _workload("W4")
    np.savez(tmp_path / "weights.npz", **weights)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", ref)
    (tmp_path / "job.json").write_text(json.dumps(
        {"wid": "W4", "dims": {}, "threads": None, "dtype": "float32", "budget": 0.001,
         "repeat": 1, "min_reps": 1}))

    def broken(twin: object, xt: object) -> object:
        raise RuntimeError("no TorchScript today")

    monkeypatch.setattr(torch_ref, "torchscript", broken)
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    out = torch_ref._child_main(str(tmp_path))
    assert "torch_jit" not in out and "torch_eager" in out and "torch_compile" in out
    assert "torch.jit trace+freeze: RuntimeError: no TorchScript today" in out["error"]


def test_torchscript_column_is_labelled_trace_freeze() -> None:
    res = runner.WorkloadResult(WORKLOADS["W4"], (1, 64), (1, 64), "float32")
    t = runner.Timing(1e-5, 1e-5, 2e-5, 3, 1)
    res.times.update({"eager": t, "fused": t, "torch_eager": t, "torch_jit": t,
                      "torch_compile": None})
    rep = runner.BenchReport(runner.BenchOptions(), {"cpu": "test", "usable_cpus": 1, "threads": {
        "scriptmod": 1, "blas": 1, "blas_set_by": "default"}}, None, [res])  # type: ignore[arg-type]
    head = report.results_table(rep).splitlines()[0]
    assert "torch eager  torch.jit trace+freeze  torch.compile" in head
