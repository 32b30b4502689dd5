"""Scalar element types and PyTorch's type-promotion rules.

Pure data: no NumPy here (the runtime maps a DType to an array dtype by ``name``).

    >>> promote_types(int32, float16)
    scriptmod.float16
    >>> result_type([int64], [], [float])   # int tensor * python float -> default float
    scriptmod.float32
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from scriptmod.ir.errors import ArgumentValueError

BOOL, INT, FLOAT, COMPLEX = 0, 1, 2, 3  # promotion categories, ordered


@dataclass(frozen=True, eq=False)
class DType:
    """An element type. Identity is the comparison: there is one object per dtype."""

    name: str          # "float32"; also the NumPy / ml_dtypes name
    itemsize: int
    category: int      # BOOL, INT, FLOAT or COMPLEX
    short: str         # TorchScript-style type name used by the IR printer ("Float")
    signed: bool = True

    @property
    def is_floating_point(self) -> bool:
        return self.category == FLOAT

    @property
    def is_complex(self) -> bool:
        return self.category == COMPLEX

    @property
    def is_signed(self) -> bool:
        return self.signed

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    def __repr__(self) -> str:
        return f"scriptmod.{self.name}"

    def __reduce__(self) -> str:
        return self.name


bool_ = DType("bool", 1, BOOL, "Bool", signed=False)
uint8 = DType("uint8", 1, INT, "Byte", signed=False)
int8 = DType("int8", 1, INT, "Char")
int16 = DType("int16", 2, INT, "Short")
int32 = DType("int32", 4, INT, "Int")
int64 = DType("int64", 8, INT, "Long")
float16 = DType("float16", 2, FLOAT, "Half")
bfloat16 = DType("bfloat16", 2, FLOAT, "BFloat16")
float32 = DType("float32", 4, FLOAT, "Float")
float64 = DType("float64", 8, FLOAT, "Double")
complex64 = DType("complex64", 8, COMPLEX, "ComplexFloat")
complex128 = DType("complex128", 16, COMPLEX, "ComplexDouble")

# PyTorch's unsigned types of "limited support": scriptmod names them (they compare and
# annotate: torchvision's ``dtype == torch.uint16``) but has no tensors of them
uint16 = DType("uint16", 2, INT, "UInt16", signed=False)
uint32 = DType("uint32", 4, INT, "UInt32", signed=False)
uint64 = DType("uint64", 8, INT, "UInt64", signed=False)
NAME_ONLY: tuple[DType, ...] = (uint16, uint32, uint64)

ALL: tuple[DType, ...] = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16,
                          float32, float64, complex64, complex128)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL + NAME_ONLY}
BY_SHORT: dict[str, DType] = {d.short: d for d in ALL + NAME_ONLY}
FLOATING = (float16, bfloat16, float32, float64)
INTEGRAL = (uint8, int8, int16, int32, int64)

_default_float: list[DType] = [float32]


def get_default_dtype() -> DType:
    return _default_float[0]


def set_default_dtype(d: DType) -> None:
    if d not in (float16, bfloat16, float32, float64):
        raise TypeError(f"set_default_dtype: expected a floating dtype, got {d!r}")
    _default_float[0] = d
    _RESULT_CACHE.clear()


def _complex_of(d: DType) -> DType:
    return complex128 if d is float64 else complex64


def _promote_pair(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.category != b.category:
        hi, lo = (a, b) if a.category > b.category else (b, a)
        if hi.category == COMPLEX and lo.category == FLOAT and lo.itemsize * 2 > hi.itemsize:
            return complex128
        return hi
    cat = a.category
    if cat == INT:
        if a is uint8 or b is uint8:  # uint8 with a signed int: next signed type that holds both
            other = b if a is uint8 else a
            return int16 if other is int8 else other
        return a if a.itemsize > b.itemsize else b
    if cat == FLOAT:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    return a if a.itemsize > b.itemsize else b  # complex


_PROMOTE: dict[tuple[DType, DType], DType] = {(a, b): _promote_pair(a, b) for a in ALL for b in ALL}


def promote_types(a: DType, b: DType) -> DType:
    """torch.promote_types: the smallest dtype both ``a`` and ``b`` convert to safely."""
    return _PROMOTE[a, b]


_SCALAR_CATEGORY = {bool: BOOL, int: INT, float: FLOAT, complex: COMPLEX}
_RESULT_CACHE: dict[tuple, DType] = {}


def scalar_category(t: type) -> int:
    return _SCALAR_CATEGORY[t]


def _fold(dtypes: Iterable[DType]) -> DType | None:
    out = None
    for d in dtypes:
        out = d if out is None else _PROMOTE[out, d]
    return out


def result_type(dim: Sequence[DType], zero_dim: Sequence[DType] = (),
                scalars: Sequence[type] = ()) -> DType:
    """PyTorch's three-tier promotion.

    ``dim``: dtypes of tensors with at least one dimension; ``zero_dim``: dtypes of 0-dim
    tensors; ``scalars``: Python types (bool, int, float, complex) of plain numbers. A lower
    tier only changes the result when its category is higher than every tier above it.
    """
    key = (tuple(dim), tuple(zero_dim), tuple(scalars))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return hit
    out = _fold(dim)
    z = _fold(zero_dim)
    if z is not None:
        if out is None or z.category > out.category:   # a floating dim tier keeps its width
            out = _complex_of(out) if z.category == COMPLEX and out is not None and \
                out.category == FLOAT else z
    if scalars:
        cat = max(_SCALAR_CATEGORY[s] for s in scalars)
        if out is None:
            out = {BOOL: bool_, INT: int64, FLOAT: get_default_dtype(),
                   COMPLEX: _complex_of(get_default_dtype())}[cat]
        elif cat > out.category:
            if cat == FLOAT:
                out = get_default_dtype()
            elif cat == INT:
                out = int64
            elif cat == COMPLEX:
                out = _complex_of(out if out.category == FLOAT else get_default_dtype())
    if out is None:
        raise TypeError("result_type: expected at least one operand, got none")
    _RESULT_CACHE[key] = out
    return out


def to_float(d: DType) -> DType:
    """The dtype a float-only op (exp, sqrt, true division) computes in for input ``d``."""
    return d if d.category >= FLOAT else get_default_dtype()


def to_real(d: DType) -> DType:
    """abs() of a complex number is real."""
    return {complex64: float32, complex128: float64}.get(d, d)


# ---- Python scalars converted to a dtype, as PyTorch converts them ---------------------------
# (eager kernels, dispatch and codegen all use these: they live here so that the eager core
# never imports codegen)
def wrap_int(value: int, dt: DType) -> int:
    """A Python int wrapped into int dtype ``dt`` (two's complement), as PyTorch wraps a
    weak scalar operand: int8 + 1000 adds -24."""
    v = value & ((1 << dt.bits) - 1)
    return v - (1 << dt.bits) if dt.signed and v >= 1 << (dt.bits - 1) else v


def checked_int(value: int, dt: DType, op: str) -> int:
    """A Python int in int dtype ``dt`` as PyTorch's checked conversion (c10's
    ``checked_convert``) makes it, for the operands PyTorch does not wrap (pow's exponent,
    where's values, clamp's bounds): an unsigned dtype takes a negative value down to -max,
    wrapped (uint8: -2 is 254); any other value outside the dtype raises.

    >>> checked_int(-2, uint8, "clamp"), checked_int(-128, int8, "where")
    (254, -128)
    """
    top = (1 << (dt.bits - dt.signed)) - 1
    if not (-top - dt.signed) <= value <= top:
        raise ArgumentValueError(f"{op}: value {value} cannot be converted to type {dt.name} "
                                 f"without overflow")
    return wrap_int(value, dt)


# the largest finite value of each float dtype
FLOAT_MAX = {float16: 65504.0, bfloat16: 3.3895313892515355e38,
             float32: 3.4028234663852886e38, float64: 1.7976931348623157e308}


def checked_float(value: bool | int | float, dt: DType, op: str) -> bool | int | float:
    """``value`` if float dtype ``dt`` holds it as PyTorch's checked conversion asks (finite
    and within the dtype's range, or not finite: inf and NaN convert); raises otherwise, as
    PyTorch does for clamp's bounds, add's alpha and a float16 pow's exponent.

    >>> checked_float(65504.0, float16, "clamp")
    65504.0
    """
    f = float(value)
    if math.isfinite(f) and abs(f) > FLOAT_MAX[dt]:
        raise ArgumentValueError(f"{op}: value {value} cannot be converted to type {dt.name} "
                                 f"without overflow")
    return value


SCALAR_INTS = range(-(1 << 63), 1 << 64)   # the Python ints PyTorch takes as a Scalar


def scalar_overflow(value: int, op: str) -> OverflowError:
    """PyTorch's error for a Python int operand of ``op`` outside ``SCALAR_INTS`` (neither an
    int64 nor a uint64), which it raises whatever the tensor's dtype is.

    >>> scalar_overflow(2**64, "add")
    OverflowError('add: int too big to convert: 18446744073709551616 is not in [-2**63, 2**64)')
    """
    what = "int too big to convert" if value > 0 else "can't convert negative int to unsigned"
    return OverflowError(f"{op}: {what}: {value} is not in [-2**63, 2**64)")


def imm_value(value: bool | int | float, dt: DType) -> bool | int | float:
    """A Python constant converted to ``dt`` (halves rounded to nearest even)."""
    if dt is bool_:
        return bool(value)
    if dt.category == INT:
        return wrap_int(int(value), dt)
    f = float(value)
    if dt is float16 and math.isfinite(f):
        return _round_ieee(f, "<e", 65520.0)
    if dt is bfloat16 and math.isfinite(f):     # as PyTorch: to float32, then to bfloat16
        b = struct.unpack("<I", struct.pack("<f", _round_ieee(f, "<f", 3.4028235677973366e38)))[0]
        b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
        return struct.unpack("<f", struct.pack("<I", b))[0]
    if dt is float32 and math.isfinite(f):
        return _round_ieee(f, "<f", 3.4028235677973366e38)
    return f


def _round_ieee(f: float, fmt: str, overflow: float) -> float:
    """``f`` rounded to nearest-even in struct format ``fmt``; inf from ``overflow`` up."""
    if abs(f) >= overflow:
        return math.copysign(math.inf, f)
    return struct.unpack(fmt, struct.pack(fmt, f))[0]
