"""The ``scriptmod`` command: usage errors, ``--json -``, quiet broken pipes, the bench help
and the flag on noisy benchmark medians (no timing is asserted: fabricated samples)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.bench import report, runner
from scriptmod.bench.floors import Rates
from scriptmod.bench.timing import WIDE_MARK, WIDE_SPREAD, summarize
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def shell(command: str) -> subprocess.CompletedProcess:
    """``command`` in bash, ``scriptmod`` meaning this checkout's ``python -m scriptmod.cli``."""
    cli = f"{sys.executable} -m scriptmod.cli"
    return subprocess.run(["bash", "-c", command.replace("scriptmod ", cli + " ", 1)], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=120)


def test_no_subcommand_prints_help_and_exits_2(capsys: pytest.CaptureFixture) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: scriptmod") and "bench" in err and "inspect" in err
    assert shell("scriptmod").returncode == 2


def test_bench_help_describes_every_workload(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for wid in ("W1", "W2", "W3", "W4", "W5", "W6", "T2", "T3", "T5"):
        assert f" {wid} {WORKLOADS[wid].name}:" in text, wid
    assert "training step" in text and "p90 - p10" in text


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive whose ``inspect --graph`` output is far larger than a pipe's buffer."""
    path = tmp_path_factory.mktemp("cli") / "deep.smod"
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(400)]).eval()
    sm.jit.trace(model, sm.randn(1, 4)).save(str(path))
    return path


@pytest.mark.parametrize("command", ["scriptmod bench --help | head -1",
                                     "scriptmod inspect {archive} --graph | head -1"])
def test_a_reader_that_stops_early_ends_quietly(command: str, archive: Path) -> None:
    proc = shell(command.format(archive=archive) + "; echo \"status ${PIPESTATUS[0]}\"")
    first, status = proc.stdout.splitlines()
    assert first.startswith(("usage: scriptmod bench", "# <root>.forward"))
    assert proc.stderr == ""                                  # no BrokenPipeError traceback
    assert status in ("status 0", "status 141")               # 141: 128 + SIGPIPE


def test_bench_json_dash_writes_only_json_to_stdout(capsys: pytest.CaptureFixture) -> None:
    rc = main(["bench", "--quick", "--no-progress", "--no-compile-time", "--workload", "W4",
               "--repeat", "3", "--json", "-"])
    out, err = capsys.readouterr()
    assert rc == 0
    data = json.loads(out)
    assert [w["id"] for w in data["workloads"]] == ["W4"] and data["ok"] is True
    t = data["workloads"][0]["times"]["fused"]
    assert t["min_s"] <= t["p10_s"] <= t["median_s"] <= t["p90_s"] <= t["max_s"]
    assert "W4 tiny-latency" in err and "wrote" not in err + out


def test_json_and_plot_cannot_both_take_stdout(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--json", "-", "--plot", "-"]) == 2
    assert "only one of them can write to stdout" in capsys.readouterr().err


# ---- noisy medians --------------------------------------------------------------------------

def fake_report(samples: dict[str, list[float]]) -> runner.BenchReport:
    res = runner.WorkloadResult(WORKLOADS["W4"], (1, 64), (1, 64), "float32")
    res.times.update({v: summarize(s) for v, s in samples.items()})
    machine = {"cpu": "test", "usable_cpus": 2,
               "threads": {"scriptmod": 2, "blas": 2, "blas_set_by": "threadpoolctl",
                           "dynamic": False, "load": {}}}
    return runner.BenchReport(runner.BenchOptions(), machine,
                              Rates(1e10, 1e10, "float32", "cpu"), [res])


def test_summary_spread_is_p90_minus_p10_over_the_median() -> None:
    steady = summarize([1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.00, 1.00])
    assert steady.spread == pytest.approx((steady.p90_s - steady.p10_s) / steady.median_s)
    assert steady.spread < WIDE_SPREAD and not steady.noisy
    noisy = summarize([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.6, 1.7, 1.8, 0.6])
    assert noisy.spread > WIDE_SPREAD and noisy.noisy
    assert not summarize([1.0, 3.0]).noisy                   # two samples: too few to judge


def test_a_noisy_median_is_marked_in_the_table_and_explained() -> None:
    steady = [1e-5] * 10
    noisy = [1e-5] * 6 + [2e-5, 2e-5, 3e-5, 0.5e-5]
    text = report.format_report(fake_report({"eager": steady, "unfused": steady,
                                             "fused": noisy}))
    row = next(line for line in text.splitlines() if line.startswith("W4 tiny-latency"))
    assert row.count(WIDE_MARK) == 1 and f"10.0 µs{WIDE_MARK}" in row
    legend = " ".join(text.split())
    assert f"{WIDE_MARK} after a median: too noisy to trust" in legend
    assert f"(p90 - p10) / median > {WIDE_SPREAD:.0%}" in legend
    calm = report.format_report(fake_report({"eager": steady, "unfused": steady,
                                             "fused": steady}))
    assert "too noisy" not in calm
