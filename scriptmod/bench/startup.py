"""Cold compile and warm start, each measured in a new process.

*Cold compile*: a child process with an empty kernel cache folder (``SCRIPTMOD_CACHE_DIR``
set to a new temporary directory) imports scriptmod, builds the workload's model, traces
it (``trace_s``; for a scripted workload, W6, ``jit.script``) and calls the traced module
once (``first_call_s``). *Warm start*: a second child does the same with the folder the
first one filled, so its first call finds every kernel object on disk and compiles none;
three such children run and the one with the median first call is reported (one sample
on a shared machine is noise; the three are under ``first_call_runs_s``).
Nothing is shared in memory: each child is a new interpreter.

What ``first_call_s`` includes: everything the first call of a freshly traced module does,
timed around that one call under ``no_grad`` (grad enabled for W4G): specialization to
the input, the graph passes, fusion, code generation, LLVM compilation (cold) or loading
the objects from the disk cache (warm), any lazy import and LLVM initialization the first
compile needs, and one execution of the model on the run input. For a training row (T2,
T3, T5) the first call is a whole training step (forward, loss, backward, AdamW step), and
its check compares the step's loss and gradients with eager's. It excludes starting
Python, ``import scriptmod`` (reported as ``import_s``), building the model and the input,
and the trace (``trace_s``). ``second_call_s`` is the next call, for scale. The first
call's output is checked against eager on the same input, so a wrong object loaded from
the cache is a failed check, not a fast number.

Bytecode: an installed package ships ``.pyc`` files, but a checkout run with
``PYTHONDONTWRITEBYTECODE`` (or a read-only one) has none, and then every module the first
call imports lazily is compiled from source inside the timed call (about 60 ms for W4 on
the development machine). So a third child runs first, untimed, with its own kernel cache
folder: it writes the bytecode of every module the measurement imports into a private
``PYTHONPYCACHEPREFIX`` (one per bench process) that the cold and warm children then read.
Their numbers are what an installed scriptmod costs, whatever the checkout's setting.

    >>> spec = StartupSpec("W4", quick=True)
    >>> StartupSpec(**json.loads(spec.as_json())) == spec     # the child's argument
    True
    >>> result = measure_startup(spec)      # two child processes, seconds   # doctest: +SKIP
    >>> result["warm"]["cache"]["compiles"]                                  # doctest: +SKIP
    0
"""
from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from scriptmod.bench.child import run_child

TIMEOUT_S = 300.0
PHASES = ("cold", "warm")
WARM_RUNS = 3      # warm starts are cheap: the median of three new processes is reported

# ``import scriptmod`` is timed by the child itself, so the child is started with ``-c``.
_CHILD = ("import sys, time; t0 = time.perf_counter(); import scriptmod; "
          "from scriptmod.bench.startup import child_main; child_main(sys.argv[1], t0)")


@dataclass(frozen=True)
class StartupSpec:
    """What a startup child builds: the workload, its size, dtype, device, run batch and
    threads (as the parent run's options)."""

    wid: str
    quick: bool = False
    dtype: str = "float32"
    device: str = "cpu"
    batch: int | None = None
    threads: int | None = None

    def as_json(self) -> str:
        """The spec as the child's command-line argument."""
        return json.dumps(asdict(self))

    @classmethod
    def of(cls, wid: str, opts: Any) -> "StartupSpec":
        """The spec of workload ``wid`` under the run's ``BenchOptions``."""
        return cls(wid, opts.quick, opts.dtype, opts.device, opts.batch, opts.threads)


