"""Every index, count and offset in native code is 64-bit (issue 17), checked cheaply: the
emitted IR/C of each kernel family does its index math in i64 / ``long long``, kernels run
at element and row indices above 2^32 (their pointers shifted back so that only the indexed
elements are real memory: a truncated index would address far outside the buffer), the
thread split covers ``n = 3 * 2^31`` exactly, and a GEMM whose sizes exceed a 32-bit BLAS's
int is refused rather than truncated. The same families on real tensors above 2^31
elements: ``tests/fuzz/test_big_tensors.py`` (``--long``)."""
from __future__ import annotations

import ctypes
import mmap
import re

import numpy as np
import pytest

from scriptmod.codegen.c_source import CUDA, render_c
from scriptmod.codegen.kernel import UNKNOWN, Imm, InputSpec, KernelSpec, OpStep
from scriptmod.codegen.llvm_ir import render_llvm
from scriptmod.codegen.lower import plan_layout
from scriptmod.codegen.native import (GemmStep, NativeProgram, Ref, blas_overflow,
                                      render_program)
from scriptmod.codegen.rows import lower_row_group, plan_row_layout
from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.runtime import threads
from scriptmod.runtime.targets import LLVM
from scriptmod.runtime.llvm_jit import KERNEL_TYPE

BIG = 1 << 32                  # a first index that no 32-bit integer holds
F32 = D.float32


# ---- the kernel families, laid out for shapes no test allocates ------------------------------

def _elementwise(shape, strides_b):
    """``y = exp(a) * b + 1`` over ``shape``: ``a`` contiguous, ``b`` with ``strides_b``."""
    spec = KernelSpec([InputSpec(F32, UNKNOWN), InputSpec(F32, UNKNOWN)],
                      [OpStep("exp", (0,), {}, F32), OpStep("mul", (2, 1), {}, F32),
                       OpStep("add", (3, Imm(1.0, F32)), {}, F32)],
                      [4], [F32], rank=len(shape))
    c = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    return plan_layout(spec, [shape, shape], [c, strides_b], shape)


def _copy(shape, strides):
    """A permute copy: one strided input stored C-ordered (``runtime.native``'s copy step)."""
    spec = KernelSpec([InputSpec(D.int8, UNKNOWN)], [], [0], [D.int8], rank=len(shape))
    return plan_layout(spec, [shape], [strides], shape)


def _rows(rows, cols):
    """``softmax`` and ``sum`` over rows of ``cols`` floats."""
    sub = parse(f"""graph(%x : Float({rows}, {cols})):
  %y : Float({rows}, {cols}) = sm::softmax[dim=-1](%x)
  %s : Float({rows}) = sm::sum[dim=[-1], keepdim=0](%x)
  return (%y, %s)
""")
    return plan_row_layout(lower_row_group(sub), [(rows, cols)], [(cols, 1)], (rows, cols))


