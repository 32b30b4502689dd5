"""codegen.native: whole programs (kernel steps + GEMMs over one arena) rendered, compiled with
runtime.llvm_jit and run against NumPy float64; text/key stability; inline GEMM vectorized."""
from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from scriptmod.codegen import native as N
from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
from scriptmod.codegen.native import GemmStep, KernelStep, NativeProgram, Ref, render_program
from scriptmod.ir import dtypes as D
from scriptmod.runtime import blas as B
from scriptmod.runtime.kernel_cache import KernelCache
from scriptmod.runtime.llvm_jit import compile_units, ir_unit

F32, F64 = D.float32, D.float64
ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
NP = {F32: np.float32, F64: np.float64}
TOL = {F32: dict(rtol=2e-5, atol=2e-5), F64: dict(rtol=1e-12, atol=1e-12)}
BLAS = B.cblas()
needs_blas = pytest.mark.skipif(BLAS is None, reason=f"no CBLAS: {B.why_not()}")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("native-cache"))


class Runner:
    """A compiled program with its argument table and a 64-byte aligned arena."""

    def __init__(self, prog: NativeProgram, cache: KernelCache, arena_bytes: int = 0,
                 kernel=None) -> None:
        mod = render_program(prog)
        self.kernel = kernel if kernel is not None else compile_units([ir_unit(mod.text, mod.name)], cache)[0]
        self.fn = ENTRY(self.kernel.address)
        raw = np.full(arena_bytes + 128, 0xFF, np.uint8)      # NaN-ish garbage, not zeros
        start = (-raw.ctypes.data) % 64
        self.arena = raw[start:start + arena_bytes + 64]
        self.n_args = prog.n_args
        self.objects = prog.objects
        self.args = (ctypes.c_void_p * (self.n_args + 2))()
        self.fns = BLAS.fns() if BLAS is not None else (ctypes.c_void_p * 4)()
        self.args[self.n_args] = self.arena.ctypes.data
        self.args[self.n_args + 1] = ctypes.addressof(self.fns)

    def __call__(self, *arrays: np.ndarray) -> None:
        for i, a in enumerate(arrays):
            self.args[i] = id(a) if i in self.objects else a.ctypes.data
        self.fn(ctypes.addressof(self.args))


def _spec(ops, n_in: int = 1, dt=F32, kinds=None, rank: int = 1) -> KernelSpec:
    kinds = kinds or ["contiguous"] * n_in
    inputs = [InputSpec(dt, k) for k in kinds]
    steps = [OpStep(op, args, {}, dt) for op, args in ops]
    return KernelSpec(inputs, steps, [n_in + len(steps) - 1], [dt], rank=rank)


ADD_RELU = _spec([("add", (0, 1)), ("relu", (2,))], n_in=2)
ADD = _spec([("add", (0, 1))], n_in=2)


def _force_blas(monkeypatch) -> None:
    monkeypatch.setattr(N, "INLINE_GEMM_MAX", -1)
    monkeypatch.setattr(N, "INLINE_GEMV_MAX", -1)


# ---- kernel steps ------------------------------------------------------------------------
def test_one_kernel_step(cache):
    spec = _spec([("exp", (0,))])
    prog = NativeProgram((KernelStep(spec, (Ref("arg", 0),), (Ref("arg", 1),), n=37),), 2)
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    y = np.full(37, np.nan, np.float32)
    Runner(prog, cache)(x, y)
    np.testing.assert_allclose(y, np.exp(x.astype(np.float64)), rtol=4e-6)


def test_strided_kernel_step_gets_its_meta(cache):
    """A broadcast bias read with strides from the baked-in meta constant."""
    spec = _spec([("add", (0, 1))], n_in=2, kinds=["contiguous", "strided"], rank=2)
    meta = tuple(spec.meta((3, 5), [None, (0, 1)]))
    prog = NativeProgram((KernelStep(spec, (Ref("arg", 0), Ref("arg", 1)), (Ref("arg", 2),),
                                     n=15, meta=meta),), 3)
    rng = np.random.default_rng(1)
    x, bias = rng.standard_normal((3, 5)).astype(np.float32), np.arange(5, dtype=np.float32)
    y = np.full((3, 5), np.nan, np.float32)
    Runner(prog, cache)(x, bias, y)
    np.testing.assert_array_equal(y, x + bias)


