"""Resident memory for the tests that bound it (read from ``/proc/self/statm``)."""
from __future__ import annotations

import gc
import os
from typing import Callable

import pytest

NEEDS_STATM = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                 reason="reads RSS from /proc")


def rss_mib() -> float:
    """This process's resident set, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def assert_rss_flat(step: Callable[[], object], warm: int = 200, calls: int = 1000,
                    limit_mib: float = 2.0) -> None:
    """``calls`` calls of ``step`` after ``warm`` warm ones grow RSS by under ``limit_mib``."""
    for _ in range(warm):
        step()
    gc.collect()
    before = rss_mib()
    for _ in range(calls):
        step()
    gc.collect()
    assert rss_mib() - before < limit_mib
