"""Debug output behind one environment variable: ``SCRIPTMOD_LOG=passes,fusion,codegen``
(``all`` turns every topic on). Read at each call, so tests may set it with monkeypatch.

    >>> if enabled("passes"):           # skip building the message when the topic is off
    ...     log("passes", "after fold_constants: 3 nodes")
"""
from __future__ import annotations

import os
import sys

ENV_VAR = "SCRIPTMOD_LOG"


def topics() -> frozenset[str]:
    """The topics turned on in ``SCRIPTMOD_LOG``."""
    raw = os.environ.get(ENV_VAR, "")
    return frozenset(t.strip().lower() for t in raw.split(",") if t.strip())


def enabled(topic: str) -> bool:
    """Whether ``topic`` (or ``all``) is on; test it before building a costly message."""
    on = topics()
    return topic.lower() in on or "all" in on


def log(topic: str, message: str) -> None:
    """Write ``[scriptmod:<topic>] message`` to stderr when the topic is on."""
    if enabled(topic):
        print(f"[scriptmod:{topic}] {message}", file=sys.stderr, flush=True)
