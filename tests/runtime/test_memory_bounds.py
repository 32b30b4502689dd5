"""Memory stays bounded: the in-memory kernel cache keeps the last ``MEMORY_KERNELS`` kernels
and any still in use (a dropped kernel's LLVM engine is released), a method keeps at most
``MAX_SPECIALIZATIONS`` specializations (least recently used evicted, with their kernels and
buffers), and many calls with varying batch sizes do not grow the process."""
from __future__ import annotations

import gc
import os
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

F32 = D.float32


def _spec(c: float) -> KernelSpec:
    return KernelSpec([InputSpec(F32)], [OpStep("add", (0, Imm(c, F32)), {}, F32)], [1], [F32])


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


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
    from scriptmod.runtime.backends import LLVM
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
    monkeypatch.setattr(_executor, "MAX_SPECIALIZATIONS", 4)
    net = _Net()
    traced = scriptmod.jit.trace(net, scriptmod.ones(2, 8))
    executor = traced._executors["forward"]
    rng = np.random.default_rng(0)
    xs = {b: rng.standard_normal((b, 8)).astype(np.float32) for b in range(1, 13)}
    gone = []
    with scriptmod.no_grad():
        for b, x in xs.items():
            np.testing.assert_allclose(traced(scriptmod.tensor(x)).numpy(), _eager(net, x),
                                       rtol=1e-5, atol=1e-6)
            gone.append(weakref.ref(executor.specs[next(reversed(executor.specs))]))
            traced(scriptmod.tensor(xs[1]))                     # batch 1 stays in use
        assert len(executor.specs) == 4
        traced(scriptmod.ones(50, 8))             # the fast path drops its last specialization
    gc.collect()
    alive = [b for b, r in zip(xs, gone) if r() is not None]
    assert 1 in alive and len(alive) <= 4, alive            # evicted ones are freed, kernels too
    built = executor.stats["specializations"]
    with scriptmod.no_grad():                                # an evicted size is rebuilt, right
        np.testing.assert_allclose(traced(scriptmod.tensor(xs[5])).numpy(), _eager(net, xs[5]),
                                   rtol=1e-5, atol=1e-6)
    assert executor.stats["specializations"] == built + 1


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_calls_with_batch_sizes_1_to_64_do_not_grow_memory() -> None:
    """The README figure is 100,000 calls; this is the CI-sized run."""
    traced = scriptmod.jit.trace(_Net(), scriptmod.ones(4, 8))
    xs = [scriptmod.randn(b, 8) for b in range(1, 65)]
    with scriptmod.no_grad():
        for i in range(1000):                    # every specialization built, pools filled
            traced(xs[i % 64])
        gc.collect()
        before = _rss_mib()
        for i in range(20_000):
            traced(xs[i % 64])
    gc.collect()
    assert _rss_mib() - before < 5.0
