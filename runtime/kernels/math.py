"""Reference kernels of elementwise math beyond the core: trigonometric/hyperbolic, log10,
copysign, fmod, hypot, nextafter, the bit shifts, gcd/lcm and frexp. Elementwise ops arrive
cast to their compute dtype (half types in float32); the unfused ones (nextafter, gcd, lcm,
frexp) get their inputs as given and cast them here."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import NP_DTYPE
from . import kernel, operand
from .elementwise import _int_zero_divisor, _quiet
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rules import promote

for _name, _np_name in (("tan", "tan"), ("asin", "arcsin"), ("acos", "arccos"),
                        ("atan", "arctan"), ("sinh", "sinh"), ("cosh", "cosh"),
                        ("asinh", "arcsinh"), ("acosh", "arccosh"), ("atanh", "arctanh"),
                        ("log10", "log10")):
    kernel(_name)(_quiet(lambda xp, x, _f=_np_name: getattr(xp, _f)(x)))

kernel("copysign")(lambda xp, a, b: xp.copysign(a, b))
kernel("hypot")(_quiet(lambda xp, a, b: xp.hypot(a, b)))


@kernel("fmod")
@_quiet
def _fmod(xp: Any, a: Any, b: Any) -> Any:
    """C's fmod: the remainder of the quotient truncated toward zero (sign of ``a``);
    an integer division by zero raises, as in PyTorch."""
    _int_zero_divisor(a, b)
    return xp.fmod(a, b)


def _shift_parts(xp: Any, a: Any, b: Any) -> tuple[Any, Any, Any, int]:
    """``a`` and ``b`` as arrays, whether each shift is in range [0, bits), and ``bits``."""
    a, b = xp.asarray(a), xp.asarray(b)
    bits = a.dtype.itemsize * 8
    valid = (b >= 0) & (b < bits)
    return a, xp.where(valid, b, 0).astype(a.dtype), valid, bits


@kernel("bitwise_left_shift")
def _left_shift(xp: Any, a: Any, b: Any) -> Any:
    """``a << b`` wrapped to the dtype; a shift that is negative or not below the bit width
    gives 0, as in PyTorch."""
    a, s, valid, _ = _shift_parts(xp, a, b)
    return xp.where(valid, xp.left_shift(a, s), xp.zeros((), a.dtype))


@kernel("bitwise_right_shift")
def _right_shift(xp: Any, a: Any, b: Any) -> Any:
    """``a >> b`` (arithmetic for signed ints); a negative shift or one not below the bit
    width gives the sign fill (0, or -1 for a negative signed value), as in PyTorch."""
    a, s, valid, bits = _shift_parts(xp, a, b)
    fill = xp.right_shift(a, bits - 1) if a.dtype.kind == "i" else xp.zeros((), a.dtype)
    return xp.where(valid, xp.right_shift(a, s), fill)


def _as_result(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` as arrays of their promoted dtype (for the unfused binary ops)."""
    dt = NP_DTYPE[promote([operand(a), operand(b)], {})]
    return xp.asarray(a).astype(dt, copy=False), xp.asarray(b).astype(dt, copy=False)


_UINT_OF = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@kernel("nextafter")
@_quiet
def _nextafter(xp: Any, a: Any, b: Any) -> Any:
    """The next float after ``a`` toward ``b`` in their dtype, by stepping the bits (so
    float16 and bfloat16 step in their own precision): ``b`` where a == b, NaN where
    either is NaN, the smallest subnormal (signed as ``b``) after zero."""
    a, b = _as_result(xp, a, b)
    a, b = xp.broadcast_arrays(a, b)
    ui = _UINT_OF[a.dtype.itemsize]
    bits = a.view(ui)
    away = (b > a) == (a > 0)                       # |a| grows: one step up in magnitude
    out = xp.where(away, bits + ui(1), bits - ui(1)).view(a.dtype)
    tiny = xp.ones((), ui).view(a.dtype)
    out = xp.where(a == 0, xp.where(b > 0, tiny, -tiny), out)
    out = xp.where(a == b, b, out)
    return xp.where(xp.isnan(a) | xp.isnan(b), xp.asarray(np.nan, a.dtype), out)


@kernel("gcd")
def _gcd(xp: Any, a: Any, b: Any) -> Any:
    """The non-negative greatest common divisor (gcd(0, 0) = 0)."""
    return xp.gcd(*_as_result(xp, a, b))


@kernel("lcm")
def _lcm(xp: Any, a: Any, b: Any) -> Any:
    """|a / gcd * b| computed in int64 and wrapped to the dtype, as PyTorch computes it
    (int8 lcm(100, 7) is -68); 0 if either is 0."""
    a, b = _as_result(xp, a, b)
    g = xp.gcd(a, b)
    wide = np.uint64 if a.dtype == np.uint8 else np.int64     # PyTorch's int arithmetic,
    q = xp.where(g == 0, 0, a // xp.where(g == 0, 1, g)).astype(wide)   # then wrapped
    with np.errstate(all="ignore"):
        return xp.abs(q * b.astype(wide)).astype(a.dtype)


@kernel("frexp")
def _frexp(xp: Any, x: Any) -> tuple[Any, Any]:
    """(mantissa, exponent) with x = mantissa * 2**exponent, |mantissa| in [0.5, 1); zero,
    inf and NaN give themselves and exponent 0. Half types split exactly in float32."""
    dt = x.dtype
    mantissa, exponent = xp.frexp(x.astype(np.float32) if dt.itemsize == 2 else x)
    return mantissa.astype(dt), exponent.astype(NP_DTYPE[D.int32])
