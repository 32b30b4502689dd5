"""Scalar ops and memory access as llvmlite instructions: the LLVM ``Emitter``, plus loop
helpers in numba's style (``for_range``, ``if_then``) so that builder code reads like the loop
it emits. Only LLVM intrinsics are called (never libm).
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Callable, Iterator, Sequence

from llvmlite import ir

from .emitter import Emitter, V, compute_dtype, float_in_int_range
from .formulas import round_bf16
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
_INTRINSIC = {"sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil",
              "trunc": "trunc", "rint": "roundeven", "copysign": "copysign",
              "minnum": "minnum", "maxnum": "maxnum",
              "minimum": "minimum", "maximum": "maximum", "fma": "fmuladd",
              "fma_exact": "fma"}
_PRED = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def ll_type(dt: DType) -> ir.Type:
    """The LLVM type values of ``dt`` are computed in."""
    dt = compute_dtype(dt)
    if dt is D.bool_:
        return I1
    if dt.is_floating_point:
        return ir.DoubleType() if dt is D.float64 else ir.FloatType()
    return ir.IntType(dt.bits)


def storage_type(dt: DType) -> ir.Type:
    """The LLVM type of ``dt`` in memory."""
    return {D.bool_: I8, D.float16: ir.HalfType(), D.bfloat16: I16}.get(dt) or ll_type(dt)


class _LoopID(ir.values.MDValue):
    """``distinct !{!self, hints...}``: the self-referential loop ID LLVM's loop hints need
    (llvmlite's ``add_metadata`` cannot express the self reference)."""

    def descr(self, buf: list) -> None:
        ops = ", ".join([self.get_reference()] + [op.get_reference() for op in self.operands])
        buf += (f"distinct !{{{ops}}}", "\n")

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def loop_hints(module: ir.Module, interleave: int | None = None,
               unroll_vectorized: int | None = None, width: int | None = None,
               vectorize: bool = True) -> ir.values.MDValue:
    """Loop metadata: ask the vectorizer to interleave ``interleave`` vector iterations, and
    the unroller to unroll the vectorized loop ``unroll_vectorized`` times (the pipeline
    unrolls only loops that ask, see ``runtime.llvm_jit``; the scalar loop is left alone:
    unrolling it first would keep it from vectorizing). ``width``: the vectorization factor
    (LLVM otherwise sizes vectors for the widest type in the loop: a float64 accumulator
    would halve a float32 loop). ``vectorize=False``: keep the loop scalar (a rarely taken
    loop, not worth the compile time)."""
    def md(*ops: ir.Value) -> ir.values.MDValue:
        return module.add_metadata(list(ops))

    def text(s: str) -> ir.MetaDataString:
        return ir.MetaDataString(module, s)
    hints = []
    if not vectorize:
        hints.append(md(text("llvm.loop.vectorize.enable"), ir.Constant(I1, 0)))
    if interleave is not None:
        hints.append(md(text("llvm.loop.interleave.count"), ir.Constant(I32, interleave)))
    if width is not None:
        hints.append(md(text("llvm.loop.vectorize.width"), ir.Constant(I32, width)))
    if unroll_vectorized is not None:
        count = md(text("llvm.loop.unroll.count"), ir.Constant(I32, unroll_vectorized))
        hints.append(md(text("llvm.loop.vectorize.followup_vectorized"), count))
    return _LoopID(module, hints, name=str(len(module.metadata)))


@contextmanager
def for_range(b: ir.IRBuilder, start: ir.Value, stop: ir.Value,
              name: str = "i", interleave: int | None = None,
              width: int | None = None, vectorize: bool = True) -> Iterator[ir.Value]:
    """``for i in range(start, stop)`` (signed i64); yields the induction variable.
    ``interleave``/``width``/``vectorize``: vectorizer hints (``loop_hints``)."""
    pre = b.block
    header = b.append_basic_block(f"{name}.header")
    body = b.append_basic_block(f"{name}.body")
    end = b.append_basic_block(f"{name}.end")
    b.branch(header)
    b.position_at_end(header)
    phi = b.phi(I64, name=name)
    phi.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", phi, stop), body, end)
    b.position_at_end(body)
    yield phi
    phi.add_incoming(b.add(phi, ir.Constant(I64, 1), flags=["nsw"]), b.block)
    latch = b.branch(header)
    if interleave and interleave > 1:     # 1: a hint of no interleaving, kept as asked
        blocks = b.function.blocks
        interleave = capped_interleave(
            interleave, sum(map(_weight, (i for blk in blocks[blocks.index(body):]
                                           for i in blk.instructions))))
    if interleave or width or not vectorize:
        latch.set_metadata("llvm.loop", loop_hints(b.module, interleave, width=width,
                                                   vectorize=vectorize))
    b.position_at_end(end)


# Interleaving copies the vectorized loop body ``count`` times, and O3's passes are
# superlinear in the size of one block: eight interleaved copies of eight chained float64
# erfs (1,500 instructions each) took 2.7-3.3 s to compile. Capped at 3,200 instructions of
# copies, the slowest 8-op groups compile in 0.3-0.8 s and still run as fast as with eight
# copies (8 chained erfs: 109 -> 101 ns per element; at 1,600 they lost 40%: such chains
# are latency-bound and do need a few copies).
INTERLEAVE_BUDGET = 3200


_I64 = ir.IntType(64)
# A vector multiply of 64-bit ints has no AVX2 instruction: it is expanded into ~6 (three
# 32-bit multiplies, shifts and adds), and the expansion is what O3 then works on. An int64
# pow (63 square-and-multiply steps) counted as 430 instructions compiled in 1.0 s.
I64_MUL_WEIGHT = 6


def _weight(instr: Any) -> int:
    return I64_MUL_WEIGHT if instr.opname == "mul" and instr.type == _I64 else 1


def capped_interleave(count: int, body_instructions: int) -> int | None:
    """The largest power of two <= ``count`` whose copies of a loop body of
    ``body_instructions`` stay within ``INTERLEAVE_BUDGET`` (None: no interleaving).

        >>> capped_interleave(8, 40), capped_interleave(8, 1500), capped_interleave(8, 4000)
        (8, 2, None)
    """
    while count > 1 and count * body_instructions > INTERLEAVE_BUDGET:
        count //= 2
    return count if count > 1 else None


def if_then(b: ir.IRBuilder, pred: ir.Value) -> "contextmanager[None]":
    """``if pred:`` block (llvmlite's own helper, re-exported beside ``for_range``)."""
    return b.if_then(pred)


@lru_cache(maxsize=None)
def host_has_scalef() -> bool:
    """Whether ``llvm.ldexp`` vectorizes to one instruction on this host (AVX-512
    ``vscalef``); elsewhere it may become a scalar libm call, so vmath does the bit trick."""
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")
    except Exception:          # no native target: the generic form is always correct
        return False


@lru_cache(maxsize=None)
def host_vector_bits() -> int:
    """The vector width LLVM uses for float loops on this host: 256 with AVX2 (AVX-512 hosts
    too: LLVM prefers 256-bit vectors there), else 128."""
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        return 256 if "+avx2" in llvm.get_host_cpu_features().flatten().split(",") else 128
    except Exception:
        return 128


class LLVMEmitter(Emitter):
    """Scalar ops as llvmlite instructions at the builder's position."""

    def __init__(self, builder: ir.IRBuilder) -> None:
        self.b = builder
        self.rare: list[V] | None = None
        self.scalar = False

    def outline(self, name: str, body: Callable[[Emitter, list[V]], Sequence[V]],
                args: Sequence[V], dt: DType, n_results: int) -> tuple[V, ...] | None:
        """``body(emitter, params)`` as an internal ``noinline`` function ``name`` of the
        module (built on first use) called here, in a loop that stays scalar (``scalar``
        set by the kernel builder: a call would keep a loop from vectorizing); None
        elsewhere. A long rare path then costs its IR once per module, not once per use."""
        if not self.scalar:
            return None
        module, t = self.b.module, ll_type(dt)
        ret = ir.LiteralStructType([t] * n_results)
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name=name)
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            fn.attributes.add("nounwind")
            inner = ir.IRBuilder(fn.append_basic_block("entry"))
            agg = ir.Constant(ret, ir.Undefined)
            for k, v in enumerate(body(LLVMEmitter(inner), list(fn.args))):
                agg = inner.insert_value(agg, v, k)
            inner.ret(agg)
        call = self.b.call(fn, list(args))
        return tuple(self.b.extract_value(call, k) for k in range(n_results))

    def skip_rare(self, cond: V) -> bool:
        """Whether a formula may leave out its slow path for the elements where ``cond``
        holds: yes while the kernel builder collects such conditions in ``rare`` (it runs
        the loop again in full where one held, see ``codegen.llvm_ir``)."""
        if self.rare is None:
            return False
        self.rare.append(cond)
        return True

    def _intrinsic(self, base: str, types: Sequence[ir.Type], ret: ir.Type,
                   args: Sequence[ir.Value]) -> ir.Value:
        module = self.b.module
        name = f"llvm.{base}." + ".".join(_mangle(t) for t in types)
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name=name)
        return self.b.call(fn, args)

    def const(self, value: bool | int | float, dt: DType) -> V:
        t = ll_type(dt)
        return ir.Constant(t, float(value) if isinstance(t, (ir.FloatType, ir.DoubleType))
                           else int(value))

    def arith(self, op: str, a: V, b: V, dt: DType) -> V:
        dt = compute_dtype(dt)
        if dt.is_floating_point:
            return getattr(self.b, {"add": "fadd", "sub": "fsub", "mul": "fmul",
                                    "div": "fdiv", "rem": "frem"}[op])(a, b)
        if op in ("div", "rem"):
            signed = dt.signed and dt is not D.bool_
            op = ("s" if signed else "u") + ("div" if op == "div" else "rem")
        return getattr(self.b, op)(a, b)

    def neg(self, a: V, dt: DType) -> V:
        return self.b.fneg(a) if compute_dtype(dt).is_floating_point else self.b.neg(a)

    def fma(self, a: V, b: V, c: V, dt: DType) -> V:
        return self._intrinsic("fmuladd", [a.type], a.type, [a, b, c])

    def call(self, fn: str, args: Sequence[V], dt: DType) -> V:
        t = ll_type(dt)
        return self._intrinsic(_INTRINSIC[fn], [t], t, list(args))

    def ldexp(self, a: V, k: V, dt: DType) -> V | None:
        """a * 2**k (k a same-width int, |k| < 2**30) with one rounding, as ``llvm.ldexp``;
        None where the host has no vector instruction for it (see ``host_has_scalef``)."""
        if not host_has_scalef():
            return None
        if k.type.width != 32:
            k = self.b.trunc(k, I32)
        return self._intrinsic("ldexp", [a.type, I32], a.type, [a, k])

    def table(self, name: str, values: Sequence[float], index: V, dt: DType) -> V:
        """``values[index]`` from an internal constant array ``name`` of the module (made on
        first use; ``index`` an i64 within range): the loop vectorizer gathers it."""
        module, t = self.b.module, ll_type(dt)
        table = module.globals.get(name)
        if table is None:
            at = ir.ArrayType(t, len(values))
            table = ir.GlobalVariable(module, at, name=name)
            table.linkage = "internal"
            table.global_constant = True
            table.initializer = ir.Constant(at, [float(v) for v in values])
        ptr = self.b.gep(table, [ir.Constant(I64, 0), index], inbounds=True,
                         source_etype=table.value_type)
        return self.b.load(ptr, typ=t, align=compute_dtype(dt).itemsize)

    def lrint(self, a: V, dt: DType) -> V | None:
        """rint(a) converted to int32 in one instruction (``llvm.lrint``, current rounding
        mode: nearest-even), for |a| < 2**31; None unless ``ldexp`` is native too."""
        if not host_has_scalef():
            return None
        return self._intrinsic("lrint", [I32, a.type], I32, [a])

    def cmp(self, op: str, a: V, b: V, dt: DType) -> V:
        dt = compute_dtype(dt)
        if dt.is_floating_point:
            if op == "ne":
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(_PRED[op], a, b)
        if dt.signed and dt is not D.bool_:
            return self.b.icmp_signed(_PRED[op], a, b)
        return self.b.icmp_unsigned(_PRED[op], a, b)

    def select(self, cond: V, a: V, b: V, dt: DType) -> V:
        return self.b.select(cond, a, b)

    def bits(self, op: str, a: V, b: V, dt: DType) -> V:
        return getattr(self.b, {"and": "and_", "or": "or_"}.get(op, op))(a, b)

    def bitcast(self, a: V, src: DType, dst: DType) -> V:
        return self.b.bitcast(a, ll_type(dst))

    def convert(self, a: V, src: DType, dst: DType, exact: bool = False) -> V:
        src, dst = compute_dtype(src), compute_dtype(dst)
        st, tt = ll_type(src), ll_type(dst)
        if dst is D.bool_:
            if src.is_floating_point:
                return self.b.fcmp_unordered("!=", a, ir.Constant(st, 0.0))
            return self.b.icmp_unsigned("!=", a, ir.Constant(st, 0))
        if src.is_floating_point and dst.is_floating_point:
            return self.b.fpext(a, tt) if src.bits < dst.bits else self.b.fptrunc(a, tt)
        if dst.is_floating_point:
            signed = src.signed and src is not D.bool_
            return self.b.sitofp(a, tt) if signed else self.b.uitofp(a, tt)
        if src.is_floating_point:
            wide = I64 if dst.bits == 64 else I32
            if not exact:       # NaN, inf, out of range: the wide int's minimum (x86, torch)
                a = self.select(float_in_int_range(self, a, src, wide.width), a,
                                self.const(-2.0 ** (wide.width - 1), src), src)
            v = self.b.fptosi(a, wide)
            return v if wide == tt else self.b.trunc(v, tt)
        return self._int_resize(a, src, tt)

    def _int_resize(self, a: V, src: DType, tt: ir.IntType) -> V:
        width = a.type.width
        if width == tt.width:
            return a
        if width > tt.width:
            return self.b.trunc(a, tt)
        signed = src.signed and src is not D.bool_
        return self.b.sext(a, tt) if signed else self.b.zext(a, tt)

    def round_half(self, a: V) -> V:
        return self.b.fpext(self.b.fptrunc(a, ir.HalfType()), ir.FloatType())

    # ---- memory ----------------------------------------------------------------------
    def load(self, ptr: ir.Value, dt: DType) -> V:
        """Load one element of storage dtype ``dt`` and widen it to its compute type."""
        st = storage_type(dt)
        v = self.b.load(ptr, typ=st, align=dt.itemsize)
        if dt is D.bool_:
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        if dt is D.float16:
            return self.b.fpext(v, ir.FloatType())
        if dt is D.bfloat16:
            return self.b.bitcast(self.b.shl(self.b.zext(v, I32), ir.Constant(I32, 16)),
                                  ir.FloatType())
        return v

    def store(self, v: V, ptr: ir.Value, dt: DType) -> None:
        """Store a compute value (already rounded for half types) as storage dtype ``dt``."""
        if dt is D.bool_:
            v = self.b.zext(v, I8)
        elif dt is D.float16:
            v = self.b.fptrunc(v, ir.HalfType())
        elif dt is D.bfloat16:
            bits = self.b.bitcast(round_bf16(self, v), I32)
            v = self.b.trunc(self.b.lshr(bits, ir.Constant(I32, 16)), I16)
        self.b.store(v, ptr, align=dt.itemsize)


def _mangle(t: ir.Type) -> str:
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.HalfType):
        return "f16"
    return f"i{t.width}"
