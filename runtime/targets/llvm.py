"""The CPU target: ``KernelSpec`` -> LLVM IR (``codegen.llvm_ir``) -> machine code
(``runtime.llvm_jit``: MCJIT, O3, disk cache) -> a ctypes call split over the thread pool.

    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> kernel = LLVM.compile(spec)
    >>> run = LLVM.caller(kernel, spec, meta=(), n=3, device=None)
    >>> x, y = np.zeros(3, np.float32), np.empty(3, np.float32)
    >>> run([x], [y]); y
    array([1., 1., 1.], dtype=float32)

Arrays are NumPy arrays; outputs are pooled by the launcher (``runtime.fusion.Launch``).
Kernel ABI: ``void k(i64 start, i64 end, void **ptrs, i64 *meta)`` (``codegen.llvm_ir``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.kernel import KernelSpec
from scriptmod.codegen.lower import can_lower
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType
from .. import pycode, threads
from ..llvm_jit import CompiledKernel, compile_spec

_i64_at = ctypes.c_int64.from_address
_get_ident = threading.get_ident
Run = Callable[[Sequence[Any], Sequence[Any]], None]


def _fast_pointers_work() -> bool:
    """Whether the data address can be read straight from the PyArrayObject (the field after
    the 16-byte object header): checked against NumPy's own interface on this build."""
    probe = np.arange(8.0)[3:]
    return _i64_at(id(probe) + 16).value == probe.__array_interface__["data"][0]


FAST_POINTERS = _fast_pointers_work()


class LLVMTarget:
    """Compile, load and launch kernels on the CPU (see the module docstring); the one target
    with every capability: native programs, our own GEMM, row kernels."""

    name = "LLVM"
    device_kind = "cpu"
    array_name = "a NumPy array"
    key_fields: tuple[str, ...] = ("dtype", "shape", "strides")   # a cached layout's key
    pools_outputs = True
    texts: tuple[str, ...] = ("llvm_ir", "asm")
    native_program = True
    own_gemm = True
    row_kernels = True

    @classmethod
    def can_lower(cls, node: Node) -> bool:
        """Whether codegen lowers ``node`` for the CPU (``codegen.lower.can_lower``)."""
        return can_lower(node, cls.device_kind)

    def compile(self, spec: KernelSpec) -> CompiledKernel:
        """The loaded kernel of ``spec`` (memory and disk cache of ``runtime.llvm_jit``);
        ``CompileBudgetError`` where it is over the compile-time budget (the fused group
        then runs its reference kernels)."""
        spec.require_layout()
        return compile_spec(spec, fallback=True)

    def text(self, what: str, kernel: CompiledKernel, spec: KernelSpec) -> str:
        """``llvm_ir`` or host ``asm`` of ``kernel``."""
        return kernel.llvm_ir if what == "llvm_ir" else kernel.asm

    # ---- guards: the device-specific part ------------------------------------------------------
    def admit(self, a: Any) -> np.ndarray | None:
        """``a`` as an array of this backend (a 0-d NumPy scalar becomes one), else None."""
        if isinstance(a, np.generic):
            a = np.asarray(a)
        return a if isinstance(a, np.ndarray) else None

    def place(self, a: np.ndarray, t: TensorType, where: str) -> np.ndarray:
        """A plain ndarray whose strides are whole elements and data aligned (copied if not)."""
        if type(a) is not np.ndarray:
            a = a.view(np.ndarray)
        if any(s % a.itemsize for s in a.strides) or not a.flags.aligned:
            a = np.ascontiguousarray(a)
        return a

    def device_of(self, arrays: Sequence[np.ndarray], name: str) -> None:
        """CPU arrays need no device."""
        return None

    # ---- launching -----------------------------------------------------------------------------
    def empty(self, device: None) -> Callable[[tuple[int, ...], np.dtype], np.ndarray]:
        """The output allocator (NumPy's: huge pages for big arrays)."""
        return np.empty

    def caller(self, kernel: CompiledKernel, spec: KernelSpec, meta: Sequence[int], n: int,
               device: None) -> Run:
        """``run(inputs, outputs)``: fill the pointer array, call the kernel over ``[0, n)``
        (elements, or rows of a row kernel; split over ``runtime.threads`` from ``MIN_SPLIT``
        elements). Arrays must have passed
        the guards: native code checks nothing."""
        meta_array = (ctypes.c_int64 * max(1, len(meta)))(*meta)
        ptr_type = ctypes.c_void_p * (len(spec.inputs) + len(spec.outputs))
        ptrs = ptr_type()
        make = _runner_factory(len(spec.inputs), len(spec.outputs))
        elements = n * (meta[spec.rank - 1] if spec.is_row else 1)   # a row kernel counts rows
        run = make(kernel.cfunc, n, ctypes.addressof(meta_array), ptrs, ctypes.addressof(ptrs),
                   ptr_type, _get_ident(), elements >= threads.MIN_SPLIT)
        run.keep = (kernel, meta_array)             # type: ignore[attr-defined]
        return run

    def __repr__(self) -> str:
        return "<LLVMTarget>"


LLVM = LLVMTarget()


def _runner_factory(n_in: int, n_out: int) -> Callable[..., Run]:
    """``make(fn, n, meta_addr, ptrs, ptrs_addr, ptr_type, owner, split) -> run``, generated
    for the arity with the pointer writes unrolled (a loop with a counter costs ~40 ns per
    array on a call of ~3 us). ``ptrs`` belongs to the thread that made it; another thread
    fills a private pointer array."""
    key = (n_in, n_out, FAST_POINTERS)
    factory = _FACTORIES.get(key)
    if factory is None:
        ins, outs = [f"a{i}" for i in range(n_in)], [f"o{i}" for i in range(n_out)]
        read = ("_i64_at(id({}) + 16).value" if FAST_POINTERS
                else '{}.__array_interface__["data"][0]')
        lines = ["def make(fn, n, meta_addr, ptrs, ptrs_addr, ptr_type, owner, split):",
                 "    def run(arrays, outs):",
                 "        if _get_ident() == owner:",
                 "            p, addr = ptrs, ptrs_addr",
                 "        else:",
                 "            p = ptr_type()",
                 "            addr = addressof(p)"]
        lines += [f"        {', '.join(ins)}, = arrays"] if ins else []
        lines += [f"        {', '.join(outs)}, = outs"] if outs else []
        lines += [f"        p[{i}] = {read.format(v)}" for i, v in enumerate(ins + outs)]
        lines += ["        if not split:",
                  "            fn(0, n, addr, meta_addr)",
                  "        elif threads.get_num_threads() > 1:",
                  "            threads.parallel_for(lambda lo, hi: fn(lo, hi, addr, meta_addr), n, 1)",
                  "        else:",
                  "            fn(0, n, addr, meta_addr)",
                  "    return run"]
        ns: dict[str, Any] = {"_get_ident": _get_ident, "_i64_at": _i64_at, "threads": threads,
                              "addressof": ctypes.addressof}
        exec(pycode.code("\n".join(lines) + "\n", "<scriptmod launcher>"), ns)
        factory = _FACTORIES[key] = ns["make"]
    return factory


_FACTORIES: dict[tuple[int, int, bool], Callable[..., Run]] = {}
