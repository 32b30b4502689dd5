"""Presenting a benchmark run: the aligned table, the JSON file and the PNG bar chart.

    >>> fmt_time(0.0042), fmt_time(3.1e-6), fmt_time(None)
    ('4.20 ms', '3.1 µs', 'n/a')

A whole run (``report = run_all(BenchOptions(quick=True))`` takes seconds, so not run here):

    >>> print(format_report(report))            # doctest: +SKIP
    >>> write_json(report, "bench.json"); plot(report, "bench.png")   # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, BinaryIO, Sequence

from scriptmod.bench.runner import BenchReport, WorkloadResult
from scriptmod.bench.timing import WIDE_MARK, WIDE_SPREAD
from scriptmod.bench.training import LOSSES, describe_optimizer

VARIANTS = ("eager", "unfused", "fused", "torch_eager", "torch_jit", "torch_ofi",
            "torch_script", "torch_compile")
LABELS = {"eager": "eager", "unfused": "unfused", "fused": "fused",
          "torch_eager": "torch eager", "torch_jit": "torch.jit trace+freeze",
          "torch_ofi": "torch.jit optimize_for_inference", "torch_script": "torch.jit.script",
          "torch_compile": "torch.compile"}
SHORT = {**LABELS, "torch_jit": "torch.jit", "torch_ofi": "torch.jit ofi"}   # narrower headers


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def fmt_time(s: float | None) -> str:
    """Seconds in the unit that reads best: ``12.3 µs``, ``4.56 ms``, ``1.20 s``."""
    if s is None or not math.isfinite(s):
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.3g} ms" if s >= 1e-2 else f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def table(rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """Rows (first is the header) as aligned text with a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if rj else c.ljust(w)
                         for c, w, rj in zip(r, widths, right)).rstrip()
    return "\n".join([line(rows[0]), line(["-" * w for w in widths])] + [line(r) for r in rows[1:]])


def _variants(report: BenchReport) -> list[str]:
    present = {k for r in report.results for k in r.times}
    return [v for v in VARIANTS if v in present]


def _median(r: WorkloadResult, variant: str) -> float | None:
    t = r.times.get(variant)
    return t.median_s if t else None


