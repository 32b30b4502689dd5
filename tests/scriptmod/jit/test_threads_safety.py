"""Threads on one traced module: calls from 8 threads with varying batch sizes give exactly
the bits a single thread gets, and ``set_num_threads`` flipped by another thread while they
call (pool swapped under running fusion groups) raises nothing and changes no bit."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod
from scriptmod import nn
from scriptmod.runtime import threads

N_THREADS = 8
CALLS = 200


@pytest.fixture
def fixed_threads(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Small kernels split over the pool (``MIN_SPLIT`` lowered), BLAS threads not following
    the load of other processes (a GEMM's bits may depend on its thread count)."""
    before, dynamic = threads.get_num_threads(), threads.get_dynamic()
    monkeypatch.setattr(threads, "MIN_SPLIT", 1 << 10)
    threads.set_dynamic(False)
    threads.set_num_threads(2)
    yield
    threads.set_num_threads(before)
    threads.set_dynamic(dynamic)


def _run_threads(work: Callable[[int], None], n: int = N_THREADS,
                 timeout: float = 120) -> list[BaseException]:
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            work(i)
        except BaseException as e:              # noqa: BLE001 - reported by the test
            errors.append(e)
    pool = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in pool), "a calling thread hung"
    return errors


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 8)

    def forward(self, x: Any) -> Any:
        return self.b((self.a(x) * 0.5).relu() + 1).tanh()


def test_threads_with_varying_batch_sizes_match_one_thread(
        fixed_threads: Any, request: pytest.FixtureRequest) -> None:
    """CI: 8 threads x 200 calls over batch sizes 1..24; ``--long`` (the README figure):
    8 threads x 10,000 calls over 1..64."""
    long = request.config.getoption("--long")
    calls, sizes = (10_000, 64) if long else (CALLS, 24)
    scriptmod.manual_seed(0)
    traced = scriptmod.jit.trace(_MLP(), scriptmod.ones(4, 32))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((b, 32)).astype(np.float32) for b in range(1, sizes + 1)]
    with scriptmod.no_grad():
        expected = [traced(scriptmod.tensor(x)).numpy().copy() for x in xs]
    mismatches: list[tuple[int, int]] = []

    def work(t: int) -> None:
        with scriptmod.no_grad():
            for i in range(calls):
                k = (i * 7 + t * 13) % len(xs)
                if not np.array_equal(traced(scriptmod.tensor(xs[k])).numpy(), expected[k]):
                    mismatches.append((t, k))
    assert _run_threads(work, timeout=1200 if long else 120) == []
    if long:
        print(f"\n{N_THREADS} threads x {calls:,} calls, batch sizes 1..{sizes}: "
              f"{len(mismatches)} mismatches")
    assert mismatches == []


def test_set_num_threads_while_threads_call_a_fusion_group(
        fixed_threads: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: 'cannot schedule new futures after shutdown' inside a FusionGroup in 7 of 8
    threads. Elementwise kernels give the same bits however the range is split."""
    acquired = [0]
    acquire = threads._acquire

    def counted() -> Any:
        acquired[0] += 1
        return acquire()
    monkeypatch.setattr(threads, "_acquire", counted)
    traced = scriptmod.jit.trace(lambda x: (x * 1.5).exp() - x.sigmoid() + 2,
                                 scriptmod.ones(64, 256))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(4)]
    with scriptmod.no_grad():
        expected = [traced(scriptmod.tensor(x)).numpy().copy() for x in xs]
    done = threading.Event()
    mismatches: list[int] = []

    def flipper() -> None:
        n = 0
        while not done.is_set():
            scriptmod.set_num_threads(1 + n % 4)
            n += 1
            time.sleep(1e-4)                    # leave the callers some of the GIL
        flips.append(n)
    flips: list[int] = []
    flip = threading.Thread(target=flipper)
    flip.start()

    def work(t: int) -> None:
        with scriptmod.no_grad():
            for i in range(CALLS // 2):
                k = (i + t) % len(xs)
                if not np.array_equal(traced(scriptmod.tensor(xs[k])).numpy(), expected[k]):
                    mismatches.append(k)
    try:
        errors = _run_threads(work)
    finally:
        done.set()
        flip.join(timeout=60)
    assert errors == [] and mismatches == []
    assert flips and flips[0] > 10                  # the pool really was swapped meanwhile
    assert acquired[0] > 0                          # and the kernels really ran on it
