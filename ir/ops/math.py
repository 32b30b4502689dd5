"""Schemas of elementwise math beyond the core: trigonometric/hyperbolic, log10, copysign,
fmod, hypot, nextafter, the bit shifts, gcd/lcm and frexp.

Only what a decomposition cannot do well is a row here: the inverse and hyperbolic
functions (one accurate kernel each, and one ONNX node), ops that read a float's bits
(copysign, nextafter, frexp) and integer ops (shifts, gcd). The rest of the family (frac,
lerp, logaddexp, xlogy, nan_to_num, fmax, ...) is written in ``scriptmod/_ops_math.py`` as
decompositions into these and the core elementwise ops.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..dtypes import DType
from ..errors import DTypeError
from ..schema import BINARY, COMMUTATIVE, ELEMENTWISE, LONG, NONDIFF, UNARY, op

EW, UN, BIN = ELEMENTWISE, UNARY, BINARY

# unary, computed in floating point (int and bool inputs give the default float dtype)
for _name in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
              "log10"):
    op(f"{_name}(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)


def _real_float(opname: str) -> Any:
    """The operands' promoted dtype, which must be floating (PyTorch has no integer, bool
    or complex kernel: its NotImplementedError)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        out = R.promote(ops, attrs)
        if not out.is_floating_point:
            raise R.no_kernel(opname, out)
        return out
    return rule


def _float_result(opname: str) -> Any:
    """The promoted dtype made floating (ints give the default float); complex refused."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        out = R.promote_float(ops, attrs)
        if out.is_complex:
            raise R.no_kernel(opname, out)
        return out
    return rule


def _integral(opname: str, allow_bool: bool = False) -> Any:
    """The promoted dtype, which must be an integer (``allow_bool``: or bool)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        out = R.promote(ops, attrs)
        if out.category != D.INT and not (allow_bool and out is D.bool_):
            raise R.no_kernel(opname, out)
        return out
    return rule


def _not_bool_real(opname: str) -> Any:
    """The promoted dtype: integers and floats (PyTorch's fmod has no bool or complex one)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        out = R.promote(ops, attrs)
        if out is D.bool_ or out.is_complex:
            raise R.no_kernel(opname, out)
        return out
    return rule


# binary
op("copysign(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", _float_result("copysign"),
   R.broadcast, EW, BIN)
op("fmod(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", _not_bool_real("fmod"),
   R.broadcast, EW, BIN, LONG)
op("hypot(Tensor self, Tensor other) -> Tensor", _real_float("hypot"), R.broadcast, EW, BIN,
   COMMUTATIVE, LONG)
op("bitwise_left_shift(Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   _integral("lshift_cpu"), R.broadcast, EW, BIN, NONDIFF)
op("bitwise_right_shift(Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   _integral("rshift_cpu"), R.broadcast, EW, BIN, NONDIFF)

# Not fused (no scalar formula): nextafter steps in its own dtype's bits (a float16 input
# must not compute in float32, as fused ops do); gcd/lcm are an Euclid loop per element
op("nextafter(Tensor self, Tensor other) -> Tensor", _real_float("nextafter"), R.broadcast)
op("gcd(Tensor self, Tensor other) -> Tensor", _integral("gcd_cpu"), R.broadcast, NONDIFF)
op("lcm(Tensor self, Tensor other) -> Tensor", _integral("lcm_cpu"), R.broadcast, NONDIFF)


def _frexp_dtype(ops: Sequence[Any], attrs: dict) -> tuple[DType, DType]:
    t = R.same(ops, attrs)
    if not t.is_floating_point:
        raise DTypeError("torch.frexp() only supports floating-point dtypes")
    return t, D.int32


def _frexp_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    s = R.same_shape(ops, attrs, values)
    return s, s


# x = mantissa * 2**exponent, |mantissa| in [0.5, 1): two results, so not fused
op("frexp(Tensor self) -> (Tensor, Tensor)", _frexp_dtype, _frexp_shape)
