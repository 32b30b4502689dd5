"""Kernel layouts: broadcasting, strided inputs, odd sizes, ranks 0-3, and vectorized code."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bench_w1 import w1_reference, w1_spec
from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep, broadcast_strides
from harness import assert_close, run_llvm, run_shim
from scriptmod.ir import dtypes as D

F32 = D.float32


def _axpb(kinds, rank):
    """y = x * a + b + sigmoid(x) over inputs of the given kinds."""
    ins = [InputSpec(F32, k, inner) for k, inner in kinds]
    ops = [OpStep("mul", (0, 1), {}, F32), OpStep("add", (3, 2), {}, F32),
           OpStep("sigmoid", (0,), {}, F32), OpStep("add", (4, 5), {}, F32)]
    return KernelSpec(ins, ops, [6], [F32], rank=rank)


def _ref(x, a, b):
    x = x.astype(np.float64)
    return x * a + b + 1 / (1 + np.exp(-x))


ROW = ("strided", 1)
COL = ("strided", 0)
ANY = ("strided", None)
CONT = ("contiguous", None)
SCALAR = ("scalar", None)


@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (4097,)])
def test_odd_sizes_contiguous(shape):
    rng = np.random.default_rng(0)
    x, a, b = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    got = run_llvm(_axpb([CONT, CONT, CONT], 1), [x, a, b])[0]
    assert_close(got, _ref(x, a, b), F32, atol=1e-5)


@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (5, 1023), (2, 4097), (130, 129)])
@pytest.mark.parametrize("kinds,ashape,bshape", [
    ([CONT, ROW, ROW], "n", "n"),            # bias row vectors (N,)
    ([CONT, ROW, ANY], "1n", "n"),           # (1, N) and a runtime-stride row
    ([CONT, COL, COL], "m1", "m1"),          # column vectors (M, 1)
    ([CONT, SCALAR, ROW], "s", "n"),         # 0-d scalar and a row
    ([CONT, ANY, ANY], "m1", "1n"),          # everything from meta
])
def test_broadcast_2d(m, n, kinds, ashape, bshape):
    rng = np.random.default_rng(1)
    shapes = {"n": (n,), "1n": (1, n), "m1": (m, 1), "s": ()}
    x = rng.standard_normal((m, n), dtype=np.float32)
    a = rng.standard_normal(shapes[ashape], dtype=np.float32)
    b = rng.standard_normal(shapes[bshape], dtype=np.float32)
    got = run_llvm(_axpb(kinds, 2), [x, a, b], (m, n))[0]
    assert_close(got, _ref(x, a, b), F32, atol=1e-5)


def test_strided_views_rank3():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((6, 10, 14), dtype=np.float32)
    x = np.ascontiguousarray(base[::2, 1:8, ::2])          # (3, 7, 7)
    a = base[::2, 1:8, 1::2]                               # non-contiguous view (3, 7, 7)
    b = rng.standard_normal((7, 1), dtype=np.float32)      # broadcast (1, 7, 1)
    got = run_llvm(_axpb([CONT, ANY, ANY], 3), [x, a, b], x.shape)[0]
    assert_close(got, _ref(x, a, b), F32, atol=1e-5)


def test_rank0_and_empty():
    x = np.array(0.5, np.float32)
    two, one = np.array(2, np.float32), np.array(1, np.float32)
    got = run_llvm(_axpb([CONT, SCALAR, SCALAR], 0), [x, two, one], ())[0]
    assert_close(got, _ref(x, 2.0, 1.0), F32, atol=1e-5)
    e = np.zeros((0, 5), np.float32)
    assert run_llvm(_axpb([CONT, ROW, ROW], 2), [e, np.ones(5, np.float32),
                                                 np.ones(5, np.float32)], (0, 5))[0].shape == (0, 5)


def test_half_types_broadcast():
    import ml_dtypes
    rng = np.random.default_rng(3)
    for dt, npdt in ((D.float16, np.float16), (D.bfloat16, ml_dtypes.bfloat16)):
        x = rng.standard_normal((9, 33)).astype(npdt)
        a = rng.standard_normal(33).astype(npdt)
        spec = KernelSpec([InputSpec(dt), InputSpec(dt, "strided", 1)],
                          [OpStep("mul", (0, 1), {}, dt), OpStep("exp", (2,), {}, dt)],
                          [3], [dt], rank=2)
        got = run_llvm(spec, [x, a], x.shape)[0]
        prod = (x.astype(np.float64) * a.astype(np.float64)).astype(npdt).astype(np.float64)
        assert_close(got, np.exp(prod), dt)


def test_w1_kernel_matches_and_vectorizes():
    from scriptmod.runtime.llvm_jit import compile_spec
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 4096), dtype=np.float32)
    a, b = rng.standard_normal(4096, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32)
    for form in ("sigmoid", "tanh"):
        spec = w1_spec(form)
        got = run_llvm(spec, [x, a, b], x.shape)[0]
        assert np.max(np.abs(got - w1_reference(x, a, b))) < 2e-5
        asm = compile_spec(spec).asm
        packed = [ln for ln in asm.splitlines() if ("zmm" in ln or "ymm" in ln) and "ps" in ln]
        assert len(packed) > 20, "the W1 inner loop did not vectorize"


def test_no_external_calls_in_any_formula_kernel():
    from scriptmod.runtime.kernel_cache import undefined_symbols
    from scriptmod.runtime.llvm_jit import _object_code
    from scriptmod.codegen.llvm_ir import render_llvm
    names = ["exp", "log", "erf", "erfc", "sin", "cos", "tanh", "expm1", "log1p", "atan2", "pow"]
    steps = [OpStep(op, (0, 0) if op in ("atan2", "pow") else (0,), {}, F32) for op in names]
    spec = KernelSpec([InputSpec(F32)], steps, list(range(1, len(steps) + 1)), [F32] * len(steps))
    assert undefined_symbols(_object_code(render_llvm(spec).text)) == []


def test_broadcast_strides_helper():
    assert broadcast_strides((4096,), (1,), (16, 4096)) == [0, 1]
    assert broadcast_strides((16, 1), (1, 1), (16, 4096)) == [1, 0]
    with pytest.raises(ValueError):
        broadcast_strides((3,), (1,), (4,))


def test_spec_key_is_stable_and_validated():
    s1, s2 = w1_spec(), w1_spec()
    assert s1 == s2 and hash(s1) == hash(s2) and s1.key() == s2.key()
    assert s1.key() != w1_spec("tanh").key()
    with pytest.raises(ValueError, match="step 0"):
        KernelSpec([InputSpec(F32)], [OpStep("neg", (1,), {}, F32)], [1], [F32])
