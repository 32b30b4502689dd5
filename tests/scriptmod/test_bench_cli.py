"""``scriptmod bench`` and ``scriptmod demo`` end to end: structure and correctness only
(benchmarks check speed; no timing is asserted here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scriptmod as sm
from scriptmod.bench import floors
from scriptmod.bench.report import fmt_time, table
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import main

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("eager", "unfused", "fused")


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict]:
    path = tmp_path_factory.mktemp("bench") / "quick.json"
    rc = main(["bench", "--quick", "--no-progress", "--no-compile-time", "--json", str(path)])
    return rc, json.loads(path.read_text())


def test_quick_bench_every_workload_matches_eager(quick_json: tuple[int, dict]) -> None:
    rc, data = quick_json
    assert rc == 0 and data["ok"] is True
    assert [w["id"] for w in data["workloads"]] == list(WORKLOADS)
    for w in data["workloads"]:
        assert w["ok"], w["match"]
        assert w["match"]["fused"]["ok"] and w["match"]["unfused"]["ok"], w["id"]
        assert w["match"]["fused"]["max_abs_diff"] <= w["match"]["fused"]["tolerance"]


def test_quick_bench_json_structure(quick_json: tuple[int, dict]) -> None:
    _, data = quick_json
    assert data["floors"]["copy_bytes_per_s"] > 0 and data["floors"]["matmul_flop_per_s"] > 0
    assert data["options"]["quick"] is True and data["machine"]["threads"]["scriptmod"] >= 1
    for w in data["workloads"]:
        for v in VARIANTS:
            t = w["times"][v]
            assert 0 < t["min_s"] <= t["median_s"] <= t["max_s"] and t["reps"] >= 1
        assert w["floor"]["kind"] == WORKLOADS[w["id"]].floor
        has_floor = w["floor"]["kind"] != "none"
        assert (w["floor"]["seconds"] is not None) == has_floor
        assert (w["floor"]["x_floor"]["fused"] is not None) == has_floor
        assert w["compile"]["cold_s"] > 0 and w["compile"]["warm_s"] > 0
        assert w["speedup_fused_vs_eager"] > 0


def test_quick_bench_warm_compile_hits_the_disk_cache(quick_json: tuple[int, dict]) -> None:
    _, data = quick_json
    w1 = next(w for w in data["workloads"] if w["id"] == "W1")
    assert w1["fused_kernels"] >= 1
    assert w1["compile"]["cache_cold"]["compiles"] >= 1
    assert w1["compile"]["cache_warm"]["compiles"] == 0
    assert w1["compile"]["cache_warm"]["disk_hits"] >= 1


@pytest.mark.parametrize("argv, message", [
    (["--workload", "W9"], "--workload: unknown W9"),
    (["--threads", "0"], "--threads: expected a positive integer"),
    (["--device", "tpu"], "--device: expected cpu or cuda"),
])
def test_bench_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_mismatch_is_loud_and_fails_the_run(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    from scriptmod.bench import runner
    monkeypatch.setattr(runner, "compare", lambda got, ref, dtype: runner.Match(
        False, 1.0, 0.0, "forced for the test"))
    assert main(["bench", "--quick", "--no-progress", "--workload", "W4", "--repeat", "1",
                 "--no-compile-time"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH: W4 fused: forced for the test" in captured.err
    assert "MISMATCH" in captured.out                      # the table's check column


def test_bench_cuda_without_gpu_is_a_clear_error(capsys: pytest.CaptureFixture) -> None:
    from scriptmod.runtime.arrays import cuda_available
    if cuda_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "--device", "cuda", "--quick", "--workload", "W1"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and ("CuPy" in err or "GPU" in err)


def test_matmul_flops_counts_linear_and_attention() -> None:
    mlp, x = WORKLOADS["W3"].build(quick=True)            # MLP(128, 512), x (32, 128)
    assert floors.matmul_flops(mlp, tuple(x.shape)) == 2 * 32 * (128 * 512 * 2)
    block, x = WORKLOADS["W5"].build(quick=True)          # d 64, hidden 256, x (2, 16, 64)
    tokens, d, seq = 2 * 16, 64, 16
    expected = 2 * tokens * (3 * d * d + d * d + 2 * d * 256) + 4 * tokens * seq * d
    assert floors.matmul_flops(block, tuple(x.shape)) == expected


def test_report_formatting() -> None:
    assert [fmt_time(s) for s in (12.34e-6, 4.567e-3, 0.1234, 1.5, None)] == [
        "12.3 µs", "4.57 ms", "123 ms", "1.50 s", "n/a"]
    assert table([["a", "bb"], ["ccc", "d"]], [False, True]).splitlines() == [
        "a    bb", "---  --", "ccc   d"]


def test_demo_runs_every_section() -> None:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-m", "scriptmod.cli", "demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for section in ("=== traced.graph", "=== traced.inlined_graph", "=== traced.code",
                    "=== traced.graph_for(x)", "=== LLVM IR of a fusion kernel",
                    "=== save, then load and run in a fresh process", "=== fused vs eager"):
        assert section in out, section
    assert "prim::CallMethod" in out and "prim::FusionGroup" in out
    assert "define " in out                       # the LLVM IR excerpt
    assert "reloaded output matches" in out and "all checks passed" in out
    assert sm.__version__
