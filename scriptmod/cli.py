"""The ``scriptmod`` command.

    scriptmod --version
    scriptmod demo                 # the README's main job
    scriptmod bench [--quick ...]  # fused against eager, with physical floors
    scriptmod inspect FILE         # what is inside a saved archive

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args)``.
"""
from __future__ import annotations

import argparse
import importlib
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
        sp = sub.add_parser(name, help=help_text)
        sp.set_defaults(module=module)
        try:
            importlib.import_module(module).configure(sp)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            sp.set_defaults(missing=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "module", None):
        parser.print_help()
        return 0
    if getattr(args, "missing", False):
        print(f"scriptmod {args.command}: not available in this build", file=sys.stderr)
        return 2
    return int(importlib.import_module(args.module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
