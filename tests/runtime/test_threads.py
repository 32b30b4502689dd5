"""runtime.threads: chunks cover the range exactly, the pool can be resized while other
threads run kernels, idle workers use no CPU, and the dynamic thread count follows the load
of other processes caps NumPy's BLAS threads (simulated: no real load, no timing
asserted)."""
from __future__ import annotations

import os
import threading
import time

import pytest

from scriptmod.runtime import blas
from scriptmod.runtime import threads as T


@pytest.fixture
def two_threads():
    before, dynamic, blas_before = T.get_num_threads(), T.get_dynamic(), blas.get_threads()
    T.set_dynamic(False)
    T.set_num_threads(2)
    yield
    T.set_num_threads(before)
    T.set_dynamic(dynamic)
    if blas_before is not None:
        blas.set_threads(blas_before)


def _covered(n: int, min_split: int = 1) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    T.parallel_for(lambda lo, hi: got.append((lo, hi)), n, min_split=min_split)
    return sorted(got)


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 4099])
def test_chunks_cover_the_range_exactly(two_threads, n: int) -> None:
    chunks = _covered(n)
    assert chunks[0][0] == 0 and chunks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))


def test_set_num_threads_also_sets_blas(two_threads) -> None:
    if blas.get_threads() is None:
        pytest.skip("no BLAS threadpoolctl controls")
    T.set_num_threads(1)
    assert blas.get_threads() == 1
    T.set_num_threads(2)
    assert blas.get_threads() == 2


def test_resizing_the_pool_while_other_threads_run_kernels(two_threads) -> None:
    """The bug: set_num_threads shut the pool down under a running parallel_for, whose next
    submit raised 'cannot schedule new futures after shutdown'."""
    errors: list[BaseException] = []
    stop = threading.Event()
    n = 1 << 12

    def kernel_caller() -> None:
        try:
            while not stop.is_set():
                chunks = _covered(n)
                assert chunks[0][0] == 0 and chunks[-1][1] == n, chunks
                assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:])), chunks
        except BaseException as exc:     # noqa: BLE001  (reported by the main thread)
            errors.append(exc)

    callers = [threading.Thread(target=kernel_caller) for _ in range(4)]
    for t in callers:
        t.start()
    try:
        deadline = time.monotonic() + 0.6
        k = 0
        while time.monotonic() < deadline:
            T.set_num_threads((2, 3, 1, 4)[k % 4])
            k += 1
    finally:
        stop.set()
        for t in callers:
            t.join(10)
    assert not errors, repr(errors[0])
    assert k > 20


def test_retired_pools_shut_down(two_threads) -> None:
    for n in (3, 4, 2):
        T.set_num_threads(n)
        _covered(1 << 12)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        workers = [t for t in threading.enumerate() if t.name.startswith("scriptmod-kernel")]
        if len(workers) <= 1:                 # the current pool's one worker (n = 2)
            break
        time.sleep(0.01)
    assert len(workers) <= 1, [t.name for t in workers]


def test_a_nested_call_in_a_worker_runs_inline(two_threads) -> None:
    inner: list[tuple[int, int]] = []
    T.parallel_for(lambda lo, hi: T.parallel_for(lambda a, b: inner.append((a, b)), 10, 1),
                   1 << 12, min_split=1)
    assert sum(b - a for a, b in inner) == 10 * 2 * T.CHUNKS_PER_THREAD


def _cpu_ns(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0])


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_idle_workers_use_no_cpu(two_threads) -> None:
    x = bytearray(1 << 16)

    def touch(lo: int, hi: int) -> None:
        x[lo:hi] = bytes(hi - lo)
    T.parallel_for(touch, len(x), min_split=1)
    workers = [t for t in threading.enumerate() if t.name.startswith("scriptmod-kernel")]
    assert workers
    before = [_cpu_ns(t.native_id) for t in workers]
    time.sleep(0.3)
    after = [_cpu_ns(t.native_id) for t in workers]
    assert all(a - b < 2_000_000 for a, b in zip(after, before)), (before, after)