def _startup(r: WorkloadResult, phase: str, key: str) -> float | None:
    value = r.startup.get(phase, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _compile_cells(r: WorkloadResult, separate: bool) -> list[str]:
    """Trace and first call cold / warm from the startup children, or (``separate`` off)
    the in-process first calls."""
    if separate:
        first = [fmt_time(_startup(r, p, "first_call_s")) for p in ("cold", "warm")]
        return [fmt_time(_startup(r, "cold", "trace_s")), " / ".join(first)]
    c = r.compile
    return [f"{fmt_time(c.get('cold_s'))} / {fmt_time(c.get('warm_s'))}" if c else "n/a"]


def _median_cell(r: WorkloadResult, variant: str) -> str:
    """The median, marked ``WIDE_MARK`` when its samples spread too wide to trust it."""
    t = r.times.get(variant)
    return fmt_time(t.median_s if t else None) + (WIDE_MARK if t and t.noisy else "")


def _row(r: WorkloadResult, variants: list[str], separate: bool) -> list[str]:
    times = [_median_cell(r, v) for v in variants]
    return ([f"{r.workload.id} {r.workload.name}"] + times +
            [_x(r.speedup), fmt_time(r.floor_s) if r.floor_s else "—", _x(r.x_floor("fused"))] +
            _compile_cells(r, separate) + [r.status])


def _separate_processes(report: BenchReport) -> bool:
    return any(r.startup for r in report.results)


def results_table(report: BenchReport) -> str:
    """Medians per variant (``WIDE_MARK`` after one too noisy to trust), fused/eager speedup,
    floor, fused's multiple of it, then trace time and first call cold / warm (new
    processes; in-process when those were skipped)."""
    variants, separate = _variants(report), _separate_processes(report)
    compile_head = (["trace", "1st call cold / warm"] if separate
                    else ["compile cold / warm (in-process)"])
    head = (["workload"] + [LABELS[v] for v in variants] +
            ["fused/eager", "floor", "x-floor"] + compile_head + ["check"])
    rows = [head] + [_row(r, variants, separate) for r in report.results]
    return table(rows, [False] + [True] * (len(head) - 2) + [False])


def startup_table(report: BenchReport) -> str:
    """Per workload, each startup child's import, trace, first call and second call, and
    what its first call did with the kernel cache (objects compiled, loaded from disk)."""
    rows = [["workload", "phase", "import scriptmod", "trace", "1st call", "2nd call",
             "compiled", "from disk"]]
    for r in report.results:
        for phase in ("cold", "warm"):
            got = r.startup.get(phase)
            if got is None:
                continue
            if "error" in got:
                rows.append([r.workload.id, phase, f"failed: {got['error']}"] + [""] * 5)
                continue
            cache = got.get("cache") or {}
            rows.append([r.workload.id, phase] +
                        [fmt_time(_startup(r, phase, k)) for k in
                         ("import_s", "trace_s", "first_call_s", "second_call_s")] +
                        [str(cache.get("compiles", "?")), str(cache.get("disk_hits", "?"))])
    return table(rows, [False, False] + [True] * 6)


def spread_table(report: BenchReport) -> str:
    """min – max of the samples behind each median and how many there were, and every
    variant's multiple of the floor."""
    variants = _variants(report)
    rows = [["workload"] + [f"{SHORT[v]} min – max (n)" for v in variants] +
            ["x-floor " + " / ".join(SHORT[v] for v in variants)]]
    for r in report.results:
        cells = []
        for v in variants:
            t = r.times.get(v)
            cells.append(f"{fmt_time(t.min_s)} – {fmt_time(t.max_s)} ({t.reps})" if t else "n/a")
        x = [r.x_floor(v) for v in variants]
        rows.append([r.workload.id] + cells + [" / ".join(f"{v:.1f}" if v else "—" for v in x)])
    return table(rows, [False] + [True] * (len(variants) + 1))


def rate_table(report: BenchReport) -> str:
    """GFLOP/s of every variant on the rows with a FLOP floor (the floor's FLOPs over each
    median: for a CONV row the convolution's ``2 * N * O * H * W * C/G * 9``), the matmul
    peak the floor uses, and fused against torch eager (torch's median over fused's: the
    ratio of their GFLOP/s, which issue 40 sets targets on); ``""`` when no row has one."""
    rows = [r for r in report.results if r.workload.floor == "flops" and r.floor_work > 0]
    if not rows:
        return ""
    variants = _variants(report)
    out = [["workload (GFLOP/s)"] + [SHORT[v] for v in variants] + ["fused / torch eager"]]
    for r in rows:
        rate = {v: r.floor_work / t.median_s / 1e9 for v in variants
                if (t := r.times.get(v)) is not None}
        fused, torch = rate.get("fused"), rate.get("torch_eager")
        out.append([f"{r.workload.id} {r.workload.name}"] +
                   [f"{rate[v]:.1f}" if v in rate else "n/a" for v in variants] +
                   [_x(fused / torch) if fused and torch else "—"])
    peak = (f"matmul peak (the floor) {report.rates.matmul_flop_per_s / 1e9:.1f} GFLOP/s"
            if report.rates else "")
    return table(out, [False] + [True] * (len(variants) + 1)) + (f"\n{peak}" if peak else "")


def header(report: BenchReport) -> str:
    m, o, rates = report.machine, report.options, report.rates
    th = m["threads"]
    return "\n".join([
        f"scriptmod bench: {m['cpu']}, {m['usable_cpus']} usable CPU(s); device {o.device}; "
        f"dtype {o.dtype}; threads: scriptmod {th['scriptmod']}, "
        f"BLAS {th['blas'] or '?'} ({th['blas_set_by']})"
        + ("; quick" if o.quick else ""),
        *([load_line(th, o.background_load)]
          if o.background_load or th.get("load", {}).get("contended") else []),
        *([textwrap.fill(m["blas_hint"], 100)] if m.get("blas_hint") else []),
        f"floors (this run): copy {rates.copy_bytes_per_s / 1e9:.1f} GB/s (read + write, "
        f"{rates.copy_threads} thread(s)), "
        f"matmul {rates.matmul_flop_per_s / 1e9:.1f} GFLOP/s ({o.dtype})"
        + (f"; run batch {o.batch} (traced at the workload's batch)" if o.batch else ""),
    ])


def load_line(threads: dict[str, Any], background: bool) -> str:
    """The run's contention: whether ``--background-load`` kept a core busy, how many load
    samples saw other processes' work, and how often the BLAS threads were capped for it
    (``runtime.threads.follow_load``).

    >>> print(load_line({"dynamic": True, "load": {"samples": 40, "contended": 38,
    ...                                            "changes": 1, "others_last": 1.0}}, True))
    background load: ON (another process kept one core busy the whole run); other processes
    busy in 38 of 40 load samples (last: 1.0 cores); BLAS threads capped or restored 1 time(s)
    """
    load = threads.get("load") or {}
    head = ("background load: ON (another process kept one core busy the whole run); "
            if background else "load: ")
    seen = (f"other processes busy in {load.get('contended', 0)} of {load.get('samples', 0)} "
            f"load samples (last: {load.get('others_last', 0):.1f} cores)")
    dyn = (f"BLAS threads capped or restored {load.get('changes', 0)} time(s)"
           if threads.get("dynamic") else "dynamic BLAS threads off (SCRIPTMOD_DYNAMIC_THREADS=0)")
    return textwrap.fill(f"{head}{seen}; {dyn}", 100)


def problems(report: BenchReport) -> list[str]:
    """One loud line per output that did not match eager or workload that failed (and one
    per note)."""
    out = []
    for r in report.results:
        for name, m in r.matches.items():
            if not m.ok:
                level = "note" if name.startswith("torch") else r.status
                out.append(f"{level}: {r.workload.id} {name}: {m.detail}")
        out += [f"note: {r.workload.id}: {n}" for n in r.notes]
    return out


FOOTNOTE = ("medians, no grad; fused/eager = eager median / fused median; floor = bytes (read x "
            "+ write y) over copy bandwidth, or matmul FLOPs (a convolution's: 2 N O H_out W_out "
            "C/G k_h k_w) over matmul peak; x-floor = fused / floor; torch.jit trace+freeze = "
            "torch.jit.freeze(torch.jit.trace(model, x)).")
NOISY_NOTE = (f"{WIDE_MARK} after a median: too noisy to trust, its samples spread wide "
              f"((p90 - p10) / median > {WIDE_SPREAD:.0%}; min - max in the table below); "
              f"rerun, with a larger --budget or on a quieter machine.")
SCRIPT_NOTE = ("Scripted workloads ({ids}): unfused and fused are scriptmod.jit.script(model), "
               "control flow kept, the trace column is the jit.script time; torch.jit.script = "
               "torch.jit.script(model), not frozen.")
STARTUP_NOTE = ("1st call = the first call of a freshly traced module, measured in a new "
                "process after import, model building and jit.trace (trace, shown apart): "
                "specialization, graph passes, fusion, code generation, LLVM compilation or "
                "loading objects from the disk cache, lazy imports and LLVM initialization, and "
                "one run (bytecode precompiled by an untimed priming process). cold: empty "
                "SCRIPTMOD_CACHE_DIR; warm: new processes with the folder the cold one filled "
                "(the median of three).")
TRAIN_NOTE = ("Training rows ({ids}): one training step each, with grad enabled and the model in "
              "train mode: zero_grad(set_to_none=True), the row's loss of the model against a "
              "fixed random target, loss.backward(), the row's optimizer step. The loss is "
              "WithLoss(model, loss)(x, target), the model and its loss as one module: eager "
              "steps it as is; unfused and fused (the compiled column) step scriptmod.jit.trace("
              "WithLoss(model, loss), (x, target)) with the optimizer's fused=True, so the loss "
              "compiles with the model. Their check compares one step's loss and every "
              "parameter's gradient with eager's; compile and 1st call are a whole first step. "
              "Floors: bytes |x| + |y| (the input and the target read once), or 3x the "
              "forward's matmul FLOPs. torch eager and torch.compile train the same weights "
              "with torch.optim's same optimizer, torch.compile compiling the same "
              "model-with-loss module's forward and backward. Loss and optimizer: {recipes}.")
FROZEN_NOTE = ("Frozen rows ({ids}): unfused and fused are scriptmod.jit.optimize_for_inference("
               "jit.trace(model, x)) (frozen, each BatchNorm folded into its convolution); "
               "torch.jit optimize_for_inference = torch.jit.optimize_for_inference("
               "torch.jit.trace(model, x)) (frozen, BatchNorm folded, oneDNN convolutions).")
DYNAMIC_NOTE = ("Rows of a varying sequence length ({ids}; scriptmod.bench.dynamic): G1's "
                "eager and torch eager are medians of whole 40-token generations, its fused and "
                "torch.compile columns the first whole generation of a module traced (compiled) "
                "once, compiles included; W5T's columns are at its last length (T=200), each "
                "length's one-trace and per-length-trace medians in the notes; the "
                "specialization counts are in the notes and the JSON (compile).")
IN_PROCESS_NOTE = ("compile (in-process) = first call of a freshly traced module in this process "
                   "(specialize, fuse, generate, LLVM, one run): cold with an empty cache folder, "
                   "warm from the disk cache; rerun without --no-compile-time for new-process "
                   "numbers.")


def format_report(report: BenchReport) -> str:
    """The header, the results table, the sample spreads, the startup details (when
    measured) and the notes, as printed by ``scriptmod bench``."""
    separate = _separate_processes(report)
    parts = [header(report), "", results_table(report), "", spread_table(report), ""]
    rates = rate_table(report)
    if rates:
        parts += [rates, ""]
    if separate:
        parts += [startup_table(report), ""]
    parts += [textwrap.fill(FOOTNOTE, 100)]
    if any(t and t.noisy for r in report.results for t in r.times.values()):
        parts.append(textwrap.fill(NOISY_NOTE, 100))
    parts.append(textwrap.fill(STARTUP_NOTE if separate else IN_PROCESS_NOTE, 100))
    scripted = [r.workload.id for r in report.results if r.workload.script]
    if scripted:
        parts.append(textwrap.fill(SCRIPT_NOTE.format(ids=", ".join(scripted)), 100))
    trained = [r.workload for r in report.results if r.workload.train]
    if trained:
        parts.append(textwrap.fill(TRAIN_NOTE.format(
            ids=", ".join(w.id for w in trained), recipes="; ".join(
                f"{w.id} {LOSSES[w.loss]}, {describe_optimizer(w.optimizer)}" for w in trained)), 100))
    frozen = [r.workload.id for r in report.results if r.workload.freeze]
    if frozen:
        parts.append(textwrap.fill(FROZEN_NOTE.format(ids=", ".join(frozen)), 100))
    measured = [r.workload.id for r in report.results if r.workload.measure is not None]
    if measured:
        parts.append(textwrap.fill(DYNAMIC_NOTE.format(ids=", ".join(measured)), 100))
    parts += [line for line in (grad_ratio_line(report), torch_compile_line(report)) if line]
    return "\n".join(parts)


def grad_ratio_line(report: BenchReport, grad: str = "W4G", no_grad: str = "W4") -> str:
    """Each variant's median with grad enabled over its ``no_grad`` median (W4G / W4; the
    issue's target is at most 2x), when the run has both rows; else ``""``."""
    rows = {r.workload.id: r for r in report.results}
    if grad not in rows or no_grad not in rows:
        return ""
    cells = []
    for v in _variants(report):
        g, n = _median(rows[grad], v), _median(rows[no_grad], v)
        if g and n:
            cells.append(f"{LABELS[v]} {g / n:.2f}x")
    return fill_cells(f"{grad} / {no_grad} (grad enabled over no_grad, median over median; "
                      f"target <= 2x): ", cells)


def torch_compile_line(report: BenchReport) -> str:
    """torch.compile's first call per row (its compile, then one call or training step),
    when the PyTorch columns ran; else ``""``."""
    cells = [f"{r.workload.id} {fmt_time(r.compile['torch_compile_first_call_s'])}"
             for r in report.results if "torch_compile_first_call_s" in r.compile]
    if not cells:
        return ""
    return fill_cells("torch.compile first call (cold compile with an empty inductor cache, "
                      "then one call; a whole step for training rows): ", cells)


def fill_cells(head: str, cells: list[str], width: int = 100) -> str:
    """``head`` and the comma-separated ``cells`` wrapped at ``width``, never inside a cell.

    >>> print(fill_cells("times: ", ["W4 1.25 s", "W4G 2.50 s"], width=20))
    times: W4 1.25 s,
    W4G 2.50 s
    """
    joined = head + ", ".join(c.replace(" ", "\xa0") for c in cells)   # textwrap keeps \xa0
    return textwrap.fill(joined, width).replace("\xa0", " ")


def json_text(report: BenchReport) -> str:
    """The run as JSON text (non-finite numbers become null, so any JSON reader accepts it)."""
    return json.dumps(_clean(report.as_dict()), indent=2, default=str) + "\n"


def write_json(report: BenchReport, path: str | Path) -> None:
    """``json_text(report)`` written to ``path`` (its folder made if missing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json_text(report))


def _clean(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` (non-interactive backend), or ``PlotUnavailable`` saying how to
    install it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib "
                              "(or pip install 'scriptmod[plot]')") from None
    return plt


def plot(report: BenchReport, path: str | Path | BinaryIO) -> None:
    """One panel per workload: a bar per variant (median, interquartile whisker; min and max
    are in the table and the JSON), the floor dashed. ``path`` may be a binary file object
    (``sys.stdout.buffer``)."""
    plt = require_matplotlib()
    results = [r for r in report.results if r.times]
    fig, axes = plt.subplots(1, max(1, len(results)), figsize=(3.2 * max(1, len(results)), 3.8),
                             squeeze=False)
    for ax, r in zip(axes[0], results):
        _panel(ax, r, _variants(report))
    fig.suptitle(f"scriptmod bench — {report.machine['cpu']}, "
                 f"{report.machine['threads']['scriptmod']} thread(s), {report.options.dtype}")
    fig.tight_layout()
    if isinstance(path, (str, Path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def _panel(ax: Any, r: WorkloadResult, variants: list[str]) -> None:
    scale, unit = (1e6, "µs") if r.workload.floor == "none" else (1e3, "ms")
    timed = [(v, t) for v in variants if (t := r.times.get(v)) is not None]
    names = [v for v, _ in timed]
    med = [t.median_s * scale for _, t in timed]
    lo = [max(0.0, m - t.q1_s * scale) for m, (_, t) in zip(med, timed)]
    hi = [max(0.0, t.q3_s * scale - m) for m, (_, t) in zip(med, timed)]
    colors = {"eager": "#999999", "unfused": "#6baed6", "fused": "#08519c",
              "torch_eager": "#fdae6b", "torch_jit": "#a63603", "torch_ofi": "#a63603",
              "torch_script": "#a63603",
              "torch_compile": "#e6550d"}
    bars = ax.bar(range(len(names)), med, yerr=[lo, hi], capsize=3,
                  color=[colors[n] for n in names])
    ax.bar_label(bars, labels=[f"{m:.3g}" for m in med], fontsize=7, padding=2)
    ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=35, ha="right")
    if r.floor_s:
        ax.axhline(r.floor_s * scale, color="#cb181d", linestyle="--",
                   label=f"floor {r.floor_s * scale:.3g} {unit}")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"{r.workload.id} {r.workload.name}", fontsize=10)
    ax.set_ylabel(f"{unit} per call (median, IQR)")
    ax.margins(y=0.12)
