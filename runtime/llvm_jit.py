"""Compile LLVM IR text to native code with llvmlite (MCJIT) and load it.

New pass builder at O3 (loop + SLP vectorization; interleaving and unrolling where the IR
asks, see ``PIPELINE``) for the host CPU name and features; the object code goes through
``runtime.kernel_cache`` so that a second process compiles nothing.

Two ways in: ``compile_units(units)`` compiles a list of units ``(key_text, render, name)``
(``spec_unit`` and ``ir_unit`` make them; a specialization's segments and kernels, our GEMM,
an optimizer's update) as one module, and ``compile_spec(spec)`` one laid-out kernel spec
(the fused kernels of ``runtime.targets.llvm``). Calling a kernel is the LLVM target's job
(through the one launcher ``runtime.fusion.Launch``); this module only makes the function
pointer.

    >>> import ctypes
    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> k = compile_spec(spec)
    >>> x = np.zeros(5, np.float32); out = np.empty_like(x)
    >>> ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    >>> k.cfunc(0, out.size, ctypes.addressof(ptrs), None); out      # ABI: see codegen.llvm_ir
    array([1., 1., 1., 1., 1.], dtype=float32)
    >>> "zmm" in k.asm                  # AVX-512 registers: on such hosts only   # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterator, Sequence, TypeVar
import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi, newpassmanagers
from scriptmod.codegen.kernel import KernelSpec
from scriptmod.codegen.llvm_ir import kernel_name, render_llvm
from scriptmod.ir import log as irlog
from .kernel_cache import KernelCache, cache_key, undefined_symbols

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.c_void_p)
CACHE = KernelCache()
_lock = threading.RLock()
_T = TypeVar("_T")


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
    calls (a bool kernel of one element did), and ``frem`` (the exact fmod of remainder's
    rare path, ``codegen.formulas``) becomes ``fmod``/``fmodf``, and ``llvm.fma`` (vmath's
    exact products) ``fma`` on a host without FMA instructions; MCJIT resolves them from
    this process's C library."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:      # no process handle on this platform: such kernels stay unresolved
        return
    for name in ("memset", "memcpy", "memmove", "fmod", "fmodf", "fma"):
        if not llvm.address_of_symbol(name) and hasattr(libc, name):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)


def target_machine() -> llvm.TargetMachine:
    """A fresh host target machine (an MCJIT engine takes ownership of its own)."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


