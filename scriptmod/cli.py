"""The ``scriptmod`` command.

    scriptmod --version
    scriptmod demo                 # the README's main job
    scriptmod bench [--quick ...]  # fused against eager, with physical floors
    scriptmod inspect FILE         # what is inside a saved archive

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args)``.
Without a subcommand the help goes to stderr and the exit status is 2 (a usage error). Output
piped into a reader that stops early (``scriptmod bench --help | head -1``) ends quietly.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import Sequence

SUBCOMMANDS = {
    "demo": ("scriptmod.demo", "trace, compile, save, load and benchmark a built-in model"),
    "bench": ("scriptmod.bench.cli", "benchmark the workloads: eager vs unfused vs fused"),
    "inspect": ("scriptmod.jit.inspect_cli", "print what is inside a saved ScriptModule archive"),
}


def build_parser() -> argparse.ArgumentParser:
    import scriptmod
    p = argparse.ArgumentParser(prog="scriptmod", description="scriptmod: PyTorch-style modules, "
                                "traced into our own IR and compiled.")
    p.add_argument("--version", action="version", version=f"scriptmod {scriptmod.__version__}")
    sub = p.add_subparsers(dest="command")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(module=module)
        try:
            importlib.import_module(module).configure(sp)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            sp.set_defaults(missing=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        _discard_stdout()
        return 128 + signal.SIGPIPE     # what a shell reports for a program killed by SIGPIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # stdout replaced by one without a file
        pass


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "module", None):
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "missing", False):
        print(f"scriptmod {args.command}: not available in this build", file=sys.stderr)
        return 2
    return int(importlib.import_module(args.module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
