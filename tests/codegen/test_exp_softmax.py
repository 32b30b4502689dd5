"""``vmath.exp_softmax``: the exp the fused attention kernel applies to ``x - max`` of a
score row (x <= 0 or NaN), emitted on ``<8 x float>`` registers as the kernel does.

Against float64 ``exp``: relative error <= 4e-6 where the result is a normal float32 above
2**-126, exactly 1 at 0, exactly 0 at -inf and for results below 2**-126.5
(the documented flush, an absolute error under 2**-126.5 = 8.3e-39), NaN for NaN."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from scriptmod.codegen import vmath
from scriptmod.codegen.emitter import Num
from scriptmod.codegen.llvm_emit import I64, PTR, for_range
from scriptmod.codegen.microkernel import AVX2, VectorEmitter, at, c64
from scriptmod.ir import dtypes as D
from scriptmod.runtime.llvm_jit import compile_units, ir_unit

LANES, VEC = AVX2.lanes, AVX2.vec


@pytest.fixture(scope="module")
def exp_softmax():
    """``f(x, y, n)``: y = exp_softmax(x) over n floats (n a multiple of 8)."""
    module = ir.Module(name="exp_softmax_test")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), name="f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, y, n = fn.args
    m = Num(VectorEmitter(b, LANES), D.float32)
    with for_range(b, c64(0), b.sdiv(n, c64(LANES)), name="v", vectorize=False) as i:
        off = b.mul(i, c64(LANES))
        b.store(vmath.exp_softmax(m, b.load(at(b, x, off), typ=VEC, align=4)),
                at(b, y, off), align=4)
    b.ret_void()
    kernel, = compile_units([ir_unit(str(module), "f")])
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(kernel.address)

    def run(values: np.ndarray) -> np.ndarray:
        xs = np.ascontiguousarray(values, np.float32)
        pad = -len(xs) % LANES
        xs = np.concatenate([xs, np.zeros(pad, np.float32)])
        out = np.empty_like(xs)
        call(xs.ctypes.data, out.ctypes.data, len(xs))
        return out[:len(values)]
    run.kernel = kernel
    return run


def test_relative_error_over_the_range_softmax_passes(exp_softmax) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.uniform(0, 87.3, 1 << 20), -np.exp2(rng.uniform(-40, 6, 1 << 18)),
                        -np.arange(0, 87, 0.125)]).astype(np.float32)
    got = exp_softmax(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    normal = ref >= np.finfo(np.float32).tiny
    rel = np.abs(got[normal] - ref[normal]) / ref[normal]
    assert rel.max() <= 4e-6, f"rel err {rel.max():.3g} at x={x[normal][np.argmax(rel)]!r}"


def test_specials_and_the_flush_below_the_normal_range(exp_softmax) -> None:
    x = np.array([0.0, -0.0, -np.inf, np.nan, -87.0, -88.0, -100.0, -1e30, -np.float32(3e38)],
                 np.float32)
    got = exp_softmax(x)
    assert got[0] == 1.0 and got[1] == 1.0
    assert got[2] == 0.0 and np.isnan(got[3])
    assert got[4] == pytest.approx(np.exp(-87.0), rel=4e-6)
    assert (got[5:] == 0.0).all()
    x = -np.linspace(87.3, 88.0, 64, dtype=np.float32)
    ref = np.exp(x.astype(np.float64))
    got = exp_softmax(x)
    assert (np.abs(got - ref) <= 2 ** -126.5).all()
    assert (got[ref > 2 ** -126.4] > 0).all() and (got[ref < 2 ** -126.6] == 0).all()


def test_it_is_cheaper_than_exp(exp_softmax) -> None:
    """No upper clamp, no NaN select, no round or convert, one scale: fewer instructions
    in the vector loop than the general ``exp`` (structure, not timing)."""
    asm = exp_softmax.kernel.asm
    assert "vroundps" not in asm and "vcvtps2dq" not in asm and "vcvttps2dq" not in asm
