"""The tiny scalar-emitter interface that formulas and vector math are written against.

One implementation builds LLVM IR (``codegen.llvm_ir.LLVMEmitter``), one writes C
statements (``codegen.c_source.CEmitter``); the formulas table drives both. Values are
opaque (an llvmlite value, a C variable name). Every value has a *semantic* dtype; it is
held in its *compute* type: bool -> i1/bool, ints -> same-width ints, float16/bfloat16 ->
float32, float32, float64.

``Num`` binds an emitter to one dtype so that math reads like math::

    m = Num(e, float32)
    y = m.fma(x, m.c(2.0), m.c(1.0))
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

V = Any  # an emitted value: opaque to formulas

CALLS = ("sqrt", "fabs", "floor", "ceil", "trunc", "rint", "copysign", "minnum", "maxnum",
         "fma_exact")    # fma_exact: one rounding always (``fma`` may be a mul and an add)
CMPS = ("eq", "ne", "lt", "le", "gt", "ge")  # float: ordered, except ne (true on NaN)


def compute_dtype(d: DType) -> DType:
    """The dtype values of ``d`` are computed in (half types compute in float32)."""
    if d.is_complex:
        raise TypeError(f"codegen: complex dtype {d.name} is not supported by fused kernels")
    return D.float32 if d in (D.float16, D.bfloat16) else d


def int_of(d: DType) -> DType:
    """The same-width signed integer of a float compute dtype (for bit tricks)."""
    return D.int64 if d is D.float64 else D.int32


def float_in_int_range(e: "Emitter", a: V, src: DType, bits: int) -> V:
    """Whether float ``a`` truncates into a signed ``bits``-bit int: |a| < 2**(bits-1), false
    for NaN and inf. Out of range, a float to int cast gives that int's minimum (what x86's
    cvttss2si gives, and so PyTorch and NumPy on x86-64): the caller converts ``-2**(bits-1)``
    there, so the conversion is never undefined."""
    limit = e.const(2.0 ** (bits - 1), src)
    return e.cmp("lt", e.call("fabs", [a], src), limit, src)


class Emitter(ABC):
    """Scalar operations. ``dt`` arguments are semantic dtypes; ops act on compute types."""

    @abstractmethod
    def const(self, value: bool | int | float, dt: DType) -> V:
        """A constant of ``dt`` (inf and nan allowed for floats)."""

    @abstractmethod
    def arith(self, op: str, a: V, b: V, dt: DType) -> V:
        """add, sub, mul, div, rem. Integer div/rem truncate; the caller guards zero."""

    @abstractmethod
    def neg(self, a: V, dt: DType) -> V:
        """-a (IEEE negation for floats, wrapping for ints)."""

    @abstractmethod
    def fma(self, a: V, b: V, c: V, dt: DType) -> V:
        """a*b + c, fused where the target can (never a library call)."""

    @abstractmethod
    def call(self, fn: str, args: Sequence[V], dt: DType) -> V:
        """A float intrinsic from ``CALLS``; minnum/maxnum return the non-NaN operand."""

    @abstractmethod
    def cmp(self, op: str, a: V, b: V, dt: DType) -> V:
        """A comparison from ``CMPS`` -> bool (ints compare signed or not by ``dt``)."""

    @abstractmethod
    def select(self, cond: V, a: V, b: V, dt: DType) -> V:
        """cond ? a : b."""

    @abstractmethod
    def bits(self, op: str, a: V, b: V, dt: DType) -> V:
        """and, or, xor, shl, lshr, ashr on ints or bools."""

    @abstractmethod
    def bitcast(self, a: V, src: DType, dst: DType) -> V:
        """Reinterpret bits between a float compute type and the same-width int."""

    @abstractmethod
    def convert(self, a: V, src: DType, dst: DType, exact: bool = False) -> V:
        """Numeric conversion between compute types (to bool is ``!= 0``; float to int
        truncates; NaN, inf and out of range give the minimum of int64 for int64 and of int32,
        wrapped, for narrower ints, as on x86-64: never UB). ``exact``: the caller guarantees an
        integral, in-range float, so no range check is needed."""

    @abstractmethod
    def round_half(self, a: V) -> V:
        """Round a float32 value to the nearest float16 (result held as float32)."""


class Num:
    """An emitter bound to one compute dtype: short names for the math in ``vmath``."""

    def __init__(self, e: Emitter, dt: DType) -> None:
        self.e, self.dt = e, compute_dtype(dt)
        self.f64 = self.dt is D.float64

    def c(self, value: float | int | bool) -> V:
        return self.e.const(value, self.dt)

    def add(self, a: V, b: V) -> V:
        return self.e.arith("add", a, b, self.dt)

    def sub(self, a: V, b: V) -> V:
        return self.e.arith("sub", a, b, self.dt)

    def mul(self, a: V, b: V) -> V:
        return self.e.arith("mul", a, b, self.dt)

    def div(self, a: V, b: V) -> V:
        return self.e.arith("div", a, b, self.dt)

    def neg(self, a: V) -> V:
        return self.e.neg(a, self.dt)

    def fma(self, a: V, b: V, c: V) -> V:
        return self.e.fma(a, b, c, self.dt)

    def call(self, fn: str, *args: V) -> V:
        return self.e.call(fn, args, self.dt)

    def cmp(self, op: str, a: V, b: V) -> V:
        return self.e.cmp(op, a, b, self.dt)

    def sel(self, cond: V, a: V, b: V) -> V:
        return self.e.select(cond, a, b, self.dt)

    def poly(self, x: V, coeffs: Sequence[float]) -> V:
        """Horner: coeffs[0] + coeffs[1]*x + ... (highest degree last)."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def isnan(self, x: V) -> V:
        return self.cmp("ne", x, x)

    def keep_nan(self, x: V, y: V) -> V:
        """y, except NaN where x is NaN."""
        return self.sel(self.isnan(x), x, y)

    def clamp(self, x: V, lo: float, hi: float) -> V:
        """Clamp with minnum/maxnum: NaN becomes a finite number (safe to convert to int)."""
        return self.call("minnum", self.call("maxnum", x, self.c(lo)), self.c(hi))

    def to_int(self, x: V) -> V:
        """Float (already integral and in range) -> same-width int."""
        return self.e.convert(x, self.dt, int_of(self.dt), exact=True)

    def int_const(self, v: int) -> V:
        return self.e.const(v, int_of(self.dt))

    def iop(self, op: str, a: V, b: V) -> V:
        """Integer arithmetic or bit op in the same-width int type."""
        it = int_of(self.dt)
        if op in ("add", "sub", "mul"):
            return self.e.arith(op, a, b, it)
        return self.e.bits(op, a, b, it)

    def signbit(self, x: V) -> V:
        it = int_of(self.dt)
        return self.e.cmp("lt", self.e.bitcast(x, self.dt, it), self.e.const(0, it), it)

    def both(self, a: V, b: V) -> V:
        return self.e.bits("and", a, b, D.bool_)

    def either(self, a: V, b: V) -> V:
        return self.e.bits("or", a, b, D.bool_)
