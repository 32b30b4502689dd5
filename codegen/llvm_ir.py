"""KernelSpec -> LLVM IR text (llvmlite.ir), for the CPU path.

ABI: ``void NAME(i64 start, i64 end, ptr ptrs, ptr meta)`` computes the outputs at the
flat indices ``[start, end)``. ``ptrs``: the data pointers of the inputs, then of the
outputs; ``meta``: int64 output shape then strided inputs' element strides (see
``codegen.kernel``). Without strided inputs the loop is a plain ``i`` loop (LLVM
vectorizes it); otherwise rows run outside and the innermost dimension inside, so that
unit-stride and broadcast (stride 0) inner accesses vectorize too.

No output overlaps an input or another output (inputs may share memory: they are only
read). Every caller guarantees it (a launch's outputs are fresh or unreferenced pooled
buffers; a native segment's arena gives values that are live at the same node disjoint
bytes), and the kernel says so: the loops live in an always-inlined ``NAME.body`` whose
pointer arguments are ``noalias``, so LLVM vectorizes without run-time overlap checks and
their scalar fallback (10-15% less compile time; W5's segments ran some of those checks'
scalar paths).

An update in place (an optimizer step writing the parameter it read) names, per output, the
input it overwrites (``render_llvm(..., in_place=...)``): that output is stored through the
input's own pointer, so one buffer is read and written through one ``noalias`` pointer and
the promise above still holds (the output's slot in ``ptrs`` is read and ignored).

    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> k = render_llvm(spec)
    >>> k.name                      # from the spec's hash: stable across processes
    'sm_ew_...'
    >>> "define void" in k.text
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

import scriptmod.ir.ops  # noqa: F401  (fills the schema registry)
from scriptmod.ir import schema as S

from .formulas import lower_steps
from .kernel import KernelSpec
from .llvm_emit import I1, I64, PTR, LLVMEmitter, for_range, storage_type

_ONE, _ZERO = ir.Constant(I64, 1), ir.Constant(I64, 0)
# Ops flagged LONG: their formulas are long dependency chains (an exp, a division). A loop of
# them is bound by latency: each element's chain is long and the core overlaps only the few
# iterations its window holds, so chaining two exps costs more than twice one. Interleaving
# INTERLEAVE vector iterations gives the core independent chains to overlap (W2: 16.4 ->
# 11 ns per 16 elements); cheap loops keep LLVM's own choice. Four, not more: with AVX2's 16
# vector registers, eight copies of a tanh or erf chain spill to the stack. One thread,
# float32, ns per element with 8 / 4 / 2 copies (each in a fresh process): tanh-GELU
# 0.87 / 0.73 / 0.93, erf-GELU 1.01 / 0.89 / 0.97, sigmoid 0.58 / 0.50 / 0.58, tanh
# 0.72 / 0.63 / 0.74, exp 0.49 / 0.45 / 0.45, W2's chain 1.94 / 1.87 / 2.34;
# float64 no slower. W1's chain (two row-broadcast vectors) is equal on one thread but was
# 6-8% slower on two (12.0-12.6 -> 12.8-13.7 ms, three pairs); W2 and T2 gained 10-20%,
# W3, W5 and T5 a few percent in most pairs.
# Row kernels (``llvm_rows``) keep eight: at four, softmax, log_softmax and LayerNorm were
# no faster, and a training step's fused loss-and-backward row kernel (T2) took 8.1 ms with
# eight against 10.0 ms with four.
LONG_OPS = S.ops_with(S.LONG)
INTERLEAVE = 4
ROW_INTERLEAVE = 8


@dataclass(frozen=True)
class LLVMKernel:
    """Rendered kernel: LLVM IR ``text`` defining function ``name``."""

    spec: KernelSpec
    name: str
    text: str


def kernel_name(spec: KernelSpec) -> str:
    """Stable symbol name of ``spec``'s kernel."""
    return f"sm_{'row' if spec.is_row else 'ew'}_{spec.key()[:16]}"