FAMILIES = {
    "elementwise": lambda: _elementwise((BIG + 8,), (1,)),
    "broadcast": lambda: _elementwise((BIG // 4, 8), (0, 1)),
    "strided": lambda: _elementwise((8, BIG // 4), (1, 8)),
    "permute copy": lambda: _copy((BIG // 8, 16), (1, BIG // 8)),
    "rows": lambda: _rows(BIG // 64, 128),
}


# ---- the emitted text -------------------------------------------------------------------------

_GEP = re.compile(r"getelementptr (?:inbounds )?[^,]+, ptr %?[\w.\"]+((?:, i\d+ [^,]+)+)")


def _index_types(text: str) -> set[str]:
    """The integer types of every ``getelementptr`` index in LLVM IR ``text``."""
    found = set()
    for m in _GEP.finditer(text):
        found |= set(re.findall(r", (i\d+) ", m.group(1) + " "))
    return found


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_llvm_kernel_indexes_in_i64(family):
    spec, _ = FAMILIES[family]()
    text = render_llvm(spec).text
    assert _index_types(text) == {"i64"}, _index_types(text)
    assert not re.search(r"phi i(8|16|32) ", text), "a loop counter narrower than i64"
    assert re.search(r"define void @\S+\(i64 %\S*, i64 %\S*, ptr", text)


def test_kernel_abi_passes_start_and_end_as_int64():
    assert KERNEL_TYPE._argtypes_[:2] == (ctypes.c_int64, ctypes.c_int64)


@pytest.mark.parametrize("family", ["elementwise", "broadcast", "strided", "permute copy"])
def test_cuda_source_indexes_in_long_long(family):
    src = render_c(FAMILIES[family]()[0], CUDA).text
    body = src[src.index("__global__"):]
    assert "for (long long i = (long long)blockIdx.x * blockDim.x" in body
    assert "long long n" in body
    # every index variable the kernel declares is a long long
    declared = re.findall(r"\b(\w[\w ]*?) (i|rem|c\d+|off\d+) = ", body)
    assert declared and all(t.endswith("long long") for t, _ in declared), declared


def test_gemm_wrapper_passes_64_bit_sizes():
    g = GemmStep(F32, m=2, n=(1 << 31) + 3, k=4, a=Ref("arg", 0), lda=4, trans_a=False,
                 b=Ref("arg", 1), ldb=(1 << 31) + 3, trans_b=False, c=Ref("arg", 2),
                 ldc=(1 << 31) + 3)
    text = render_program(NativeProgram((g,), n_args=3, blas_int_bits=64)).text
    assert "i64 2147483651" in text and "i32 2147483651" not in text
    assert _index_types(text) <= {"i64"}


def test_gemm_too_big_for_a_32_bit_blas_is_refused():
    g = GemmStep(F32, m=2, n=1 << 31, k=4, a=Ref("arg", 0), lda=4, trans_a=False,
                 b=Ref("arg", 1), ldb=1 << 31, trans_b=False, c=Ref("arg", 2), ldc=1 << 31)
    with pytest.raises(ValueError, match=r"32-bit BLAS integer cannot hold n=2147483648"):
        NativeProgram((g,), n_args=3, blas_int_bits=32)
    assert blas_overflow({"m": 2, "n": 1 << 31, "k": 4}, 32) == "n=2147483648"
    assert blas_overflow({"m": 2, "k": (1 << 31) - 1, "batch": 1}, 32) is None
    assert blas_overflow({"ldc": 1 << 40}, 64) is None


def test_inline_gemm_indexes_in_i64():
    g = GemmStep(D.float64, m=4, n=4, k=4, a=Ref("arg", 0), lda=4, trans_a=True,
                 b=Ref("arg", 1), ldb=4, trans_b=True, c=Ref("arg", 2), ldc=4, batch=3,
                 stride_a=16, stride_b=16, stride_c=16)
    assert g.inline
    text = render_program(NativeProgram((g,), n_args=3)).text
    assert _index_types(text) == {"i64"}
    assert "define linkonce_odr void @sm_gemm_float64_TT(ptr noalias" in text
    assert re.search(r"sm_gemm_float64_TT\(ptr noalias %\S+, ptr noalias %\S+, ptr noalias "
                     r"%\S+, i64 %\S+, i64", text)


# ---- kernels run at indices above 2^32 --------------------------------------------------------

def _run(spec, meta, start, arrays, shifts):
    """Run ``spec``'s kernel over ``[start, start + len)``, each array's pointer moved back
    by its shift (in elements): the kernel must index it at ``shift`` and beyond."""
    kernel = LLVM.compile(spec)
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data - s * a.itemsize
                                             for a, s in zip(arrays, shifts)])
    meta_arr = (ctypes.c_int64 * max(1, len(meta)))(*meta)
    n = arrays[-1].shape[0]
    kernel.cfunc(start, start + n, ctypes.addressof(ptrs), ctypes.addressof(meta_arr))


def test_elementwise_kernel_at_flat_index_above_2_32():
    spec, meta = FAMILIES["elementwise"]()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 8)).astype(np.float32)
    out = np.zeros(8, np.float32)
    _run(spec, meta, BIG, [a, b, out], [BIG] * 3)
    np.testing.assert_allclose(out, np.exp(a) * b + 1, rtol=1e-6, atol=1e-6)


def test_broadcast_kernel_at_row_above_2_32():
    """Two rows of 8, one on each side of element 2^32 (the odometer carries there): the
    broadcast input (strides 0, 1) reads the same 8 values for each row."""
    spec, meta = FAMILIES["broadcast"]()
    assert spec.strided, "the broadcast input must take the strided (odometer) path"
    rng = np.random.default_rng(1)
    a = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    out = np.zeros(16, np.float32)
    start = BIG - 8
    _run(spec, meta, start, [a, b, out], [start, 0, start])
    np.testing.assert_allclose(out, np.exp(a) * np.tile(b, 2) + 1, rtol=1e-6, atol=1e-6)


def test_permute_copy_at_offsets_above_2_32():
    """``x.T`` copied, ``x`` of (16, R) int8 with R = 2^28 + 1: output row ``r`` reads input
    offsets ``r + c * R``; for the last rows those pass 2^31 from ``c = 8`` and 2^32 at
    ``c = 15``. The source is an anonymous mapping of 4 GiB that only the bytes read touch
    (pages are committed lazily)."""
    rows = (1 << 28) + 1
    spec, meta = _copy((rows, 16), (1, rows))
    try:
        src_map = mmap.mmap(-1, 16 * rows)
    except (OSError, OverflowError) as e:
        pytest.skip(f"no 4 GiB of address space to map: {e}")
    try:
        src = np.frombuffer(src_map, np.int8).reshape(16, rows)
        r0 = rows - 2                     # the last two output rows
        src[:, r0:] = np.arange(32, dtype=np.int8).reshape(16, 2) + 1
        assert r0 + 15 * rows > 1 << 32
        out = np.zeros(32, np.int8)
        _run(spec, meta, r0 * 16, [src.reshape(-1), out], [0, r0 * 16])
        np.testing.assert_array_equal(out.reshape(2, 16), src[:, r0:].T)
        del src
    finally:
        src_map.close()


def test_row_kernel_at_row_above_2_32_elements():
    """Rows of 128 from row 2^26 (element 2^33): softmax and the per-row sum."""
    spec, meta = FAMILIES["rows"]()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 128)).astype(np.float32)
    y = np.zeros((2, 128), np.float32)
    s = np.zeros(2, np.float32)
    r0 = BIG // 64 - 2
    kernel = LLVM.compile(spec)
    ptrs = (ctypes.c_void_p * 3)(x.ctypes.data - r0 * 128 * 4, y.ctypes.data - r0 * 128 * 4,
                                 s.ctypes.data - r0 * 4)
    meta_arr = (ctypes.c_int64 * len(meta))(*meta)
    kernel.cfunc(r0, r0 + 2, ctypes.addressof(ptrs), ctypes.addressof(meta_arr))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(s, x.astype(np.float64).sum(-1), rtol=1e-5)


# ---- the thread split --------------------------------------------------------------------------

@pytest.mark.parametrize("parts", [1, 2, 3, 8, 64])
def test_split_covers_n_above_2_32(parts):
    n = 3 * (1 << 31) + 5
    chunks = threads.split(n, parts)
    assert chunks[0][0] == 0 and chunks[-1][1] == n and len(chunks) <= parts
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(chunks, chunks[1:]))
    assert all(lo % threads.ALIGN == 0 for lo, _ in chunks)
    assert max(hi for _, hi in chunks) > 1 << 32


