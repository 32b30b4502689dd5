"""A whole specialization as one native function: fusion-group kernels and GEMMs back to back,
every tensor at a fixed place (a caller's pointer or a byte offset in one arena).

    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.ir import dtypes as D
    >>> relu = KernelSpec([InputSpec(D.float32)], [OpStep("relu", (0,), {}, D.float32)],
    ...                   [1], [D.float32])
    >>> prog = NativeProgram((
    ...     GemmStep(D.float32, m=1, n=4, k=3, a=Ref("arg", 0), lda=3, trans_a=False,
    ...              b=Ref("arg", 1), ldb=3, trans_b=True, c=Ref("arena", 0), ldc=4),
    ...     KernelStep(relu, (Ref("arena", 0),), (Ref("arg", 2),), n=4)), n_args=3)
    >>> print(prog.text().splitlines()[1])
    gemm float32 m=1 n=4 k=3 a=arg0 lda=3 N b=arg1 ldb=3 T c=arena0 ldc=4
    >>> mod = render_program(prog)
    >>> mod.name == "sm_prog_" + prog.key()[:16], "define void @" + mod.name in mod.text
    (True, True)

Entry ABI: ``void NAME(ptr args)``, one pointer table the caller fills:
``args[0:n_args]``: the data pointers of the tensors (inputs, parameters, outputs), except
the slots listed in ``objects``, which hold a NumPy array object whose data pointer the entry
reads at byte ``object_data_offset`` (the caller checked that layout: writing ``id(array)``
costs a third of reading the pointer in Python); ``args[n_args]``: base of the scratch arena
(64-byte aligned); ``args[n_args + 1]``: the function-pointer table, ``fns[0]`` =
``cblas_sgemm``, ``fns[1]`` = ``cblas_dgemm`` (CBLAS ABI, integer arguments
``blas_int_bits`` wide; see ``runtime.blas``); ``args[n_args + 2]``: a program with symbolic
sizes (``symbols``, ``n_placed``) reads its ``int64`` sizes table there: the symbols' values
of this call, then the byte offsets of its ``placed`` arena buffers. One argument: each one
more costs ~60 ns in a ctypes call. No address is baked into the IR: the object code is
cached on disk across processes.

Symbolic sizes: every size, stride, element count and byte offset that is a ``Poly`` is
computed in the entry block from the symbols (integer arithmetic, once per call); kernel
steps then pass ``n`` and a ``meta`` array built on the stack, GEMMs pass their sizes to the
same helpers, and a GEMM whose inline-or-BLAS choice depends on the sizes branches on them.

Kernel steps call the ``codegen.llvm_ir`` kernel of their spec (``start=0, end=n``, the
pointer array built on the entry's stack, ``meta`` a constant); each distinct kernel is linked
into the module with internal linkage, so LLVM inlines it and folds the constant shapes.
Small GEMMs and matrix-vector products run as an inline loop (a BLAS call costs more than
the math of a ``(1x64)@(64x64)^T`` layer), one compiled helper per dtype and transposition
with the sizes as arguments (compile time grows with code, not with layers); larger ones call
BLAS. Batches loop in the entry. Kernel steps and inline GEMMs are ``noinline`` helpers,
named by what they compute (``linkonce_odr``: equal helpers of linked programs merge).
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Mapping, Union

from llvmlite import ir

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from .kernel import KINDS, KernelSpec, text_key
from .llvm_emit import I32, I64, PTR, for_range, loop_hints
from .llvm_ir import kernel_name, render_llvm
from .record import Record
from .sizes import Poly, SizeDependent

FORMAT = "native program v3"
SPACES = ("arg", "arena", "placed")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112          # CBLAS enum values
FNS_SGEMM, FNS_DGEMM = 0, 1                          # slots of the ``fns`` table
FNS_SGEMM_BATCH, FNS_DGEMM_BATCH = 2, 3              # cblas_?gemm_batch, or NULL
# A batch of GEMMs goes to ``cblas_?gemm_batch`` above this m*n*k. OpenBLAS (0.3.31, as NumPy
# wheels bundle it) crashes in that entry point on its small-matrix path, which serves
# m*n*k <= 100**3 (checked size by size: 100x100x100 crashes, 100x100x101 and 128x128x64
# are right); below it each GEMM is its own call, as before.
BATCH_API_MIN_MNK = 100 ** 3
# Inline loop or BLAS call (measured on the Zen 4 dev box, AVX2, float32): a BLAS call costs
# ~1.4 us before any math; the inline loop wins up to about 8x64x64 (2.0 us against 2.5 us
# at that size, trans_b) and on every matrix-vector product (1x64x64: 0.8 against 1.6 us;
# 1x1024x1024: 80 against 600+ us), which streams B at memory speed either way.
INLINE_GEMM_MAX = 8 * 64 * 64                        # m*n*k at or below: inline loop
INLINE_GEMV_MAX = 1 << 20                            # m == 1 and n*k at or below: inline
_I8 = ir.IntType(8)
_KERNEL_TYPE = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR])
_ENTRY_TYPE = ir.FunctionType(ir.VoidType(), [PTR])
_GEMM_DTYPES = (D.float32, D.float64)
_DOT_FLAGS = ("reassoc", "contract")                 # lets LLVM split the sum into lanes
# Partial sums the dot loop keeps (vectors of them): one would chain every fadd on the last,
# four is what LLVM's own heuristic chose before the pipeline stopped interleaving unasked.
DOT_INTERLEAVE = 4
DOT_UNROLL = 2                                       # vector iterations per trip


class Ref(Record):
    """Where a tensor's element 0 lives: ``args[index] + offset`` bytes (space "arg": a pointer
    table the caller fills), ``arena + index + offset`` bytes (space "arena") or, in a
    program with symbolic sizes, ``arena + sizes[len(symbols) + index] + offset`` bytes
    (space "placed": an arena buffer whose offset the caller computes per set of sizes).
    ``offset`` may be a ``Poly`` of the program's symbols.

    >>> Ref("arena", 256, 8).text(), Ref("arg", 1).text()
    ('arena256+8', 'arg1')
    """

    space: str          # "arg" | "arena" | "placed"
    index: int
    offset: int | Poly = 0     # extra bytes (views: narrow, select)

    def __post_init__(self) -> None:
        if self.space not in SPACES:
            raise ValueError(f"Ref: space must be one of {SPACES}, got {self.space!r}")
        if self.index < 0 or self.offset < 0:
            raise ValueError(f"Ref: index and offset must be >= 0, got index={self.index}, "
                             f"offset={self.offset}")

    def text(self) -> str:
        """``arg3``, ``arena128``, ``arg0+16``: the form used in ``NativeProgram.text``."""
        return f"{self.space}{self.index}" + (f"+{self.offset}" if self.offset else "")


class KernelStep(Record):
    """One fusion-group kernel over all its ``n`` output elements.

    ``meta``: ``spec.meta(...)`` (output shape, then strided inputs' strides), baked in as a
    constant; it may stay empty when the spec has no strided input. With symbolic sizes,
    ``n`` and entries of ``meta`` are ``Poly``: the entry computes them per call.
    """

    spec: KernelSpec
    inputs: tuple[Ref, ...]
    outputs: tuple[Ref, ...]
    n: int | Poly
    meta: tuple[int | Poly, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "meta", tuple(v if isinstance(v, Poly) else int(v)
                                               for v in self.meta))
        spec = self.spec
        unplanned = [i for i, s in enumerate(spec.inputs) if s.kind not in KINDS]
        if unplanned:
            raise ValueError(f"KernelStep: spec inputs {unplanned} have no layout (kind must "
                             f"be one of {KINDS}); plan the spec's layout first")
        if len(self.inputs) != len(spec.inputs) or len(self.outputs) != len(spec.outputs):
            raise ValueError(f"KernelStep: spec takes {len(spec.inputs)} inputs and "
                             f"{len(spec.outputs)} outputs, got {len(self.inputs)} and "
                             f"{len(self.outputs)}")
        if self.n < 0:
            raise ValueError(f"KernelStep: n must be >= 0, got {self.n}")
        want = spec.rank * (1 + len(spec.strided))
        if spec.strided and len(self.meta) != want:
            raise ValueError(f"KernelStep: meta must hold {want} ints (shape and strides of "
                             f"{len(spec.strided)} strided inputs), got {len(self.meta)}")

    def text(self) -> str:
        """One line: kernel name, ``n``, meta and the refs."""
        ins = ", ".join(r.text() for r in self.inputs)
        outs = ", ".join(r.text() for r in self.outputs)
        meta = "[" + ", ".join(map(str, self.meta)) + "]"
        return (f"kernel {kernel_name(self.spec)} n={self.n} meta={meta} "
                f"in=[{ins}] out=[{outs}]")


class GemmStep(Record):
    """For b in range(batch): C_b[m, n] = op(A_b)[m, k] @ op(B_b)[k, n], all row-major with
    leading dims lda/ldb/ldc (elements); op(X) = X^T when trans_x. Batch strides in elements
    (0: the same matrix for every b). C must overlap neither A nor B (as for BLAS; the
    inline loops tell LLVM so); A and B may be the same memory. Any size may be a ``Poly``
    (computed per call)."""

    dtype: DType
    m: int
    n: int
    k: int
    a: Ref
    lda: int
    trans_a: bool
    b: Ref
    ldb: int
    trans_b: bool
    c: Ref
    ldc: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in _GEMM_DTYPES:
            raise ValueError(f"GemmStep: dtype must be float32 or float64, got {self.dtype!r}")
        for field in ("m", "n", "k", "stride_a", "stride_b", "stride_c"):
            if getattr(self, field) < 0:
                raise ValueError(f"GemmStep: {field} must be >= 0, got {getattr(self, field)}")
        if self.batch < 1:
            raise ValueError(f"GemmStep: batch must be >= 1, got {self.batch}")
        for ld, cols in (("lda", self.m if self.trans_a else self.k),
                         ("ldb", self.k if self.trans_b else self.n), ("ldc", self.n)):
            if getattr(self, ld) < max(1, cols):
                raise ValueError(f"GemmStep: {ld} must be >= max(1, {cols}) (the row length "
                                 f"of its row-major matrix), got {getattr(self, ld)}")

    @property
    def inline(self) -> bool | None:
        """Whether this GEMM runs as an inline loop rather than a BLAS call; None when that
        depends on symbolic sizes (the entry decides per call)."""
        try:
            return bool(self.m * self.n * self.k <= INLINE_GEMM_MAX
                        or (self.m == 1 and self.n * self.k <= INLINE_GEMV_MAX))
        except SizeDependent:
            return None

    def text(self) -> str:
        """One line with every field (the basis of the program's key)."""
        ta, tb = "T" if self.trans_a else "N", "T" if self.trans_b else "N"
        line = (f"gemm {self.dtype.name} m={self.m} n={self.n} k={self.k} "
                f"a={self.a.text()} lda={self.lda} {ta} b={self.b.text()} ldb={self.ldb} {tb} "
                f"c={self.c.text()} ldc={self.ldc}")
        if self.batch != 1:
            line += (f" batch={self.batch} strides={self.stride_a},{self.stride_b},"
                     f"{self.stride_c}")
        return line


Step = Union[KernelStep, GemmStep]


BLAS_INTS = ("m", "n", "k", "lda", "ldb", "ldc", "batch")    # GEMM fields BLAS takes as ints


def blas_overflow(fields: Mapping[str, int], bits: int) -> str | None:
    """The first of a GEMM's BLAS integer arguments (``BLAS_INTS`` in ``fields``: a
    ``GemmStep``'s or the planner's dict of them) that a ``bits``-wide BLAS integer cannot
    hold, as ``"name=value"``; None when all fit. Batch strides never reach BLAS (the entry
    computes addresses in 64 bits).

    >>> blas_overflow({"m": 3, "n": 1 << 31, "k": 2}, 32), blas_overflow({"n": 1 << 31}, 64)
    ('n=2147483648', None)
    """
    top = (1 << (bits - 1)) - 1
    for name in BLAS_INTS:
        if not isinstance(fields.get(name, 0), Poly) and fields.get(name, 0) > top:
            return f"{name}={fields[name]}"
    return None


def check_blas_ints(g: GemmStep, bits: int, who: str) -> None:
    """``ValueError`` when a BLAS call of ``g`` would truncate an integer argument (an LP64
    BLAS takes 32-bit ints): such a GEMM must run elsewhere (NumPy splits it)."""
    bad = blas_overflow({name: getattr(g, name) for name in BLAS_INTS}, bits)
    if bad is not None:
        raise ValueError(f"{who}: a {bits}-bit BLAS integer cannot hold {bad} (at most "
                         f"{(1 << (bits - 1)) - 1}); run this GEMM outside native code")


class NativeProgram(Record):
    """Steps run in order by one native function (see the module docstring for its ABI)."""

    steps: tuple[Step, ...]
    n_args: int
    blas_int_bits: int = 64
    objects: tuple[int, ...] = ()        # arg slots holding an array object, not its data
    object_data_offset: int = 16         # where a NumPy array object keeps its data pointer
    symbols: tuple[str, ...] = ()        # symbolic dims: ``sizes[i]`` holds symbol i
    n_placed: int = 0                    # arena buffers placed per call (``Ref`` "placed")

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "objects", tuple(sorted(set(self.objects))))
        if any(not 0 <= i < self.n_args for i in self.objects):
            raise ValueError(f"NativeProgram: objects {self.objects} must be arg slots "
                             f"below n_args={self.n_args}")
        if self.blas_int_bits not in (32, 64):
            raise ValueError(f"NativeProgram: blas_int_bits must be 32 or 64, "
                             f"got {self.blas_int_bits}")
        for i, step in enumerate(self.steps):
            if not isinstance(step, (KernelStep, GemmStep)):
                raise TypeError(f"NativeProgram: step {i} must be a KernelStep or GemmStep, "
                                f"got {type(step).__name__}")
            for ref in step_refs(step):
                if ref.space == "arg" and ref.index >= self.n_args:
                    raise ValueError(f"NativeProgram: step {i} reads args[{ref.index}] but "
                                     f"n_args is {self.n_args}")
            if isinstance(step, GemmStep) and step.inline is False:
                check_blas_ints(step, self.blas_int_bits, f"NativeProgram: step {i}")

    @property
    def specs(self) -> tuple[KernelSpec, ...]:
        """The distinct kernel specs, in order of first use."""
        seen: dict[str, KernelSpec] = {}
        for s in self.steps:
            if isinstance(s, KernelStep):
                seen.setdefault(kernel_name(s.spec), s.spec)
        return tuple(seen.values())

    def text(self) -> str:
        """A stable text form: the steps, then each distinct kernel spec's text (computed
        once: the program is frozen)."""
        text = self.__dict__.get("_text")
        if text is None:
            lines = [f"{FORMAT} n_args={self.n_args} blas_int_bits={self.blas_int_bits} "
                     f"inline_gemm_max={INLINE_GEMM_MAX},{INLINE_GEMV_MAX}"]
            if self.objects:
                lines[0] += f" objects={','.join(map(str, self.objects))}" \
                            f"@{self.object_data_offset}"
            if self.symbols or self.n_placed:
                lines[0] += f" symbols={','.join(self.symbols)} placed={self.n_placed}"
            lines += [s.text() for s in self.steps]
            for spec in self.specs:
                lines += [f"{kernel_name(spec)}:"] + ["  " + ln
                                                       for ln in spec.text().splitlines()]
            text = "\n".join(lines)
            object.__setattr__(self, "_text", text)
        return text

    def key(self) -> str:
        """sha256 hex digest of ``text()``: equal programs give equal keys in any process."""
        return text_key(self)


def step_refs(step: Step) -> tuple[Ref, ...]:
    """The tensors ``step`` reads and writes."""
    if isinstance(step, KernelStep):
        return step.inputs + step.outputs
    return (step.a, step.b, step.c)


class NativeModule(Record):
    """A rendered program: LLVM IR ``text`` defining the entry function ``name``."""

    program: NativeProgram
    name: str
    text: str


def program_name(prog: NativeProgram) -> str:
    """Stable symbol name of ``prog``'s entry function."""
    return f"sm_prog_{prog.key()[:16]}"


def render_program(prog: NativeProgram, name: str | None = None) -> NativeModule:
    """Render ``prog`` to one LLVM module: the entry function plus its kernels (internal)."""
    name = name or program_name(prog)
    module = ir.Module(name=name)
    kernels = {kernel_name(spec): ir.Function(module, _KERNEL_TYPE, name=kernel_name(spec))
               for spec in prog.specs}
    entry = ir.Function(module, _ENTRY_TYPE, name=name)
    entry.attributes.add("nounwind")
    _EntryBuilder(prog, entry, kernels).build()
    texts = [_kernel_text(spec) for spec in prog.specs]
    return NativeModule(prog, name, _link(str(module), texts, list(kernels)))


@lru_cache(maxsize=256)
def _kernel_text(spec: KernelSpec) -> str:
    """A kernel's module text (rendering is half of ``render_program``'s time; specs recur
    across a model's specializations)."""
    return render_llvm(spec, kernel_name(spec)).text


def _link(main: str, others: list[str], kernels: list[str]) -> str:
    """Link the kernels' modules into ``main`` (LLVM's linker renumbers their metadata and
    merges their intrinsic declarations); kernels become internal and always inlined into
    their step functions, where the constant ``n`` and ``meta`` specialize them."""
    import llvmlite.binding as llvm
    module = llvm.parse_assembly(main)
    for text in others:
        module.link_in(llvm.parse_assembly(text))
    for fname in kernels:
        fn = module.get_function(fname)
        fn.linkage = "internal"
        fn.add_function_attribute("alwaysinline")
    return str(module)


def _shared_function(module: ir.Module, ftype: ir.FunctionType, name: str) -> ir.Function:
    """A helper compiled once however many steps call it (``noinline``): LLVM's time grows
    with the code it optimizes, and W4's four equal layers need one copy, not four. Its name
    says what it computes and it is ``linkonce_odr``, so that when several programs are
    linked into one module (``runtime.llvm_jit.compile_units``: a specialization's
    segments) equal helpers merge into one (W5's two LayerNorms share theirs); the compiler
    internalizes what it does not export."""
    fn = ir.Function(module, ftype, name=name)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    return fn


def _helper_name(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


class _EntryBuilder:
    """Emits the entry function: per step, fill a pointer table or compute operand addresses
    and call the step's function (one per distinct kernel step and inline GEMM shape)."""

    def __init__(self, prog: NativeProgram, fn: ir.Function,
                 kernels: dict[str, ir.Function]) -> None:
        self.prog, self.fn, self.kernels = prog, fn, kernels
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        (self.args,) = fn.args
        self.arena = self._load_ptr(self.args, prog.n_args)
        self.fns = self._load_ptr(self.args, prog.n_args + 1)
        self.objects = frozenset(prog.objects)
        self.arg_ptrs: dict[int, ir.Value] = {}       # loaded in the entry block, on first use
        self.helpers: dict[tuple, ir.Function] = {}
        self.sizes_table: ir.Value | None = None      # ``args[n_args + 2]``, on first use
        self.values: dict[Poly | str, ir.Value] = {}  # symbolic sizes, computed in the entry
        self.slots: dict[int, ir.Value] = {}           # ``sizes[i]``, loaded in the entry

    def _size_slot(self, i: int) -> ir.Value:
        """``sizes[i]`` (``int64``), loaded in the entry block."""
        if i not in self.slots:
            with self.b.goto_entry_block():
                if self.sizes_table is None:
                    self.sizes_table = self._load_ptr(self.args, self.prog.n_args + 2)
                at = self.b.gep(self.sizes_table, [ir.Constant(I64, i)], source_etype=I64)
                self.slots[i] = self.b.load(at, typ=I64, align=8)
        return self.slots[i]

    def size(self, x: int | Poly) -> ir.Value:
        """A size as an ``i64``: a constant, or a ``Poly`` of the symbols computed once in
        the entry block (sizes are products and sums of positive dims: ``nsw``)."""
        if not isinstance(x, Poly):
            return ir.Constant(I64, int(x))
        if x not in self.values:
            for s in x.symbols:
                if s not in self.values:
                    self.values[s] = self._size_slot(self.prog.symbols.index(s))
            with self.b.goto_entry_block():
                total: ir.Value | None = None
                for mono, coef in x.terms:
                    term: ir.Value = ir.Constant(I64, coef)
                    for s in mono:
                        term = self.b.mul(term, self.values[s], flags=["nsw"])
                    total = term if total is None else self.b.add(total, term, flags=["nsw"])
                self.values[x] = total                                   # type: ignore
        return self.values[x]

    def arg_ptr(self, i: int) -> ir.Value:
        """``args[i]``'s data pointer (a segment uses a few of a plan's many slots: loading
        only those keeps the IR, and its rendering, small)."""
        if i not in self.arg_ptrs:
            with self.b.goto_entry_block():
                p = self._load_ptr(self.args, i)
                if i in self.objects:   # an array object: its data pointer, at a fixed offset
                    at = self.b.gep(p, [ir.Constant(I64, self.prog.object_data_offset)],
                                    source_etype=_I8, inbounds=True)
                    p = self.b.load(at, typ=PTR, align=8)
            self.arg_ptrs[i] = p
        return self.arg_ptrs[i]

    def build(self) -> None:
        for i, step in enumerate(self.prog.steps):
            if isinstance(step, KernelStep):
                self._kernel(i, step)
            elif step.m and step.n:
                self._gemm(step)
        self.b.ret_void()

    def _load_ptr(self, table: ir.Value, i: int, typ: ir.Type = PTR) -> ir.Value:
        slot = self.b.gep(table, [ir.Constant(I64, i)], source_etype=PTR)
        return self.b.load(slot, typ=typ, align=8)

    def ptr(self, ref: Ref) -> ir.Value:
        """The address of ``ref``'s element 0."""
        off: int | Poly | ir.Value
        if ref.space == "arg":
            base, off = self.arg_ptr(ref.index), ref.offset
        elif ref.space == "arena":
            base, off = self.arena, ref.index + ref.offset
        else:
            at = self._size_slot(len(self.prog.symbols) + ref.index)
            base = self.b.gep(self.arena, [at], source_etype=_I8, inbounds=True)
            off = ref.offset
        if isinstance(off, int) and not off:
            return base
        return self.b.gep(base, [self.size(off)], source_etype=_I8, inbounds=True)

    def _kernel(self, i: int, step: KernelStep) -> None:
        b, refs = self.b, step.inputs + step.outputs
        with b.goto_entry_block():
            table = b.alloca(PTR, size=ir.Constant(I64, len(refs)), name=f"ptrs{i}")
        for j, ref in enumerate(refs):
            b.store(self.ptr(ref), b.gep(table, [ir.Constant(I64, j)], source_etype=PTR))
        if not any(isinstance(v, Poly) for v in (step.n,) + step.meta):
            b.call(self._step_function(step), [table])
            return
        meta: ir.Value = ir.Constant(PTR, None)
        if step.meta:                          # computed per call, on the entry's stack
            values = [self.size(v) for v in step.meta]     # (before: it moves the builder)
            with b.goto_entry_block():
                meta = b.alloca(I64, size=ir.Constant(I64, len(step.meta)), name=f"meta{i}")
                for j, v in enumerate(values):
                    b.store(v, b.gep(meta, [ir.Constant(I64, j)], source_etype=I64))
        b.call(self._sized_step_function(step), [table, self.size(step.n), meta])

    def _sized_step_function(self, step: KernelStep) -> ir.Function:
        """``void step(ptr ptrs, i64 n, ptr meta)``: the kernel over ``[0, n)``, its sizes
        from the call (one per kernel, whatever the sizes)."""
        key = ("sized kernel", kernel_name(step.spec))
        if key not in self.helpers:
            ftype = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR])
            fn = _shared_function(self.fn.module, ftype, f"sm_stepv_{_helper_name(*key)}")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            ptrs, n, meta = fn.args
            b.call(self.kernels[kernel_name(step.spec)], [ir.Constant(I64, 0), n, ptrs, meta])
            b.ret_void()
            self.helpers[key] = fn
        return self.helpers[key]

    def _step_function(self, step: KernelStep) -> ir.Function:
        """``void step(ptr ptrs)``: the kernel over ``[0, n)`` with its constant meta."""
        key = ("kernel", kernel_name(step.spec), step.n, step.meta)
        if key in self.helpers:
            return self.helpers[key]
        module = self.fn.module
        name = f"sm_step_{_helper_name(*key)}"
        fn = _shared_function(module, ir.FunctionType(ir.VoidType(), [PTR]), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        meta: ir.Value = ir.Constant(PTR, None)
        if step.meta:
            ty = ir.ArrayType(I64, len(step.meta))
            var = ir.GlobalVariable(module, ty, name=f"{name}.meta")
            var.global_constant, var.linkage = True, "private"
            var.initializer = ir.Constant(ty, list(step.meta))
            meta = var
        b.call(self.kernels[kernel_name(step.spec)],
               [ir.Constant(I64, 0), ir.Constant(I64, step.n), fn.args[0], meta])
        b.ret_void()
        self.helpers[key] = fn
        return fn

    def _gemm(self, g: GemmStep) -> None:
        a, b_, c = self.ptr(g.a), self.ptr(g.b), self.ptr(g.c)
        if g.batch == 1:
            self._one_gemm(g, a, b_, c)
            return
        symbolic = any(isinstance(getattr(g, f), Poly) for f in ("m", "n", "k", "batch"))
        if symbolic or g.inline or g.m * g.n * g.k <= BATCH_API_MIN_MNK:
            self._gemm_loop(g, a, b_, c)
            return
        # a BLAS batch: one ``cblas_?gemm_batch`` call where the library has it (its
        # threads take whole GEMMs: the 32 heads of W5's attention ran at ~70 GFLOP/s as 32
        # calls, ~125 as one), else one call per GEMM
        iN = ir.IntType(self.prog.blas_int_bits)
        fnty = ir.FunctionType(ir.VoidType(), [I32] + [PTR] * 13 + [iN, PTR])
        slot = FNS_SGEMM_BATCH if g.dtype is D.float32 else FNS_DGEMM_BATCH
        fp = self._load_ptr(self.fns, slot, fnty.as_pointer())     # typed: an indirect call
        null = ir.Constant(fnty.as_pointer(), None)
        with self.b.if_else(self.b.icmp_unsigned("!=", fp, null)) as (have, lack):
            with have:
                self._blas_batch(g, fp, a, b_, c)
            with lack:
                self._gemm_loop(g, a, b_, c)

    def _at_batch(self, base: ir.Value, i: ir.Value, stride: int | Poly,
                  g: GemmStep) -> ir.Value:
        """Matrix ``i`` of a batch at ``base`` with ``stride`` elements between matrices."""
        if isinstance(stride, int) and not stride:
            return base
        return self.b.gep(base, [self.b.mul(i, self.size(stride))],
                          source_etype=_float_type(g.dtype), inbounds=True)

    def _gemm_loop(self, g: GemmStep, a: ir.Value, b_: ir.Value, c: ir.Value) -> None:
        with for_range(self.b, ir.Constant(I64, 0), self.size(g.batch), "batch") as i:
            self._one_gemm(g, self._at_batch(a, i, g.stride_a, g),
                           self._at_batch(b_, i, g.stride_b, g),
                           self._at_batch(c, i, g.stride_c, g))

    def _blas_batch(self, g: GemmStep, fp: ir.Value, a: ir.Value, bm: ir.Value,
                    c: ir.Value) -> None:
        """``fp(RowMajor, &tA, &tB, &M, &N, &K, &1, As, &lda, Bs, &ldb, &0, Cs, &ldc, 1,
        &batch)`` (``cblas_xgemm_batch``): one group of ``batch`` GEMMs, its pointer arrays
        built on the stack."""
        b, t = self.b, _float_type(g.dtype)
        iN = ir.IntType(self.prog.blas_int_bits)
        with b.goto_entry_block():
            arrays = [b.alloca(PTR, size=ir.Constant(I64, g.batch), name=n)
                      for n in ("as", "bs", "cs")]
            cells = {n: b.alloca(ty, name=n) for n, ty in (
                ("ta", I32), ("tb", I32), ("m", iN), ("n", iN), ("k", iN), ("alpha", t),
                ("lda", iN), ("ldb", iN), ("beta", t), ("ldc", iN), ("size", iN))}
        for n, v in (("ta", ir.Constant(I32, TRANS if g.trans_a else NO_TRANS)),
                     ("tb", ir.Constant(I32, TRANS if g.trans_b else NO_TRANS)),
                     ("m", ir.Constant(iN, g.m)), ("n", ir.Constant(iN, g.n)),
                     ("k", ir.Constant(iN, g.k)), ("alpha", ir.Constant(t, 1.0)),
                     ("lda", ir.Constant(iN, g.lda)), ("ldb", ir.Constant(iN, g.ldb)),
                     ("beta", ir.Constant(t, 0.0)), ("ldc", ir.Constant(iN, g.ldc)),
                     ("size", ir.Constant(iN, g.batch))):
            b.store(v, cells[n])
        with for_range(b, ir.Constant(I64, 0), ir.Constant(I64, g.batch), "fill") as i:
            for arr, base, stride in zip(arrays, (a, bm, c), (g.stride_a, g.stride_b,
                                                            g.stride_c)):
                b.store(self._at_batch(base, i, stride, g), b.gep(arr, [i], source_etype=PTR))
        b.call(fp, [ir.Constant(I32, ROW_MAJOR), cells["ta"], cells["tb"], cells["m"],
                       cells["n"], cells["k"], cells["alpha"], arrays[0], cells["lda"],
                       arrays[1], cells["ldb"], cells["beta"], arrays[2], cells["ldc"],
                       ir.Constant(iN, 1), cells["size"]])

    def _one_gemm(self, g: GemmStep, a: ir.Value, bm: ir.Value, c: ir.Value) -> None:
        inline = g.inline
        if inline is None:                 # sizes decide: the same test, per call
            with self.b.if_else(self._inline_test(g)) as (small, large):
                with small:
                    self._inline_gemm(g, a, bm, c)
                with large:
                    self._blas_gemm(g, a, bm, c)
        elif inline:
            self._inline_gemm(g, a, bm, c)
        else:
            self._blas_gemm(g, a, bm, c)

    def _inline_test(self, g: GemmStep) -> ir.Value:
        """``GemmStep.inline`` on the call's sizes."""
        b, m, n, k = self.b, self.size(g.m), self.size(g.n), self.size(g.k)
        nk = b.mul(n, k)
        small = b.icmp_signed("<=", b.mul(m, nk), ir.Constant(I64, INLINE_GEMM_MAX))
        gemv = b.and_(b.icmp_signed("==", m, ir.Constant(I64, 1)),
                      b.icmp_signed("<=", nk, ir.Constant(I64, INLINE_GEMV_MAX)))
        return b.or_(small, gemv)

    def _inline_gemm(self, g: GemmStep, a: ir.Value, bm: ir.Value, c: ir.Value) -> None:
        sizes = [self.size(v) for v in (g.m, g.n, g.k, g.lda, g.ldb, g.ldc)]
        self.b.call(self._gemm_function(g), [a, bm, c] + sizes)

    def _gemm_function(self, g: GemmStep) -> ir.Function:
        """``void gemm(ptr noalias A, B, C, i64 m, n, k, lda, ldb, ldc)``, one per dtype and
        transposition: shapes are arguments, so a model's layers share one compiled loop."""
        key = ("gemm", g.dtype.name, g.trans_a, g.trans_b)
        if key not in self.helpers:
            ftype = ir.FunctionType(ir.VoidType(), [PTR] * 3 + [I64] * 6)
            ta, tb = "T" if g.trans_a else "N", "T" if g.trans_b else "N"
            fn = _shared_function(self.fn.module, ftype, f"sm_gemm_{g.dtype.name}_{ta}{tb}")
            for arg in fn.args[:3]:
                arg.add_attribute("noalias")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            a, bm, c, *sizes = fn.args
            _emit_inline_gemm(b, g.dtype, g.trans_a, g.trans_b, a, bm, c, _Shape(*sizes))
            b.ret_void()
            self.helpers[key] = fn
        return self.helpers[key]

    def _blas_gemm(self, g: GemmStep, a: ir.Value, bm: ir.Value, c: ir.Value) -> None:
        """``cblas_xgemm(RowMajor, tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C, ldc)``."""
        t, iN = _float_type(g.dtype), ir.IntType(self.prog.blas_int_bits)
        fnty = ir.FunctionType(ir.VoidType(), [I32, I32, I32, iN, iN, iN, t, PTR, iN, PTR,
                                               iN, t, PTR, iN])
        slot = FNS_SGEMM if g.dtype is D.float32 else FNS_DGEMM
        fp = self._load_ptr(self.fns, slot, fnty.as_pointer())     # typed: an indirect call
        def n(v: int | Poly) -> ir.Value:
            if not isinstance(v, Poly):
                return ir.Constant(iN, v)
            return self.b.trunc(self.size(v), iN) if iN.width < 64 else self.size(v)
        def trans(flag: bool) -> ir.Constant:
            return ir.Constant(I32, TRANS if flag else NO_TRANS)
        self.b.call(fp, [ir.Constant(I32, ROW_MAJOR), trans(g.trans_a), trans(g.trans_b),
                         n(g.m), n(g.n), n(g.k), ir.Constant(t, 1.0), a, n(g.lda), bm,
                         n(g.ldb), ir.Constant(t, 0.0), c, n(g.ldc)])


def _float_type(dt: DType) -> ir.Type:
    return ir.DoubleType() if dt is D.float64 else ir.FloatType()


# ---- inline GEMM ----------------------------------------------------------------------------
# Two loop orders, chosen so that the innermost loop runs along contiguous memory:
#  - op(B) = B (row-major k x n): "axpy" order i, p, j: C[i, :] += A(i, p) * B[p, :]. The inner
#    j loop reads B and writes C contiguously and carries no dependency between iterations,
#    so it vectorizes without reassociating anything (each C element sums in p order).
#  - op(B) = B^T (B stored n x k, a Linear's weight): "dot" order i, j, p: C[i, j] = sum_p
#    A(i, p) * B[j, p]. The inner p loop reads B's row contiguously (and A's, when not
#    transposed) but is a reduction: it only vectorizes when its fadd may be reassociated,
#    hence ``reassoc contract`` on that sum alone (partial sums per lane, as BLAS does).


class _Shape(Record):
    """A GEMM's sizes and leading dims as IR values (constants or the helper's arguments)."""

    m: ir.Value
    n: ir.Value
    k: ir.Value
    lda: ir.Value
    ldb: ir.Value
    ldc: ir.Value


def _emit_inline_gemm(b: ir.IRBuilder, dt: DType, trans_a: bool, trans_b: bool,
                      a: ir.Value, bm: ir.Value, c: ir.Value, d: _Shape) -> None:
    """C = op(A) @ op(B) for one matrix triple, as loops (see the comment above); ``c``
    overlaps neither ``a`` nor ``b`` (the helper's arguments are ``noalias``)."""
    t = _float_type(dt)

    def elem(base: ir.Value, row: ir.Value, ld: ir.Value, col: ir.Value) -> ir.Value:
        idx = b.add(b.mul(row, ld, flags=["nsw"]), col, flags=["nsw"])
        return b.gep(base, [idx], source_etype=t, inbounds=True)

    def a_at(i: ir.Value, p: ir.Value) -> ir.Value:
        return elem(a, p, d.lda, i) if trans_a else elem(a, i, d.lda, p)

    with for_range(b, ir.Constant(I64, 0), d.m, "gi") as i:
        if trans_b:
            _dot_row(b, t, d, lambda p: a_at(i, p), lambda j, p: elem(bm, j, d.ldb, p),
                     lambda j: elem(c, i, d.ldc, j))
        else:
            _axpy_row(b, t, d, lambda p: a_at(i, p), lambda p, j: elem(bm, p, d.ldb, j),
                      lambda j: elem(c, i, d.ldc, j))


def _dot_row(b: ir.IRBuilder, t: ir.Type, d: _Shape, a_at, b_at, c_at) -> None:
    """One row of C, one dot product per element (op(B) = B^T)."""
    zero = ir.Constant(I64, 0)
    with for_range(b, zero, d.n, "gj") as j:
        pre = b.block
        header = b.append_basic_block("gp.header")
        body = b.append_basic_block("gp.body")
        end = b.append_basic_block("gp.end")
        b.branch(header)
        b.position_at_end(header)
        p = b.phi(I64, name="gp")
        acc = b.phi(t, name="acc")
        p.add_incoming(zero, pre)
        acc.add_incoming(ir.Constant(t, 0.0), pre)
        b.cbranch(b.icmp_signed("<", p, d.k), body, end)
        b.position_at_end(body)
        x, y = b.load(a_at(p), typ=t), b.load(b_at(j, p), typ=t)
        nxt = b.fadd(acc, b.fmul(x, y, flags=("contract",)), flags=_DOT_FLAGS)
        p.add_incoming(b.add(p, ir.Constant(I64, 1), flags=["nsw"]), b.block)
        acc.add_incoming(nxt, b.block)
        latch = b.branch(header)
        latch.set_metadata("llvm.loop", loop_hints(b.module, DOT_INTERLEAVE, DOT_UNROLL))
        b.position_at_end(end)
        b.store(acc, c_at(j))


def _axpy_row(b: ir.IRBuilder, t: ir.Type, d: _Shape, a_at, b_at, c_at) -> None:
    """One row of C as a sum of scaled rows of B (op(B) = B)."""
    zero = ir.Constant(I64, 0)
    with for_range(b, zero, d.n, "gz") as j:
        b.store(ir.Constant(t, 0.0), c_at(j))
    with for_range(b, zero, d.k, "gp") as p:
        x = b.load(a_at(p), typ=t)
        with for_range(b, zero, d.n, "gj") as j:
            ptr = c_at(j)
            prod = b.fmul(x, b.load(b_at(p, j), typ=t), flags=("contract",))
            b.store(b.fadd(b.load(ptr, typ=t), prod, flags=("contract",)), ptr)