def render_llvm(spec: KernelSpec, name: str | None = None,
                in_place: Sequence[int | None] = ()) -> LLVMKernel:
    """Render ``spec`` to LLVM IR text (see the module docstring for the ABI: outputs must not
    overlap inputs). ``spec`` needs a layout (``codegen.lower.plan_layout``): a
    ``ValueError`` says which input lacks one. ``in_place[j]``: the contiguous input of the
    same dtype that output ``j`` overwrites, or None (elementwise kernels only; the caller
    keys the kernel by it, ``spec.text()`` does not carry it)."""
    spec.require_layout()
    targets = store_targets(spec, in_place)
    name = name or kernel_name(spec)
    module = ir.Module(name=name)
    n_ptrs = len(spec.inputs) + len(spec.outputs)
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [PTR] * n_ptrs +
                                               [PTR]), name=f"{name}.body")
    body.linkage = "internal"
    body.attributes.add("nounwind")
    body.attributes.add("alwaysinline")
    for arg in body.args[2:2 + n_ptrs]:
        arg.add_attribute("noalias")
    if spec.is_row:
        from .llvm_rows import RowKernelBuilder
        RowKernelBuilder(spec, body, LONG_OPS, ROW_INTERLEAVE).build()
    else:
        _KernelBuilder(spec, body, targets).build()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR]), name=name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    start, end, ptrs, meta = fn.args
    bases = [b.load(b.gep(ptrs, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR, align=8)
             for k in range(n_ptrs)]
    b.call(body, [start, end, *bases, meta])
    b.ret_void()
    return LLVMKernel(spec, name, str(module))


def store_targets(spec: KernelSpec, in_place: Sequence[int | None]) -> list[int]:
    """The pointer each output is stored through: its own slot (``n_inputs + j``), or the
    input it overwrites; ``ValueError`` when that input cannot take it."""
    n_in, n_out = len(spec.inputs), len(spec.outputs)
    if not in_place:
        return [n_in + j for j in range(n_out)]
    if spec.is_row or len(in_place) != n_out:
        raise ValueError(f"render_llvm: in_place needs an elementwise kernel and one entry per "
                         f"output ({n_out}), got {len(in_place)} for a "
                         f"{'row' if spec.is_row else 'elementwise'} kernel")
    for j, k in enumerate(in_place):
        if k is not None and not (0 <= k < n_in and spec.inputs[k].kind == "contiguous"
                                  and spec.inputs[k].dtype is spec.out_dtypes[j]
                                  and list(in_place).count(k) == 1):
            raise ValueError(f"render_llvm: output {j} ({spec.out_dtypes[j].name}) cannot "
                             f"overwrite input {k}: expected a contiguous input of that dtype "
                             f"that no other output overwrites")
    return [n_in + j if k is None else k for j, k in enumerate(in_place)]


class _KernelBuilder:
    """Emits the loop nest of one kernel function; the body comes from ``lower_steps``.
    ``targets[j]``: the pointer argument output ``j`` is stored through."""

    def __init__(self, spec: KernelSpec, fn: ir.Function, targets: Sequence[int]) -> None:
        self.spec, self.fn, self.targets = spec, fn, list(targets)
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.e = LLVMEmitter(self.b)
        self.start, self.end, *self.ptr_args, self.meta = fn.args
        self.nd = spec.rank >= 1 and bool(spec.strided)
        self.interleave = INTERLEAVE if any(s.op in LONG_OPS for s in spec.ops) else None

    def build(self) -> None:
        b = self.b
        with b.if_then(b.icmp_signed(">=", self.start, self.end), likely=False):
            b.ret_void()
        n_in = len(self.spec.inputs)
        self.bases = list(self.ptr_args)
        self.scalars = {i: self.e.load(self.bases[i], s.dtype)
                        for i, s in enumerate(self.spec.inputs) if s.kind == "scalar"}
        if self.nd:
            self._nd_loops()
        else:
            self._fast_then_full(self._flat_loop)
        b.ret_void()

    def _flat_loop(self, vectorize: bool) -> None:
        b = self.b
        with for_range(b, self.start, self.end, interleave=self.interleave if vectorize else None,
                       vectorize=vectorize) as i:
            self._body(lambda k: b.gep(self.bases[k], [i], source_etype=self._st(k)), i)

    def _fast_then_full(self, loop: Callable[[bool], None]) -> None:
        """Emit ``loop(vectorize)``. Formulas with a rare slow path (vmath's sin and cos of
        |x| >= 2**20) cost the common case nothing: the vectorized loop leaves those paths
        out and flags the elements that needed one, and only then does the loop run again
        in full, scalar, calling those paths out of line (``LLVMEmitter.outline``: one copy
        per module). An update in place runs in full at once (its first loop overwrote the
        inputs a second would read)."""
        in_place = self.targets != list(range(len(self.spec.inputs), len(self.ptr_args)))
        self.e.rare, self.rare_flag = (None if in_place else []), None
        loop(True)
        self.e.rare = None
        if self.rare_flag is not None:
            b = self.b
            with b.if_then(b.load(self.rare_flag, typ=I1), likely=False):
                self.e.scalar = True
                loop(False)
                self.e.scalar = False
                b.store(ir.Constant(I1, 0), self.rare_flag)

    def _flag_rare(self) -> None:
        """OR this element's rare-path conditions into the kernel's flag."""
        b, conds = self.b, self.e.rare
        if not conds:
            return
        if self.rare_flag is None:
            here = b.block
            b.position_before(self.fn.entry_basic_block.terminator)
            self.rare_flag = b.alloca(I1, name="rare")
            b.store(ir.Constant(I1, 0), self.rare_flag)
            b.position_at_end(here)
        any_rare = conds[0]
        for cond in conds[1:]:
            any_rare = b.or_(any_rare, cond)
        b.store(b.or_(b.load(self.rare_flag, typ=I1), any_rare), self.rare_flag)
        conds.clear()

    def _st(self, k: int) -> ir.Type:
        n_in = len(self.spec.inputs)
        dt = self.spec.inputs[k].dtype if k < n_in else self.spec.out_dtypes[k - n_in]
        return storage_type(dt)

    def _meta(self, k: int) -> ir.Value:
        slot = self.b.gep(self.meta, [ir.Constant(I64, k)], source_etype=I64)
        return self.b.load(slot, typ=I64, align=8)

    def _body(self, elem_ptr, i: ir.Value) -> None:
        """Load every input at this element, run the steps, store the outputs."""
        spec = self.spec
        vals = [self.scalars[k] if k in self.scalars else self.e.load(elem_ptr(k), s.dtype)
                for k, s in enumerate(spec.inputs)]
        for j, (v, dt) in enumerate(zip(lower_steps(self.e, spec, vals), spec.out_dtypes)):
            self.e.store(v, elem_ptr(self.targets[j]), dt)
        self._flag_rare()

    # ---- n-d iteration: rows outside, innermost dimension inside -----------------------
    def _nd_loops(self) -> None:
        b = self.b
        shape, strides = read_meta(b, self.meta, self.spec)
        idx, dvars, offs = start_odometer(b, self.start, shape, strides, len(shape) - 1)
        var = {name: b.alloca(I64, name=name) for name in ("i", "col")}
        b.store(self.start, var["i"])
        b.store(idx[-1], var["col"])
        self._row_loop(shape, strides, var, dvars, offs)

    def _row_loop(self, shape, strides, var, dvars, offs) -> None:
        b = self.b
        header = b.append_basic_block("row.header")
        body = b.append_basic_block("row.body")
        done = b.append_basic_block("row.end")
        b.branch(header)
        b.position_at_end(header)
        i = b.load(var["i"], typ=I64)
        b.cbranch(b.icmp_signed("<", i, self.end), body, done)
        b.position_at_end(body)
        col = b.load(var["col"], typ=I64)
        left_in_row, left = b.sub(shape[-1], col), b.sub(self.end, i)
        n = b.select(b.icmp_signed("<", left_in_row, left), left_in_row, left)
        self._inner_loop(i, col, n, strides, offs)
        b.store(b.add(i, n), var["i"])
        b.store(_ZERO, var["col"])
        self._carry(shape, strides, dvars, offs, header)
        b.position_at_end(done)

    def _inner_loop(self, i, col, n, strides, offs) -> None:
        """The contiguous inner loop over one row segment of ``n`` elements."""
        b, n_in = self.b, len(self.spec.inputs)
        rows, steps = {}, {}
        for k in range(len(self.bases)):
            spec = self.spec.inputs[k] if k < n_in else None
            if spec is not None and spec.kind == "strided":
                inner = strides[k][-1] if spec.inner is None else ir.Constant(I64, spec.inner)
                start = b.add(b.load(offs[k], typ=I64), b.mul(col, inner))
                rows[k], steps[k] = b.gep(self.bases[k], [start], source_etype=self._st(k)), inner
            elif spec is None or spec.kind == "contiguous":
                rows[k], steps[k] = b.gep(self.bases[k], [i], source_etype=self._st(k)), _ONE
        def loop(vectorize: bool) -> None:
            with for_range(b, _ZERO, n, name="j", vectorize=vectorize,
                           interleave=self.interleave if vectorize else None) as j:
                def elem(k: int) -> ir.Value:
                    at = j if steps[k] is _ONE else b.mul(j, steps[k])
                    return b.gep(rows[k], [at], source_etype=self._st(k))
                self._body(elem, j)
        self._fast_then_full(loop)

    def _carry(self, shape, strides, dvars, offs, header: ir.Block) -> None:
        carry_rows(self.b, shape, strides, dvars, offs, header)


def read_meta(b: ir.IRBuilder, meta: ir.Value, spec: KernelSpec
              ) -> tuple[list[ir.Value], dict[int, list[ir.Value]]]:
    """The laid-out shape and each strided input's strides, loaded from ``meta``."""
    def at(k: int) -> ir.Value:
        return b.load(b.gep(meta, [ir.Constant(I64, k)], source_etype=I64), typ=I64, align=8)
    rank = spec.rank
    return ([at(d) for d in range(rank)],
            {k: [at(rank * (1 + j) + d) for d in range(rank)] for j, k in enumerate(spec.strided)})


def start_odometer(b: ir.IRBuilder, index: ir.Value, shape: list, strides: dict, outer: int
                   ) -> tuple[list[ir.Value], list[ir.Value], dict[int, ir.Value]]:
    """``index`` as a multi-index over ``shape``; the first ``outer`` dims of it in stack
    slots (``carry_rows`` advances them), and each strided input's offset there."""
    idx, rem = [_ZERO] * len(shape), index
    for d in reversed(range(len(shape))):
        idx[d], rem = b.urem(rem, shape[d]), b.udiv(rem, shape[d])
    dvars = [b.alloca(I64, name=f"idx{d}") for d in range(outer)]
    offs = {k: b.alloca(I64, name=f"off{k}") for k in strides}
    for d, dv in enumerate(dvars):
        b.store(idx[d], dv)
    for k, st in strides.items():
        off = _ZERO
        for d in range(outer):
            off = b.add(off, b.mul(idx[d], st[d]))
        b.store(off, offs[k])
    return idx, dvars, offs


def carry_rows(b: ir.IRBuilder, shape, strides, dvars, offs, header: ir.Block) -> None:
    """Advance the outer multi-index ``dvars`` (over ``shape``) by one row, and each strided
    input's offset in ``offs`` with it (an odometer with carries); then branch to ``header``."""
    for d in reversed(range(len(dvars))):
        v = b.add(b.load(dvars[d], typ=I64), _ONE)
        b.store(v, dvars[d])
        for k, st in strides.items():
            b.store(b.add(b.load(offs[k], typ=I64), st[d]), offs[k])
        nxt = b.append_basic_block(f"carry{d}")
        b.cbranch(b.icmp_signed("<", v, shape[d]), header, nxt)
        b.position_at_end(nxt)
        b.store(_ZERO, dvars[d])
        for k, st in strides.items():
            b.store(b.sub(b.load(offs[k], typ=I64), b.mul(st[d], shape[d])), offs[k])
    b.branch(header)
