"""Memory stays bounded: the in-memory kernel cache keeps the last ``MEMORY_KERNELS`` kernels
and any still in use (a dropped kernel's LLVM engine is released), a method keeps at most
``MAX_SPECIALIZATIONS`` specializations (least recently used evicted, with their kernels and
buffers), many calls with varying batch sizes do not grow the process, and neither do many
fresh compiles (``--long``: the README's 2,000 traces)."""
from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

import scriptmod
from scriptmod import nn
from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from scriptmod.ir import dtypes as D
from scriptmod.jit import _executor
from scriptmod.runtime import llvm_jit
from scriptmod.runtime.kernel_cache import KernelCache
from tests.rss import NEEDS_STATM, rss_mib

F32 = D.float32


def _spec(c: float) -> KernelSpec:
    return KernelSpec([InputSpec(F32)], [OpStep("add", (0, Imm(c, F32)), {}, F32)], [1], [F32])


def test_kernel_cache_keeps_recent_and_live_kernels_only(tmp_path: Any) -> None:
    cache = KernelCache(tmp_path, memory=4)
    kept = llvm_jit.compile_spec(_spec(100.0), cache)            # still used by someone
    dropped = [weakref.ref(llvm_jit.compile_spec(_spec(float(i)), cache)) for i in range(12)]
    gc.collect()
    assert sum(r() is not None for r in dropped) == 4            # the 4 most recent
    assert all(r() is not None for r in dropped[-4:])
    assert cache.in_memory() == 5                                 # + the one in use
    assert llvm_jit.compile_spec(_spec(100.0), cache) is kept     # shared, not reloaded
    assert cache.stats()["compiles"] == 13 and cache.stats()["disk_hits"] == 0
    again = llvm_jit.compile_spec(_spec(0.0), cache)              # evicted: from disk
    assert cache.stats()["disk_hits"] == 1
    (y,) = _launch(again, _spec(0.0))
    np.testing.assert_array_equal(y, np.ones(8, np.float32))


def _launch(kernel: Any, spec: KernelSpec) -> list[np.ndarray]:
    from scriptmod.runtime.targets import LLVM
    from scriptmod.runtime.fusion import Launch
    return Launch(LLVM, kernel, spec, (), (8,)).launch([np.ones(8, np.float32)])


def test_a_dropped_kernel_releases_its_engine(tmp_path: Any) -> None:
    cache = KernelCache(tmp_path, memory=0)
    kernel = llvm_jit.compile_spec(_spec(7.0), cache)
    engine = weakref.ref(kernel._engine)
    del kernel
    gc.collect()
    assert engine() is None and cache.in_memory() == 0


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: Any) -> Any:
        return (self.lin(x) * 2).relu() + 1


def _eager(net: _Net, x: np.ndarray) -> np.ndarray:
    w, b = net.lin.weight.detach().numpy(), net.lin.bias.detach().numpy()
    return np.maximum((x @ w.T + b) * 2, 0) + 1


