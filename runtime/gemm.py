"""Our float32 GEMM on the CPU (``codegen.gemm``): ``a @ b`` for 2-D float32 NumPy arrays, the
work split over the thread pool by blocks of C, with an optional fusion-group kernel applied
to each block while it is in cache (``epilogue``).

    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((37, 50), dtype=np.float32)
    >>> w = rng.standard_normal((45, 50), dtype=np.float32)
    >>> bool(np.allclose(matmul(a, w.T), a @ w.T, rtol=1e-5, atol=1e-5))
    True

When to use it (``preferred``): where it beats the BLAS NumPy runs. On an AVX-512 host whose
OpenBLAS runs an AVX2-or-older kernel (Zen 5 with OpenBLAS 0.3.31 runs its Haswell kernel),
our 8 x 32 zmm tiles run ~1.5x OpenBLAS's rate; elsewhere (an AVX2 host, or OpenBLAS's own
AVX-512 kernel) BLAS is as fast or faster and keeps the GEMM. ``SCRIPTMOD_GEMM=own|blas``
overrides that choice; ``auto`` (or unset) is the rule above. It is read when a
specialization is planned, so a change applies to specializations built after it.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache, partial
from typing import Any, Callable

import numpy as np

from scriptmod.codegen.gemm import MC, NC, PARAMS, name, render_gemm, workspace_floats
from scriptmod.codegen.microkernel import AVX512, AVX512_NARROW, Isa, host_isa
from scriptmod.ir.graph import Node
from scriptmod.ir import env
from . import threads as _threads
from .errors import worded
from .llvm_jit import CompiledKernel, compile_units, host
from .native import data_ptr

EP_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_void_p)
GEMM_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 8)
_UNIT = 64                    # ``parallel_for`` chunks at multiples of 64: one unit = 64
MIN_FLOPS = 1 << 24           # smaller products stay with BLAS or the native inline loops
MIN_THREAD_FLOPS = 1 << 22    # less work than this runs on the calling thread
CHOICES = ("auto", "own", "blas")


def choice() -> str:
    """``SCRIPTMOD_GEMM``: ``own``, ``blas`` or ``auto`` (default)."""
    return env.choice("SCRIPTMOD_GEMM", CHOICES, "auto")


def preferred() -> bool:
    """Whether large float32 GEMMs should run here rather than in BLAS (module docstring)."""
    c = choice()
    return c == "own" or (c == "auto" and _auto())


@lru_cache(maxsize=None)
def _auto() -> bool:
    from . import blas
    if host_isa(host()[2]).lanes < 16:
        return False
    return bool(blas.kernel_hint(host()[2], blas.kernel()))


def chosen(m: int, k: int, n: int) -> bool:
    """Whether an ``(m, k) @ (k, n)`` float32 GEMM runs here: ``MIN_FLOPS`` or more, on a
    host where ``preferred``. The planner and the executor's matmul steps ask this."""
    return 2 * m * k * n >= MIN_FLOPS and preferred()


def rows(a: Any, b: Any) -> np.ndarray | None:
    """``a`` as the 2-D ``(rows, K)`` operand ``matmul`` takes (a C-contiguous stack of rows
    is one matrix), or None: arrays it does not take (``supported``) or under ``MIN_FLOPS``."""
    if type(a) is not np.ndarray or a.ndim < 2:
        return None
    if a.ndim > 2:
        if not a.flags.c_contiguous:
            return None
        a = a.reshape(-1, a.shape[-1])
    if not supported(a, b) or 2 * a.shape[0] * a.shape[1] * b.shape[1] < MIN_FLOPS:
        return None
    return a


def matmul_step(fallback: Callable[[Any, Any], Any]) -> Callable[[list], Any]:
    """The executor's step for a matmul ``chosen`` at planning: ``matmul`` on the arrays
    ``rows`` takes (the result shaped as ``a @ b``), ``fallback(a, b)`` for the rest."""
    def step(args: list) -> Any:
        a, b = args
        a2 = rows(a, b)
        if a2 is None:
            return fallback(a, b)
        out = matmul(a2, b)
        return out if a2 is a else out.reshape(a.shape[:-1] + b.shape[1:])
    return step


