"""Row kernels (``KernelSpec.is_row``, from ``codegen.rows``) as LLVM IR.

Same ABI as ``codegen.llvm_ir``, with ``[start, end)`` counting rows: the leading dims of the
laid-out shape (``meta`` holds it; its last dim is the reduced one, ``C`` elements). Per row:

- pass ``p`` loops over the ``C`` columns and accumulates every reduction whose operand is
  available after ``p`` earlier passes (softmax: pass 0 the max, pass 1 the sum of exps),
  recomputing the elementwise steps it needs (they come from L1: a row of 4096 floats is 16
  KiB), and stores the per-element outputs that are ready in that pass;
- per-row outputs (a reduced value, its keepdim form) are stored once, after the passes;
- a ``row_first`` value (the row's element 0 of its operand) is read before its pass;
- a float32 ``exp`` marked ``at_most_zero`` (softmax's ``exp(a - max(a))``, see
  ``codegen.rows``) is ``vmath.exp_softmax``: a masked score's ``-inf`` gives 0 without
  the subnormal scaling ``exp``'s clamp to -104 goes through;
- infinite constants of elementwise steps (``where(mask, a, -inf)``) are read once per call
  with a volatile load: as constants, LLVM turns ``max(acc, where(mask, a, -inf))`` into a
  conditional reduction it does not vectorize.

Accumulators are scalars updated with ``reassoc`` adds (sums, in float64) and
``llvm.maximum``/``llvm.minimum`` (NaN-propagating, as torch), which LLVM's loop vectorizer
turns into vector partial results; loops of long formulas are interleaved as in
``codegen.llvm_ir``. Elementwise steps that depend only on per-row values (``rsqrt(var +
eps)``) are loop-invariant: LLVM hoists them out of the column loop.
"""
from __future__ import annotations

import math

from llvmlite import ir

from scriptmod.ir import dtypes as D
from . import vmath
from .emitter import Num, compute_dtype
from .formulas import TV, emit_step, to
from .kernel import Imm, KernelSpec, OpStep
from .llvm_ir import carry_rows, read_meta, start_odometer
from .llvm_emit import I64, LLVMEmitter, for_range, host_vector_bits, ll_type, storage_type

_ONE, _ZERO = ir.Constant(I64, 1), ir.Constant(I64, 0)
_SUM_FLAGS = ("reassoc", "contract")
REDUCE_INIT = {"row_sum": 0.0, "row_max": float("-inf"), "row_min": float("inf")}
REDUCE_INTRINSIC = {"row_max": "maximum", "row_min": "minimum"}
ROW_FIRST = "row_first"      # a row's element 0 of its operand: known before its pass
ROW_VALUES = frozenset(REDUCE_INIT) | {ROW_FIRST}     # steps with one value per row
REDUCE_INTERLEAVE = 4        # partial results per lane for loops without long formulas


def levels(spec: KernelSpec) -> list[int]:
    """Per value: how many row passes must run before it is known (inputs and steps on them:
    0; a reduction: one more than its operand)."""
    n_in = len(spec.inputs)
    out = [0] * (n_in + len(spec.ops))
    for i, step in enumerate(spec.ops):
        lv = max((out[a] for a in step.args if not isinstance(a, Imm)), default=0)
        out[n_in + i] = lv + 1 if step.op in REDUCE_INIT else lv
    return out


