"""``--background-load``: another process keeps one core busy while the benchmark runs.

The load is the issue's ``python -c "while True: pass"``, with one addition: every few
million iterations it checks that its parent is still alive, so that even a bench killed
with SIGKILL (no ``finally`` runs) leaves no orphan spinning on a core. Normally it is
killed when the ``with`` block exits, also on Ctrl-C or an exception.

    >>> with busy_process() as proc:
    ...     proc.poll() is None                  # running
    True
    >>> proc.poll() is not None                  # killed and reaped on exit
    True
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Iterator

# One core's worth of pure-Python spinning; the parent check costs one syscall per ~20 ms.
SPIN = ("import os\n"
        "parent = os.getppid()\n"
        "while os.getppid() == parent:\n"
        "    for _ in range(1 << 20):\n"
        "        pass\n")


@contextlib.contextmanager
def busy_process() -> Iterator[subprocess.Popen[bytes]]:
    """A child process that keeps one core busy for the duration of the ``with`` block."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def maybe_busy(enabled: bool) -> contextlib.AbstractContextManager[object]:
    """``busy_process()`` when ``enabled``, else nothing."""
    return busy_process() if enabled else contextlib.nullcontext()
