"""Running one benchmark workload: build, compile (cold and warm), check, time, bound.

For each workload the model is built with scriptmod's layers and traced at the workload's
batch (W6, whose loop exits on the data, is scripted with ``jit.script`` instead); the
fused and the unfused (``jit.fuser(False)``) ScriptModules are checked against eager on
the run input (dtype tolerance), then eager, unfused and fused are timed back to
back in this process under ``no_grad`` (with grad enabled for W4G) (``timing``), and the
result is set against the floor measured in the same run (``floors``). A training row
(T2, T3, T5, TC1) checks one step's loss and gradients and times whole training steps
(``training``). Cold compile and warm start are measured in two new processes
(``startup``), unless ``BenchOptions.startup`` is off.

    >>> opts = BenchOptions(workloads=["W1"], quick=True)
    >>> opts.budget, opts.min_reps                  # seconds of timing per variant, samples
    (0.15, 3)
    >>> report = run_all(opts)            # seconds of benchmarking   # doctest: +SKIP
    >>> report.results[0].speedup         # eager / fused, measured   # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator

import numpy as np

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.bench import floors, startup, training
# TOLERANCE, Match, compare and host64 lived here; demo.py and the tests still import them here
from scriptmod.bench.check import TOLERANCE, Match, compare, compare_all, host64  # noqa: F401
from scriptmod.bench.timing import Timing, Variant, time_once, time_variants
from scriptmod.bench.workloads import WORKLOADS, Workload


@dataclass
class BenchOptions:
    """What ``scriptmod bench`` runs (the command-line options, parsed)."""

    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    quick: bool = False
    threads: int | None = None
    dtype: str = "float32"
    device: str = "cpu"
    batch: int | None = None
    repeat: int | None = None
    budget_s: float | None = None          # timing budget per variant (None: by mode)
    compare_torch: bool = False
    torch_compile_timeout_s: float = 300.0
    startup: bool = True                   # cold compile and warm start in child processes
    background_load: bool = False          # another process keeps one core busy meanwhile

    @property
    def budget(self) -> float:
        return self.budget_s if self.budget_s is not None else (0.15 if self.quick else 2.0)

    @property
    def min_reps(self) -> int:
        return 3 if self.quick else 7


@dataclass
class WorkloadResult:
    """Everything measured for one workload; ``as_dict`` is its JSON form."""

    workload: Workload
    trace_shape: tuple[int, ...]
    run_shape: tuple[int, ...]
    dtype: str
    matches: dict[str, Match] = field(default_factory=dict)
    times: dict[str, Timing | None] = field(default_factory=dict)
    floor_work: float = 0.0                # bytes or FLOPs, as the workload's floor kind says
    floor_s: float | None = None
    compile: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)   # startup.measure_startup's result
    kernels: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(m.ok for name, m in self.matches.items() if not name.startswith("torch"))

    @property
    def status(self) -> str:
        """``ok``, ``MISMATCH`` (a compiled output differs from eager) or ``ERROR``."""
        return "ok" if self.ok else "ERROR" if "error" in self.matches else "MISMATCH"

    @property
    def speedup(self) -> float | None:
        e, f = self.times.get("eager"), self.times.get("fused")
        return e.median_s / f.median_s if e and f else None

    def x_floor(self, variant: str) -> float | None:
        t = self.times.get(variant)
        return t.median_s / self.floor_s if t and self.floor_s else None

    def as_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "id": w.id, "name": w.name, "description": w.description,
            "trace_shape": list(self.trace_shape), "run_shape": list(self.run_shape),
            "dtype": self.dtype, "ok": self.ok,
            "match": {k: m.as_dict() for k, m in self.matches.items()},
            "times": {k: (t.as_dict() if t else None) for k, t in self.times.items()},
            "speedup_fused_vs_eager": self.speedup,
            "floor": {"kind": w.floor, "work": self.floor_work, "seconds": self.floor_s,
                      "x_floor": {k: self.x_floor(k) for k in self.times}},
            "compile": self.compile, "startup": self.startup, "fused_kernels": self.kernels,
            "notes": self.notes,
        }


# ---- the compiler's switches and its kernel cache -------------------------------------------

def fusion(enabled: bool) -> ContextManager[Any]:
    """Fusion on or off for calls made inside the ``with`` (this thread)."""
    return jit.fuser(enabled)


def set_threads(n: int) -> None:
    """Threads for compiled CPU kernels."""
    sm.set_num_threads(n)


def get_threads() -> int:
    return int(sm.get_num_threads())


def fused_kernels(module: Any, *inputs: Any) -> list[Any]:
    """The fused kernels ``module`` runs for ``inputs``, each with ``.llvm_ir`` and ``.asm``."""
    return list(jit.kernels_for(module, *inputs))


def kernel_cache() -> Any:
    """The process's compiled-kernel cache (memory and disk; ``stats()`` counts)."""
    from scriptmod.runtime.llvm_jit import CACHE
    return CACHE


