"""The scalar formula of every elementwise op: ONE table, ``FORMULAS[op_name]``.

A formula is ``fn(e, args, out, attrs) -> value``: ``e`` an ``Emitter`` (LLVM or C),
``args`` typed operands (``TV``), ``out`` the step's result dtype. The same table drives
``codegen.llvm_ir`` and ``codegen.c_source``. A float16/bfloat16 op computes in float32 and
its result is rounded (to nearest even) to its dtype by ``emit_step``, once per op, as eager
and PyTorch round it; operands promoted into a half dtype are rounded by ``to``.

    >>> sorted(FORMULAS)[:3]
    ['abs', 'acos', 'acosh']
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

from . import vmath
from .emitter import Emitter, Num, V, compute_dtype
from .kernel import Imm, KernelSpec, OpStep, checked_float, checked_int
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.ir.dtypes import DType, imm_value


class TV(NamedTuple):
    """A typed operand: emitted value, semantic dtype, and the Python value of an Imm."""

    v: V
    dt: DType
    imm: bool | int | float | None = None


Formula = Callable[[Emitter, Sequence[TV], DType, dict], V]
HALF = (D.float16, D.bfloat16)


# ---- conversions ------------------------------------------------------------------------
def round_bf16(e: Emitter, v: V) -> V:
    """Round a float32 value to the nearest bfloat16 (ties to even), kept as float32."""
    i32 = D.int32
    b = e.bitcast(v, D.float32, i32)
    lsb = e.bits("and", e.bits("lshr", b, e.const(16, i32), i32), e.const(1, i32), i32)
    r = e.arith("add", e.arith("add", b, e.const(0x7FFF, i32), i32), lsb, i32)
    r = e.bits("and", r, e.const(-65536, i32), i32)
    out = e.bitcast(r, i32, D.float32)
    return e.select(e.cmp("ne", v, v, D.float32), e.const(math.nan, D.float32), out, D.float32)


def round_to(e: Emitter, v: V, dt: DType) -> V:
    """Round a float32 compute value to a half dtype's precision (identity otherwise)."""
    if dt is D.float16:
        return e.round_half(v)
    if dt is D.bfloat16:
        return round_bf16(e, v)
    return v


def to(e: Emitter, a: TV, dt: DType) -> V:
    """Operand ``a`` converted to ``dt`` (rounded when ``dt`` is a half type)."""
    if a.dt is dt:
        return a.v
    if a.imm is not None:       # the constant as its own dtype holds it (1e30 as float16: inf)
        return e.const(imm_value(imm_value(a.imm, a.dt), dt), compute_dtype(dt))
    src, dst = compute_dtype(a.dt), compute_dtype(dt)
    v = a.v if src is dst else e.convert(a.v, src, dst)
    return round_to(e, v, dt) if dt in HALF and a.dt is not D.float16 else v


def _all(e: Emitter, args: Sequence[TV], dt: DType) -> list[V]:
    return [to(e, a, dt) for a in args]


def _common(args: Sequence[TV]) -> DType:
    out = args[0].dt
    for a in args[1:]:
        out = D.promote_types(out, a.dt)
    return out


def _need(cond: bool, op: str, dt: DType) -> None:
    if not cond:
        raise TypeError(f"codegen: {op} is not defined for dtype {dt.name}")


# ---- unary ------------------------------------------------------------------------------
def _float_unary(fn: Callable[[Num, V], V]) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        _need(out.is_floating_point, fn.__name__, out)
        return fn(Num(e, out), to(e, args[0], out))
    return formula