def test_specializations_are_an_lru(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank is a batch class of its own (sizes of one class share a specialization:
    tests/scriptmod/jit/test_batch_classes.py), so ranks 2..11 make ten specializations."""
    monkeypatch.setattr(_executor, "MAX_SPECIALIZATIONS", 4)
    net = _Net()
    traced = scriptmod.jit.trace(net, scriptmod.ones(2, 8))
    executor = traced._executors["forward"]
    rng = np.random.default_rng(0)
    shapes = [(2,) * r + (8,) for r in range(1, 11)]
    xs = {s: rng.standard_normal(s).astype(np.float32) for s in shapes}
    keep = scriptmod.ones(1, 8)
    gone = []
    with scriptmod.no_grad():
        for s, x in xs.items():
            np.testing.assert_allclose(traced(scriptmod.tensor(x)).numpy(), _eager(net, x),
                                       rtol=1e-5, atol=1e-6)
            gone.append(weakref.ref(executor.specs[next(reversed(executor.specs))]))
            traced(keep)                                        # batch 1 stays in use
        assert len(executor.specs) == 4
        traced(scriptmod.ones(50, 8))             # the fast path drops its last specialization
    gc.collect()
    alive = [s for s, r in zip(xs, gone) if r() is not None]
    assert len(alive) <= 4, alive                           # evicted ones are freed, kernels too
    built = executor.stats["specializations"]
    again = shapes[4]
    with scriptmod.no_grad():                                # an evicted one is rebuilt, right
        np.testing.assert_allclose(traced(scriptmod.tensor(xs[again])).numpy(),
                                   _eager(net, xs[again]), rtol=1e-5, atol=1e-6)
    assert executor.stats["specializations"] == built + 1


@NEEDS_STATM
def test_calls_with_batch_sizes_1_to_64_do_not_grow_memory(request: pytest.FixtureRequest) -> None:
    """20,000 calls in CI; ``--long``: the README figure, 100,000 calls."""
    long = request.config.getoption("--long")
    calls = 100_000 if long else 20_000
    traced = scriptmod.jit.trace(_Net(), scriptmod.ones(4, 8))
    xs = [scriptmod.randn(b, 8) for b in range(1, 65)]
    with scriptmod.no_grad():
        for i in range(1000):                    # every specialization built, pools filled
            traced(xs[i % 64])
        gc.collect()
        before = rss_mib()
        for i in range(calls):
            traced(xs[i % 64])
    gc.collect()
    grown = rss_mib() - before
    if long:
        print(f"\nRSS over {calls:,} calls, batch sizes 1..64: {grown:+.2f} MiB")
    assert grown < 5.0


# Fresh compiles grew the process by 80-85 KiB each: llvmlite never freed the pass manager
# (``llvm_jit._free_pass_manager``) and the process-wide LLVM context kept every kernel's
# constants (``llvm_jit.parsed``). Now 1.5-2.6 KiB, of which 1.4 KiB is llvmlite's own
# ``PassInstrumentationCallbacks`` per pass builder (README, "Reliability").
KIB_PER_COMPILE = 20
CI_COMPILES, LONG_COMPILES, WARM_UP = 300, 2000, 100


class _Scaled(nn.Module):
    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: Any) -> Any:
        return (x * self.c + 1.0).relu()


def _growth_per_compile(step: Any, n: int, compiles: Any, warm_up: int = WARM_UP) -> float:
    """KiB of RSS per compile over ``n`` calls of ``step(i)`` (each compiling one new
    module), after ``warm_up`` calls have filled the kernel LRU and the allocator."""
    for i in range(warm_up):
        step(-1 - i)
    gc.collect()
    before, done = rss_mib(), compiles()
    for i in range(n):
        step(i)
    gc.collect()
    assert compiles() - done == n, "each step must compile a new module"
    return (rss_mib() - before) * 1024 / n


@NEEDS_STATM
def test_fresh_traces_release_their_native_code(request: pytest.FixtureRequest,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Any) -> None:
    """300 traces (2,000 with ``--long``), each compiling a new kernel into an empty disk
    cache, grow the process by less than ``KIB_PER_COMPILE`` each (85 KiB before)."""
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path))
    n = LONG_COMPILES if request.config.getoption("--long") else CI_COMPILES
    x = scriptmod.ones(4, 8)

    def trace(i: int) -> None:
        c = 1.0 + i / 4096
        traced = scriptmod.jit.trace(_Scaled(c), x)
        with scriptmod.no_grad():
            np.testing.assert_array_equal(traced(x).numpy(), np.full((4, 8), c + 1, np.float32))

    per = _growth_per_compile(trace, n, lambda: llvm_jit.CACHE.stats()["compiles"])
    if request.config.getoption("--long"):
        print(f"\n{n} fresh traces: {per:.1f} KiB per compile, {per * n / 1024:+.1f} MiB")
    assert per < KIB_PER_COMPILE


@NEEDS_STATM
def test_segments_compiled_together_release_their_native_code(tmp_path: Any) -> None:
    """``compile_units`` (a specialization's units as one module): 120 fresh modules of
    two kernels each stay under the same bound per module."""
    cache = KernelCache(tmp_path)

    def together(i: int) -> None:
        c = 1.0 + i / 4096
        plus, minus = llvm_jit.compile_units([llvm_jit.spec_unit(_spec(c)),
                                              llvm_jit.spec_unit(_spec(-c))], cache)
        assert plus._engine is minus._engine

    assert _growth_per_compile(together, 120, lambda: cache.stats()["compiles"], warm_up=40) \
        < KIB_PER_COMPILE