def isa() -> Isa:
    """The host's register shape (``microkernel.host_isa``)."""
    return host_isa(host()[2])


def narrow_isa() -> Isa:
    """The host's register shape for products of at most 16 columns: one vector of columns
    on an AVX-512 host (``microkernel.AVX512_NARROW``), the AVX2 shape (16 columns) else."""
    shape = isa()
    return AVX512_NARROW if shape is AVX512 else shape


@lru_cache(maxsize=None)
def kernel(shape: Isa) -> tuple[Any, CompiledKernel]:
    """The compiled GEMM for ``shape``: its ctypes function and the ``CompiledKernel``."""
    k, = compile_units([(f"gemm f32\0{shape!r}", partial(render_gemm, shape), name(shape))])
    return GEMM_TYPE(k.address), k


def supported(a: Any, b: Any) -> bool:
    """Whether ``matmul`` takes these arrays: 2-D float32 NumPy arrays ``(M, K)`` and
    ``(K, N)``, no empty dim, element-aligned strides, ``a`` with unit column stride."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        return False
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim != 2 or b.ndim != 2:
        return False
    if a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
        return False
    return a.strides[1] == 4 and all(s % 4 == 0 for s in a.strides + b.strides)


class Epilogue:
    """A fusion-group kernel applied to each finished block of C: ``fn`` has
    ``codegen.llvm_ir``'s ABI ``(start, end, args, meta)`` over flat output indices, ``args``
    the address of its pointer table (C's data pointer among its inputs), ``meta`` of its
    shape and strides; the caller keeps all three alive for the call."""

    def __init__(self, fn: int, args: int, meta: int) -> None:
        self.fn, self.args, self.meta = fn, args, meta


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
           epilogue: Epilogue | None = None, threads: int | None = None,
           shape: Isa | None = None, accumulate: bool = False) -> np.ndarray:
    """``a @ b`` into ``out`` (a new C-contiguous array by default; without an epilogue any
    float32 ``(M, N)`` array with unit column stride, such as a column block of a larger
    matrix), then ``epilogue`` per block; ``accumulate``: ``out += a @ b``; ``threads=1``:
    the calling thread only; ``shape``: the register shape (default the host's, ``isa()``).
    Raises ``ValueError`` naming the arrays it does not take (``supported``)."""
    if not supported(a, b):
        raise worded(ValueError(f"gemm.matmul: expected float32 arrays a (M, K) with unit "
                                f"column stride and b (K, N), no empty dim; got a {_desc(a)}, "
                                f"b {_desc(b)}"), internal=True)   # the planner checked
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        if accumulate:
            raise worded(ValueError("gemm.matmul: accumulate needs an out array"),
                         internal=True)
        out = np.empty((M, N), np.float32)
    elif out.shape != (M, N) or out.dtype != np.float32 or not _writable_rows(out, epilogue):
        raise worded(ValueError(f"gemm.matmul: out must be a float32 ({M}, {N}) array with "
                                f"unit column stride (C-contiguous with an epilogue), got "
                                f"{_desc(out)}"), internal=True)
    shape = shape or isa()
    params, units = plan(M, N, K, a.strides[0] // 4, b.strides[0] // 4, b.strides[1] // 4,
                          out.strides[0] // 4, bool(accumulate))
    fn = kernel(shape)[0]
    floats = workspace_floats(shape)
    ep = (None, None, None) if epilogue is None else \
        (epilogue.fn, epilogue.args, epilogue.meta)
    pointers = (data_ptr(params), data_ptr(a), data_ptr(b), data_ptr(out))

    def run(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, *pointers, _threads.scratch(floats), *ep)
    if threads == 1 or 2 * M * N * K < MIN_THREAD_FLOPS or units < 2:
        run(0, units * _UNIT)
    else:
        _threads.parallel_for(run, units * _UNIT, min_split=0)
    return out


def _writable_rows(out: np.ndarray, epilogue: Epilogue | None) -> bool:
    """Whether the GEMM can write ``out``: rows of unit column stride at a row stride of
    whole elements, no smaller than a row (C-contiguous where an epilogue reads it by flat
    index)."""
    if epilogue is not None:
        return out.flags.c_contiguous
    return out.flags.writeable and out.strides[1] == 4 and out.strides[0] % 4 == 0 \
        and out.strides[0] // 4 >= out.shape[1]


@lru_cache(maxsize=256)
def plan(M: int, N: int, K: int, lda: int, bsk: int, bsn: int, ldc: int,
         acc: bool) -> tuple[np.ndarray, int]:
    """The GEMM's parameter array (``codegen.gemm.PARAMS``, read-only) and its number of
    units for these sizes and element strides (``acc``: add into C)."""
    nb = -(-N // NC)
    sizes = dict(M=M, N=N, K=K, lda=lda, bsk=bsk, bsn=bsn, ldc=ldc, NB=nb, ACC=int(acc))
    params = np.array([sizes[p] for p in PARAMS], np.int64)
    params.flags.writeable = False
    return params, -(-M // MC) * nb


def _desc(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} {tuple(a.shape)} strides {a.strides}"
    return type(a).__name__


# ---- a fusion group as the GEMM's epilogue ------------------------------------------------

def epilogue_source(group: Node) -> Any:
    """The ``runtime.epilogue.Source`` (kind ``gemm``) when the fusion group ``group`` can
    run as a matmul's epilogue (``Epilogue``): an elementwise group (no row ops) with one
    float32 CPU output of the matmul's static shape, reading the matmul's result once, the
    group its only user, in the same block; the matmul of a float32 ``(..., K)`` by a
    ``(K, N)`` matrix. The GEMM is then deferred to the group's place (nothing else reads
    its result)."""
    from .epilogue import Source, elementwise_group, f32_cpu
    if not elementwise_group(group):
        return None
    out = group.output.type
    for slot, v in enumerate(group.inputs):
        m = v.node
        if not m.is_op or m.op_name != "matmul" or m.attrs or len(v.uses) != 1 \
                or m.owning_block is not group.owning_block:
            continue
        a, b = (u.type for u in m.inputs)
        if not (f32_cpu(v.type) and f32_cpu(a) and f32_cpu(b)):
            continue
        if len(b.shape or ()) == 2 and len(a.shape or ()) >= 2 \
                and tuple(v.type.shape or ()) == tuple(out.shape or ()):
            return Source((m,), slot, "gemm")
    return None


def epilogue_step(slot: int, fk: Any, group: Callable[[list], list],
                  fallback: Callable[[list], Any]) -> Callable[[list], Any]:
    """The step of a GEMM and its epilogue group (``epilogue_source``), called with
    ``[a, b, *group inputs]`` (the group's input ``slot``, the product, a placeholder):
    ``matmul`` with the group's kernel applied per block of C where the arrays allow (``fk``
    the group's ``FusedKernel``, or None); else ``fallback([a, b])`` (the plain matmul
    step) and then ``group(inputs)``, the group's own step."""
    pools: dict[tuple, Any] = {}

    def step(args: list) -> Any:
        x, w, ins = args[0], args[1], list(args[2:])
        if fk is not None:
            out = _fused(fk, slot, x, w, ins, pools)
            if out is not None:
                return out
        ins[slot] = fallback([x, w])
        return group(ins)[0]
    return step


def _fused(fk: Any, slot: int, x: Any, w: Any, ins: list, pools: dict) -> Any:
    """The epilogue's output, or None where the arrays or the group's launch do not fit
    (then nothing was computed)."""
    from .epilogue import run_fused
    x2 = rows(x, w)
    if x2 is None:
        return None
    return run_fused(fk, slot, ins, (x2.shape[0], w.shape[1]), x.shape[:-1] + w.shape[1:],
                     pools, lambda c, ep: matmul(x2, w, c, ep))
