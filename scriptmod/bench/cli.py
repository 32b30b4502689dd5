"""``scriptmod bench``: eager vs unfused vs fused on W1–W6, the attention micro-benchmarks
A128/A512, the training rows T2/T3/T5 (one AdamW step of W2/W3/W5) and the CNN rows C1, C2,
TC1, M1, CONV1–CONV5 (ResNet-18, MobileNetV2, a ResNet-18 training step, the MNIST net,
single convolutions) and the RNN rows R1, R2, TR1 (the word-language LSTM, a bidirectional
GRU encoder, the LSTM's training step), against measured floors (W6 is scripted with
``jit.script``, the others traced).

    scriptmod bench                          # everything, default threads, float32
    scriptmod bench --quick                  # small sizes, few repetitions (a smoke test)
    scriptmod bench --workload W1,W3 --threads 1 --json out.json --plot out.png
    scriptmod bench --compare torch          # adds torch eager, TorchScript, torch.compile
    scriptmod bench --workload W6 --compare torch   # scripted GRU: torch.jit.script column
    scriptmod bench --workload T2,T3,T5 --compare torch   # training steps, torch.compile too
    scriptmod bench --workload CNN --compare torch   # C1,C2,TC1,M1,CONV1-5 (CONV: the convs)
    scriptmod bench --workload RNN --compare torch   # R1,R2,TR1
    scriptmod bench --no-compile-time        # skip the two new-process startup runs
    scriptmod bench --background-load        # another process keeps one core busy meanwhile
    scriptmod bench --ray                    # W3 through Ray Data and Ray Serve (bench.ray_bench)
    scriptmod bench --workload G1,W5T --compare torch   # generation, varying lengths
    scriptmod bench --paired --workload T5   # fused and torch eager alternating in one process

``--threads N`` sets the threads of scriptmod's compiled kernels and of the BLAS NumPy
loaded (matmuls, in every variant; through threadpoolctl, else the header says "unchanged").
PyTorch's threads (``--compare torch``) are set to N too. Without ``--threads`` all of them
keep their defaults. Unless ``SCRIPTMOD_DYNAMIC_THREADS=0``, the BLAS uses fewer threads
while other processes keep cores busy (``scriptmod.runtime.threads``), refreshed before
every timing sample; the header says how often that happened.

``--background-load`` starts ``python -c "while True: pass"`` (in effect: see
``scriptmod.bench.background``) before the first floor and kills it after the last one,
also on Ctrl-C or an error, so every timing, child process included, runs with one core
taken; the header says so.

Unless ``--no-compile-time``, each workload also runs in two new processes sharing a new
kernel cache folder: the first measures trace time and the cold compile (first call with
an empty cache), the second the warm start (first call with every object on disk); see
``scriptmod.bench.startup`` for what the first call includes. Exit status: 0, 1 when a
compiled output (in this process or a startup child) did not match eager, 2 for a usage
error.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING

from scriptmod.bench.timing import WIDE_MARK, WIDE_SPREAD
from scriptmod.bench.dynamic import DYNAMIC
from scriptmod.bench.workloads import GROUPS, WORKLOADS

if TYPE_CHECKING:
    from scriptmod.bench.runner import BenchOptions


def workloads_help() -> str:
    """The workloads, one entry each, for ``scriptmod bench --help``.

    >>> print(workloads_help().splitlines()[1])
      W1    ew-chain: gelu_tanh(x * a + b) + x; input 4096x4096; floor: bytes moved
    """
    floor = {"bytes": "bytes moved", "flops": "matmul FLOPs", "none": "none (latency)"}
    lines = ["workloads (--workload; W6 is scripted with jit.script, the others traced):"]
    for w in (*WORKLOADS.values(), *DYNAMIC.values()):
        lines += textwrap.wrap(f"{w.id:<5} {w.name}: {w.description}; input "
                               f"{'x'.join(map(str, w.shape))}; "
                               f"floor: {floor[w.floor]}", 96, initial_indent="  ",
                               subsequent_indent=" " * 8)
    lines += textwrap.wrap(f"{', '.join(DYNAMIC)} run only when --workload names them (a "
                           f"sequence length that varies: scriptmod.bench.dynamic).", 96)
    lines += textwrap.wrap("Groups: " + "; ".join(f"{g} = {','.join(ids)}" for g, ids in
                                                  GROUPS.items()) + ".", 96)
    lines += textwrap.wrap(f"A median marked {WIDE_MARK} in the results table is too noisy "
                           f"to trust: its samples' (p90 - p10) / median is over "
                           f"{WIDE_SPREAD:.0%}.", 96)
    return "\n".join(lines)


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (__doc__ or "").split("\n\n")[0]
    p.epilog = workloads_help()
    p.add_argument("--workload", default=",".join(WORKLOADS), metavar="W1,W3",
                   help=f"comma-separated workload ids (default: all of {','.join(WORKLOADS)})")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads for compiled kernels and NumPy's BLAS (default: unchanged)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda needs CuPy and a GPU)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="run at batch N; the model is still traced at the workload's batch")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="exactly N timed samples per variant (default: adaptive, by time budget)")
    p.add_argument("--budget", type=float, metavar="S",
                   help="seconds of timing per variant (default 2, 0.15 with --quick)")
    p.add_argument("--json", metavar="PATH", help="write the full results as JSON "
                   "('-': to stdout, the table then goes to stderr)")
    p.add_argument("--plot", metavar="PATH", help="write a PNG bar chart (needs matplotlib; "
                   "'-': to stdout, the table then goes to stderr)")
    p.add_argument("--compare", choices=("torch",),
                   help="add PyTorch columns: eager, TorchScript (torch.jit trace+freeze; "
                   "torch.jit.script for W6, torch.jit.optimize_for_inference for C1/C2) and "
                   "torch.compile, same weights and input, no grad (training rows T2/T3/T5/TC1: "
                   "torch eager and torch.compile training steps)")
    p.add_argument("--compile-time", action=argparse.BooleanOptionalAction, default=True,
                   help="measure trace, cold compile and warm start in two new processes "
                   "per workload (default: on; --no-compile-time skips them)")
    p.add_argument("--torch-compile-timeout", type=float, default=300.0, metavar="S",
                   help="cap in seconds on the PyTorch child process per workload "
                   "(eager, TorchScript, then torch.compile's compile and timing; default 300)")
    p.add_argument("--background-load", action="store_true",
                   help="keep one core busy with another process (python -c \"while True: "
                   "pass\") for the whole run: timings under contention")
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few repetitions: a smoke test, not a measurement")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--paired", action="store_true",
                   help="instead: scriptmod's fused variant and PyTorch eager alternating in "
                   "rounds in one process (default workloads T2,T3,T5; needs torch; uses "
                   "--workload, --threads, --repeat (rounds), --quick and --json; see "
                   "scriptmod.bench.paired)")
    p.add_argument("--ray", action="store_true",
                   help="instead: W3 rows/s through Ray Data (1 and 2 actors) and Ray Serve "
                   "against a plain loop in this process (needs scriptmod[ray]; uses --quick "
                   "and --json only; see scriptmod.bench.ray_bench)")


def options(args: argparse.Namespace) -> BenchOptions:
    """The parsed command line as ``BenchOptions``; ``ValueError`` names a bad argument."""
    from scriptmod.bench.runner import BenchOptions
    ids = [i for w in args.workload.split(",") if w.strip()
           for i in GROUPS.get(w.strip().upper(), (w.strip().upper(),))]
    known = {**WORKLOADS, **DYNAMIC}
    unknown = [w for w in ids if w not in known]
    if unknown or not ids:
        raise ValueError(f"--workload: unknown {','.join(unknown) or '(empty)'}; "
                         f"expected some of {','.join(known)}")
    for name in ("threads", "batch", "repeat"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name}: expected a positive integer, got {value}")
    if args.json == "-" and args.plot == "-":
        raise ValueError("--json - and --plot -: only one of them can write to stdout")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise ValueError(f"--device: expected cpu or cuda, got {args.device!r}")
    return BenchOptions(workloads=ids, quick=args.quick, threads=args.threads,
                        dtype=args.dtype, device=args.device, batch=args.batch,
                        repeat=args.repeat, budget_s=args.budget,
                        compare_torch=args.compare == "torch",
                        torch_compile_timeout_s=args.torch_compile_timeout,
                        startup=args.compile_time,
                        background_load=args.background_load)


def run(args: argparse.Namespace) -> int:
    if args.ray:
        from scriptmod.bench import ray_bench
        return ray_bench.run(args)
    if args.paired:
        from scriptmod.bench import paired
        return paired.run(args)
    from scriptmod.bench import report as rep
    from scriptmod.bench.runner import DeviceError, run_all
    try:
        opts = options(args)
        if args.plot:
            rep.require_matplotlib()
        result = run_all(opts, progress=False if args.no_progress else None)
    except (ValueError, DeviceError, rep.PlotUnavailable) as exc:
        print(f"scriptmod bench: {exc}", file=sys.stderr)
        return 2
    text = sys.stderr if "-" in (args.json, args.plot) else sys.stdout   # stdout: the file
    print(rep.format_report(result), file=text)
    for line in rep.problems(result):
        print(line, file=sys.stderr if line.startswith("MISMATCH") else text)
    if args.json == "-":
        sys.stdout.write(rep.json_text(result))
    elif args.json:
        rep.write_json(result, args.json)
        print(f"wrote {args.json}", file=text)
    if args.plot:
        rep.plot(result, sys.stdout.buffer if args.plot == "-" else args.plot)
        if args.plot != "-":
            print(f"wrote {args.plot}", file=text)
    return 0 if result.ok else 1