def test_parallel_for_hands_out_64_bit_ranges():
    n = 3 * (1 << 31)
    seen = []
    before = threads.get_num_threads()
    try:
        threads.set_num_threads(2)
        threads.parallel_for(lambda lo, hi: seen.append((lo, hi)), n, 1)
    finally:
        threads.set_num_threads(before)
    seen.sort()
    assert seen[0][0] == 0 and seen[-1][1] == n
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(seen, seen[1:]))


def test_launch_counts_elements_and_rows_in_64_bits():
    from scriptmod.runtime.fusion import Launch
    spec, meta = FAMILIES["elementwise"]()
    assert Launch(LLVM, LLVM.compile(spec), spec, meta, (3, 1 << 31)).n == 3 << 31
    rspec, rmeta = FAMILIES["rows"]()
    launch = Launch(LLVM, LLVM.compile(rspec), rspec, rmeta, (BIG // 64, 128),
                    out_shapes=[(BIG // 64, 128), (BIG // 64,)])
    assert launch.n == BIG // 64


@pytest.mark.parametrize("bits", [32, 64])
def test_planner_keeps_too_big_gemms_away_from_a_32_bit_blas(bits, monkeypatch):
    """``k = 2^31`` fits an ILP64 BLAS (the GEMM is native) but not an LP64 one (it runs in
    Python, where NumPy splits it), planned from static shapes: nothing is allocated."""
    from scriptmod.ir import parse
    from scriptmod.runtime import blas, native
    found = blas.cblas()
    if found is None:
        pytest.skip("no CBLAS in this NumPy")
    monkeypatch.setattr(blas, "cblas", lambda: blas.Blas(found.sgemm, found.dgemm, bits,
                                                         found.source))
    monkeypatch.setenv("SCRIPTMOD_GEMM", "blas")     # (else runtime.gemm takes it here)
    k = 1 << 31
    g = parse(f'''graph(%x : Float(2, {k}), %w : Float({k}, 2)):
      %y : Float(2, 2) = sm::matmul(%x, %w)
      return (%y)
    ''')
    plans = native.plan_blocks(g, None)
    steps = [s for plan in plans.values() for seg in plan.segments
             for s in seg.program.steps]
    if bits == 32:
        assert steps == []
    else:
        assert len(steps) == 1 and steps[0].k == k and "i64 2147483648" in \
            plans[g.block].segments[0].llvm_ir
