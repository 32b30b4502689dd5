"""Shared helpers for codegen tests: run a KernelSpec through LLVM or the C shim, NumPy
references in float64, and dtype-aware comparisons."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import ml_dtypes
import numpy as np
import scipy.special as sps

from scriptmod.codegen.c_source import CPU_SHIM, CSource, render_c
from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep, broadcast_strides
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

FLOATS = (D.float32, D.float64, D.float16, D.bfloat16)
INTS = (D.int8, D.uint8, D.int16, D.int32, D.int64)
RTOL = {"float32": 4e-6, "float64": 1e-13, "float16": 1e-3, "bfloat16": 8e-3}


def np_dtype(dt: DType) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dt is D.bfloat16 else np.dtype(dt.name)


def layout(spec: KernelSpec, inputs: Sequence[np.ndarray], out_shape: tuple) -> list[int]:
    """``meta`` for ``inputs`` (strides in elements, broadcast to ``out_shape``)."""
    strides = []
    for s, a in zip(spec.inputs, inputs):
        el = [st // a.itemsize for st in a.strides]
        strides.append(broadcast_strides(a.shape, el, out_shape) if s.kind == "strided" else None)
    return spec.meta(out_shape, strides) if spec.strided else []


def run_llvm(spec: KernelSpec, inputs: Sequence[np.ndarray], out_shape: tuple = None):
    """Compile with the LLVM backend and run through the runtime's launcher; returns the
    output arrays."""
    from scriptmod.runtime.targets import LLVM
    from scriptmod.runtime.fusion import Launch
    out_shape = tuple(out_shape if out_shape is not None else inputs[0].shape)
    launch = Launch(LLVM, LLVM.compile(spec), spec, layout(spec, inputs, out_shape), out_shape)
    return launch.launch(list(inputs))


SHIM_FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC")
SHIM_CHUNK = 120                         # kernels per translation unit
_SHIMS: dict[str, Callable] = {}         # source text -> its ``sm_launch_<name>`` function


def have_gxx() -> bool:
    return shutil.which("g++") is not None


def shim_cache_dir() -> str:
    """Where built shim libraries are kept, keyed by a hash of their source and flags."""
    d = os.path.join(tempfile.gettempdir(), f"scriptmod-shim-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def _unit(sources: Sequence[CSource]) -> str:
    """One C++ translation unit for many CPU-shim kernels: the shared prelude once, each
    kernel's launcher renamed ``sm_launch_<name>``."""
    prelude = CPU_SHIM.prelude
    parts = [prelude]
    for src in sources:
        assert src.text.startswith(prelude), "a CPU_SHIM source starts with its prelude"
        body = src.text[len(prelude):]
        parts.append(body.replace('extern "C" void sm_launch(',
                                  f'extern "C" void sm_launch_{src.name}('))
    return "\n".join(parts)


def build_library(text: str) -> str:
    """Compile ``text`` to a shared library (cached on disk); returns its path."""
    key = hashlib.sha256((" ".join(SHIM_FLAGS) + "\n" + text).encode()).hexdigest()[:24]
    so = os.path.join(shim_cache_dir(), f"{key}.so")
    if not os.path.exists(so):
        d = tempfile.mkdtemp(prefix="sm-shim-")
        c, tmp = os.path.join(d, "k.cpp"), os.path.join(d, "k.so")
        with open(c, "w") as f:
            f.write(text)
        r = subprocess.run(["g++", *SHIM_FLAGS, c, "-o", tmp], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"g++ failed on the shim source {c}:\n{r.stderr[:4000]}")
        os.replace(tmp, so)                  # atomic: concurrent builders never see half a file
    return so


def build_shims(sources: Sequence[CSource], jobs: int | None = None) -> None:
    """Build every kernel of ``sources`` not built yet: ``SHIM_CHUNK`` kernels per library,
    libraries compiled in parallel. ``shim_function(src)`` then finds each one."""
    todo = {s.name: s for s in sources if s.text not in _SHIMS}
    if not todo:
        return
    names = sorted(todo)                     # a deterministic split: libraries stay cached
    chunks = [[todo[n] for n in names[i:i + SHIM_CHUNK]] for i in range(0, len(names), SHIM_CHUNK)]
    jobs = jobs or max(1, min(len(chunks), os.cpu_count() or 1))
    with ThreadPoolExecutor(jobs) as pool:
        paths = list(pool.map(lambda ch: build_library(_unit(ch)), chunks))
    for chunk, path in zip(chunks, paths):
        lib = ctypes.CDLL(path)
        for src in chunk:
            fn = getattr(lib, f"sm_launch_{src.name}")
            fn.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_uint,
                           ctypes.c_uint]
            fn.restype = None
            _SHIMS[src.text] = fn


def shim_function(src: CSource) -> Callable:
    """The launcher of ``src`` (built on demand)."""
    build_shims([src])
    return _SHIMS[src.text]