class RowKernelBuilder:
    """Emits the body function of one row kernel (see the module docstring)."""

    def __init__(self, spec: KernelSpec, fn: ir.Function, long_ops: frozenset,
                 interleave: int) -> None:
        self.spec, self.fn = spec, fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.e = LLVMEmitter(self.b)
        self.start, self.end, *self.ptrs, self.meta = fn.args
        self.long_ops, self.interleave = long_ops, interleave
        self.n_in = len(spec.inputs)
        self.level = levels(spec)
        self.spill = self._spills()

    # ---- structure ------------------------------------------------------------------------------
    def build(self) -> None:
        b, spec = self.b, self.spec
        with b.if_then(b.icmp_signed(">=", self.start, self.end), likely=False):
            b.ret_void()
        shape, strides = read_meta(b, self.meta, spec)
        self.C, lead = shape[-1], shape[:-1]
        self.infinities = self._opaque_infinities()
        self.scalars = {k: self.e.load(self.ptrs[k], s.dtype)
                        for k, s in enumerate(spec.inputs) if s.kind == "scalar"}
        # the leading multi-index of row ``start`` and each strided input's offset there
        _, dvars, offs = start_odometer(b, self.start, lead, strides, len(lead))
        self.accs = {i: b.alloca(ll_type(spec.ops[i - self.n_in].dtype), name=f"acc{i}")
                     for i in self._reductions()}
        row_var = b.alloca(I64, name="row")
        b.store(self.start, row_var)
        header = b.append_basic_block("row.header")
        body = b.append_basic_block("row.body")
        done = b.append_basic_block("row.end")
        b.branch(header)
        b.position_at_end(header)
        row = b.load(row_var, typ=I64)
        b.cbranch(b.icmp_signed("<", row, self.end), body, done)
        b.position_at_end(body)
        self._row(row, strides, offs)
        b.store(b.add(row, _ONE), row_var)
        carry_rows(b, lead, strides, dvars, offs, header)
        b.position_at_end(done)
        b.ret_void()

    def _spills(self) -> dict[int, int]:
        """``{value: output}``: an output ``e * r`` (``r`` known only after ``e``'s pass,
        softmax's ``exp(a - m) / sum``) stores ``e`` in its own buffer in ``e``'s pass and
        scales it in place in the last pass, instead of computing ``e`` twice. Only where the
        output holds ``e`` exactly (same dtype, not per-row) and is stored by the last pass
        (an iteration reads ``e`` once, before the store; no pass after it reads ``e``)."""
        spec, n_in, out = self.spec, self.n_in, {}
        last = max(self.level[o] for o in spec.outputs)
        for jo, o in enumerate(spec.outputs):
            # the output's own pass must be the last: no later pass may read ``e`` back
            if spec.per_row[jo] or o < n_in or spec.ops[o - n_in].op != "mul" \
                    or self.level[o] != last:
                continue
            args = [a for a in spec.ops[o - n_in].args if not isinstance(a, Imm)]
            early = [a for a in args if a >= n_in and self.level[a] < self.level[o]
                     and spec.ops[a - n_in].op not in ROW_VALUES]
            if len(early) == 1 and spec.out_dtypes[jo] is spec.ops[early[0] - n_in].dtype \
                    and early[0] not in out and spec.out_dtypes[jo].is_floating_point:
                out[early[0]] = jo
        return out

    def _opaque_infinities(self) -> dict[Imm, TV]:
        """Each infinite constant of an elementwise step (a masked score's ``-inf``), read
        once per call with a volatile load, which LLVM never folds. As a constant, ``max(acc,
        where(mask, a, -inf))`` folds to ``where(mask, max(acc, a), acc)`` (``-inf`` is the
        identity of ``max``): a conditional reduction the loop vectorizer leaves scalar, 4x
        slower for a causal softmax's rows."""
        out: dict[Imm, TV] = {}
        for st in self.spec.ops:
            for a in st.args:
                if isinstance(a, Imm) and a not in out and st.op not in ROW_VALUES \
                        and a.dtype.is_floating_point and math.isinf(a.value):
                    t = ll_type(compute_dtype(a.dtype))
                    name = f"sm.rows.{'inf' if a.value > 0 else 'ninf'}.{t}"
                    var = self.fn.module.globals.get(name)
                    if var is None:
                        var = ir.GlobalVariable(self.fn.module, t, name=name)
                        var.linkage, var.global_constant = "internal", True
                        var.initializer = ir.Constant(t, a.value)
                    load = _VolatileLoad(self.b.block, var, typ=t)
                    self.b._insert(load)              # (IRBuilder has no volatile load)
                    out[a] = TV(load, a.dtype, a.value)
        return out

    def _opaque_step(self, step: OpStep) -> OpStep:
        """``step`` with its infinite constants read as ``_opaque_infinities``' values."""
        if not any(isinstance(a, Imm) and a in self.infinities for a in step.args):
            return step
        args = tuple(("opaque", a) if isinstance(a, Imm) and a in self.infinities else a
                     for a in step.args)
        return OpStep(step.op, args, step.attrs, step.dtype)          # type: ignore[arg-type]

    def _reductions(self) -> list[int]:
        return [self.n_in + i for i, s in enumerate(self.spec.ops) if s.op in REDUCE_INIT]

    def _st(self, k: int) -> ir.Type:
        dt = self.spec.inputs[k].dtype if k < self.n_in else self.spec.out_dtypes[k - self.n_in]
        return storage_type(dt)

    def _row(self, row: ir.Value, strides: dict, offs: dict) -> None:
        """Every pass over one row, then its per-row outputs."""
        b, spec = self.b, self.spec
        self.rowptr, self.step = {}, {}
        base = b.mul(row, self.C)
        for k, s in enumerate(spec.inputs):
            if s.kind == "contiguous":
                self.rowptr[k] = b.gep(self.ptrs[k], [base], source_etype=self._st(k))
                self.step[k] = _ONE
            elif s.kind == "strided":
                self.rowptr[k] = b.gep(self.ptrs[k], [b.load(offs[k], typ=I64)],
                                       source_etype=self._st(k))
                self.step[k] = strides[k][-1] if s.inner is None else ir.Constant(I64, s.inner)
        self.row_vals: dict[int, TV] = {}
        reds = self._reductions()
        full = [(j, o) for j, o in enumerate(spec.outputs) if not spec.per_row[j]]
        firsts = [self.n_in + i for i, st in enumerate(spec.ops) if st.op == ROW_FIRST]
        passes = sorted({self.level[spec.ops[r - self.n_in].args[0]] for r in reds}
                        | {self.level[o] for _, o in full} | {self.level[e] for e in self.spill}
                        | {self.level[f] for f in firsts})
        for p in passes:
            for f in firsts:
                if self.level[f] == p:        # element 0 of its operand, before the pass
                    step = spec.ops[f - self.n_in]
                    first = _Values(self, _ZERO, p, base)[step.args[0]]
                    self.row_vals[f] = TV(to(self.e, first, step.dtype), step.dtype)
            now = [r for r in reds if self.level[spec.ops[r - self.n_in].args[0]] == p]
            stores = [(j, o) for j, o in full if self.level[o] == p]
            self._pass(p, now, stores, base)
        per_row = [(j, o) for j, o in enumerate(spec.outputs) if spec.per_row[j]]
        if per_row:
            vals = _Values(self, _ZERO, None, None)
            for j, o in per_row:
                ptr = b.gep(self.ptrs[self.n_in + j], [row], source_etype=self._st(self.n_in + j))
                self.e.store(to(self.e, vals[o], spec.out_dtypes[j]), ptr, spec.out_dtypes[j])

    def _pass(self, p: int, reds: list[int], stores: list[tuple[int, int]],
              base: ir.Value) -> None:
        """One loop over the row's columns: accumulate ``reds``, store ``stores`` (and the
        values later passes read back, ``spill``). Sums add in float64; a loop of float32
        values keeps float32's vector width (``width``), each lane widened for the add."""
        b, e, spec = self.b, self.e, self.spec
        for r in reds:
            dt = spec.ops[r - self.n_in].dtype
            b.store(ir.Constant(ll_type(dt), REDUCE_INIT[spec.ops[r - self.n_in].op]),
                    self.accs[r])
        spills = [(jo, v) for v, jo in self.spill.items() if self.level[v] == p]
        interleave = self.interleave if self._long(reds, stores + spills) else REDUCE_INTERLEAVE
        narrow = [self._operand_dtype(r).itemsize for r in reds] + \
            [spec.out_dtypes[jo].itemsize for jo, _ in stores + spills]
        width = host_vector_bits() // (8 * max(4, min(narrow))) if narrow else None
        with for_range(b, _ZERO, self.C, name="col", interleave=interleave, width=width) as j:
            vals = _Values(self, j, p, base)
            for r in reds:
                step = spec.ops[r - self.n_in]
                v = to(e, vals[step.args[0]], step.dtype)
                acc = b.load(self.accs[r], typ=ll_type(step.dtype))
                if step.op == "row_sum":
                    new = b.fadd(acc, v, flags=_SUM_FLAGS)
                else:
                    new = e.call(REDUCE_INTRINSIC[step.op], [acc, v], step.dtype)
                b.store(new, self.accs[r])
            for jo, o in stores + spills:
                dt = spec.out_dtypes[jo]
                e.store(to(e, vals[o], dt), self._out_elem(jo, base, j), dt)
        for r in reds:
            dt = spec.ops[r - self.n_in].dtype
            self.row_vals[r] = TV(b.load(self.accs[r], typ=ll_type(dt)), dt)

    def _operand_dtype(self, r: int) -> D.DType:
        """The compute dtype of reduction ``r``'s operand."""
        a = self.spec.ops[r - self.n_in].args[0]
        dt = self.spec.inputs[a].dtype if a < self.n_in else self.spec.ops[a - self.n_in].dtype
        return compute_dtype(dt)

    def _out_elem(self, jo: int, base: ir.Value, j: ir.Value) -> ir.Value:
        """The address of output ``jo``'s element ``j`` of the row at ``base``."""
        st = self._st(self.n_in + jo)
        return self.b.gep(self.b.gep(self.ptrs[self.n_in + jo], [base], source_etype=st), [j],
                          source_etype=st)

    def _long(self, reds: list[int], stores: list[tuple[int, int]]) -> bool:
        """Whether the pass computes a long formula (exp, log, a division)."""
        need = [self.spec.ops[r - self.n_in].args[0] for r in reds] + [o for _, o in stores]
        seen: set[int] = set()
        while need:
            v = need.pop()
            if v in seen or v < self.n_in:
                continue
            seen.add(v)
            step = self.spec.ops[v - self.n_in]
            if step.op in self.long_ops:
                return True
            if step.op not in ROW_VALUES:
                need.extend(a for a in step.args if not isinstance(a, Imm))
        return False


