"""Generated CUDA C: compiles with ``nvcc -ptx`` (when nvcc exists) and, through the CPU
shim (a C++ prelude defining blockIdx/threadIdx and looping over them), computes the same
numbers as the NumPy reference."""
from __future__ import annotations

import os
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from bench_w1 import w1_reference, w1_spec
from scriptmod.codegen.c_source import CPU_SHIM, CUDA, render_c
from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
from harness import (REF_BINARY, REF_UNARY, assert_close, binary_spec, have_gxx, run_shim,
                     unary_spec)
from scriptmod.ir import dtypes as D
from test_formulas import COMPARE, FLOAT_BINARY, FLOAT_UNARY, INT_BINARY

needs_gxx = pytest.mark.skipif(not have_gxx(), reason="g++ not found")
F32 = D.float32


def _specs():
    return {
        "w1": w1_spec(),
        "unary_f32": unary_spec(FLOAT_UNARY, F32, lambda op: F32),
        "unary_f64": unary_spec(FLOAT_UNARY, D.float64, lambda op: D.float64),
        "binary_f16": binary_spec(FLOAT_BINARY, D.float16, D.float16, lambda op: D.float16),
        "int_bf16": binary_spec(INT_BINARY + ["pow"], D.int64, D.int64, lambda op: D.int64),
        "cast": KernelSpec([InputSpec(D.bfloat16)],
                           [OpStep("cast", (0,), {"dtype": d}, d)
                            for d in (D.bool_, D.uint8, D.int32, D.float16, D.float64)],
                           [1, 2, 3, 4, 5], [D.bool_, D.uint8, D.int32, D.float16, D.float64]),
    }


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("name", list(_specs()))
def test_cuda_source_compiles_with_nvcc(name, tmp_path):
    src = render_c(_specs()[name], CUDA)
    path = tmp_path / "k.cu"
    path.write_text(src.text)
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", str(path), "-o", str(tmp_path / "k.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n" + src.text[:3000]
    assert f".entry {src.name}" in (tmp_path / "k.ptx").read_text()


def test_cuda_source_shape():
    src = render_c(w1_spec(), CUDA)
    assert "blockIdx.x * blockDim.x + threadIdx.x" in src.text and "gridDim.x" in src.text
    assert src.text.count("__global__") == 1 and src.n_meta == 6


@needs_gxx
def test_shim_float_unary():
    rng = np.random.default_rng(0)
    for dt, np_dt in ((F32, np.float32), (D.float64, np.float64)):
        x = np.concatenate([rng.standard_normal(997) * 4, [0.0, -0.0, np.inf, -np.inf, np.nan]])
        x = x.astype(np_dt)
        outs = run_shim(unary_spec(FLOAT_UNARY, dt, lambda op: dt), [x])
        for op, g in zip(FLOAT_UNARY, outs):
            with np.errstate(all="ignore"):
                assert_close(g, REF_UNARY[op](x.astype(np.float64)), dt, what=f"shim {op}")


@needs_gxx
def test_shim_half_binary_and_compare():
    rng = np.random.default_rng(1)
    for dt, np_dt in ((D.float16, np.float16), (D.bfloat16, ml_dtypes.bfloat16)):
        a = (rng.standard_normal(515) * 3).astype(np_dt)
        b = (rng.standard_normal(515) * 3).astype(np_dt)
        ops = FLOAT_BINARY + COMPARE
        outs = run_shim(binary_spec(ops, dt, dt, lambda op: D.bool_ if op in COMPARE else dt),
                        [a, b])
        for op, g in zip(ops, outs):
            with np.errstate(all="ignore"):
                ref = REF_BINARY[op](a.astype(np.float64), b.astype(np.float64))
            if op in COMPARE:
                assert np.array_equal(g, ref), op
            else:
                assert_close(g, ref, dt, what=f"shim {op}[{dt.name}]")


@needs_gxx
def test_shim_ints_and_casts():
    rng = np.random.default_rng(2)
    a = rng.integers(-1000, 1000, 301).astype(np.int64)
    b = rng.integers(1, 9, 301).astype(np.int64)
    outs = run_shim(_specs()["int_bf16"], [a, b])
    for op, g in zip(INT_BINARY + ["pow"], outs):
        assert np.array_equal(g, REF_BINARY[op](a, b)), op
    x = (np.abs(rng.standard_normal(301)) * 50).astype(ml_dtypes.bfloat16)
    spec = _specs()["cast"]
    for d, g in zip(spec.out_dtypes, run_shim(spec, [x])):
        want = x.astype(np.float32).astype("bool" if d is D.bool_ else d.name)
        assert np.array_equal(g, want), d.name


@needs_gxx
@pytest.mark.parametrize("grid,block", [(1, 1), (3, 32), (7, 5)])
def test_shim_w1_broadcast_grid_stride(grid, block):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 130), dtype=np.float32)
    a, b = rng.standard_normal(130, dtype=np.float32), rng.standard_normal(130, dtype=np.float32)
    got = run_shim(w1_spec(), [x, a, b], x.shape, grid=grid, block=block)[0]
    assert np.max(np.abs(got - w1_reference(x, a, b))) < 2e-5
