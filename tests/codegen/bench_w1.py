"""W1 measurement (not a test): ``python tests/codegen/bench_w1.py``.

Times the fused W1 kernel ``y = gelu_tanh(x * a + b) + x`` (x 4096x4096 float32, a and b
row vectors) at 1 and 2 threads against an ``np.copyto`` floor measured in the same run,
plus cold compile time and warm load from the disk cache. Numbers go in codegen/README.md.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if _ROOT not in sys.path:      # normalized: an "a/../.." entry makes the tracer's own frames
    sys.path.insert(0, _ROOT)  # look like user code (co_filename differs from __file__)

import numpy as np  # noqa: E402

from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep  # noqa: E402
from scriptmod.ir import dtypes as D  # noqa: E402

F32 = D.float32


def w1_spec(form: str = "sigmoid") -> KernelSpec:
    """gelu_tanh(x*a + b) + x; ``form``: 'sigmoid' (v*sigmoid(2u)) or 'tanh' (0.5v(1+tanh u))."""
    c = math.sqrt(2.0 / math.pi)
    ops = [OpStep("mul", (0, 1), {}, F32), OpStep("add", (3, 2), {}, F32),        # 4: v
           OpStep("pow", (4, Imm(3, D.int64)), {}, F32),                          # 5: v^3
           OpStep("mul", (5, Imm(0.044715, F32)), {}, F32),
           OpStep("add", (4, 6), {}, F32)]                                          # 7: v+.04v^3
    if form == "sigmoid":
        ops += [OpStep("mul", (7, Imm(2 * c, F32)), {}, F32), OpStep("sigmoid", (8,), {}, F32),
                OpStep("mul", (4, 9), {}, F32)]
    else:
        ops += [OpStep("mul", (7, Imm(c, F32)), {}, F32), OpStep("tanh", (8,), {}, F32),
                OpStep("add", (9, Imm(1.0, F32)), {}, F32), OpStep("mul", (4, 10), {}, F32),
                OpStep("mul", (11, Imm(0.5, F32)), {}, F32)]
    ops.append(OpStep("add", (len(ops) + 2, 0), {}, F32))
    row = InputSpec(F32, "strided", inner=1)
    return KernelSpec([InputSpec(F32), row, row], ops, [len(ops) + 2], [F32], rank=2)


def w1_reference(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64) * a + b
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) + x


def median_ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    os.environ.setdefault("SCRIPTMOD_CACHE_DIR", tempfile.mkdtemp(prefix="smbench-"))
    from scriptmod.runtime import llvm_jit, threads
    from scriptmod.runtime.targets import LLVM
    from scriptmod.runtime.fusion import Launch
    from scriptmod.runtime.kernel_cache import KernelCache
    n = 4096
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    dst = np.empty_like(x)
    for form in ("sigmoid", "tanh"):
        spec = w1_spec(form)
        llvm_jit.host()
        t0 = time.perf_counter()
        k = llvm_jit.compile_spec(spec, KernelCache())
        cold = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        llvm_jit.compile_spec(spec, KernelCache())      # fresh memory cache: disk load
        warm = (time.perf_counter() - t0) * 1e3
        meta = spec.meta((n, n), [None, [0, 1], [0, 1]])
        launch = Launch(LLVM, k, spec, meta, (n, n))    # pooled output: reused when dropped
        (y,) = launch.launch([x, a, b])
        err = np.max(np.abs(y - w1_reference(x, a, b)))
        print(f"W1[{form}] cold compile {cold:.1f} ms, warm disk load {warm:.2f} ms, "
              f"max abs err {err:.2e}, packed zmm ops: {k.asm.count('zmm')}")
        for t in (1, 2):
            threads.set_num_threads(t)
            copy = median_ms(lambda: np.copyto(dst, x), 20)
            kern = median_ms(lambda: launch.launch([x, a, b]), 20)
            print(f"  {t} thread(s): kernel {kern:.2f} ms, np.copyto floor {copy:.2f} ms, "
                  f"ratio {kern / copy:.2f}")
    tiny = np.ones(64, np.float32)
    neg = KernelSpec([InputSpec(F32)], [OpStep("neg", (0,), {}, F32)], [1], [F32])
    launch1 = Launch(LLVM, LLVM.compile(neg), neg, (), (64,))
    per_call = median_ms(lambda: [launch1.launch([tiny]) for _ in range(1000)], 5)
    print(f"call overhead (64 elements, pooled output): {per_call:.3f} us per call")


if __name__ == "__main__":
    main()