def launch_shim(src: CSource, inputs: Sequence[np.ndarray], outs: Sequence[np.ndarray],
                meta: Sequence[int], grid: int = 3, block: int = 32) -> None:
    """Run the grid-stride loop of ``src`` over every (block, thread) of the launch."""
    arrays = list(inputs) + list(outs)
    ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
    meta_arr = (ctypes.c_longlong * max(1, len(meta)))(*meta)
    n = int(np.prod(outs[0].shape, dtype=np.int64)) if outs else 0
    shim_function(src)(ptrs, n, meta_arr, grid, block)


def run_shim(spec: KernelSpec, inputs: Sequence[np.ndarray], out_shape: tuple = None,
             grid: int = 3, block: int = 32):
    """Render C for the CPU shim, build it with g++, run the grid-stride loop via ctypes."""
    out_shape = out_shape if out_shape is not None else inputs[0].shape
    outs = [np.empty(out_shape, np_dtype(d)) for d in spec.out_dtypes]
    launch_shim(render_c(spec, CPU_SHIM), inputs, outs, layout(spec, inputs, out_shape),
                grid, block)
    return outs


def unary_spec(ops: Sequence[str], dt: DType, out_dt: Callable[[str], DType]) -> KernelSpec:
    """One kernel computing every op in ``ops`` of one input (one output each)."""
    steps = [OpStep(op, (0,), {}, out_dt(op)) for op in ops]
    return KernelSpec([InputSpec(dt)], steps, list(range(1, len(ops) + 1)),
                      [s.dtype for s in steps], rank=1)


def binary_spec(ops: Sequence[str], a: DType, b: DType, out_dt: Callable[[str], DType],
                rank: int = 1) -> KernelSpec:
    steps = [OpStep(op, (0, 1), {}, out_dt(op)) for op in ops]
    return KernelSpec([InputSpec(a), InputSpec(b)], steps, list(range(2, len(ops) + 2)),
                      [s.dtype for s in steps], rank=rank)


def torch_sign(x):
    """PyTorch's sign: 0 for NaN and for -0.0 (NumPy gives NaN and -0.0)."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


REF_UNARY: dict[str, Callable] = {
    "neg": np.negative, "abs": np.abs, "sign": torch_sign, "relu": lambda x: np.where(x < 0, 0, x),
    "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "exp": np.exp,
    "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sigmoid": sigmoid, "erf": sps.erf, "erfc": sps.erfc, "reciprocal": lambda x: 1.0 / x,
    "log2": np.log2, "exp2": np.exp2, "isnan": np.isnan, "isinf": np.isinf,
    "logical_not": np.logical_not, "bitwise_not": np.invert,
}
REF_BINARY: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floor_divide": np.floor_divide, "remainder": np.remainder, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2, "eq": np.equal,
    "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}


DIGITS = {"float16": (11, -14), "bfloat16": (8, -126), "float32": (24, -126),
          "float64": (53, -1022)}


def ulp(x: np.ndarray, dt: DType) -> np.ndarray:
    """One unit in the last place of ``x`` in ``dt`` (0 for non-float dtypes)."""
    if dt.name not in DIGITS:
        return np.zeros_like(x)
    p, emin = DIGITS[dt.name]
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.abs(x)))
    return np.exp2(np.maximum(np.nan_to_num(e, neginf=emin), emin) - (p - 1))


def assert_close(got: np.ndarray, ref: np.ndarray, dt: DType, rtol: float | None = None,
                 what: str = "", atol: float = 0.0) -> None:
    """Compare a kernel output with a float64 reference rounded to ``dt``: NaN where NaN,
    equal infinities, finite values within ``rtol`` (plus a tiny absolute slack)."""
    with np.errstate(all="ignore"):
        ref_dt = np.asarray(ref).astype(np_dtype(dt)).astype(np.float64).ravel()
    g = np.asarray(got).astype(np.float64).ravel()
    ref64 = np.asarray(ref, dtype=np.float64).ravel()
    nan = np.isnan(ref64)
    where = np.flatnonzero(np.isnan(g) != nan)[:5]
    assert where.size == 0, f"{what}: NaN mismatch at {where}"
    fin = np.isfinite(ref_dt) & ~nan
    inf = ~fin & ~nan
    assert np.array_equal(g[inf], ref_dt[inf]), f"{what}: infinity mismatch"
    rtol = RTOL.get(dt.name, 0.0) if rtol is None else rtol
    err = np.abs(g[fin] - ref_dt[fin])
    bad = err > rtol * np.abs(ref_dt[fin]) + 2 * ulp(ref_dt[fin], dt) + atol
    if bad.any():
        i = np.argmax(bad)
        x = np.flatnonzero(fin)[i]
        raise AssertionError(f"{what}: {bad.sum()} values off, e.g. index {x}: got {g[x]!r}, "
                             f"expected {ref_dt[x]!r}")
