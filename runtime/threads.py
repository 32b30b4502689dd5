"""The CPU kernel thread pool: persistent workers that split a flat index range.

Compiled kernels are called through ctypes, which releases the GIL, so plain Python
threads run them in parallel. Idle workers block on the executor's queue: they use no CPU
between calls.

    >>> before = get_num_threads(); set_num_threads(2)
    >>> chunks = []
    >>> parallel_for(lambda lo, hi: chunks.append((lo, hi)), 1 << 20)
    >>> chunks = sorted(chunks)      # 2 * CHUNKS_PER_THREAD aligned chunks cover [0, n)
    >>> len(chunks) == 2 * CHUNKS_PER_THREAD, chunks[0][0], chunks[-1][1]
    (True, 0, 1048576)
    >>> all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    True
    >>> set_num_threads(before)

``set_num_threads(n)`` also sets the threads of the BLAS NumPy uses (through threadpoolctl,
``runtime.blas``), as ``torch.set_num_threads`` does for PyTorch's.

Contention (dynamic BLAS threads, in the spirit of OpenMP's ``OMP_DYNAMIC``): while other
processes keep some of this process's cores busy, NumPy's BLAS runs on at most the free
cores, and goes back to its count once they are free. OpenBLAS splits a GEMM statically
and its threads busy-wait on each other (and spin ~0.1 s after each call): with more
runnable threads than cores, a GEMM waits whole scheduler time slices for a descheduled
worker (measured with a second process busy on one of 2 cores: 32 small GEMMs that take
0.8 ms took up to 780 ms, and W5 fused 1.2-1.8 s instead of 25-50 ms). This pool needs no
such cap: its chunks are pulled dynamically, its waits block, and a worker that never got
a core is cancelled, so with a busy core 1 or 2 threads ran W1-W3 equally fast. The load
is sampled through psutil (busy time of the CPUs this process may use, minus this
process's own CPU time) at most every ``SAMPLE_S``, when ``parallel_for`` or
``follow_load`` runs. ``SCRIPTMOD_DYNAMIC_THREADS=0`` or ``set_dynamic(False)`` keeps the
configured counts whatever the load.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from scriptmod.ir import env

from . import blas

ALIGN = 64            # chunk boundaries are multiples of this many elements
MIN_SPLIT = 1 << 19   # ranges smaller than this run on the calling thread (handing off
                      # a 2 MB float32 pass costs more than it saves; measured on W5)
CHUNKS_PER_THREAD = 4   # dynamic schedule: a core slowed by a neighbour takes fewer chunks
SAMPLE_S = 0.2          # the load of other processes is sampled at most this often

_clock = time.monotonic   # (tests replace it)
_lock = threading.Lock()
_local = threading.local()        # .worker: this thread is one of the pool's
_state: dict = {"n": None, "pool": None, "blas_cap": None, "blas_base": None,
                "dynamic": env.flag("SCRIPTMOD_DYNAMIC_THREADS", True)}


def _default_threads() -> int:
    return env.integer("SCRIPTMOD_NUM_THREADS", 0, minimum=1) or _usable_cpus()


def _usable_cpus() -> int:
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
    """Use ``n`` threads for compiled CPU kernels and NumPy's BLAS (like
    ``torch.set_num_threads``). Safe while other threads run kernels: the old pool is shut
    down once the calls using it have returned."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads: expected n >= 1, got {n}")
    n = int(n)
    with _lock:
        old = _state["pool"]
        if old is not None and old.workers != n - 1:
            _state["pool"] = None
            old.retired = True
        idle_old = old if old is not None and old.retired and old.users == 0 else None
        _state["n"] = n
        cap, _state["blas_cap"], _state["blas_base"] = _state["blas_cap"], None, None
    if idle_old is not None:
        idle_old.executor.shutdown(wait=True)
    blas.set_threads(n)
    if cap is not None:                 # other processes still hold cores: keep the cap
        _cap_blas(cap)


class _Pool:
    """An executor and how many ``parallel_for`` calls are using it: a pool that
    ``set_num_threads`` replaced is shut down by its last user, never under one."""

    __slots__ = ("executor", "workers", "users", "retired")

    def __init__(self, workers: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=workers, initializer=_mark_worker,
                                           thread_name_prefix="scriptmod-kernel")
        self.workers, self.users, self.retired = workers, 0, False


def _mark_worker() -> None:
    _local.worker = True


def _acquire() -> _Pool:
    with _lock:
        pool = _state["pool"]
        if pool is None:
            pool = _state["pool"] = _Pool(max(1, get_num_threads() - 1))
        pool.users += 1
        return pool


def _release(pool: _Pool) -> None:
    with _lock:
        pool.users -= 1
        last = pool.retired and pool.users == 0
    if last:
        pool.executor.shutdown(wait=False)


def scratch(floats: int) -> int:
    """The 64-byte aligned address of this thread's float32 scratch of at least ``floats``
    floats, kept between calls (native kernels' packing buffers and workspaces: a fresh one
    per call, hundreds of KiB, would be new pages to fault in every time). One per thread,
    so a kernel must not hold it across a call into another kernel that uses it."""
    ws = getattr(_local, "scratch", None)
    if ws is None or ws.size < floats + 16:
        ws = _local.scratch = np.empty(max(floats, 1 << 14) + 16, np.float32)
    return (ws.ctypes.data + 63) & ~63


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


