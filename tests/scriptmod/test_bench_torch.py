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


def _job(d: Path, wid: str) -> None:
    """The job folder ``run_torch_job`` writes, for a 1-sample timing."""
    model, x, ref, weights = _workload(wid)
    np.savez(d / "weights.npz", **weights)
    np.save(d / "x.npy", x)
    np.save(d / "ref.npy", ref)
    (d / "job.json").write_text(json.dumps(
        {"wid": wid, "grad": WORKLOADS[wid].grad, "dims": {}, "threads": None,
         "dtype": "float32", "budget": 0.001, "repeat": 1, "min_reps": 1}))


@pytest.mark.parametrize("wid", ["W3", "W4", "A128"])
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


@pytest.mark.parametrize("wid", ["W4", "W4G", "A128"])
def test_child_writes_all_three_columns(wid: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _job(tmp_path, wid)
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    seen: list[bool] = []
    real = torch_ref._timed_part

    def spy(model: object, x: object, ref: np.ndarray, spec: dict) -> dict:
        seen.append(torch.is_grad_enabled())
        return real(model, x, ref, spec)

    monkeypatch.setattr(torch_ref, "_timed_part", spy)
    out = torch_ref._child_main(str(tmp_path))
    assert "error" not in out, out
    assert seen == [wid == "W4G"] * 3                       # no_grad, or grad for W4G
    for name in torch_ref.COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])
        assert out[name]["timing"]["reps"] == 1 and out[name]["build_s"] >= 0
        assert json.loads((tmp_path / f"{name}.json").read_text()) == out[name]


def test_grad_torchscript_keeps_its_parameters() -> None:
    model, x, ref, weights = _workload("W4G")
    twin = torch_ref.build_twin("W4G", {}, weights)
    ts = torch_ref.torchscript(twin, torch.from_numpy(x), freeze=False)
    y = ts(torch.from_numpy(x))
    assert len(list(ts.parameters())) == 10 and y.requires_grad
    assert runner.compare(y, ref, "float32").ok


def test_a_failing_column_is_na_and_the_others_stay(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _job(tmp_path, "W4")

    def broken(twin: object, xt: object, freeze: bool = True) -> object:
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
    machine = {"cpu": "test", "usable_cpus": 1,
               "threads": {"scriptmod": 1, "blas": 1, "blas_set_by": "default"}}
    rep = runner.BenchReport(runner.BenchOptions(), machine, None, [res])  # type: ignore[arg-type]
    head = report.results_table(rep).splitlines()[0]
    assert "torch eager  torch.jit trace+freeze  torch.compile" in head
