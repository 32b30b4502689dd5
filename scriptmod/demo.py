"""``scriptmod demo``: the whole pipeline on a built-in model, in under a minute.

Trace W3's MLP block (or W5's transformer block), print its graph, inlined graph and code,
the fused graph that actually runs and one fusion kernel's LLVM IR, save the archive, load
it in a fresh Python process and compare its output with this one's, then time fused
against eager with the bench runner.

    scriptmod demo                       # the MLP block, archive in a temporary folder
    scriptmod demo --model transformer --out demo-out/
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

MODELS = {"mlp": "W3", "transformer": "W5"}
IR_LINES = 30

LOAD_AND_RUN = """\
import sys, numpy as np, scriptmod
from scriptmod.runtime.llvm_jit import CACHE
m = scriptmod.jit.load(sys.argv[1])
x = scriptmod.from_numpy(np.load(sys.argv[2]))
with scriptmod.no_grad():
    y = m(x).numpy()
print(f"max abs diff {float(np.abs(y - np.load(sys.argv[3])).max()):.6g}")
print("kernel cache of this process:", CACHE.stats())
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=sorted(MODELS), default="mlp",
                   help="mlp (W3's block, default) or transformer (W5's block), small sizes")
    p.add_argument("--out", metavar="DIR", help="keep the archive and inputs here "
                   "(default: a temporary folder, removed afterwards)")
    p.add_argument("--no-bench", action="store_true", help="skip the fused-vs-eager table")


def section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 72 - len(title)))


def run(args: argparse.Namespace) -> int:
    import scriptmod as sm
    from scriptmod.bench.workloads import WORKLOADS
    wid = MODELS[args.model]
    model, x = WORKLOADS[wid].build(quick=True)
    print(f"scriptmod demo: {wid} {WORKLOADS[wid].name} ({WORKLOADS[wid].description}), "
          f"input {tuple(x.shape)}")
    with sm.no_grad():
        traced = sm.jit.trace(model, x)
        show_graphs(traced, x)
        show_kernel(traced, x)
        ok = save_and_reload(traced, model, x, args.out)
    if not args.no_bench:
        ok = bench_table(wid) and ok
    section("result")
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


def show_graphs(traced: Any, x: Any) -> None:
    section("traced.graph (one prim::CallMethod per submodule call)")
    print(traced.graph)
    section("traced.inlined_graph")
    print(traced.inlined_graph)
    section("traced.code")
    print(traced.code)
    section("traced.graph_for(x): the optimized, fused graph that runs")
    print(traced.graph_for(x))


def show_kernel(traced: Any, x: Any) -> None:
    import scriptmod as sm
    section(f"LLVM IR of a fusion kernel (first {IR_LINES} lines)")
    kernels = sm.jit.kernels_for(traced, x)     # runs the module once: real input layouts
    if not kernels:
        print("(nothing was fused: no kernel to show)")
        return
    k = kernels[0]
    lines = str(k.llvm_ir).splitlines()
    print(f"; {getattr(k, 'name', 'kernel')}: {len(kernels)} fused kernel(s), "
          f"{len(lines)} lines of IR")
    print("\n".join(lines[:IR_LINES]))
    if len(lines) > IR_LINES:
        print(f"; ... {len(lines) - IR_LINES} more lines (kernels_for(module, x)[0].llvm_ir)")


def save_and_reload(traced: Any, model: Any, x: Any, out: str | None) -> bool:
    """Save the archive, run it in a fresh process on the same input, compare."""
    section("save, then load and run in a fresh process")
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        return _roundtrip(traced, model, x, Path(out))
    with tempfile.TemporaryDirectory(prefix="scriptmod-demo-") as d:
        print(f"writing to the temporary folder {d} (removed at the end; --out DIR keeps "
              f"the files)")
        return _roundtrip(traced, model, x, Path(d))


def _roundtrip(traced: Any, model: Any, x: Any, folder: Path) -> bool:
    from scriptmod.bench.runner import TOLERANCE, compare
    archive, xs, ys = folder / "model.smod", folder / "x.npy", folder / "y.npy"
    y = traced(x).numpy()
    eager = compare(y, np.asarray(model(x).numpy(), np.float64), "float32")
    print(f"compiled vs eager in this process: max abs diff {eager.max_abs_diff:.3g} "
          f"({'ok' if eager.ok else 'MISMATCH'})")
    traced.save(str(archive))
    np.save(xs, x.numpy())
    np.save(ys, y)
    print(f"saved {archive} ({archive.stat().st_size} bytes); input {xs.name}, output {ys.name}")
    proc = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(archive), str(xs), str(ys)],
                          capture_output=True, text=True, timeout=120, env=_child_env())
    print(f"$ python -c '<load and run>'  # exit {proc.returncode}")
    print(proc.stdout.rstrip() or proc.stderr.strip()[-2000:])
    diff = _parse_diff(proc.stdout)
    tol = TOLERANCE["float32"] * max(1.0, float(np.abs(y).max()))
    ok = proc.returncode == 0 and diff is not None and diff <= tol and eager.ok
    print(f"reloaded output {'matches' if ok else 'DOES NOT MATCH'} (tolerance {tol:.3g})")
    return ok


def _child_env() -> dict[str, str]:
    import os
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _parse_diff(stdout: str) -> float | None:
    for line in stdout.splitlines():
        if line.startswith("max abs diff "):
            return float(line.split()[-1])
    return None


def bench_table(wid: str) -> bool:
    """W1 (all elementwise) and the demo's workload, quick sizes, through the bench runner."""
    from scriptmod.bench import report
    from scriptmod.bench.runner import BenchOptions, run_all
    section("fused vs eager (scriptmod bench --quick --workload W1," + wid + ")")
    result = run_all(BenchOptions(workloads=["W1", wid], quick=True), progress=False)
    print(report.header(result))
    print(report.results_table(result))
    for line in report.problems(result):
        print(line)
    return result.ok


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scriptmod demo", description=__doc__.split("\n")[0])
    configure(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
