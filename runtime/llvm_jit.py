"""Compile LLVM IR text to native code with llvmlite (MCJIT) and load it.

New pass builder at O3 (loop + SLP vectorization) for the host CPU name and features; the
object code goes through ``runtime.kernel_cache`` so that a second process compiles nothing.
Calling a kernel is the LLVM backend's job (``runtime.backends.llvm``, through the one
launcher ``runtime.fusion.Launch``); this module only makes the function pointer.

    >>> import ctypes
    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.codegen.llvm_ir import render_llvm
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> k = compile_llvm(render_llvm(spec))
    >>> x = np.zeros(5, np.float32); out = np.empty_like(x)
    >>> ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    >>> k.cfunc(0, out.size, ctypes.addressof(ptrs), None); out      # ABI: see codegen.llvm_ir
    array([1., 1., 1., 1., 1.], dtype=float32)
    >>> "zmm" in k.asm                  # AVX-512 registers: on such hosts only   # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import threading
import time
from functools import lru_cache
from typing import Callable
import llvmlite
import llvmlite.binding as llvm
from scriptmod.codegen.kernel import KernelSpec
from scriptmod.codegen.llvm_ir import LLVMKernel, render_llvm
from scriptmod.ir import log as irlog
from .kernel_cache import KernelCache, cache_key, undefined_symbols

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.c_void_p)
CACHE = KernelCache()
_lock = threading.RLock()


class UnresolvedSymbolError(RuntimeError):
    """Object code needs symbols this process cannot resolve (calling it would crash)."""


@lru_cache(maxsize=None)
def host() -> tuple[str, str, str]:
    """(triple, cpu name, cpu features) of this machine; initializes LLVM once."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _add_libc_symbols()
    return (llvm.get_process_triple(), llvm.get_host_cpu_name(),
            llvm.get_host_cpu_features().flatten())


def _add_libc_symbols() -> None:
    """O3's loop-idiom pass turns store/copy loops into ``memset``/``memcpy``/``memmove``
    calls (a bool kernel of one element did); MCJIT resolves them from this process's libc."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:      # no process handle on this platform: such kernels stay unresolved
        return
    for name in ("memset", "memcpy", "memmove"):
        if not llvm.address_of_symbol(name) and hasattr(libc, name):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)


def target_machine() -> llvm.TargetMachine:
    """A fresh host target machine (an MCJIT engine takes ownership of its own)."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


def optimize(text: str) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify and optimize IR text at O3 for the host; returns (module, tm)."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = target_machine()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod, tm


def compile_object(text: str) -> bytes:
    """Optimized object code (ELF) for IR ``text``."""
    mod, tm = optimize(text)
    return tm.emit_object(mod)


def unresolved(obj: bytes) -> list[str]:
    """Undefined symbols of ``obj`` that this process cannot resolve."""
    host()                                   # registers libc's memset & co. first
    return [s for s in undefined_symbols(obj) if not llvm.address_of_symbol(s)]


class CompiledKernel:
    """A loaded kernel: its function pointer (``address``, ctypes ``cfunc`` of the kernel
    ABI ``KERNEL_TYPE``) and, for inspection, ``llvm_ir`` and ``asm``."""

    def __init__(self, name: str, llvm_ir: str, engine: llvm.ExecutionEngine,
                 address: int) -> None:
        self.name, self.llvm_ir = name, llvm_ir
        self._engine = engine                       # keeps the code alive
        self.address = address
        self.cfunc = KERNEL_TYPE(address)
        self._asm: str | None = None

    @property
    def asm(self) -> str:
        """Host assembly of the optimized kernel (recompiled on first use)."""
        if self._asm is None:
            if not self.llvm_ir and "_render" in self.__dict__:   # loaded by compile_cached
                self.llvm_ir = self.__dict__.pop("_render")()
            mod, tm = optimize(self.llvm_ir)
            self._asm = tm.emit_assembly(mod)
        return self._asm


def _load(name: str, text: str, obj: bytes) -> CompiledKernel:
    missing = unresolved(obj)
    if missing:
        raise UnresolvedSymbolError(f"kernel {name}: unresolved symbols {missing}")
    tm = target_machine()
    empty = llvm.parse_assembly("")
    empty.triple = tm.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    address = engine.get_function_address(name)
    if not address:
        raise UnresolvedSymbolError(f"kernel {name}: function not found in object code")
    return CompiledKernel(name, text, engine, address)


def compile_ir(text: str, name: str, cache: KernelCache = CACHE) -> CompiledKernel:
    """Compile (or fetch from the memory or disk cache) the function ``name`` of IR ``text``."""
    return _cached(cache_key(text, *host(), llvmlite.__version__), name, lambda: text, text,
                   cache)


def _cached(key: str, name: str, render: Callable[[], str], loaded_text: str,
            cache: KernelCache) -> CompiledKernel:
    """The kernel under ``key``: from memory, else from disk (a corrupt or unloadable entry
    is discarded), else built from ``render()`` and stored. ``loaded_text`` is the IR a disk
    hit carries ("" when it renders only on demand, see ``compile_cached``)."""
    with _lock:
        hit = cache.lookup(key)
        if hit is not None:
            return hit
        obj = cache.load_object(key)
        kernel = None
        if obj is not None:
            try:
                kernel = _load(name, loaded_text, obj)
            except (UnresolvedSymbolError, ValueError, RuntimeError) as exc:
                cache.discard(key, str(exc))
            else:
                if not loaded_text:
                    kernel.__dict__["_render"] = render
        if kernel is None:
            kernel = _build(name, render(), key, cache)
        cache.remember(key, kernel)
        return kernel


def _build(name: str, text: str, key: str, cache: KernelCache) -> CompiledKernel:
    t0 = time.perf_counter()
    obj = compile_object(text)
    cache.count("compiles")
    kernel = _load(name, text, obj)       # raises before anything bad reaches the disk
    cache.store_object(key, obj)
    irlog.log("codegen", f"compiled {name} in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    return kernel


def compile_llvm(kernel: LLVMKernel, cache: KernelCache = CACHE) -> CompiledKernel:
    """Compile a rendered kernel (``codegen.llvm_ir.render_llvm``)."""
    return compile_ir(kernel.text, kernel.name, cache)


def compile_spec(spec: KernelSpec, cache: KernelCache = CACHE) -> CompiledKernel:
    """Render and compile a ``KernelSpec``."""
    return compile_llvm(render_llvm(spec), cache)


def compile_cached(key_text: str, render: Callable[[], str], name: str,
                   cache: KernelCache = CACHE) -> CompiledKernel:
    """``compile_ir`` keyed by ``key_text`` (a stable description of what ``render()``
    produces, e.g. a ``NativeProgram``'s text) salted with the code generator's own source:
    a memory or disk hit loads the object without rendering any IR (a warm start skips
    codegen entirely; ``llvm_ir`` of such a kernel renders on first access)."""
    key = cache_key("compile_cached\0" + key_text + _codegen_salt(), *host(),
                    llvmlite.__version__)
    return _cached(key, name, render, "", cache)


@lru_cache(maxsize=None)
def _codegen_salt() -> str:
    """sha256 of the code generator's sources: a changed generator never reuses objects
    keyed by what they were generated from."""
    import hashlib
    from pathlib import Path
    import scriptmod.codegen as codegen
    h = hashlib.sha256()
    for folder in codegen.__path__:
        for path in sorted(Path(folder).glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()
