"""sin/cos over the whole float range (Payne-Hanek above 2**20), compiled against a float64
reference (float32), NumPy's libm (float64, < 1 ulp) and torch; special values, subnormals,
multiples of pi near large values, strided layouts, and the C source's library calls."""
from __future__ import annotations

import numpy as np
import pytest

from harness import run_llvm
from scriptmod.codegen.c_source import CUDA, render_c
from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
from scriptmod.ir import dtypes as D

DTYPES = {np.float32: D.float32, np.float64: D.float64}
OPS = ("sin", "cos")


def unary_spec(op: str, dt: D.DType, kind: str = "contiguous", rank: int = 1) -> KernelSpec:
    return KernelSpec([InputSpec(dt, kind)], [OpStep(op, (0,), {}, dt)], [1], [dt], rank=rank)


def arguments(dt) -> np.ndarray:
    """Log-uniform magnitudes of both signs up to the largest float, float multiples of pi
    near large values, the 2**20 boundary, subnormals and the special values."""
    info = np.finfo(dt)
    rng = np.random.default_rng(17)
    mags = np.exp2(rng.uniform(-10, np.log2(info.max), 20000))
    k = np.exp2(rng.uniform(20, np.log2(info.max) - 2, 2000)).round()
    pis = np.concatenate([k * np.pi, k * np.pi / 2])
    edge = np.nextafter(np.array([2.0 ** 20] * 3, dt), np.array([0, np.inf, 2 ** 20], dt))
    tiny = np.array([info.smallest_subnormal, -info.smallest_subnormal, info.tiny * 0.75])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max])
    with np.errstate(over="ignore"):
        x = np.concatenate([mags, -mags, pis, -pis, edge, tiny, special]).astype(dt)
    return x


def ulp_error(got: np.ndarray, ref: np.ndarray, dt) -> np.ndarray:
    """|got - ref| in units of the last place of ref rounded to ``dt``."""
    return np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(dt)).astype(
        np.float64)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", OPS)
def test_whole_range_within_two_ulp(op: str, dt) -> None:
    x = arguments(dt)
    got, = run_llvm(unary_spec(op, DTYPES[dt]), [x])
    with np.errstate(invalid="ignore"):
        ref = getattr(np, op)(x.astype(np.float64))  # float64 libm: exact enough for both
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "NaN where the reference has none"
    finite = np.isfinite(ref)
    err = ulp_error(got[finite], ref[finite], dt)
    worst = int(np.argmax(err))
    assert err[worst] <= 2.0, f"{op}: {err[worst]:.2f} ulp at x={x[finite][worst]!r}"
    big = np.abs(x[finite]) >= 2.0 ** 20
    assert big.sum() > 20000                                 # the large range is covered
    if op == "sin":                                          # sin(+-0) = +-0, subnormals
        zero_or_tiny = np.abs(x) < np.finfo(dt).tiny
        assert np.array_equal(got[zero_or_tiny], x[zero_or_tiny])


@pytest.mark.parametrize("op", OPS)
def test_equal_to_torch_at_large_arguments(op: str) -> None:
    torch = pytest.importorskip("torch")
    x = (np.exp2(np.random.default_rng(3).uniform(20, 127, 4096)) *
         np.sign(np.random.default_rng(4).uniform(-1, 1, 4096))).astype(np.float32)
    got, = run_llvm(unary_spec(op, D.float32), [x])
    want = getattr(torch, op)(torch.from_numpy(x)).numpy()
    assert ulp_error(got, want.astype(np.float64), np.float32).max() <= 2.0


def test_mixed_small_and_large_elements_in_a_strided_kernel() -> None:
    """Large elements make the loop run again in full: the small ones keep their values,
    through a strided (transposed) layout too."""
    x = np.random.default_rng(5).uniform(-4, 4, (64, 33))
    x[7, 3], x[40, 30] = 1e300, -3.0e22
    xt = x.T
    for op in OPS:
        got, = run_llvm(unary_spec(op, D.float64, "strided", rank=2), [xt])
        assert ulp_error(got, getattr(np, op)(xt), np.float64).max() <= 2.0


def test_c_source_calls_the_full_range_library_functions() -> None:
    for op, fn in (("sin", "sinf("), ("cos", "cosf(")):
        text = render_c(unary_spec(op, D.float32), CUDA).text
        assert fn in text
    assert "sin(" in render_c(unary_spec("sin", D.float64), CUDA).text


def test_update_in_place_reduces_large_arguments_in_one_loop() -> None:
    """An output that overwrites its input cannot run the loop twice: it takes the full
    reduction in the vectorized loop itself."""
    import ctypes
    from scriptmod.codegen.llvm_ir import render_llvm
    from scriptmod.runtime.llvm_jit import compile_units, ir_unit
    x = arguments(np.float64)
    x = x[np.isfinite(x)]
    want = np.sin(x)
    rendered = render_llvm(unary_spec("sin", D.float64), in_place=[0])
    kernel, = compile_units([ir_unit(rendered.text, rendered.name)])
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, x.ctypes.data)
    kernel.cfunc(0, x.size, ctypes.addressof(ptrs), None)
    assert ulp_error(x, want, np.float64).max() <= 2.0