class _VolatileLoad(ir.LoadInstr):
    """``load volatile``: a value the optimizer cannot fold (see ``_opaque_infinities``)."""

    def descr(self, buf: list) -> None:
        start = len(buf)
        super().descr(buf)
        buf[start] = buf[start].replace("load ", "load volatile ", 1)


class _Values:
    """The values of one loop body at column ``j``, emitted on first use (each step at most
    once per body); reductions read the row values of earlier passes."""

    def __init__(self, kb: RowKernelBuilder, j: ir.Value, p: int | None,
                 base: ir.Value | None) -> None:
        self.kb, self.j, self.p, self.base, self.memo = kb, j, p, base, {}

    def __getitem__(self, v: int | tuple) -> TV:
        kb = self.kb
        if isinstance(v, tuple):              # ("opaque", Imm): see _opaque_infinities
            return kb.infinities[v[1]]
        got = self.memo.get(v)
        if got is not None:
            return got
        if v < kb.n_in:
            s = kb.spec.inputs[v]
            if s.kind == "scalar":
                got = TV(kb.scalars[v], s.dtype)
            else:
                at = self.j if kb.step[v] is _ONE else kb.b.mul(self.j, kb.step[v])
                ptr = kb.b.gep(kb.rowptr[v], [at], source_etype=kb._st(v))
                got = TV(kb.e.load(ptr, s.dtype), s.dtype)
        elif v in kb.spill and self.p is not None and self.p > kb.level[v]:
            jo = kb.spill[v]                  # stored by an earlier pass: read it back
            dt = kb.spec.out_dtypes[jo]
            got = TV(kb.e.load(kb._out_elem(jo, self.base, self.j), dt), dt)
        else:
            step = kb.spec.ops[v - kb.n_in]
            if step.op in ROW_VALUES:
                got = kb.row_vals[v]
            elif step.op == "exp" and step.attrs.get("at_most_zero") and step.dtype is D.float32:
                x = to(kb.e, self[step.args[0]], D.float32)     # softmax's exp(a - max(a))
                got = TV(vmath.exp_softmax(Num(kb.e, D.float32), x), D.float32)
            else:
                got = emit_step(kb.e, kb._opaque_step(step), self)
        self.memo[v] = got
        return got

