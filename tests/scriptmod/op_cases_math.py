"""``op_cases`` rows of elementwise math beyond the core: trigonometric/hyperbolic, log10,
copysign, fmod, hypot, nextafter, the shifts, gcd/lcm and frexp (imported by ``op_cases``
at its end; build rows with its ``case`` and sample builders). References are NumPy's
float64 functions, with PyTorch's rules written out where NumPy differs (shifts out of
range, nextafter in a half dtype's own bits)."""
from __future__ import annotations

from typing import Any

import numpy as np

from op_cases import (COMPLEX, FLOATS, INTS, Gen, Sample, _in_float, binary, case, np_dtype,
                      unary)

_INT_AND_BOOL = ("uint8", "int32", "int64", "bool")

# op -> (NumPy function, sample range): float results, int and bool inputs computed in float
_UNARY = {"tan": (np.tan, -1.2, 1.2), "asin": (np.arcsin, -0.95, 0.95),
          "acos": (np.arccos, -0.95, 0.95), "atan": (np.arctan, -3, 3),
          "sinh": (np.sinh, -3, 3), "cosh": (np.cosh, -3, 3), "asinh": (np.arcsinh, -3, 3),
          "acosh": (np.arccosh, 1.1, 4), "atanh": (np.arctanh, -0.9, 0.9),
          "log10": (np.log10, 0.5, 3)}
for _n, (_f, _lo, _hi) in _UNARY.items():
    case(_n, unary(_lo, _hi), _in_float(_f),
         FLOATS + _INT_AND_BOOL + (COMPLEX if _n != "log10" else ()))


def _float_pair(fn: Any) -> Any:
    """A binary reference computing ints in float64 (the ops' float result)."""
    def ref(a: Any, b: Any) -> Any:
        a, b = (np.asarray(x, np.float64) if np.asarray(x).dtype.kind not in "fc" else x
                for x in (a, b))
        return fn(a, b)
    return ref


case("copysign", binary(), _float_pair(np.copysign), FLOATS + ("int32", "int64"))
case("fmod", binary(lo_b=1, hi_b=3), np.fmod, FLOATS + INTS[1:])
case("hypot", binary(scalars=False), np.hypot, FLOATS)


def _shift_samples(g: Gen) -> list[Sample]:
    """In-range shifts, out-of-range ones (negative, the bit width and beyond) and a
    Python scalar amount."""
    bits = np_dtype(g.dtype).itemsize * 8
    a = g.arr((2, 4), -20, 20)
    amounts = np.array([[0, 1, 3, bits - 1], [bits, bits + 3, -1, 2]], dtype=g.dtype
                       ) if g.dtype != "uint8" else np.array([[0, 1, 3, 7], [8, 11, 2, 5]],
                                                             dtype="uint8")
    return [Sample("mixed", (a, amounts)), Sample("scalar", (a, 2)),
            Sample("broadcast", (g.arr((3, 1), -20, 20), g.arr((2,), 0, 3))),
            Sample("empty", (g.arr((0, 2)), g.arr((2,), 0, 3)))]


def _left_ref(a: Any, b: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    return np.where(ok, np.left_shift(a, np.where(ok, b, 0).astype(a.dtype)), 0).astype(a.dtype)


def _right_ref(a: Any, b: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    fill = np.right_shift(a, bits - 1) if a.dtype.kind == "i" else np.zeros_like(a)
    return np.where(ok, np.right_shift(a, np.where(ok, b, 0).astype(a.dtype)), fill
                    ).astype(a.dtype)


case("bitwise_left_shift", _shift_samples, _left_ref, INTS, grad=False)
case("bitwise_right_shift", _shift_samples, _right_ref, INTS, grad=False)


def _nextafter_samples(g: Gen) -> list[Sample]:
    a = g.arr((2, 4))
    b = g.arr((2, 4))
    a[0, :4] = [0.0, 1.0, -np.inf, np.nan]
    b[0, :4] = [-1.0, 1.0, 0.0, 2.0]
    return [Sample("mixed", (a, b)), Sample("broadcast", (g.arr((3, 1)), g.arr((2,)))),
            Sample("empty", (g.arr((0, 2)), g.arr((2,))))]


def _nextafter_check(s: Sample, got: Any) -> None:
    """Exactly the next value in the inputs' own dtype (a float64 reference cannot say)."""
    a, b = np.broadcast_arrays(*s.inputs)
    if a.dtype == np_dtype("bfloat16"):      # NumPy has no nextafter for it: step the bits
        bits = a.view(np.uint16).astype(np.int32)
        with np.errstate(invalid="ignore"):
            away = (b > a) == (a > 0)
        want = np.where(away, bits + 1, bits - 1).astype(np.uint16).view(a.dtype)
        tiny = np.array(1, np.uint16).view(a.dtype)
        want = np.where(a == 0, np.where(b > 0, tiny, -tiny), want)
        want = np.where(a == b, b, want)
    else:
        want = np.nextafter(a, b)
    assert got.dtype == a.dtype, (got.dtype, a.dtype)
    np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))


case("nextafter", _nextafter_samples, None, FLOATS, grad=False, check=_nextafter_check)


def _int_pair(g: Gen) -> list[Sample]:
    a = g.arr((2, 3), -9, 9)          # lcm stays within int8
    b = g.arr((2, 3), -9, 9)
    a[0, 0] = b[0, 0] = 0
    return [Sample("same", (a, b)), Sample("broadcast", (g.arr((3, 1), -9, 9), g.arr((2,), 1, 9))),
            Sample("0d", (g.arr((), -9, 9), g.arr((2,), -9, 9))),
            Sample("empty", (g.arr((0, 2)), g.arr((2,))))]


def _lcm_ref(a: Any, b: Any) -> Any:
    return np.abs(np.lcm(a.astype(np.int64), b.astype(np.int64))).astype(
        np.result_type(a, b))


_SIGNED = ("int8", "int16", "int32", "int64")
case("gcd", _int_pair, lambda a, b: np.gcd(a, b), ("uint8",) + _SIGNED, grad=False)
case("lcm", _int_pair, _lcm_ref, _SIGNED, grad=False)


def _frexp_samples(g: Gen) -> list[Sample]:
    x = g.arr((2, 4), -50, 50)
    x[0, :4] = [0.0, np.inf, -np.inf, np.nan]
    return [Sample("specials", (x,)), Sample("finite", (g.arr((3,), -50, 50),), {}, g.grad_of(0)),
            Sample("0d", (g.arr(()),), {}, g.grad_of(0)), Sample("empty", (g.arr((0,)),))]


def _frexp_ref(x: Any) -> Any:
    mantissa, exponent = np.frexp(x.astype(np.float64))
    return mantissa, exponent.astype(np.int32)


case("frexp", _frexp_samples, _frexp_ref, FLOATS)
