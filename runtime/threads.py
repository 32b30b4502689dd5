"""The CPU kernel thread pool: persistent workers that split a flat index range.

Compiled kernels are called through ctypes, which releases the GIL, so plain Python
threads run them in parallel.

    >>> before = get_num_threads(); set_num_threads(2)
    >>> chunks = []
    >>> parallel_for(lambda lo, hi: chunks.append((lo, hi)), 1 << 20)
    >>> chunks = sorted(chunks)      # 2 * CHUNKS_PER_THREAD aligned chunks cover [0, n)
    >>> len(chunks) == 2 * CHUNKS_PER_THREAD, chunks[0][0], chunks[-1][1]
    (True, 0, 1048576)
    >>> all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    True
    >>> set_num_threads(before)
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

ALIGN = 64            # chunk boundaries are multiples of this many elements
MIN_SPLIT = 1 << 19   # ranges smaller than this run on the calling thread (handing off
                      # a 2 MB float32 pass costs more than it saves; measured on W5)

_lock = threading.Lock()
_state: dict = {"n": None, "pool": None}


def _default_threads() -> int:
    env = os.environ.get("SCRIPTMOD_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:     # not Linux
        return max(1, os.cpu_count() or 1)


def get_num_threads() -> int:
    """Threads used by compiled CPU kernels (default: every core this process may use)."""
    if _state["n"] is None:
        _state["n"] = _default_threads()
    return _state["n"]


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for compiled CPU kernels (like ``torch.set_num_threads``)."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads: expected n >= 1, got {n}")
    with _lock:
        if _state["n"] != int(n) and _state["pool"] is not None:
            _state["pool"].shutdown(wait=True)
            _state["pool"] = None
        _state["n"] = int(n)


def _pool(workers: int) -> ThreadPoolExecutor:
    with _lock:
        if _state["pool"] is None:
            _state["pool"] = ThreadPoolExecutor(max_workers=workers,
                                                thread_name_prefix="scriptmod-kernel")
        return _state["pool"]


def split(n: int, parts: int, align: int = ALIGN) -> list[tuple[int, int]]:
    """``[0, n)`` in at most ``parts`` chunks whose inner boundaries are multiples of ``align``.

    >>> split(1000, 2)
    [(0, 512), (512, 1000)]
    """
    if n <= 0:
        return []
    per = -(-n // parts)
    per = -(-per // align) * align
    return [(lo, min(lo + per, n)) for lo in range(0, n, per)]


CHUNKS_PER_THREAD = 4   # dynamic schedule: a core slowed by a neighbour takes fewer chunks


def parallel_for(fn: Callable[[int, int], None], n: int, min_split: int = MIN_SPLIT) -> None:
    """Call ``fn(lo, hi)`` over chunks covering ``[0, n)``. The caller and the workers pull
    chunks from one shared iterator (its ``next`` is atomic under the GIL), so on a machine
    where one core is slowed the others take over its share instead of waiting for it."""
    threads = get_num_threads()
    if threads == 1 or n < min_split:
        if n > 0:
            fn(0, n)
        return
    chunks = iter(split(n, threads * CHUNKS_PER_THREAD))

    def work() -> None:
        for lo, hi in chunks:
            fn(lo, hi)
    pool = _pool(threads - 1)
    futures = [pool.submit(work) for _ in range(threads - 1)]
    work()
    for f in futures:
        f.result()