def _neg(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    _need(out is not D.bool_, "neg", out)
    return e.neg(to(e, args[0], out), compute_dtype(out))


def _abs(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    x, dt = to(e, args[0], out), compute_dtype(out)
    if out.is_floating_point:
        return e.call("fabs", [x], dt)
    if out is D.bool_ or not out.signed:
        return x
    return e.select(e.cmp("lt", x, e.const(0, dt), dt), e.neg(x, dt), x, dt)


def _sign(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    x, dt = to(e, args[0], out), compute_dtype(out)
    if out is D.bool_:
        return x
    zero, one = e.const(0, dt), e.const(1, dt)     # PyTorch: sign(NaN) = sign(-0.0) = +0
    pos = e.select(e.cmp("gt", x, zero, dt), one, zero, dt)
    return e.select(e.cmp("lt", x, zero, dt), e.const(-1, dt), pos, dt)


def _relu(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    x, dt = to(e, args[0], out), compute_dtype(out)
    if out is D.bool_:
        return x
    return e.select(e.cmp("lt", x, e.const(0, dt), dt), e.const(0, dt), x, dt)


def _rounding(fn: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        x = to(e, args[0], out)
        return e.call(fn, [x], compute_dtype(out)) if out.is_floating_point else x
    return formula


def _reciprocal(m: Num, x: V) -> V:
    return m.div(m.c(1.0), x)


# ---- binary arithmetic --------------------------------------------------------------------
def _arith(op: str, bool_op: str | None) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        a, b = _all(e, args, out)
        if out is D.bool_:
            _need(bool_op is not None, op, out)
            return e.bits(bool_op, a, b, out)
        return e.arith(op, a, b, compute_dtype(out))
    return formula


def _div(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    _need(out.is_floating_point, "div", out)
    a, b = _all(e, args, out)
    return e.arith("div", a, b, compute_dtype(out))


def _int_divmod(e: Emitter, a: V, b: V, dt: DType) -> tuple[V, V]:
    """Floor quotient and remainder of ints; b == 0 gives (a, 0) instead of a trap."""
    zero, one = e.const(0, dt), e.const(1, dt)
    unsafe = e.cmp("eq", b, zero, dt)
    if dt.signed:
        minus1 = e.cmp("eq", b, e.const(-1, dt), dt)
        unsafe = e.bits("or", unsafe, minus1, D.bool_)
    bs = e.select(unsafe, one, b, dt)
    q, r = e.arith("div", a, bs, dt), e.arith("rem", a, bs, dt)
    if not dt.signed:
        return q, r
    q = e.select(minus1, e.neg(a, dt), q, dt)
    fix = e.bits("and", e.cmp("ne", r, zero, dt),
                 e.bits("xor", e.cmp("lt", r, zero, dt), e.cmp("lt", bs, zero, dt), D.bool_),
                 D.bool_)
    q = e.select(fix, e.arith("sub", q, one, dt), q, dt)
    return q, e.select(fix, e.arith("add", r, bs, dt), r, dt)


# |a/b| from which a - trunc(a/b)*b is no longer exact: such elements take the exact fmod
FMOD_FAST_MAX = 2.0 ** 20


def _fmod(m: Num, a: V, b: V, q: V) -> V:
    """C's fmod(a, b), exactly, given q = a/b: a - trunc(q)*b with one rounding while
    |q| < ``FMOD_FAST_MAX``; the target's exact fmod (LLVM ``frem``, C ``fmod``) beyond, a
    rare path that an emitter with ``skip_rare`` leaves to a scalar rerun (as vmath's sin)."""
    fast = m.fma(m.neg(m.call("trunc", q)), b, a)
    large = m.cmp("ge", m.call("fabs", q), m.c(FMOD_FAST_MAX))      # NaN: no; inf: yes
    skip = getattr(m.e, "skip_rare", None)
    if skip is not None and skip(large):
        return fast
    return m.sel(large, m.e.arith("rem", a, b, m.dt), fast)


def _float_divmod(m: Num, a: V, b: V) -> tuple[V, V]:
    """PyTorch's (and NumPy's npy_divmod) floor division and remainder of floats, from the
    exact fmod: exact over the whole float range, as PyTorch's CPU kernels are."""
    e, zero, one = m.e, m.c(0.0), m.c(1.0)
    q = m.div(a, b)
    mod = _fmod(m, a, b, q)
    inf_b = m.cmp("eq", m.call("fabs", b), m.c(math.inf))
    mod = m.sel(m.both(inf_b, m.cmp("lt", m.call("fabs", a), m.c(math.inf))), a, mod)
    div = m.div(m.sub(a, mod), b)
    wrong = m.both(m.cmp("ne", mod, zero),
                   e.bits("xor", m.cmp("lt", b, zero), m.cmp("lt", mod, zero), D.bool_))
    mod = m.sel(wrong, m.add(mod, b), mod)
    mod = m.sel(m.cmp("eq", mod, zero), m.call("copysign", zero, a), mod)   # PyTorch: sign of a
    div = m.sel(wrong, m.sub(div, one), div)
    fl = m.call("floor", div)
    fl = m.sel(m.cmp("gt", m.sub(div, fl), m.c(0.5)), m.add(fl, one), fl)
    fl = m.sel(m.cmp("eq", div, zero), m.call("copysign", zero, q), fl)
    b_zero = m.cmp("eq", b, zero)
    return m.sel(b_zero, q, fl), m.sel(b_zero, m.c(math.nan), mod)


def _divmod(which: int, name: str) -> Formula:
    """floor_divide (which=0) or remainder (which=1), Python/NumPy semantics."""
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        a, b = _all(e, args, out)
        if out.is_floating_point:
            return _float_divmod(Num(e, out), a, b)[which]
        _need(out is not D.bool_, name, out)
        return _int_divmod(e, a, b, out)[which]
    return formula


def _pow(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    base, ex = args
    if ex.imm is not None and not out.is_floating_point and ex.imm < 0:
        raise ArgumentValueError("pow: Integers to negative integer powers are not allowed.")
    if ex.imm is not None and not out.is_floating_point and out is not D.bool_:
        checked_int(int(ex.imm), out, "pow")
    if ex.imm is not None and out in HALF:          # PyTorch converts it to the half dtype
        checked_float(ex.imm, out, "pow")
    m = Num(e, out)
    x = to(e, base, out)
    if ex.imm is not None and float(ex.imm).is_integer() and abs(ex.imm) <= 64:
        if out.is_floating_point or ex.imm >= 0:
            return vmath.powi(m, x, int(ex.imm))
    if ex.imm is not None and out.is_floating_point and ex.imm in (0.5, -0.5):
        return vmath.sqrt(m, x) if ex.imm > 0 else vmath.rsqrt(m, x)
    if out.is_floating_point:
        return vmath.pow(m, x, to(e, ex, out))
    _need(out is not D.bool_, "pow", out)
    return _int_pow(e, x, to(e, ex, out), compute_dtype(out))


def _int_pow(e: Emitter, x: V, n: V, dt: DType) -> V:
    """Integer power by square-and-multiply over every exponent bit; n < 0 as in Python's
    int(x ** n) truncated: 1 for x == 1, +-1 for x == -1, else 0."""
    one, zero = e.const(1, dt), e.const(0, dt)
    r, base, k = one, x, n
    for _ in range(dt.bits - (1 if dt.signed else 0)):
        odd = e.cmp("ne", e.bits("and", k, one, dt), zero, dt)
        r = e.select(odd, e.arith("mul", r, base, dt), r, dt)
        base = e.arith("mul", base, base, dt)
        k = e.bits("lshr", k, one, dt)
    if not dt.signed:
        return r
    odd_n = e.cmp("ne", e.bits("and", n, one, dt), zero, dt)
    neg_res = e.select(e.cmp("eq", x, one, dt), one, zero, dt)
    neg_res = e.select(e.cmp("eq", x, e.const(-1, dt), dt),
                       e.select(odd_n, e.const(-1, dt), one, dt), neg_res, dt)
    return e.select(e.cmp("lt", n, zero, dt), neg_res, r, dt)


def _extremum(which: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        a, b = _all(e, args, out)
        dt = compute_dtype(out)
        if out is D.bool_:
            return e.bits("or" if which == "gt" else "and", a, b, dt)
        r = e.select(e.cmp(which, a, b, dt), a, b, dt)
        if out.is_floating_point:                              # NaN propagates from either side
            r = e.select(e.cmp("ne", b, b, dt), b, r, dt)
            r = e.select(e.cmp("ne", a, a, dt), a, r, dt)
        return r
    return formula


def _copysign(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    _need(out.is_floating_point, "copysign", out)
    a, b = _all(e, args, out)
    return Num(e, out).call("copysign", a, b)


def _fmod_formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    """C's fmod (the sign of ``a``; ``a`` itself for an infinite ``b``); ints: the
    truncated remainder, b == 0 giving 0 instead of a trap (eager raises)."""
    a, b = _all(e, args, out)
    dt = compute_dtype(out)
    if not out.is_floating_point:
        _need(out is not D.bool_, "fmod", out)
        unsafe = e.cmp("eq", b, e.const(0, dt), dt)
        if out.signed:
            unsafe = e.bits("or", unsafe, e.cmp("eq", b, e.const(-1, dt), dt), D.bool_)
        return e.arith("rem", a, e.select(unsafe, e.const(1, dt), b, dt), dt)
    m = Num(e, out)
    r = _fmod(m, a, b, m.div(a, b))
    keep_a = m.both(m.cmp("eq", m.call("fabs", b), m.c(math.inf)),
                    m.cmp("lt", m.call("fabs", a), m.c(math.inf)))
    r = m.sel(keep_a, a, r)
    return m.sel(m.cmp("eq", r, m.c(0.0)), m.call("copysign", m.c(0.0), a), r)


def _shift(left: bool) -> Formula:
    """PyTorch's shifts: a shift below 0 or not below the bit width gives 0 (left) or the
    sign fill (right: 0, or -1 for a negative signed value)."""
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        _need(out.category == D.INT, "bitwise_shift", out)
        a, b = _all(e, args, out)
        dt = compute_dtype(out)
        zero = e.const(0, dt)
        valid = e.cmp("lt", b, e.const(out.bits, dt), dt)
        if out.signed:
            valid = e.bits("and", valid, e.cmp("ge", b, zero, dt), D.bool_)
        s = e.select(valid, b, zero, dt)
        if left:
            return e.select(valid, e.bits("shl", a, s, dt), zero, dt)
        if not out.signed:
            return e.select(valid, e.bits("lshr", a, s, dt), zero, dt)
        fill = e.bits("ashr", a, e.const(out.bits - 1, dt), dt)
        return e.select(valid, e.bits("ashr", a, s, dt), fill, dt)
    return formula


def _binary_float(fn: Callable[[Num, V, V], V]) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        _need(out.is_floating_point, fn.__name__, out)
        a, b = _all(e, args, out)
        return fn(Num(e, out), a, b)
    return formula


def _atan2(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    a, b = _all(e, args, out)
    return vmath.atan2(Num(e, out), a, b)


# ---- comparisons, logic, bits -----------------------------------------------------------------
def _compare(op: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        dt = _common(args)
        a, b = _all(e, args, dt)
        return e.cmp(op, a, b, compute_dtype(dt))
    return formula


def _logical(op: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        vals = _all(e, args, D.bool_)
        if op == "not":
            return e.bits("xor", vals[0], e.const(True, D.bool_), D.bool_)
        return e.bits(op, vals[0], vals[1], D.bool_)
    return formula


def _isclass(kind: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        a = args[0]
        if not a.dt.is_floating_point:
            return e.const(False, D.bool_)
        dt = compute_dtype(a.dt)
        if kind == "nan":
            return e.cmp("ne", a.v, a.v, dt)
        return e.cmp("eq", e.call("fabs", [a.v], dt), e.const(math.inf, dt), dt)
    return formula


def _isclose(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    """PyTorch's: equal, or both NaN with ``equal_nan``, or a finite |a - b| within
    atol + |rtol * b|; integers compare exactly, their distance is taken in float64."""
    dt = _common(args)
    close = e.cmp("eq", *_all(e, args, dt), compute_dtype(dt))
    m = Num(e, dt if dt.is_floating_point else D.float64)
    a, b = (to(e, x, m.dt) for x in args)
    if attrs["equal_nan"] and dt.is_floating_point:
        close = m.either(close, m.both(m.isnan(a), m.isnan(b)))
    if attrs["rtol"] == 0 and attrs["atol"] == 0:
        return close
    err = m.call("fabs", m.sub(a, b))
    allowed = m.add(m.c(attrs["atol"]), m.call("fabs", m.mul(m.c(attrs["rtol"]), b)))
    within = m.both(m.cmp("lt", err, m.c(math.inf)), m.cmp("le", err, allowed))
    return m.either(close, within)


def _bitwise(op: str) -> Formula:
    def formula(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
        _need(not out.is_floating_point, f"bitwise_{op}", out)
        vals = _all(e, args, out)
        if op == "not":
            return e.bits("xor", vals[0], e.const(True if out is D.bool_ else -1, out), out)
        return e.bits(op, vals[0], vals[1], out)
    return formula


# ---- selection, clamp, cast ---------------------------------------------------------------------
def _where(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    cond = to(e, args[0], D.bool_)
    if out.category == D.INT:
        for a in args[1:]:
            if a.imm is not None:
                checked_int(int(a.imm), out, "where")
    a, b = _all(e, args[1:], out)
    return e.select(cond, a, b, compute_dtype(out))


def _clamp(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    x, dt = to(e, args[0], out), compute_dtype(out)
    lo, hi = attrs.get("min"), attrs.get("max")
    if out.is_floating_point and any(b is not None and math.isnan(b) for b in (lo, hi)):
        return e.const(math.nan, dt)                # a NaN bound gives NaN, as in PyTorch
    if lo is not None:
        lv = e.const(_bound(lo, math.ceil, out), dt)
        x = e.select(e.cmp("lt", x, lv, dt), lv, x, dt)
    if hi is not None:
        hv = e.const(_bound(hi, math.floor, out), dt)
        x = e.select(e.cmp("gt", x, hv, dt), hv, x, dt)
    return x


def _bound(value: float, to_int: Callable[[float], int], out: DType) -> bool | int | float:
    if out.is_floating_point:
        return imm_value(checked_float(value, out, "clamp"), out)
    if out is D.bool_:
        return imm_value(to_int(value), out)
    return checked_int(to_int(value), out, "clamp")


def _cast(e: Emitter, args: Sequence[TV], out: DType, attrs: dict) -> V:
    target = attrs.get("dtype", out)
    target = D.BY_NAME[target] if isinstance(target, str) else target
    return to(e, args[0], target)


FORMULAS: dict[str, Formula] = {
    "neg": _neg, "abs": _abs, "sign": _sign, "relu": _relu,
    "floor": _rounding("floor"), "ceil": _rounding("ceil"), "round": _rounding("rint"),
    "trunc": _rounding("trunc"),
    "exp": _float_unary(vmath.exp), "log": _float_unary(vmath.log),
    "log1p": _float_unary(vmath.log1p), "expm1": _float_unary(vmath.expm1),
    "sqrt": _float_unary(vmath.sqrt), "rsqrt": _float_unary(vmath.rsqrt),
    "sin": _float_unary(vmath.sin), "cos": _float_unary(vmath.cos),
    "tanh": _float_unary(vmath.tanh), "sigmoid": _float_unary(vmath.sigmoid),
    "erf": _float_unary(vmath.erf), "erfc": _float_unary(vmath.erfc),
    "reciprocal": _float_unary(_reciprocal), "log2": _float_unary(vmath.log2),
    "exp2": _float_unary(vmath.exp2),
    "add": _arith("add", "or"), "sub": _arith("sub", None), "mul": _arith("mul", "and"),
    "div": _div, "floor_divide": _divmod(0, "floor_divide"),
    "remainder": _divmod(1, "remainder"), "pow": _pow,
    "maximum": _extremum("gt"), "minimum": _extremum("lt"), "atan2": _atan2,
    "eq": _compare("eq"), "ne": _compare("ne"), "lt": _compare("lt"), "le": _compare("le"),
    "gt": _compare("gt"), "ge": _compare("ge"),
    "logical_and": _logical("and"), "logical_or": _logical("or"),
    "logical_xor": _logical("xor"), "logical_not": _logical("not"),
    "isnan": _isclass("nan"), "isinf": _isclass("inf"), "isclose": _isclose,
    "bitwise_and": _bitwise("and"), "bitwise_or": _bitwise("or"),
    "bitwise_xor": _bitwise("xor"), "bitwise_not": _bitwise("not"),
    "where": _where, "clamp": _clamp, "cast": _cast,
    # the math family (ir/ops/math.py)
    "tan": _float_unary(vmath.tan), "asin": _float_unary(vmath.asin),
    "acos": _float_unary(vmath.acos), "atan": _float_unary(vmath.atan),
    "sinh": _float_unary(vmath.sinh), "cosh": _float_unary(vmath.cosh),
    "asinh": _float_unary(vmath.asinh), "acosh": _float_unary(vmath.acosh),
    "atanh": _float_unary(vmath.atanh), "log10": _float_unary(vmath.log10),
    "copysign": _copysign, "fmod": _fmod_formula, "hypot": _binary_float(vmath.hypot),
    "bitwise_left_shift": _shift(True), "bitwise_right_shift": _shift(False),
}


# ops whose result is one of their operands (converted to the result dtype by ``to``, so
# already rounded) or an integer no larger in magnitude: exact in a half dtype, not rounded
EXACT_IN_HALF = frozenset({"neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc",
                           "maximum", "minimum", "where", "clamp", "copysign", "fmod"})


def lower_steps(e: Emitter, spec: KernelSpec, inputs: Sequence[V]) -> list[V]:
    """Emit every step of ``spec`` given the loaded input values; returns the outputs,
    each converted to its ``out_dtype`` (compute type, half types already rounded)."""
    vals = [TV(v, s.dtype) for v, s in zip(inputs, spec.inputs)]
    for step in spec.ops:
        vals.append(emit_step(e, step, vals))
    return [to(e, vals[o], d) for o, d in zip(spec.outputs, spec.out_dtypes)]


def emit_step(e: Emitter, step: "OpStep", vals: Sequence[TV]) -> TV:
    """One step's value, its ``Imm`` arguments made constants and the rest read from
    ``vals`` (indexed by value number). A float16/bfloat16 result is rounded to its dtype
    here, once per op, as eager and PyTorch round it (the op itself computes in float32),
    unless the op is ``EXACT_IN_HALF``."""
    fn = FORMULAS.get(step.op)
    if fn is None:
        raise NotImplementedError(f"codegen: no scalar formula for op {step.op!r}")
    args = [TV(e.const(imm_value(a.value, a.dtype), compute_dtype(a.dtype)), a.dtype, a.value)
            if isinstance(a, Imm) else vals[a] for a in step.args]
    v = fn(e, args, step.dtype, step.attrs)
    return TV(v if step.op in EXACT_IN_HALF else round_to(e, v, step.dtype), step.dtype)
