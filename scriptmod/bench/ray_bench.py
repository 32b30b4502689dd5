"""``scriptmod bench --ray``: W3 rows per second through Ray Data and Ray Serve (issue 18).

    scriptmod bench --ray                    # W3, 128 batches of 256 rows
    scriptmod bench --ray --quick            # the small W3, a smoke test
    scriptmod bench --ray --json out.json

One archive of W3 (traced at its batch of 256 rows) runs over the same rows four ways: a
plain loop of ``ArchivePredictor.predict`` over the batches in this process, at 1 thread
and at every core; then Ray Data (``map_archive``, actors of 1 CPU each, 16 input blocks) with
1 and with 2 actors on a local cluster of every core. A Ray figure runs from the start of
execution to the last row, so it includes the actors' start-up (a process, ``import
scriptmod``, loading the archive, a warm-up call whose kernels come from the kernel cache
the loop filled); the steady rate after the first output batch is reported beside it. Ray
Serve (1 replica, 1 CPU): the latency of single-row requests sent one at a time, then the rows per
second of many single-row requests sent at once and batched by ``@serve.batch``.
Exit status: 0, 1 when an output through Ray differs from the plain loop's, 2 without Ray.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import scriptmod as sm
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.integrations.ray import ArchivePredictor, map_archive, serve_deployment

BLOCKS = 16      # input blocks: enough that every actor always has one to take


@dataclass
class Row:
    variant: str
    rows_per_s: float
    seconds: float
    steady_rows_per_s: float | None = None   # after the first output batch (Ray Data)


@dataclass
class RayBenchResult:
    model: str
    rows: int
    batch: int
    cores: int
    ray_version: str
    rows_table: list[Row] = field(default_factory=list)
    serve: dict[str, float] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    try:
        import ray
    except ImportError:
        print("scriptmod bench --ray: needs Ray: pip install scriptmod[ray]", file=sys.stderr)
        return 2
    result = measure(quick=args.quick, ray=ray)
    print(format_report(result), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        text = json.dumps(dataclasses.asdict(result), indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text)
    for line in result.mismatches:
        print(f"MISMATCH {line}", file=sys.stderr)
    return 1 if result.mismatches else 0


def measure(quick: bool, ray: Any) -> RayBenchResult:
    w = WORKLOADS["W3"]
    model, example = w.build(quick)
    batch, cores = example.shape[0], len(os.sched_getaffinity(0))
    x = np.random.default_rng(0).standard_normal(
        ((16 if quick else 128) * batch, example.shape[1])).astype(np.float32)
    buffer = io.BytesIO()
    sm.jit.save(sm.jit.trace(model, example), buffer)
    archive = buffer.getvalue()
    result = RayBenchResult(f"W3 {w.name} ({w.description})", len(x), batch, cores,
                            ray.__version__)
    expected = _plain_loops(result, archive, x, batch, cores)
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    for name in ("ray.data", "ray.serve"):      # their INFO lines would bury the table
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        _ray_data(result, ray, archive, x, batch, expected)
        _ray_serve(result, archive, x[:2000], expected[:2000], quick)
    finally:
        ray.shutdown()
    return result


def _plain_loops(result: RayBenchResult, archive: bytes, x: np.ndarray, batch: int,
                 cores: int) -> np.ndarray:
    """The loop in this process, at 1 thread and at every core; its output is the reference."""
    before = sm.get_num_threads()
    try:
        for threads in sorted({1, cores}):
            predictor = ArchivePredictor(archive, threads=threads, warmup_rows=batch)
            start = time.perf_counter()
            out = np.concatenate([predictor.predict(x[i:i + batch])
                                  for i in range(0, len(x), batch)])
            seconds = time.perf_counter() - start
            name = f"plain loop, {threads} thread{'s' * (threads > 1)}"
            result.rows_table.append(Row(name, len(x) / seconds, seconds))
    finally:
        sm.set_num_threads(before)
    return out


def _ray_data(result: RayBenchResult, ray: Any, archive: bytes, x: np.ndarray, batch: int,
              expected: np.ndarray) -> None:
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True   # compared row for row with the loop
    for actors in (1, 2):
        ds = ray.data.from_numpy(np.array_split(x, BLOCKS))
        ds = map_archive(ds, archive, actors=actors, batch_size=batch)
        stamps, outs = _timed(ds.iter_batches(batch_size=None, batch_format="numpy"))
        out = np.concatenate([b["output"] for b in outs])
        seconds, first = stamps[-1] - stamps[0], stamps[1] - stamps[0]
        steady = (len(x) - len(outs[0]["output"])) / max(seconds - first, 1e-9)
        result.rows_table.append(Row(f"Ray Data, {actors} actor{'s' * (actors > 1)}",
                                     len(x) / seconds, seconds, steady))
        if out.shape != expected.shape or not np.allclose(out, expected, rtol=1e-4, atol=1e-4):
            result.mismatches.append(f"Ray Data with {actors} actors: the output differs "
                                     f"from the plain loop's")


def _timed(batches: Iterable[dict[str, np.ndarray]]) -> tuple[list[float], list[dict]]:
    """The start time, then the time each batch arrived; and the batches."""
    stamps, outs = [time.perf_counter()], []
    for b in batches:
        outs.append(b)
        stamps.append(time.perf_counter())
    return stamps, outs


def _ray_serve(result: RayBenchResult, archive: bytes, x: np.ndarray, expected: np.ndarray,
               quick: bool) -> None:
    from ray import serve
    serve.start(proxy_location="Disabled")
    try:
        handle = serve.run(serve_deployment(archive), name="bench", route_prefix=None)
        one = [_latency(lambda: handle.predict.remote(row).result()) for row in x[:200]]
        n = 500 if quick else len(x)
        start = time.perf_counter()
        responses = [handle.predict.remote(row) for row in x[:n]]
        out = np.stack([r.result() for r in responses])
        seconds = time.perf_counter() - start
    finally:
        serve.shutdown()
    result.serve = {"latency_p50_ms": 1e3 * float(np.median(one)),
                    "latency_p99_ms": 1e3 * float(np.percentile(one, 99)),
                    "concurrent_requests": n, "concurrent_rows_per_s": n / seconds}
    if not np.allclose(out, expected[:n], rtol=1e-4, atol=1e-4):
        result.mismatches.append("Ray Serve: the output differs from the plain loop's")


def _latency(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def format_report(r: RayBenchResult) -> str:
    base = [row for row in r.rows_table if row.variant.startswith("plain")][-1].rows_per_s
    lines = [f"scriptmod bench --ray: {r.model}", f"{r.rows} rows in batches of {r.batch}, "
             f"float32; {r.cores} cores; Ray {r.ray_version}", "",
             f"{'variant':<24}{'rows/s':>10}{'seconds':>9}{'vs loop':>9}  steady rows/s"]
    for row in r.rows_table:
        steady = f"{row.steady_rows_per_s:>13.0f}" if row.steady_rows_per_s else ""
        lines.append(f"{row.variant:<24}{row.rows_per_s:>10.0f}{row.seconds:>9.2f}"
                     f"{row.rows_per_s / base:>8.2f}x  {steady}")
    s = r.serve
    if s:
        lines += ["", f"Ray Serve, 1 replica: single-row latency p50 {s['latency_p50_ms']:.1f} "
                  f"ms, p99 {s['latency_p99_ms']:.1f} ms; {s['concurrent_requests']:.0f} "
                  f"single-row requests at once: {s['concurrent_rows_per_s']:.0f} rows/s"]
    lines += ["", "vs loop: against the plain loop at every core. Ray Data times include the "
              "actors' start-up; with N cores, N actors of 1 thread each can at best match one "
              "process of N threads, and pay the copies through Ray's object store."]
    return "\n".join(lines)