def _optimized(text: str) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify and optimize IR text for the host (``PIPELINE``); returns (module, tm)
    (the module in an LLVM context of its own, freed after it: see ``parsed``). For tests
    that read the optimized IR."""
    mod = llvm.parse_assembly(text, llvm.create_context())
    tm = _optimize_module(mod, max(speed_level(text)[0], 1))
    return mod, tm


@contextmanager
def parsed(*texts: str) -> Iterator[llvm.ModuleRef]:
    """The module of IR ``texts`` linked into one, in an LLVM context of its own; both are
    freed on exit. (The process-wide context keeps every constant, type and metadata node
    any module ever created: about 2.5 KiB more per kernel compiled, never returned.)"""
    context = llvm.create_context()
    try:
        mod = llvm.parse_assembly(texts[0], context)
        try:
            for text in texts[1:]:
                mod.link_in(llvm.parse_assembly(text, context))
            yield mod
        finally:
            mod.close()
    finally:
        context.close()


# Compile-time budget. LLVM cannot be stopped inside a pass, so the level is chosen up front
# from the predicted cost: the instructions of the module's largest function, as O3's time
# grows faster than linearly in one loop body (8-op groups of float64 erf/pow, ~1,500
# instructions after ``codegen.llvm_emit``'s interleave cap, take 0.3-0.6 s). Above
# O3_MAX_INSTRUCTIONS a module gets O2; above O2_MAX_INSTRUCTIONS a fusion group runs its
# reference kernels (``CompileBudgetError``, caught by ``runtime.fusion``), and anything
# else gets O1 (no vectorization). The choice, the cost and the time taken are logged
# under ``SCRIPTMOD_LOG=codegen``.
O3_MAX_INSTRUCTIONS = 6000
O2_MAX_INSTRUCTIONS = 15000


class CompileBudgetError(RuntimeError):
    """A kernel predicted to compile too long at O2: its caller runs reference kernels."""


def predicted_cost(*texts: str) -> int:
    """Instructions in the largest function of the LLVM IR ``texts`` (each line of a
    function body that is not a label, ``}`` or blank)."""
    largest = count = 0
    for text in texts:
        for line in text.splitlines():
            if line.startswith("define "):
                count = 0
            elif line.startswith("  ") and line.strip():
                count += 1
                largest = max(largest, count)
    return largest


def speed_level(*texts: str) -> tuple[int, int]:
    """(optimization level, predicted cost) of a module of ``texts``: 3, 2, or 0 where it is
    over every budget (a fusion group falls back to its reference kernels, anything else
    compiles at O1).

        >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
        >>> from scriptmod.ir import dtypes as D
        >>> erfs = [OpStep("erf", (k,), {}, D.float64) for k in range(8)]
        >>> speed_level(render_llvm(KernelSpec([InputSpec(D.float64)], erfs, [8], [D.float64],
        ...                                    rank=1)).text)         # doctest: +ELLIPSIS
        (3, ...)
    """
    cost = predicted_cost(*texts)
    return (3 if cost <= O3_MAX_INSTRUCTIONS else 2 if cost <= O2_MAX_INSTRUCTIONS else 0), cost


def _optimize_module(mod: llvm.ModuleRef, level: int = 3) -> llvm.TargetMachine:
    """Verify and optimize a parsed module in place; returns its target machine.

    O3 with loop and SLP vectorization, but LLVM interleaves and unrolls loops only where
    the IR asks for it (``llvm.loop.interleave.count`` hints: the LONG-op kernels and the
    inline GEMM's dot product, where they pay): on the short, memory-bound loops of a
    native segment they bought nothing, and cost a third of the compile time (W5: 335 ->
    225 ms of LLVM over its 8 modules). Everything made for the run is freed after it
    (``_free_pass_manager``)."""
    mod.verify()
    tm = target_machine()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2
    pto.slp_vectorization = level >= 2
    pto.loop_interleaving = False          # forced counts (loop metadata) still apply
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()        # one run only: the inliner pass moves its passes
    try:
        with _no_remarks():
            mpm.run(mod, pb)
    finally:
        _free_pass_manager(mpm)
        pb.close()
        pto.close()
    return tm


def _free_pass_manager(mpm: llvm.ModulePassManager) -> None:
    """Delete a pass manager and its passes: in llvmlite 0.50 ``ModulePassManager.close()``
    frees nothing, as ``ObjectRef._dispose`` (a no-op) precedes ``NewPassManager._dispose`` in
    its MRO, and the O3 pipeline's passes (about 30 KiB, 64 KiB after a run) leaked at every
    compile. What still leaks is llvmlite's own: the ``PassInstrumentationCallbacks`` that
    ``LLVMPY_CreatePassBuilder`` allocates and nothing deletes, 1.4 KiB per compile. A pass
    builder is not shared to save it: every run registers callbacks into it that point at
    that run's objects, which later runs would call."""
    if type(mpm)._dispose is ffi.ObjectRef._dispose:
        newpassmanagers.NewPassManager._dispose(mpm)
        mpm.detach()
    else:                                   # an llvmlite whose close() frees it
        mpm.close()


_STDERR_LOCK = threading.Lock()


@contextmanager
def _no_remarks() -> Iterator[None]:
    """Drop LLVM's "remark: loop not vectorized" lines, which its default diagnostic handler
    writes to the process's stderr for a hinted loop (``llvm.loop.vectorize.width``) that one
    of the vectorizer's attempts refused, even when the loop ends up vectorized (the row
    kernels' float64 sums, checked in their assembly); anything else LLVM writes passes."""
    with _STDERR_LOCK:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):           # no real fd 2 (embedded interpreters)
            yield
            return
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                rest = [ln for ln in tmp.read().decode(errors="replace").splitlines(True)
                        if not ln.startswith("remark:")]
                if rest:
                    sys.stderr.write("".join(rest))


