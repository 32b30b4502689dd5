"""How the vector math is emitted: one shared exp for sigmoid and tanh of a value, native
scaling where the host has it, interleave hints on long kernels, and the generic fallbacks
(no ``ldexp``/``lrint`` hooks) staying accurate."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sps

from scriptmod.codegen import llvm_emit
from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from scriptmod.codegen.llvm_ir import render_llvm
from harness import run_llvm, unary_spec
from scriptmod.ir import dtypes as D

F32 = D.float32


def _zoo_spec() -> KernelSpec:
    """W2's activation chain: gelu(erf), prelu, sigmoid*tanh, threshold, relu(h + x)."""
    ops = [OpStep("mul", (Imm(0.5, F32), 0), {}, F32),                    # 2
           OpStep("mul", (0, Imm(-0.7071067811865475, F32)), {}, F32),    # 3
           OpStep("erfc", (3,), {}, F32), OpStep("mul", (2, 4), {}, F32),  # 4, 5
           OpStep("gt", (5, Imm(0, F32)), {}, D.bool_),                    # 6
           OpStep("mul", (1, 5), {}, F32), OpStep("where", (6, 5, 7), {}, F32),   # 7, 8
           OpStep("sigmoid", (8,), {}, F32), OpStep("tanh", (8,), {}, F32),       # 9, 10
           OpStep("mul", (9, 10), {}, F32),                                        # 11
           OpStep("gt", (11, Imm(0.1, F32)), {}, D.bool_),
           OpStep("where", (12, 11, Imm(0.0, F32)), {}, F32),
           OpStep("add", (13, 0), {}, F32), OpStep("relu", (14,), {}, F32)]        # 15
    return KernelSpec([InputSpec(F32), InputSpec(F32, "scalar")], ops, [15], [F32], rank=1)


def _zoo_ref(x: np.ndarray, w: float) -> np.ndarray:
    x = x.astype(np.float64)
    h = 0.5 * x * sps.erfc(-x / np.sqrt(2))
    h = np.where(h > 0, h, w * h)
    h = sps.expit(h) * np.tanh(h)
    h = np.where(h > 0.1, h, 0.0)
    return np.maximum(h + x, 0)


def test_zoo_kernel_matches_float64():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(100_003) * 3, [0.0, -0.0, 1e-30, -40, 40]])
    x = x.astype(np.float32)
    got = run_llvm(_zoo_spec(), [x, np.array(0.25, np.float32)])[0]
    np.testing.assert_allclose(got, _zoo_ref(x, 0.25), rtol=4e-6, atol=1e-7)


@pytest.mark.skipif(not llvm_emit.host_has_scalef(), reason="needs AVX-512 (vscalef)")
def test_sigmoid_and_tanh_share_one_exp():
    from scriptmod.runtime.llvm_jit import compile_spec
    spec = unary_spec(["sigmoid", "tanh"], F32, lambda op: F32)
    both = KernelSpec(spec.inputs, list(spec.ops) + [OpStep("mul", (1, 2), {}, F32)], [3],
                      [F32], rank=1)
    one = unary_spec(["sigmoid"], F32, lambda op: F32)
    count = [compile_spec(s).asm.count("vscalefps") for s in (one, both)]
    assert count[0] > 0 and count[1] == count[0], count


def test_long_kernels_get_interleave_hints():
    long_ir = render_llvm(_zoo_spec()).text
    assert "llvm.loop.interleave.count" in long_ir and "distinct !{" in long_ir
    cheap = unary_spec(["relu"], F32, lambda op: F32)
    assert "llvm.loop" not in render_llvm(cheap).text


def test_generic_fallbacks_stay_accurate(monkeypatch: pytest.MonkeyPatch):
    """Without the native hooks (another host) exp/erfc/tanh take the bit-trick ldexp."""
    monkeypatch.setattr(llvm_emit, "host_has_scalef", lambda: False)
    x = np.concatenate([np.linspace(-12, 12, 20_001), [-90.0, -103.0, 88.0]]).astype(np.float32)
    names = ["exp", "erfc", "tanh", "sigmoid"]
    spec = unary_spec(names, F32, lambda op: F32)
    assert "llvm.ldexp" not in render_llvm(spec).text
    refs = {"exp": np.exp, "erfc": sps.erfc, "tanh": np.tanh, "sigmoid": sps.expit}
    for name, got in zip(names, run_llvm(spec, [x])):
        ref = refs[name](x.astype(np.float64))
        ok = np.abs(ref) >= np.finfo(np.float32).tiny
        rel = np.abs(got[ok] - ref[ok]) / np.abs(ref[ok])
        assert rel.max() <= 4e-6, (name, rel.max())
