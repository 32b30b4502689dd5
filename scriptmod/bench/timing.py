"""Timing the benchmark variants, and the thread counts they run with.

Variants are timed one after the other in the same process, each in its own block: a
warm-up, then samples. (Interleaving them round by round was tried and rejected: on W1 a
100 ms eager call between two fused calls roughly doubled the fused median, 4.7 -> 8.4 ms,
because the eager call's 64 MB temporaries disturb the memory system the fused kernel then
runs in; a block measures each variant in its own steady state, as a loop over one model
runs.) A sample is the mean of ``inner`` back-to-back calls, with ``inner`` chosen from the
warm-up so that a sample lasts at least ``MIN_SAMPLE_S`` (microsecond calls are otherwise
at the mercy of the timer). Samples continue until the time budget is spent, with at least
``min_reps`` and at most ``max_reps`` of them, and past it while they are unstable (up to
``EXTEND`` budgets); ``repeat`` fixes the count instead.

    >>> model, x = nn.Linear(4, 2), scriptmod.ones(3, 4)
    >>> t = time_variants({"eager": Variant(lambda: model(x))}, budget_s=0.01, repeat=3)["eager"]
    >>> t.reps, t.min_s <= t.median_s <= t.max_s
    (3, True)
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from scriptmod.runtime import threads

MIN_SAMPLE_S = 2e-3
MAX_INNER = 2000


WIDE_SPREAD = 0.25    # (p90 - p10) / median above which a median is flagged as untrustworthy
WIDE_MARK = "~"       # the flag, after the median in the results table


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, min, max, quartiles and 10th/90th percentiles over ``reps``
    samples of ``inner`` calls each.

    >>> Timing(1.0, 0.8, 1.6, 10, 1, p10_s=0.9, p90_s=1.4).noisy      # spread 50% > 25%
    True
    """

    median_s: float
    min_s: float
    max_s: float
    reps: int
    inner: int
    q1_s: float = 0.0
    q3_s: float = 0.0
    p10_s: float = 0.0
    p90_s: float = 0.0

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how far apart the middle 80% of the samples lie."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """Whether the samples spread too wide for the median to be trusted (``spread`` over
        ``WIDE_SPREAD``; never with fewer than 3 samples, which have no spread to speak of)."""
        return self.reps >= 3 and self.spread > WIDE_SPREAD

    def as_dict(self) -> dict[str, Any]:
        return {"median_s": self.median_s, "min_s": self.min_s, "max_s": self.max_s,
                "q1_s": self.q1_s, "q3_s": self.q3_s, "p10_s": self.p10_s,
                "p90_s": self.p90_s, "reps": self.reps, "inner": self.inner}


@dataclass
class Variant:
    """One thing to time: ``fn`` runs inside ``context()`` (entered once per sample)."""

    fn: Callable[[], Any]
    context: Callable[[], ContextManager[Any]] = contextlib.nullcontext
    samples: list[float] = field(default_factory=list)
    inner: int = 1

    def sample(self, n: int, sync: Callable[[], None]) -> float:
        threads.follow_load()               # every variant runs with the BLAS threads that
        with self.context():                # fit the machine's load now (runtime.threads)
            t0 = time.perf_counter()
            for _ in range(n):
                self.fn()
            sync()
            return (time.perf_counter() - t0) / n

    def warm_up(self, sync: Callable[[], None]) -> None:
        """Two untimed calls (caches, page faults, lazy compilation), then pick ``inner``."""
        self.sample(1, sync)
        once = self.sample(1, sync)
        self.inner = max(1, min(MAX_INNER, int(MIN_SAMPLE_S / max(once, 1e-9))))


def time_variants(variants: dict[str, Variant], budget_s: float, repeat: int | None = None,
                  min_reps: int = 5, max_reps: int = 1000,
                  sync: Callable[[], None] = lambda: None) -> dict[str, Timing]:
    """Each variant in turn, back to back: warm-up, then samples for ``budget_s`` (longer,
    up to ``EXTEND`` budgets, while its samples are not yet stable)."""
    out = {}
    for name, v in variants.items():
        v.warm_up(sync)
        start = time.perf_counter()
        while repeat is None or len(v.samples) < repeat:
            v.samples.append(v.sample(v.inner, sync))
            if repeat is None and _done(v.samples, time.perf_counter() - start, budget_s,
                                        min_reps, max_reps):
                break
        out[name] = summarize(v.samples, v.inner)
    return out


EXTEND = 3.0          # the most a noisy run may stretch the time budget
STABLE_IQR = 0.10     # interquartile range / median below which samples count as stable


def _done(samples: list[float], elapsed: float, budget: float, min_reps: int,
          max_reps: int) -> bool:
    if len(samples) >= max_reps or elapsed >= EXTEND * budget:
        return True
    if len(samples) < min_reps or elapsed < budget:
        return False
    return _relative_iqr(samples) <= STABLE_IQR


def _relative_iqr(samples: list[float]) -> float:
    if len(samples) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / statistics.median(samples)


def summarize(samples: list[float], inner: int = 1) -> Timing:
    """The ``Timing`` of ``samples`` (seconds per call, each the mean of ``inner`` calls).

    >>> t = summarize([1.0, 1.0, 1.0, 1.0, 2.0])
    >>> t.median_s, t.max_s, t.noisy
    (1.0, 2.0, True)
    """
    s = samples
    q1, _, q3 = statistics.quantiles(s, n=4) if len(s) >= 2 else (s[0], s[0], s[0])
    deciles = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return Timing(statistics.median(s), min(s), max(s), len(s), inner, q1, q3,
                  deciles[0], deciles[-1])


def time_once(fn: Callable[[], Any], sync: Callable[[], None] = lambda: None) -> float:
    """Seconds one call takes (for first calls: compile times)."""
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


# ---- threads ---------------------------------------------------------------------------------

def set_blas_threads(n: int) -> str:
    """Limit the BLAS that NumPy loaded to ``n`` threads; returns how it was done:
    ``"threadpoolctl"``, or ``"unchanged"`` where it controls no BLAS in this process (set
    ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` before starting
    Python instead)."""
    from scriptmod.runtime import blas
    return "threadpoolctl" if blas.set_threads(n) else "unchanged"


def blas_threads() -> int | None:
    """Threads of the BLAS NumPy loaded (``None``: none that threadpoolctl controls)."""
    from scriptmod.runtime import blas
    return blas.get_threads()