@contextlib.contextmanager
def fresh_kernel_cache() -> Iterator[str]:
    """A new empty ``SCRIPTMOD_CACHE_DIR`` and no kernels in memory (a cold compile)."""
    old = os.environ.get("SCRIPTMOD_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="scriptmod-bench-cache-") as d:
        os.environ["SCRIPTMOD_CACHE_DIR"] = d
        _forget_kernels()
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("SCRIPTMOD_CACHE_DIR", None)
            else:
                os.environ["SCRIPTMOD_CACHE_DIR"] = old


def _forget_kernels() -> None:
    kernel_cache().clear_memory()


def _cache_stats() -> dict[str, int]:
    return dict(kernel_cache().stats())


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


# ---- devices ---------------------------------------------------------------------------------

class DeviceError(RuntimeError):
    """The requested device cannot be used on this machine."""


def device_backend(device: str) -> tuple[Any, Callable[[], None]]:
    """The array module of ``device`` and a function that waits for its queued work."""
    if not device.startswith("cuda"):
        return np, lambda: None
    from scriptmod.runtime import arrays
    if not arrays.cuda_available():
        why = "CuPy is not installed" if arrays.cupy is None else "no CUDA GPU is visible"
        raise DeviceError(f"--device {device}: {why}; install scriptmod[cuda] "
                          f"(cupy-cuda12x) on a machine with an NVIDIA GPU, or use --device cpu")
    cp: Any = arrays.cupy
    return cp, lambda: cp.cuda.Device().synchronize()


# ---- one workload ----------------------------------------------------------------------------

@dataclass
class Compiled:
    """The fused and unfused ScriptModules of a model, and what compiling them cost."""

    fused: Any
    unfused: Any
    info: dict[str, Any]


def build(w: Workload, opts: BenchOptions) -> tuple[nn.Module, sm.Tensor, sm.Tensor]:
    """Model, trace input (the workload's batch) and run input (``--batch`` if given)."""
    dt = getattr(sm, opts.dtype)
    model, x_trace = w.build(quick=opts.quick, dtype=dt)
    x_run = x_trace
    if opts.batch is not None and opts.batch != x_trace.shape[w.batch_dim]:
        sm.manual_seed(1)
        shape = list(x_trace.shape)
        shape[w.batch_dim] = opts.batch
        x_run = sm.randn(*shape, dtype=dt)
    if opts.device != "cpu":
        dev = opts.device
        model, x_trace, x_run = model.to(dev), x_trace.to(dev), x_run.to(dev)
    return model, x_trace, x_run


def compile_models(w: Workload, model: nn.Module, x_trace: sm.Tensor, x: sm.Tensor,
                   sync: Callable[[], None],
                   first: Callable[[Any], Any] | None = None) -> Compiled:
    """Compile three times: cold compile (empty cache folder), warm compile (fresh
    ScriptModule, kernels from the disk cache only) and unfused. Times are first calls,
    ``first(module)`` (default ``module(x)``; a training row's is a whole step);
    ``trace_s`` is the trace (or, for a scripted workload, the ``jit.script``)."""
    call = first or (lambda m: m(x))
    info: dict[str, Any] = {"compiler": "jit.script" if w.script else "jit.trace"}
    with fresh_kernel_cache():
        s0 = _cache_stats()
        box: list[Any] = []
        info["trace_s"] = time_once(lambda: box.append(compile_model(w, model, x_trace)))
        info["cold_s"] = time_once(lambda: call(box[0]), sync)
        s1 = _cache_stats()
        _forget_kernels()
        fused = compile_model(w, model, x_trace)
        info["warm_s"] = time_once(lambda: call(fused), sync)
        info["cache_cold"], info["cache_warm"] = _delta(s0, s1), _delta(s1, _cache_stats())
    with fusion(False):
        unfused = compile_model(w, model, x_trace)
        info["unfused_first_s"] = time_once(lambda: call(unfused), sync)
    return Compiled(fused, unfused, info)


def compile_model(w: Workload, model: nn.Module, x: sm.Tensor) -> Any:
    """The workload's ScriptModule: ``jit.script(model)`` for a scripted workload (W6), for
    a training row the trace of the model with its loss (``training.WithLoss``, traced at
    ``x`` and its target), for a frozen one (C1, C2) ``jit.optimize_for_inference`` of the
    trace (frozen, BatchNorm folded into its convolution), else ``trace_model(model, x)``."""
    if w.script:
        return jit.script(model)
    if w.train:
        return trace_model(training.WithLoss(model, w.loss),
                           (x, training.target_for(model, x, w.loss)))
    if w.freeze:
        return jit.optimize_for_inference(trace_model(model, x))
    return trace_model(model, x)


def trace_model(model: nn.Module, x: Any) -> Any:
    """``jit.trace`` as the bench uses it (``x``: the example input, or a tuple of them).
    The bench checks outputs itself (``check_outputs``), against eager, on the run input."""
    return jit.trace(model, x, check_trace=False)


def check_outputs(res: WorkloadResult, c: Compiled, x: sm.Tensor, ref: np.ndarray) -> None:
    """Compiled against eager, fused and unfused; a mismatch is recorded, never raised."""
    with fusion(False):
        res.matches["unfused"] = compare(c.unfused(x), ref, res.dtype)
    res.matches["fused"] = compare(c.fused(x), ref, res.dtype)
    res.kernels = len(fused_kernels(c.fused, x))


def check_training(res: WorkloadResult, c: Compiled, model: nn.Module, x: sm.Tensor,
                   target: sm.Tensor, ref: dict[str, np.ndarray | None],
                   clip: float | None = None) -> None:
    """A training row's check: one forward and backward of each compiled module from the
    weights ``ref`` (eager's loss and gradients, clipped to ``clip``) was computed from,
    compared with it."""
    with fusion(False):
        got = training.gradients(c.unfused, model, x, target, clip)
    res.matches["unfused"] = compare_all(got, ref, res.dtype)
    res.matches["fused"] = compare_all(training.gradients(c.fused, model, x, target, clip),
                                        ref, res.dtype)
    res.kernels = len(fused_kernels(c.fused, x, target))


def floor_work(w: Workload, model: nn.Module, x: sm.Tensor, y: np.ndarray) -> float:
    """What the floor divides: bytes (read x + write y) or matmul FLOPs; 0 for none."""
    if w.floor == "bytes":
        return float(x.numel() * x.element_size() + y.size * x.element_size())
    if w.floor == "flops":
        return float(floors.matmul_flops(model, tuple(x.shape)))
    return 0.0


def run_workload(w: Workload, opts: BenchOptions,
                 stage: Callable[[str], None] = lambda s: None) -> WorkloadResult:
    """Build, compile, check, time and bound one workload (errors are recorded)."""
    _, sync = device_backend(opts.device)
    model, x_trace, x = build(w, opts)
    res = WorkloadResult(w, tuple(x_trace.shape), tuple(x.shape), opts.dtype)
    try:
        with w.grad_mode():
            _measure(res, model, x_trace, x, opts, sync, stage)
    except Exception as exc:  # noqa: BLE001  (one broken workload must not hide the others)
        res.matches["error"] = Match(False, float("inf"), 0.0, f"{type(exc).__name__}: {exc}")
        res.notes.append(f"failed: {type(exc).__name__}: {exc}")
    return res


def _measure(res: WorkloadResult, model: nn.Module, x_trace: sm.Tensor, x: sm.Tensor,
             opts: BenchOptions, sync: Callable[[], None],
             stage: Callable[[str], None]) -> None:
    if res.workload.measure is not None:
        res.workload.measure(res, model, x, opts, stage)
        return
    if res.workload.train:
        _measure_training(res, model, x_trace, x, opts, sync, stage)
        return
    stage("compile")
    c = compile_models(res.workload, model, x_trace, x, sync)
    res.compile = c.info
    stage("check")
    ref = host64(model(x))
    check_outputs(res, c, x, ref)
    if res.workload.run_note is not None:
        res.notes.append(res.workload.run_note(model, x))
    variants = {"eager": Variant(lambda: model(x)), "unfused": Variant(lambda: c.unfused(x),
                                                                          lambda: fusion(False)),
                "fused": Variant(lambda: c.fused(x))}
    stage("time")
    res.times.update(time_variants(variants, opts.budget, opts.repeat, opts.min_reps, sync=sync))
    res.floor_work = floor_work(res.workload, model, x, ref)
    _startup_and_torch(res, model, x, ref, opts, stage)


def _measure_training(res: WorkloadResult, model: nn.Module, x_trace: sm.Tensor,
                      x: sm.Tensor, opts: BenchOptions, sync: Callable[[], None],
                      stage: Callable[[str], None]) -> None:
    """A training row (``bench.training``): first calls are whole steps, the check compares
    one step's loss and gradients, the variants are steps. Compiling and timing train the
    shared weights, so the check and the PyTorch side start again from the built ones."""
    w = res.workload
    target = training.target_for(model, x, w.loss)
    start = training.snapshot(model)
    stage("compile")
    c = compile_models(w, model, x_trace, x, sync,
                       first=lambda m: training.compiled_step(m, x, target, w.optimizer)())
    res.compile = c.info
    stage("check")
    training.restore(model, start)
    with_loss = training.WithLoss(model, w.loss)
    ref = training.gradients(with_loss, model, x, target, training.CLIP_NORM.get(w.optimizer))
    check_training(res, c, model, x, target, ref, training.CLIP_NORM.get(w.optimizer))
    eager = training.TrainStep(with_loss, training.make_optimizer(w.optimizer,
                                                                  model.parameters())[0],
                               x, target, clip=training.CLIP_NORM.get(w.optimizer))
    unfused, fused = (training.compiled_step(m, x, target, w.optimizer)
                      for m in (c.unfused, c.fused))
    if fused.note:
        res.notes.append(fused.note)
    variants = {"eager": Variant(eager), "unfused": Variant(unfused, lambda: fusion(False)),
                "fused": Variant(fused)}
    stage("time")
    res.times.update(time_variants(variants, opts.budget, opts.repeat, opts.min_reps, sync=sync))
    training.restore(model, start)
    res.floor_work = floors.training_work(w.floor, model, tuple(x.shape),
                                          tuple(target.shape), x.element_size())
    _startup_and_torch(res, model, x, ref, opts, stage, target)


def _startup_and_torch(res: WorkloadResult, model: nn.Module, x: sm.Tensor, ref: Any,
                       opts: BenchOptions, stage: Callable[[str], None],
                       target: sm.Tensor | None = None) -> None:
    """The startup children and the PyTorch columns, when the options ask for them."""
    if opts.startup:
        stage("startup")
        record_startup(res, startup.measure_startup(startup.StartupSpec.of(res.workload.id,
                                                                             opts)))
    if opts.compare_torch:
        from scriptmod.bench import torch_ref
        stage("torch")
        torch_ref.TorchSide.create(res.workload, model, x, ref, opts, target).finish(res)


def record_startup(res: WorkloadResult, measured: dict[str, Any]) -> None:
    """Keep the startup children's results; each first call's check against eager (or
    the child's failure) becomes the ``cold_start`` / ``warm_start`` match."""
    res.startup = measured
    for phase, r in measured.items():
        if "error" in r:
            res.matches[f"{phase}_start"] = Match(False, float("inf"), 0.0,
                                                  f"child process: {r['error']}")
        else:
            res.matches[f"{phase}_start"] = Match(**r["match"])


def selectable() -> dict[str, Workload]:
    """Every ``--workload`` id: the default set (``WORKLOADS``) and the rows that run only
    when named (``bench.dynamic.DYNAMIC``: G1, W5T)."""
    from scriptmod.bench.dynamic import DYNAMIC
    return {**WORKLOADS, **DYNAMIC}


# ---- all workloads ---------------------------------------------------------------------------

@dataclass
class BenchReport:
    """A whole run: options, machine, measured rates and one result per workload."""

    options: BenchOptions
    machine: dict[str, Any]
    rates: floors.Rates
    results: list[WorkloadResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {"scriptmod_version": sm.__version__, "ok": self.ok,
                "options": dict(vars(self.options)), "machine": self.machine,
                "floors": self.rates.as_dict(),
                "workloads": [r.as_dict() for r in self.results]}


def configure_threads(n: int | None) -> dict[str, Any]:
    """Apply ``--threads`` to scriptmod's kernels and NumPy's BLAS; report what is in effect
    (``dynamic``: whether the BLAS threads follow the load of other processes,
    ``runtime.threads``)."""
    from scriptmod.bench.timing import blas_threads, set_blas_threads
    from scriptmod.runtime import threads as rt
    how = "default"
    if n is not None:
        set_threads(n)
        how = set_blas_threads(n)
    return {"requested": n, "scriptmod": get_threads(), "blas": blas_threads(),
            "blas_set_by": how, "dynamic": rt.get_dynamic()}


def machine_info(threads: dict[str, Any], device: str) -> dict[str, Any]:
    import platform
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    from scriptmod.runtime import blas
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "usable_cpus": usable,
            "threads": threads, "device": device, "python": platform.python_version(),
            "numpy": np.__version__, "blas_kernel": blas.kernel(),
            "blas_hint": blas.kernel_hint() if device == "cpu" else ""}


def run_all(opts: BenchOptions, progress: bool | None = None) -> BenchReport:
    """Measure the floors before and after the workloads (keeping the better rate of the
    two), run every selected workload, and set each one's floor. ``progress`` shows a tqdm
    bar (``None``: only on a terminal). With ``opts.background_load`` another process keeps
    one core busy from the first floor to the last (``bench.background``); the machine info
    counts the load samples that saw it (``threads["load"]``)."""
    from tqdm import tqdm

    from scriptmod.bench.background import maybe_busy
    from scriptmod.runtime import threads as rt
    xp, sync = device_backend(opts.device)
    threads = configure_threads(opts.threads)
    bar = tqdm(total=len(opts.workloads) + 2, desc="bench", unit="step", leave=False,
               disable=None if progress is None else not progress)
    load_before = rt.LOAD.stats()
    with bar, maybe_busy(opts.background_load):
        bar.set_postfix_str("floors")
        before = floors.measure(xp, opts.dtype, opts.quick, opts.device, sync, get_threads())
        bar.update()
        results = []
        for wid in opts.workloads:
            stage = lambda s, wid=wid: bar.set_postfix_str(f"{wid} {s}")  # noqa: E731
            results.append(run_workload(selectable()[wid], opts, stage))
            bar.update()
        bar.set_postfix_str("floors")
        after = floors.measure(xp, opts.dtype, opts.quick, opts.device, sync, get_threads())
        rates = floors.best(before, after)
        bar.update()
    for r in results:
        r.floor_s = floors.floor_seconds(r.workload.floor, rates, r.floor_work)
    load = rt.LOAD.stats()
    threads["load"] = {k: load[k] - load_before[k] if k != "others_last" else load[k]
                       for k in load}
    return BenchReport(opts, machine_info(threads, opts.device), rates, results)