# Part of every cache key: a changed pipeline never reuses objects built by another one.
PIPELINE = "O3 vectorize=loop,slp interleave=hinted unroll=hinted"


def _object_code(text: str) -> bytes:
    """Optimized object code (ELF) for IR ``text``, not loaded nor cached (tests read its
    symbols and time it)."""
    return _emitted(text, llvm.TargetMachine.emit_object)


def _emitted(text: str, emit: Callable[[llvm.TargetMachine, llvm.ModuleRef], _T]) -> _T:
    """``emit(tm, module)`` of IR ``text`` optimized as a compile would (object or asm)."""
    with parsed(text) as mod:
        return emit(_optimize_module(mod, max(speed_level(text)[0], 1)), mod)


def unresolved(obj: bytes) -> list[str]:
    """Undefined symbols of ``obj`` that this process cannot resolve."""
    host()                                   # registers libc's memset & co. first
    return [s for s in undefined_symbols(obj) if not llvm.address_of_symbol(s)]


class CompiledKernel:
    """A loaded kernel: its function pointer (``address``, ctypes ``cfunc`` of the kernel
    ABI ``KERNEL_TYPE``) and, for inspection, ``llvm_ir`` and ``asm`` (``llvm_ir`` may be
    given as a function that renders it: a kernel loaded from the disk cache renders its IR
    only when someone reads it)."""

    def __init__(self, name: str, llvm_ir: str | Callable[[], str],
                 engine: llvm.ExecutionEngine, address: int) -> None:
        self.name = name
        self._ir = llvm_ir
        self._engine = engine                       # keeps the code alive
        self.address = address
        self.cfunc = KERNEL_TYPE(address)
        self._asm: str | None = None

    @property
    def llvm_ir(self) -> str:
        """The LLVM IR the kernel was compiled from (rendered on first use if need be)."""
        if not isinstance(self._ir, str):
            self._ir = self._ir()
        return self._ir

    @property
    def asm(self) -> str:
        """Host assembly of the optimized kernel (recompiled on first use)."""
        if self._asm is None:
            self._asm = _emitted(self.llvm_ir, llvm.TargetMachine.emit_assembly)
        return self._asm

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.name} at {self.address:#x}>"


Unit = tuple[str, Callable[[], str], str]
"""What ``compile_units`` compiles: ``(key_text, render, name)``: a stable description of
what ``render()`` produces (e.g. a ``NativeProgram``'s text, a spec's text), the function
that renders its LLVM IR, and the name of the function it defines."""


def _engine(obj: bytes, what: str) -> llvm.ExecutionEngine:
    """An MCJIT engine holding ``obj`` (its symbols checked first: calling code that needs a
    symbol this process lacks would crash)."""
    missing = unresolved(obj)
    if missing:
        raise UnresolvedSymbolError(f"kernel {what}: unresolved symbols {missing}")
    tm = target_machine()
    empty = llvm.parse_assembly("")
    empty.triple = tm.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine


def _load(names: Sequence[str], texts: Sequence[str | Callable[[], str]],
          obj: bytes) -> list[CompiledKernel]:
    """The functions ``names`` of ``obj``, loaded by one engine they share."""
    engine = _engine(obj, ", ".join(names))
    out = []
    for name, text in zip(names, texts):
        address = engine.get_function_address(name)
        if not address:
            raise UnresolvedSymbolError(f"kernel {name}: function not found in object code")
        out.append(CompiledKernel(name, text, engine, address))
    return out


def _key(text: str) -> str:
    return cache_key(text, *host(), f"{llvmlite.__version__} {PIPELINE}")


def _cached(key: str, name: str, render: Callable[[], str],
            loaded: str | Callable[[], str], cache: KernelCache,
            fallback: bool = False) -> CompiledKernel:
    """The kernel under ``key``: from memory, else from disk (a corrupt or unloadable entry
    is discarded), else built from ``render()`` and stored. ``loaded`` is the IR a disk hit
    carries (``render`` itself: a disk hit renders its IR only on demand)."""
    with _lock:
        hit = cache.lookup(key)
        if hit is not None:
            return hit
        kernel, = _from_disk(key, [name], [loaded], cache) or _build(key, [name], [render],
                                                                     cache, fallback)
        cache.remember(key, kernel)
        return kernel


def _from_disk(key: str, names: Sequence[str], texts: Sequence[str | Callable[[], str]],
               cache: KernelCache) -> list[CompiledKernel] | None:
    obj = cache.load_object(key)
    if obj is None:
        return None
    try:
        return _load(names, texts, obj)
    except (UnresolvedSymbolError, ValueError, RuntimeError) as exc:
        cache.discard(key, str(exc))
        return None


def _build(key: str, names: Sequence[str], renders: Sequence[Callable[[], str]],
           cache: KernelCache, fallback: bool = False) -> list[CompiledKernel]:
    """Render, link into one module, optimize and emit once, load, store (at the level
    ``speed_level`` picks; ``fallback``: the caller has reference kernels, so a module over
    every budget raises ``CompileBudgetError`` instead of compiling at O1)."""
    t0 = time.perf_counter()
    texts = [render() for render in renders]
    level, cost = speed_level(*texts)
    why = "" if level == 3 else f" (over the budget of {O3_MAX_INSTRUCTIONS} for O3" + (
        ")" if level == 2 else f" and {O2_MAX_INSTRUCTIONS} for O2)")
    with parsed(*texts) as mod:
        _export_only(mod, names)
        if level == 0 and fallback:
            irlog.log("codegen", f"not compiling {', '.join(names)}: predicted cost {cost} "
                                 f"instructions{why}: reference kernels")
            raise CompileBudgetError(f"kernel {', '.join(names)}: predicted cost {cost} "
                                     f"instructions is over the compile-time budget{why}")
        level = max(level, 1)
        obj = _optimize_module(mod, level).emit_object(mod)
    cache.count("compiles")
    kernels = _load(names, texts, obj)         # raises before anything bad reaches the disk
    cache.store_object(key, obj)
    irlog.log("codegen", f"compiled {', '.join(names)} at O{level}, predicted cost {cost} "
                         f"instructions{why}, in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    return kernels


def _export_only(mod: llvm.ModuleRef, names: Sequence[str]) -> None:
    """Make every definition but the functions ``names`` internal (shared ``linkonce_odr``
    helpers of linked programs become one private copy, which LLVM may inline); raises
    ``ValueError`` when one of ``names`` is not defined or was renamed by the linker."""
    for name in names:
        try:
            fn = mod.get_function(name)
        except NameError:
            fn = None
        if fn is None or fn.is_declaration or fn.linkage != llvm.Linkage.external:
            raise ValueError(f"compile: function {name} is not defined by its module, or "
                             f"was renamed when linking {names}")
    keep = set(names)
    for value in [*mod.functions, *mod.global_variables]:
        if not value.is_declaration and value.name not in keep \
                and not value.name.startswith("llvm."):      # llvm.used & co. keep theirs
            value.linkage = llvm.Linkage.internal


def spec_unit(spec: KernelSpec) -> Unit:
    """``spec``'s kernel as a unit, keyed by the spec's text."""
    return ("kernel spec\0" + spec.text(), lambda: render_llvm(spec).text, kernel_name(spec))


def ir_unit(text: str, name: str) -> Unit:
    """The function ``name`` of LLVM IR ``text`` as a unit, keyed by the text itself."""
    return ("llvm ir\0" + text, lambda: text, name)


def compile_spec(spec: KernelSpec, cache: KernelCache = CACHE,
                 fallback: bool = False) -> CompiledKernel:
    """Compile a laid-out ``KernelSpec`` (keyed by its text: a cache hit renders no IR).
    ``fallback``: raise ``CompileBudgetError`` rather than compile a kernel over every budget
    (see ``speed_level``)."""
    spec.require_layout()
    return compile_units([spec_unit(spec)], cache, fallback)[0]


def _unit_key(key_text: str) -> str:
    """A unit's cache key (the "compile_cached" prefix keeps the keys objects already on
    disk were stored under)."""
    return _key("compile_cached\0" + key_text + _codegen_salt())


def compile_units(units: Sequence[Unit], cache: KernelCache = CACHE,
                  fallback: bool = False) -> list[CompiledKernel]:
    """The loaded kernel of each unit. Each is keyed by its ``key_text`` salted with the code
    generator's own source, so a memory or disk hit loads the object without rendering any
    IR (a warm start skips codegen entirely; ``llvm_ir`` of such a kernel renders on first
    access). The units no cache holds compile as ONE LLVM module (one optimization and code
    generation run, one object on disk under a key over all their keys, one engine to load):
    a specialization's segments and kernels cost one LLVM run instead of one each (W5: 8 ->
    1), and a warm start loads one object. ``fallback``: raise ``CompileBudgetError`` rather
    than compile a module over every budget (see ``speed_level``).

        >>> from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
        >>> from scriptmod.ir import dtypes as D
        >>> specs = [KernelSpec([InputSpec(D.float32)],
        ...                     [OpStep(op, (0, Imm(0.8125, D.float32)), {}, D.float32)],
        ...                     [1], [D.float32]) for op in ("mul", "add")]
        >>> mul, add = compile_units([spec_unit(s) for s in specs])
        >>> mul._engine is add._engine, compile_spec(specs[1]) is add       # memory hit
        (True, True)
    """
    keys = [_unit_key(key_text) for key_text, _, _ in units]
    with _lock:
        found: dict[str, CompiledKernel] = {}
        todo: dict[str, tuple[Callable[[], str], str]] = {}
        for key, (_, render, name) in zip(keys, units):
            if key not in found and key not in todo:
                hit = cache.lookup(key)
                if hit is not None:
                    found[key] = hit
                else:
                    todo[key] = (render, name)
        if todo:
            found.update(_together(todo, cache, fallback))
        return [found[key] for key in keys]


def _together(todo: dict[str, tuple[Callable[[], str], str]], cache: KernelCache,
              fallback: bool) -> dict[str, CompiledKernel]:
    """Build the units of ``todo`` (key -> (render, name)) as one module (one key alone: its
    own key, so one unit is stored exactly as if compiled alone)."""
    keys = sorted(todo)
    group = keys[0] if len(keys) == 1 else _key("together\0" + "\0".join(keys))
    names = [todo[k][1] for k in keys]
    renders = [todo[k][0] for k in keys]
    try:
        kernels = _from_disk(group, names, renders, cache) or _build(group, names, renders,
                                                                     cache, fallback)
    except ValueError:            # names that clash when linked: one module each
        kernels = [_cached(k, todo[k][1], todo[k][0], todo[k][0], cache, fallback)
                   for k in keys]
    for key, kernel in zip(keys, kernels):
        cache.remember(key, kernel)
    return dict(zip(keys, kernels))


@lru_cache(maxsize=None)
def _codegen_salt() -> str:
    """sha256 of the code generator's sources and of the op tables it reads (flags such as
    LONG change the IR): a changed generator never reuses objects keyed by what they were
    generated from. (``os.listdir``: a ``pathlib`` glob compiles a regex, 4 ms of a warm
    start.)"""
    import hashlib
    import os
    import scriptmod.codegen as codegen
    import scriptmod.ir as ir_package
    import scriptmod.ir.ops as ops
    paths = [os.path.join(folder, name) for folder in [*codegen.__path__, *ops.__path__]
             for name in sorted(os.listdir(folder)) if name.endswith(".py")]
    paths += [os.path.join(folder, name) for folder in ir_package.__path__
              for name in ("dtypes.py", "schema.py")]
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()
