"""Scalar ops and memory access as llvmlite instructions: the LLVM ``Emitter``, plus loop
helpers in numba's style (``for_range``, ``if_then``) so that builder code reads like the loop
it emits. Only LLVM intrinsics are called (never libm).
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, Sequence

from llvmlite import ir

from .emitter import Emitter, V, compute_dtype, int_range_as_float
from .formulas import round_bf16
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
_INTRINSIC = {"sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil",
              "trunc": "trunc", "rint": "roundeven", "copysign": "copysign",
              "minnum": "minnum", "maxnum": "maxnum",
              "minimum": "minimum", "maximum": "maximum", "fma": "fmuladd"}
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
               unroll_vectorized: int | None = None, width: int | None = None
               ) -> ir.values.MDValue:
    """Loop metadata: ask the vectorizer to interleave ``interleave`` vector iterations, and
    the unroller to unroll the vectorized loop ``unroll_vectorized`` times (the pipeline
    unrolls only loops that ask, see ``runtime.llvm_jit``; the scalar loop is left alone:
    unrolling it first would keep it from vectorizing). ``width``: the vectorization factor
    (LLVM otherwise sizes vectors for the widest type in the loop: a float64 accumulator
    would halve a float32 loop)."""
    def md(*ops: ir.Value) -> ir.values.MDValue:
        return module.add_metadata(list(ops))

    def text(s: str) -> ir.MetaDataString:
        return ir.MetaDataString(module, s)
    hints = []
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
              width: int | None = None) -> Iterator[ir.Value]:
    """``for i in range(start, stop)`` (signed i64); yields the induction variable.
    ``interleave``/``width``: vectorizer hints (``loop_hints``)."""
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
    if interleave or width:
        latch.set_metadata("llvm.loop", loop_hints(b.module, interleave, width=width))
    b.position_at_end(end)


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
            if not exact:       # saturate with min/max (fptosi.sat would be scalarized)
                lo, hi = int_range_as_float(src, wide.width)
                a = self.call("minnum", [self.call("maxnum", [a, self.const(lo, src)], src),
                                         self.const(hi, src)], src)
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
