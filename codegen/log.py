"""Debug output for codegen, shown only with ``SCRIPTMOD_LOG=codegen`` (comma list allowed).

    >>> from scriptmod.codegen.log import debug
    >>> debug("compiled %s in %.1f ms", "k_ab12", 21.3)   # silent unless enabled
"""
from __future__ import annotations

import os
import sys


def enabled(topic: str = "codegen") -> bool:
    """True when ``topic`` is listed in the SCRIPTMOD_LOG environment variable."""
    topics = os.environ.get("SCRIPTMOD_LOG", "")
    return topic in {t.strip() for t in topics.split(",")} or topics.strip() == "all"


def debug(msg: str, *args: object, topic: str = "codegen") -> None:
    """Print ``msg % args`` to stderr under ``[topic]`` when enabled."""
    if enabled(topic):
        print(f"[{topic}] " + (msg % args if args else msg), file=sys.stderr)