def parallel_for(fn: Callable[[int, int], None], n: int, min_split: int = MIN_SPLIT) -> None:
    """Call ``fn(lo, hi)`` over chunks covering ``[0, n)``. The caller and the workers pull
    chunks from one shared iterator (its ``next`` is atomic under the GIL), so on a machine
    where one core is slowed the others take over its share instead of waiting for it; a
    worker that has not started by the time the caller ran out of chunks is cancelled, not
    waited for. Runs on the calling thread below ``min_split``, with one thread, or
    inside a pool worker (a nested call)."""
    if n <= 0:
        return
    follow_load()
    threads = get_num_threads() if n >= min_split else 1
    if threads == 1 or getattr(_local, "worker", False):
        fn(0, n)
        return
    chunks = iter(split(n, threads * CHUNKS_PER_THREAD))

    def work() -> None:
        for lo, hi in chunks:
            fn(lo, hi)
    pool = _acquire()
    try:
        futures = [pool.executor.submit(work) for _ in range(threads - 1)]
        try:
            work()
        finally:
            for f in futures:
                if not f.cancel():          # running (or done): its chunk must finish
                    f.result()
    finally:
        _release(pool)


# ---- contention: other processes on our cores ------------------------------------------------

def set_dynamic(enabled: bool) -> None:
    """Whether NumPy's BLAS threads follow the load of other processes (default: on, unless
    ``SCRIPTMOD_DYNAMIC_THREADS=0``). Off restores the configured count."""
    with _lock:
        _state["dynamic"] = bool(enabled)
    if not enabled:
        _cap_blas(None)


def get_dynamic() -> bool:
    """Whether NumPy's BLAS threads follow the load of other processes (``set_dynamic``)."""
    return bool(_state["dynamic"])


def follow_load() -> None:
    """Fit NumPy's BLAS threads to the load now: as configured while this process's cores
    are free, at most the free cores while other processes keep some busy. Between samples
    (``SAMPLE_S``) this is a clock read; ``parallel_for`` calls it, and so may any code
    about to run BLAS.

    >>> follow_load()
    """
    if not _state["dynamic"] or _clock() - LOAD.time < SAMPLE_S:
        return
    busy = int(LOAD.sample(_clock()) + 0.5)        # cores' worth kept busy by others
    _cap_blas(None if busy == 0 else max(1, _usable_cpus() - busy))


def _cap_blas(cap: int | None) -> None:
    """At most ``cap`` BLAS threads (``None``: back to the count they had before the cap)."""
    with _lock:
        before = _state["blas_cap"]
        if cap == before:
            return
        _state["blas_cap"] = cap
        if cap is not None:
            if _state["blas_base"] is None:
                _state["blas_base"] = blas.get_threads()
            base = _state["blas_base"]
            target = min(base, cap) if base else None
        else:
            target, _state["blas_base"] = _state["blas_base"], None
    LOAD.changes += 1
    if target:
        blas.set_threads(target)


class Load:
    """Cores' worth of CPU time that other processes used on this process's CPUs between
    two samples: busy CPU time (psutil's per-CPU times: user, nice, system, irq, softirq,
    steal) minus this process's own CPU time, over the wall time. Zero where it cannot be read."""

    def __init__(self) -> None:
        self.time = float("-inf")
        self.busy = self.own = self.others = 0.0
        self.samples = self.contended = self.changes = 0
        self._lock = threading.Lock()

    def sample(self, now: float) -> float:
        """The estimate, renewed when ``SAMPLE_S`` has passed since the last sample (a
        shorter window would read mostly the 10 ms granularity of the ticks)."""
        if now - self.time < SAMPLE_S or not self._lock.acquire(blocking=False):
            return self.others
        try:
            busy, own = busy_seconds(), sum(os.times()[:2])
            if busy is None:
                self.time = now
                return 0.0
            if now > self.time > float("-inf"):
                self.others = max(0.0, (busy - self.busy - (own - self.own)) / (now - self.time))
                self.samples += 1
                self.contended += self.others >= 0.5
            self.time, self.busy, self.own = now, busy, own
            return self.others
        finally:
            self._lock.release()

    def stats(self) -> dict[str, float]:
        """Samples taken, how many saw another process's load, thread-count changes, and
        the last sample (cores' worth)."""
        return {"samples": self.samples, "contended": self.contended,
                "changes": self.changes, "others_last": round(self.others, 2)}


LOAD = Load()
def busy_seconds() -> float | None:
    """CPU seconds spent busy (user, nice, system, irq, softirq, steal), summed over the CPUs
    this process may use; ``None`` where psutil cannot read per-CPU times."""
    import psutil       # first use only: sampled at most every SAMPLE_S
    try:
        per_cpu = psutil.cpu_times(percpu=True)
    except (OSError, NotImplementedError):
        return None
    try:
        cpus = [i for i in os.sched_getaffinity(0) if i < len(per_cpu)]
    except AttributeError:          # no affinity API (macOS): every CPU
        cpus = list(range(len(per_cpu)))
    return sum(t.user + t.system + sum(getattr(t, f, 0.0) for f in _BUSY_FIELDS)
               for t in (per_cpu[i] for i in cpus))


_BUSY_FIELDS = ("nice", "irq", "softirq", "steal")     # those a platform reports


# OpenBLAS's workers spin ~0.1 s after each call by default, on the cores this pool's
# kernels need right after a GEMM; set once, here, while no kernel runs (``blas.set_spin``).
BLAS_SPIN = blas.default_spin()