def measure_startup(spec: StartupSpec, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """``{"cold": {...}, "warm": {...}}``: two child processes sharing one new kernel cache
    folder, after an untimed priming child (see the module docstring); a phase that failed
    holds ``{"error": why}``."""
    env = {"SCRIPTMOD_LOG": "",                     # logging would inflate the times
           "PYTHONPYCACHEPREFIX": _bytecode_folder().name, "PYTHONDONTWRITEBYTECODE": ""}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="scriptmod-bench-startup-") as d:
        for phase, cache in (("prime", "prime"), ("cold", "kernels"), ("warm", "kernels")):
            failed = [p for p, r in out.items() if "error" in r]
            if failed:
                out[phase] = {"error": f"not run: the {failed[0]} run failed"}
                continue
            runs = [run_child(["-c", _CHILD, spec.as_json()], timeout,
                              {**env, "SCRIPTMOD_CACHE_DIR": os.path.join(d, cache)})
                    for _ in range(WARM_RUNS if phase == "warm" else 1)]
            out[phase] = _median_run(runs)
    prime = out.pop("prime")
    if "error" in prime:
        return {phase: {"error": f"priming run: {prime['error']}"} for phase in PHASES}
    return out


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median first call (the first failure, if any run failed), with
    every run's first call under ``first_call_runs_s``.

    >>> _median_run([{"first_call_s": t} for t in (0.05, 0.03, 0.04)])
    {'first_call_s': 0.04, 'first_call_runs_s': [0.03, 0.04, 0.05]}
    """
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(runs, key=lambda r: r["first_call_s"])
    if len(ranked) == 1:
        return ranked[0]
    return {**ranked[len(ranked) // 2],
            "first_call_runs_s": [r["first_call_s"] for r in ranked]}


@functools.lru_cache(maxsize=None)
def _bytecode_folder() -> tempfile.TemporaryDirectory[str]:
    """One ``PYTHONPYCACHEPREFIX`` per bench process, removed at exit."""
    return tempfile.TemporaryDirectory(prefix="scriptmod-bench-pyc-")


def child_main(spec_json: str, import_started: float) -> None:
    """The child's work (``python -c`` of ``_CHILD``): print one JSON line of results."""
    import_s = time.perf_counter() - import_started
    try:
        result = _measure(StartupSpec(**json.loads(spec_json)))
        result["import_s"] = import_s
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which fails the check)
        result = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    print(json.dumps(result))
    sys.stdout.flush()


def _measure(spec: StartupSpec) -> dict[str, Any]:
    from scriptmod.bench import runner
    from scriptmod.bench.timing import time_once
    from scriptmod.bench.workloads import WORKLOADS
    opts = runner.BenchOptions(workloads=[spec.wid], quick=spec.quick, threads=spec.threads,
                               dtype=spec.dtype, device=spec.device, batch=spec.batch)
    runner.configure_threads(spec.threads)
    _, sync = runner.device_backend(spec.device)
    w = WORKLOADS[spec.wid]
    model, x_trace, x = runner.build(w, opts)
    with w.grad_mode():
        calls = _training_calls(w, model, x) if w.train else _forward_calls(model, x)
        traced: list[Any] = []
        trace_s = time_once(lambda: traced.append(runner.compile_model(w, model, x_trace)), sync)
        call, check = calls(traced[0])
        before = _cache_stats()
        first_s = time_once(call, sync)
        cache = _delta(before, _cache_stats())
        match = check(spec.dtype)
        second_s = time_once(call, sync)
    return {"trace_s": trace_s, "first_call_s": first_s, "second_call_s": second_s,
            "match": match.as_dict(), "cache": cache, "files_on_disk": _files_on_disk()}


Calls = Callable[[Any], tuple[Callable[[], Any], Callable[[str], Any]]]


def _forward_calls(model: Any, x: Any) -> Calls:
    """The call a forward workload times (``compiled(x)``) and its check against eager."""
    from scriptmod.bench import runner
    out: list[Any] = []

    def calls(compiled: Any) -> tuple[Callable[[], Any], Callable[[str], Any]]:
        return (lambda: out.append(compiled(x)),
                lambda dtype: runner.compare(out[0], runner.host64(model(x)), dtype))
    return calls


def _training_calls(w: Any, model: Any, x: Any) -> Calls:
    """A training row's: a whole step (``training.compiled_step``), and the first step's
    loss and gradients against eager's from the same weights, computed before the trace."""
    from scriptmod.bench import training
    from scriptmod.bench.check import compare_all
    target = training.target_for(model, x, w.loss)
    ref = training.gradients(training.WithLoss(model, w.loss), model, x, target,
                             training.CLIP_NORM.get(w.optimizer))
    losses: list[Any] = []

    def calls(compiled: Any) -> tuple[Callable[[], Any], Callable[[str], Any]]:
        step = training.compiled_step(compiled, x, target, w.optimizer)
        return (lambda: losses.append(step()),
                lambda dtype: compare_all(training.collect(model, losses[0]), ref, dtype))
    return calls


def _cache_stats() -> dict[str, int] | None:
    """The kernel cache's counters, or None where this build has no such cache."""
    try:
        from scriptmod.bench.runner import kernel_cache
        return dict(kernel_cache().stats())
    except (ImportError, AttributeError):
        return None


def _delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before.get(k, 0) for k in after}


def _files_on_disk() -> int:
    """Files in the cache folder after the first call (what a warm start can load)."""
    d = os.environ.get("SCRIPTMOD_CACHE_DIR")
    return sum(1 for p in Path(d).rglob("*") if p.is_file()) if d else 0
