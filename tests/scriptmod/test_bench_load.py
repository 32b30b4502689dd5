"""``scriptmod bench --background-load`` (a busy process started and always killed, the
header saying so) and the attention rows A128/A512. Quick sizes, nothing timed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit
from scriptmod.bench import floors, report, runner
from scriptmod.bench.background import busy_process, maybe_busy
from scriptmod.bench.cli import options
from scriptmod.bench.floors import Rates
from scriptmod.bench.timing import Timing
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])           # utime + stime


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_option_parsing() -> None:
    parse = build_parser().parse_args
    assert options(parse(["bench"])).background_load is False
    opts = options(parse(["bench", "--background-load", "--workload", "a128,W3"]))
    assert opts.background_load is True and opts.workloads == ["A128", "W3"]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")
def test_the_busy_process_burns_a_core_and_is_killed_on_exit() -> None:
    with busy_process() as proc:
        start = _cpu_ticks(proc.pid)
        time.sleep(0.3)
        assert proc.poll() is None
        assert _cpu_ticks(proc.pid) - start >= 10        # >= 0.1 s of CPU in 0.3 s
    assert proc.returncode is not None                  # killed and reaped


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_the_busy_process_is_killed_on_an_exception(exc: type[BaseException]) -> None:
    with pytest.raises(exc):
        with maybe_busy(True) as proc:
            pid = proc.pid
            raise exc()
    assert proc.returncode is not None and _gone(pid, 1.0)


def test_without_the_option_nothing_starts() -> None:
    with maybe_busy(False) as proc:
        assert proc is None


@pytest.mark.skipif(sys.platform != "linux", reason="getppid-based orphan check")
def test_the_busy_process_exits_when_the_bench_is_killed() -> None:
    """SIGKILL runs no ``finally``: the load notices its parent is gone and exits."""
    code = ("import sys, time\n"
            "from scriptmod.bench.background import busy_process\n"
            "with busy_process() as p:\n"
            "    print(p.pid, flush=True)\n"
            "    time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                     os.environ.get("PYTHONPATH")]))}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        pid = int(parent.stdout.readline())
        assert not _gone(pid, 0.1)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _gone(pid, 3.0)


def test_the_header_says_the_load_was_on() -> None:
    res = runner.WorkloadResult(WORKLOADS["W4"], (1, 64), (1, 64), "float32")
    t = Timing(1e-5, 1e-5, 2e-5, 3, 1)
    res.times.update({"eager": t, "unfused": t, "fused": t})
    machine = {"cpu": "test", "usable_cpus": 2,
               "threads": {"scriptmod": 2, "blas": 2, "blas_set_by": "threadpoolctl",
                           "dynamic": True, "load": {"samples": 9, "contended": 8,
                                                     "changes": 1, "others_last": 1.0}}}
    rates = Rates(1e10, 1e10, "float32", "cpu")
    loaded = runner.BenchReport(runner.BenchOptions(background_load=True), machine, rates,
                                [res])
    text = " ".join(report.format_report(loaded).split())
    assert "background load: ON" in text and "busy in 8 of 9 load samples" in text
    quiet = runner.BenchReport(runner.BenchOptions(), {**machine, "threads": {
        **machine["threads"], "load": {"samples": 9, "contended": 0, "changes": 0,
                                       "others_last": 0.0}}}, rates, [res])
    assert "background load" not in report.format_report(quiet)


# ---- attention rows --------------------------------------------------------------------------

@pytest.mark.parametrize("wid, t", [("A128", 16), ("A512", 32)])
def test_attention_rows_trace_match_eager_and_count_gemm_flops(wid: str, t: int) -> None:
    w = WORKLOADS[wid]
    model, x = w.build(quick=True)
    assert tuple(x.shape) == (3, 2, 2, t, 16) and w.floor == "flops"
    with sm.no_grad():
        traced = jit.trace(model, x, check_trace=False)
        got, ref = traced(x).numpy(), model(x).numpy()
    q, k, v = (x.numpy()[i].astype(np.float64) for i in range(3))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(16)
    p = np.exp(s - s.max(-1, keepdims=True))
    expected = (p / p.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(ref, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert floors.matmul_flops(model, tuple(x.shape)) == 2 * 2 * 2 * 2 * t * t * 16


def test_attention_full_size_and_batch_dim() -> None:
    w = WORKLOADS["A512"]
    assert w.shape == (3, 8, 4, 512, 64) and WORKLOADS["A128"].shape == (3, 8, 4, 128, 64)
    model, x = w.build(quick=True, batch=3)             # --batch sets B, not the q/k/v dim
    assert tuple(x.shape) == (3, 3, 2, 32, 16)
    opts = runner.BenchOptions(workloads=["A128"], quick=True, batch=5)
    _, x_trace, x_run = runner.build(WORKLOADS["A128"], opts)
    assert tuple(x_trace.shape) == (3, 2, 2, 16, 16) and tuple(x_run.shape) == (3, 5, 2, 16, 16)
