"""The ``scriptmod`` command: ``scriptmod --version``, ``scriptmod demo``, ..."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _demo(args: argparse.Namespace) -> int:
    from scriptmod.demo import main as demo_main
    return demo_main()


def build_parser() -> argparse.ArgumentParser:
    import scriptmod
    p = argparse.ArgumentParser(prog="scriptmod", description=__doc__)
    p.add_argument("--version", action="version", version=f"scriptmod {scriptmod.__version__}")
    sub = p.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="run the built-in demo model")
    d.set_defaults(fn=_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "fn"):
        build_parser().print_help()
        return 0
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
