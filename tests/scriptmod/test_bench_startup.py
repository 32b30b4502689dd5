"""Cold compile and warm start in new processes (``scriptmod.bench.startup``) and how the
report shows them. One real pair of child processes on the quick W4; everything else
works on recorded results. No timing is asserted beyond "measured and positive"."""
from __future__ import annotations

import json

import pytest

from scriptmod.bench import report, runner, startup
from scriptmod.bench.cli import options
from scriptmod.bench.floors import Rates
from scriptmod.bench.timing import Timing
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import build_parser


@pytest.fixture(scope="module")
def w4_startup() -> dict:
    return startup.measure_startup(startup.StartupSpec("W4", quick=True, threads=1))


def test_cold_compiles_and_warm_loads_every_object_from_disk(w4_startup: dict) -> None:
    cold, warm = w4_startup["cold"], w4_startup["warm"]
    assert "error" not in cold and "error" not in warm, w4_startup
    assert cold["cache"]["compiles"] >= 1 and cold["cache"]["disk_hits"] == 0
    assert warm["cache"]["compiles"] == 0 and warm["cache"]["disk_hits"] >= 1
    assert cold["files_on_disk"] >= 1 and warm["files_on_disk"] == cold["files_on_disk"]
    for phase in (cold, warm):
        assert phase["match"]["ok"], phase["match"]
        assert phase["trace_s"] > 0 and phase["first_call_s"] > 0 and phase["import_s"] > 0
        assert phase["second_call_s"] > 0


def test_recorded_startup_becomes_checks_and_columns() -> None:
    res = _result("W4")
    runner.record_startup(res, {"cold": _phase(compiles=5, disk_hits=0),
                                "warm": _phase(compiles=0, disk_hits=5)})
    assert res.matches["cold_start"].ok and res.matches["warm_start"].ok and res.ok
    text = report.format_report(_report([res]))
    assert "1st call cold / warm" in text and "trace" in text
    assert "import scriptmod" in text and "from disk" in text        # the startup table
    assert "compile cold / warm (in-process)" not in text
    assert res.as_dict()["startup"]["warm"]["cache"]["compiles"] == 0


def test_a_failed_child_fails_the_run_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def failing(args: list[str], timeout: float, env: dict | None = None) -> dict:
        calls.append(args)
        assert env is not None and env["SCRIPTMOD_CACHE_DIR"]
        return {"error": "child exited with 1: boom"}

    monkeypatch.setattr(startup, "run_child", failing)
    measured = startup.measure_startup(startup.StartupSpec("W4", quick=True))
    assert len(calls) == 1                          # nothing more after a failed priming run
    assert measured["warm"] == {"error": "priming run: child exited with 1: boom"}
    res = _result("W4")
    runner.record_startup(res, measured)
    assert not res.ok and res.status == "MISMATCH"
    assert "child process: priming run: child exited with 1: boom" in res.matches[
        "cold_start"].detail
    rep = _report([res])
    assert any("cold_start" in line and "boom" in line for line in report.problems(rep))
    assert "failed: priming run: child exited with 1: boom" in report.startup_table(rep)


def test_a_failed_cold_run_skips_the_warm_one(monkeypatch: pytest.MonkeyPatch) -> None:
    envs: list[dict] = []

    def cold_fails(args: list[str], timeout: float, env: dict | None = None) -> dict:
        envs.append(dict(env or {}))
        return {"error": "boom"} if len(envs) == 2 else {"first_call_s": 1.0}

    monkeypatch.setattr(startup, "run_child", cold_fails)
    measured = startup.measure_startup(startup.StartupSpec("W4", quick=True))
    assert measured == {"cold": {"error": "boom"},
                        "warm": {"error": "not run: the cold run failed"}}
    prime, cold = envs
    assert prime["SCRIPTMOD_CACHE_DIR"] != cold["SCRIPTMOD_CACHE_DIR"]   # primes bytecode only
    assert prime["PYTHONPYCACHEPREFIX"] == cold["PYTHONPYCACHEPREFIX"]
    assert cold["PYTHONDONTWRITEBYTECODE"] == ""


def test_without_startup_the_table_says_in_process() -> None:
    res = _result("W1")
    res.compile = {"cold_s": 0.05, "warm_s": 0.01}
    text = report.results_table(_report([res]))
    assert "compile cold / warm (in-process)" in text and "50 ms / 10 ms" in text


def test_compile_time_option_defaults_on() -> None:
    parse = build_parser().parse_args
    assert options(parse(["bench"])).startup is True
    assert options(parse(["bench", "--no-compile-time"])).startup is False


def test_spec_follows_the_run_options() -> None:
    opts = runner.BenchOptions(quick=True, dtype="float64", batch=3, threads=2)
    spec = startup.StartupSpec.of("W3", opts)
    assert spec == startup.StartupSpec("W3", True, "float64", "cpu", 3, 2)
    assert startup.StartupSpec(**json.loads(spec.as_json())) == spec


def _phase(compiles: int, disk_hits: int) -> dict:
    return {"trace_s": 0.01, "first_call_s": 0.05, "second_call_s": 3e-5, "import_s": 0.7,
            "match": {"ok": True, "max_abs_diff": 0.0, "tolerance": 1e-4, "detail": ""},
            "cache": {"compiles": compiles, "disk_hits": disk_hits}, "files_on_disk": 5}


def _result(wid: str) -> runner.WorkloadResult:
    res = runner.WorkloadResult(WORKLOADS[wid], (1, 64), (1, 64), "float32")
    t = Timing(1e-5, 1e-5, 2e-5, 3, 1)
    res.times.update({"eager": t, "unfused": t, "fused": t})
    res.matches.update({"fused": runner.Match(True, 0.0, 1e-4),
                        "unfused": runner.Match(True, 0.0, 1e-4)})
    return res


def _report(results: list[runner.WorkloadResult]) -> runner.BenchReport:
    machine = {"cpu": "test", "usable_cpus": 1,
               "threads": {"scriptmod": 1, "blas": 1, "blas_set_by": "default"}}
    rates = Rates(copy_bytes_per_s=1e10, matmul_flop_per_s=1e10, dtype="float32", device="cpu")
    return runner.BenchReport(runner.BenchOptions(), machine, rates, results)


def test_w4g_is_w4_with_grad_enabled() -> None:
    import scriptmod as sm
    w4, w4g = WORKLOADS["W4"], WORKLOADS["W4G"]
    assert w4g.grad and not w4.grad and w4g.shape == w4.shape
    with w4.grad_mode():
        assert not sm.is_grad_enabled()
    with w4g.grad_mode():
        assert sm.is_grad_enabled()
    model, _ = w4g.build(quick=True)
    assert all(p.requires_grad for p in model.parameters())