# ---- dynamic threads -----------------------------------------------------------------------

class FakeMachine:
    """A clock and /proc/stat where other processes use ``others`` cores' worth of CPU."""

    def __init__(self) -> None:
        self.now, self.others, self.busy = 1000.0, 0.0, 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.busy += self.others * seconds

    def busy_seconds(self) -> float:
        return self.busy + sum(os.times()[:2])        # plus this process's own CPU time

    def sample(self, others: float) -> None:
        """Other processes use ``others`` cores for one sampling interval; then the pool
        looks at the load."""
        self.others = others
        self.advance(T.SAMPLE_S)
        T.follow_load()


@pytest.fixture
def machine(two_threads, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    m = FakeMachine()
    monkeypatch.setattr(T, "_clock", lambda: m.now)
    monkeypatch.setattr(T, "busy_seconds", m.busy_seconds)
    monkeypatch.setattr(T, "_usable_cpus", lambda: 2)
    monkeypatch.setattr(T, "LOAD", T.Load())
    T.set_dynamic(True)
    T.set_num_threads(2)
    return m


def _blas_threads() -> int:
    n = blas.get_threads()
    if n is None:
        pytest.skip("no BLAS threadpoolctl controls")
    return n


def test_a_busy_core_elsewhere_caps_the_blas_threads(machine: FakeMachine) -> None:
    T.follow_load()                                    # first sample: a baseline
    assert _blas_threads() == 2
    machine.sample(1.0)
    assert _blas_threads() == 1
    assert len(_covered(1 << 12)) == 2 * T.CHUNKS_PER_THREAD   # the kernel pool keeps 2
    machine.sample(0.0)
    assert _blas_threads() == 2                        # restored
    stats = T.LOAD.stats()
    assert stats["samples"] == 2 and stats["contended"] == 1 and stats["changes"] == 2


def test_samples_wait_for_a_full_window(machine: FakeMachine) -> None:
    T.follow_load()
    machine.others = 1.0
    machine.advance(T.SAMPLE_S / 10)
    T.follow_load()
    assert _blas_threads() == 2                        # too soon: the estimate stands
    machine.advance(T.SAMPLE_S)
    T.follow_load()
    assert _blas_threads() == 1


def test_parallel_for_follows_the_load(machine: FakeMachine) -> None:
    _covered(1 << 12)
    machine.others = 1.0
    machine.advance(T.SAMPLE_S)
    _covered(1 << 12)
    assert _blas_threads() == 1


def test_a_lower_blas_setting_of_the_user_is_kept(machine: FakeMachine) -> None:
    _blas_threads()
    T.follow_load()
    blas.set_threads(1)                                # the user's own limit
    machine.sample(1.0)
    machine.sample(0.0)
    assert blas.get_threads() == 1


def test_set_num_threads_under_load_keeps_the_cap(machine: FakeMachine) -> None:
    _blas_threads()
    T.follow_load()
    machine.sample(1.0)
    T.set_num_threads(2)
    assert blas.get_threads() == 1 and T.get_num_threads() == 2
    machine.sample(0.0)
    assert blas.get_threads() == 2


def test_dynamic_off_restores_the_configured_count(machine: FakeMachine) -> None:
    _blas_threads()
    T.follow_load()
    machine.sample(1.0)
    assert blas.get_threads() == 1
    T.set_dynamic(False)
    assert blas.get_threads() == 2
    machine.advance(T.SAMPLE_S)
    T.follow_load()
    assert blas.get_threads() == 2


def test_busy_seconds_reads_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil
    a = T.busy_seconds()
    assert a is not None and a > 0
    x = [0.0]
    for _ in range(200_000):      # this process's own work shows in the busy time
        x[0] += 1.0
    assert T.busy_seconds() >= a

    def unreadable(percpu: bool = False) -> None:
        raise OSError("no per-CPU times here")
    monkeypatch.setattr(psutil, "cpu_times", unreadable)
    assert T.busy_seconds() is None