def test_chained_kernel_steps_through_the_arena(cache):
    """x -> exp -> arena[0] ; arena[0] * x -> arena[256]; arena[256] + arena[0] -> out."""
    n = 40
    mul = _spec([("mul", (0, 1))], n_in=2)
    prog = NativeProgram((
        KernelStep(_spec([("exp", (0,))]), (Ref("arg", 0),), (Ref("arena", 0),), n),
        KernelStep(mul, (Ref("arena", 0), Ref("arg", 0)), (Ref("arena", 256),), n),
        KernelStep(ADD, (Ref("arena", 256), Ref("arena", 0)), (Ref("arg", 1),), n)), 2)
    x = np.linspace(-2, 2, n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    Runner(prog, cache, 512)(x, y)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(y, e * x + e, rtol=1e-5, atol=1e-6)


def test_ref_offsets_are_honoured(cache):
    """Views: a narrow of an argument (offset in bytes) and an arena slot at index + offset."""
    x = np.arange(20, dtype=np.float32)
    y = np.full(12, np.nan, np.float32)
    neg = _spec([("neg", (0,))])
    prog = NativeProgram((
        KernelStep(neg, (Ref("arg", 0, offset=4 * 8),), (Ref("arena", 64, offset=16),), 6),
        KernelStep(neg, (Ref("arena", 80),), (Ref("arg", 1, offset=4 * 6),), 6),
        KernelStep(neg, (Ref("arg", 0),), (Ref("arg", 1),), 6)), 2)
    Runner(prog, cache, 128)(x, y)
    np.testing.assert_array_equal(y, np.r_[-x[:6], x[8:14]])


# ---- GEMMs ------------------------------------------------------------------------------
def _operand(rng, rows: int, cols: int, ld: int, dt, batch: int = 1, stride: int = 0):
    """A (batch of) row-major rows x cols matrices with leading dim ld, in one flat buffer;
    returns (buffer, list of the matrices as views)."""
    size = (batch - 1) * stride + (rows - 1) * ld + cols if rows and cols else 1
    buf = rng.standard_normal(max(size, 1)).astype(NP[dt])
    mats = [np.lib.stride_tricks.as_strided(buf[b * stride:], (rows, cols),
                                            (ld * buf.itemsize, buf.itemsize))
            for b in range(batch)]
    return buf, mats


def _check_gemm(cache, dt, m, n, k, trans_a, trans_b, pad=0, batch=1, zero_stride=""):
    rng = np.random.default_rng(m * 100 + n * 10 + k + 7 * trans_a + 3 * trans_b)
    ar, ac = (k, m) if trans_a else (m, k)
    br, bc = (n, k) if trans_b else (k, n)
    lda, ldb, ldc = ac + pad, bc + 2 * pad, n + pad
    sa = 0 if "a" in zero_stride else ar * lda + pad
    sb = 0 if "b" in zero_stride else br * ldb
    sc = m * ldc + 3
    a, am = _operand(rng, ar, ac, lda, dt, batch, sa)
    b, bm = _operand(rng, br, bc, ldb, dt, batch, sb)
    c = np.full((batch - 1) * sc + m * ldc + 1, np.nan, NP[dt])
    step = GemmStep(dt, m, n, k, Ref("arg", 0), lda, trans_a, Ref("arg", 1), ldb, trans_b,
                    Ref("arg", 2), ldc, batch, sa if batch > 1 else 0,
                    sb if batch > 1 else 0, sc if batch > 1 else 0)
    Runner(NativeProgram((step,), 3), cache)(a, b, c)
    for i in range(batch):
        opa = am[i].T if trans_a else am[i]
        opb = bm[i].T if trans_b else bm[i]
        ref = opa.astype(np.float64) @ opb.astype(np.float64)
        got = np.lib.stride_tricks.as_strided(c[i * sc:], (m, n), (ldc * c.itemsize, c.itemsize))
        np.testing.assert_allclose(got, ref, **TOL[dt], err_msg=f"batch {i}")
    return step


TRANS = list(itertools.product([False, True], repeat=2))


@needs_blas
@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("trans_a,trans_b", TRANS)
def test_blas_gemm(cache, monkeypatch, dt, trans_a, trans_b):
    _force_blas(monkeypatch)
    step = _check_gemm(cache, dt, 5, 7, 6, trans_a, trans_b)
    assert not step.inline


@needs_blas
@pytest.mark.parametrize("trans_a,trans_b", TRANS)
def test_blas_gemm_padded_leading_dims(cache, monkeypatch, trans_a, trans_b):
    _force_blas(monkeypatch)
    _check_gemm(cache, F32, 4, 9, 5, trans_a, trans_b, pad=3)


@needs_blas
@pytest.mark.parametrize("zero_stride", ["", "a", "b"])
@pytest.mark.parametrize("dt", [F32, F64])
def test_blas_gemm_batched(cache, monkeypatch, dt, zero_stride):
    _force_blas(monkeypatch)
    _check_gemm(cache, dt, 3, 4, 5, False, True, pad=1, batch=4, zero_stride=zero_stride)


@needs_blas
@pytest.mark.parametrize("zero_stride", ["", "b"])
@pytest.mark.parametrize("trans_a,trans_b", TRANS)
@pytest.mark.parametrize("dt", [F32, F64])
def test_blas_batch_api_above_the_small_matrix_bound(cache, dt, trans_a, trans_b,
                                                      zero_stride):
    """A batch whose GEMMs are larger than OpenBLAS's small-matrix bound is one
    ``cblas_?gemm_batch`` call (W5's attention heads); at the bound, one call per GEMM."""
    m, n, k = 101, 100, 101
    assert m * n * k > N.BATCH_API_MIN_MNK >= 100 * 100 * 100
    _check_gemm(cache, dt, m, n, k, trans_a, trans_b, pad=2, batch=3, zero_stride=zero_stride)
    _check_gemm(cache, dt, 100, 100, 100, trans_a, trans_b, batch=2, zero_stride=zero_stride)
    prog = NativeProgram((GemmStep(dt, m, n, k, Ref("arg", 0), k, False, Ref("arg", 1), k,
                                   True, Ref("arg", 2), n, batch=3, stride_a=m * k,
                                   stride_b=n * k, stride_c=m * n),), 3)
    assert "ptr %as" in render_program(prog).text


@needs_blas
def test_large_gemm_calls_blas_by_default(cache):
    step = _check_gemm(cache, F32, 70, 65, 80, False, True)
    assert not step.inline


@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("trans_a,trans_b", TRANS)
@pytest.mark.parametrize("shape", [(1, 64, 64), (3, 5, 7), (16, 17, 33), (2, 3, 0)])
def test_inline_gemm(cache, dt, trans_a, trans_b, shape):
    step = _check_gemm(cache, dt, *shape, trans_a, trans_b, pad=1)
    assert step.inline


@pytest.mark.parametrize("zero_stride", ["", "a", "b"])
def test_inline_gemm_batched(cache, zero_stride):
    _check_gemm(cache, F32, 2, 3, 4, True, False, pad=2, batch=3, zero_stride=zero_stride)


@pytest.mark.parametrize("shape,inline", [
    ((1, 64, 64), True), ((8, 64, 64), True), ((9, 64, 64), False), ((1, 1024, 1024), True),
    ((1, 2048, 1024), False), ((64, 64, 64), False), ((3, 5, 0), True)])
def test_inline_or_blas_rule(shape, inline):
    m, n, k = shape
    step = GemmStep(F32, m, n, k, Ref("arg", 0), max(k, 1), False, Ref("arg", 1), max(k, 1),
                    True, Ref("arg", 2), n)
    assert step.inline is inline


def test_inline_matrix_vector_product(cache):
    """m == 1 stays inline however wide (a GEMV streams B either way)."""
    step = _check_gemm(cache, F32, 1, 1000, 1024, False, True)
    assert step.inline and step.m * step.n * step.k > N.INLINE_GEMM_MAX


def test_empty_gemm_writes_nothing(cache):
    c = np.full(4, np.nan, np.float32)
    step = GemmStep(F32, 0, 4, 3, Ref("arg", 0), 3, False, Ref("arg", 0), 4, False,
                    Ref("arg", 1), 4)
    Runner(NativeProgram((step,), 2), cache)(np.zeros(12, np.float32), c)
    assert np.isnan(c).all()


@pytest.mark.parametrize("trans_b", [False, True])
def test_inline_gemm_vectorizes(cache, trans_b):
    """The inner loop becomes vector FMAs: dot order via reassoc, axpy order as is."""
    step = GemmStep(F32, 1, 64, 64, Ref("arg", 0), 64, False, Ref("arg", 1), 64, trans_b,
                    Ref("arg", 2), 64)
    mod = render_program(NativeProgram((step,), 3))
    asm = compile_units([ir_unit(mod.text, mod.name)], cache)[0].asm
    if "vfmadd" not in asm and "fma" not in _host_features():
        pytest.skip("host has no FMA")
    assert "vfmadd" in asm and ("ymm" in asm or "zmm" in asm)


def _host_features() -> str:
    from scriptmod.runtime.llvm_jit import host
    return host()[2]


# ---- a W4-like chain ---------------------------------------------------------------------
def w4_program(batch: int = 1, widths=(64, 64, 64, 64, 64, 10)) -> tuple[NativeProgram, int]:
    """x -> 5 x (Linear: x @ W^T, then + bias (ReLU but the last)). Args: x, (W, b) x 5, out.
    Returns the program and its arena size in bytes."""
    steps, src, arena = [], Ref("arg", 0), 0
    n_layers = len(widths) - 1
    for i in range(n_layers):
        k, n = widths[i], widths[i + 1]
        mm = Ref("arena", arena)
        arena += -(-batch * n * 4 // 64) * 64
        steps.append(GemmStep(F32, batch, n, k, src, k, False, Ref("arg", 1 + 2 * i), k, True,
                              mm, n))
        last = i == n_layers - 1
        dst = Ref("arg", 1 + 2 * n_layers) if last else Ref("arena", arena)
        arena += 0 if last else -(-batch * n * 4 // 64) * 64
        spec = _spec([("add", (0, 1))] + ([] if last else [("relu", (2,))]), n_in=2,
                     kinds=["contiguous", "strided"], rank=2)
        steps.append(KernelStep(spec, (mm, Ref("arg", 2 + 2 * i)), (dst,), batch * n,
                                tuple(spec.meta((batch, n), [None, (0, 1)]))))
        src = dst
    return NativeProgram(tuple(steps), 2 + 2 * n_layers), arena


def w4_arrays(batch: int = 1, widths=(64, 64, 64, 64, 64, 10)):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    params = []
    for k, n in zip(widths, widths[1:]):
        params += [(rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32),
                   rng.standard_normal(n).astype(np.float32) * 0.1]
    return x, params


def w4_reference(x, params) -> np.ndarray:
    h = x.astype(np.float64)
    for i in range(0, len(params), 2):
        h = h @ params[i].T.astype(np.float64) + params[i + 1]
        if i + 2 < len(params):
            h = np.maximum(h, 0)
    return h


@pytest.mark.parametrize("batch", [1, 3])
def test_w4_like_chain(cache, batch):
    prog, arena = w4_program(batch)
    x, params = w4_arrays(batch)
    out = np.full((batch, 10), np.nan, np.float32)
    run = Runner(prog, cache, arena)
    run(x, *params, out)
    np.testing.assert_allclose(out, w4_reference(x, params), rtol=1e-5, atol=1e-5)
    x2 = -x
    run(x2, *params, out)                       # the arena is reused: no stale state
    np.testing.assert_allclose(out, w4_reference(x2, params), rtol=1e-5, atol=1e-5)


def test_w4_like_chain_compiles_one_gemm_and_one_step_per_shape():
    """Equal layers share their helpers: one inline GEMM loop (shapes are arguments) and one
    kernel step per distinct (spec, n, meta), named by what they compute (``linkonce_odr``,
    so that equal helpers of programs linked into one module merge)."""
    text = render_program(w4_program(1)[0]).text
    defines = [ln.split("(")[0] for ln in text.splitlines() if ln.startswith("define linkonce_odr")]
    assert sum("@sm_gemm_float32_NT" in d for d in defines) == 1
    assert sum("@sm_step_" in d for d in defines) == 2


def test_linked_programs_share_equal_helpers(cache):
    """Two programs with the same kernel steps and GEMM shape, linked into one module (as
    ``compile_units`` does): one internal copy of each helper survives, and both entries,
    loaded from one object, compute the right thing."""
    import llvmlite.binding as llvm
    from scriptmod.runtime import llvm_jit
    p1, arena = w4_program(2)
    p2 = NativeProgram(p1.steps, p1.n_args + 1)          # another entry, the same helpers
    mod = llvm.parse_assembly(render_program(p1).text)
    mod.link_in(llvm.parse_assembly(render_program(p2).text))
    llvm_jit._export_only(mod, [N.program_name(p1), N.program_name(p2)])
    defined = [f.name for f in mod.functions if not f.is_declaration]
    assert sum(n.startswith("sm_step_") for n in defined) == 2
    assert sum(n.startswith("sm_gemm_") for n in defined) == 1
    assert all(f.linkage == llvm.Linkage.internal for f in mod.functions
               if not f.is_declaration and not f.name.startswith("sm_prog_"))
    units = [(p.text(), lambda p=p: render_program(p).text, N.program_name(p)) for p in (p1, p2)]
    k1, k2 = llvm_jit.compile_units(units, cache)
    assert k1._engine is k2._engine and k1.address != k2.address
    x, params = w4_arrays(2)
    for prog, kernel in ((p1, k1), (p2, k2)):
        out = np.full((2, 10), np.nan, np.float32)
        Runner(prog, cache, arena, kernel)(x, *params, *([out] if prog is p1 else [out, out]))
        np.testing.assert_allclose(out, w4_reference(x, params), rtol=1e-5, atol=1e-5)


@needs_blas
def test_w4_like_chain_through_blas(cache, monkeypatch):
    _force_blas(monkeypatch)
    prog, arena = w4_program(2)
    x, params = w4_arrays(2)
    out = np.full((2, 10), np.nan, np.float32)
    Runner(prog, cache, arena)(x, *params, out)
    np.testing.assert_allclose(out, w4_reference(x, params), rtol=1e-5, atol=1e-5)


def test_threads_share_one_compiled_program(cache):
    """The entry keeps no state of its own: threads with their own arena and argument table
    call the same function concurrently and each gets its own result."""
    import threading
    prog, arena = w4_program(2)
    runners = [Runner(prog, cache, arena) for _ in range(4)]
    assert len({r.kernel.address for r in runners}) == 1
    x, params = w4_arrays(2)
    errors: list = []

    def work(t: int, run: Runner) -> None:
        xt = x * (t + 1)
        out = np.empty((2, 10), np.float32)
        for _ in range(50):
            out.fill(np.nan)
            run(xt, *params, out)
            if not np.allclose(out, w4_reference(xt, params), rtol=1e-5, atol=1e-5):
                errors.append(t)
                return
    threads = [threading.Thread(target=work, args=(t, r)) for t, r in enumerate(runners)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


# ---- text, key, names, validation --------------------------------------------------------
GOLDEN = """\
native program v3 n_args=3 blas_int_bits=64 inline_gemm_max=32768,1048576
gemm float32 m=2 n=4 k=3 a=arg0 lda=3 N b=arg1+8 ldb=3 T c=arena0 ldc=4 batch=2 strides=6,0,8
kernel {k} n=16 meta=[] in=[arena0, arena0] out=[arg2]
{k}:
  kernel rank=1
    %0 = input float32:contiguous
    %1 = input float32:contiguous
    %2 = float32 add(%0, %1)
    %3 = float32 relu(%2)
    return %3:float32"""


def _small_prog() -> NativeProgram:
    return NativeProgram((
        GemmStep(F32, 2, 4, 3, Ref("arg", 0), 3, False, Ref("arg", 1, 8), 3, True,
                 Ref("arena", 0), 4, batch=2, stride_a=6, stride_b=0, stride_c=8),
        KernelStep(ADD_RELU, (Ref("arena", 0), Ref("arena", 0)), (Ref("arg", 2),), 16)), 3)


def test_text_golden_and_key_stable():
    from scriptmod.codegen.llvm_ir import kernel_name
    prog = _small_prog()
    want = GOLDEN.format(k=kernel_name(ADD_RELU))
    assert prog.text() == want, "actual text:\n" + prog.text()
    assert prog.key() == _small_prog().key() and len(prog.key()) == 64
    assert render_program(prog).text == render_program(_small_prog()).text
    other = NativeProgram(prog.steps, 3, blas_int_bits=32)
    assert other.key() != prog.key()
    assert N.program_name(prog) == render_program(prog).name


def test_each_spec_rendered_once_and_internal():
    steps = tuple(KernelStep(ADD, (Ref("arg", 0), Ref("arg", 0)), (Ref("arg", 1),), 4)
                  for _ in range(3))
    text = render_program(NativeProgram(steps, 2), name="my_entry").text
    kernels = [ln for ln in text.splitlines() if ln.startswith("define internal void @sm_ew_")]
    assert len([ln for ln in kernels if ".body" not in ln]) == 1     # and its noalias body
    assert "define void @my_entry(ptr" in text


def test_lp64_blas_call_uses_i32():
    step = GemmStep(F64, 100, 100, 100, Ref("arg", 0), 100, False, Ref("arg", 1), 100, False,
                    Ref("arg", 2), 100)
    text = render_program(NativeProgram((step,), 3, blas_int_bits=32)).text
    assert "double 1.0" in text.replace("1.000000e+00", "1.0")
    assert "i32 100" in text and "i64 100" not in text.split("call void")[1].split("\n")[0]


@pytest.mark.parametrize("make,match", [
    (lambda: Ref("heap", 0), "space"),
    (lambda: Ref("arg", -1), "index"),
    (lambda: KernelStep(ADD, (Ref("arg", 0),), (Ref("arg", 1),), 4), "inputs"),
    (lambda: GemmStep(D.int32, 1, 1, 1, Ref("arg", 0), 1, False, Ref("arg", 0), 1, False,
                      Ref("arg", 0), 1), "dtype"),
    (lambda: GemmStep(F32, 2, 3, 4, Ref("arg", 0), 3, False, Ref("arg", 0), 3, False,
                      Ref("arg", 0), 3), "lda"),
    (lambda: GemmStep(F32, 2, 3, 4, Ref("arg", 0), 2, True, Ref("arg", 0), 2, False,
                      Ref("arg", 0), 3), "ldb"),
    (lambda: GemmStep(F32, 2, 3, 4, Ref("arg", 0), 4, False, Ref("arg", 0), 3, False,
                      Ref("arg", 0), 3, batch=0), "batch"),
    (lambda: NativeProgram((KernelStep(ADD, (Ref("arg", 0), Ref("arg", 5)),
                                       (Ref("arg", 1),), 4),), 2), "args\\[5\\]"),
    (lambda: NativeProgram((), 0, blas_int_bits=16), "blas_int_bits"),
])
def test_bad_programs_are_refused_with_a_clear_message(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_spec_without_layout_is_refused():
    spec = KernelSpec([InputSpec(F32)], [OpStep("neg", (0,), {}, F32)], [1], [F32])
    object.__setattr__(spec.inputs[0], "kind", "unknown")     # as lower_group leaves it
    with pytest.raises(ValueError, match="no layout"):
        KernelStep(spec, (Ref("arg", 0),), (Ref("arg", 1),), 4)


def test_strided_spec_needs_its_meta():
    spec = _spec([("add", (0, 1))], n_in=2, kinds=["contiguous", "strided"], rank=2)
    with pytest.raises(ValueError, match="meta must hold 4 ints"):
        KernelStep(spec, (Ref("arg", 0), Ref("arg", 1)), (Ref("arg", 2),), 6, (2, 3))


def test_kernel_pointers_are_noalias_and_need_no_overlap_checks():
    """A kernel's loops live in a ``noalias`` body (outputs never overlap inputs, see
    codegen.llvm_ir), so the vectorized loop runs without run-time overlap checks."""
    from scriptmod.codegen.llvm_ir import render_llvm
    from scriptmod.runtime.llvm_jit import _optimized
    spec = _spec([("add", (0, 1))], n_in=2, kinds=["contiguous", "strided"], rank=2)
    text = render_llvm(spec).text
    body = next(ln for ln in text.splitlines() if ln.startswith("define internal") and
                ".body" in ln)
    assert body.count("noalias") == 3                     # two inputs, one output
    optimized = str(_optimized(text)[0])
    assert "vector.body" in optimized and "vector.memcheck" not in optimized
