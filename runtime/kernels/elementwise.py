"""Reference kernels of the elementwise ops. Inputs arrive already cast to the compute
dtype by ``run_kernel``; half types compute in float32."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ..arrays import NP_DTYPE, from_np_dtype
from . import NEGATIVE_POWER, kernel
from scriptmod.ir.errors import ArgumentValueError, DTypeError
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import checked_int


def _quiet(fn: Callable) -> Callable:
    """IEEE results (inf, nan) without NumPy's RuntimeWarnings, as PyTorch gives them."""
    @functools.wraps(fn)
    def wrapper(xp: Any, *args: Any, **kw: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(xp, *args, **kw)
    return wrapper


def _erf(xp: Any, x: Any) -> Any:
    return _special(xp).erf(x)


def _erfc(xp: Any, x: Any) -> Any:
    return _special(xp).erfc(x)


def _special(xp: Any) -> Any:
    if xp is np:
        import scipy.special as sp
    else:
        import cupyx.scipy.special as sp  # type: ignore
    return sp


kernel("neg")(lambda xp, x: -x if x.dtype != bool else _bool_neg(x))
kernel("abs")(lambda xp, x: xp.abs(x))


@kernel("sign")
def _sign(xp: Any, x: Any) -> Any:
    """(x > 0) - (x < 0), as PyTorch: sign(NaN) is 0 and sign(-0.0) is +0.0."""
    if x.dtype == bool:
        return x.copy()
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _bound(xp: Any, x: Any, bound: Any, op: Any) -> Any:
    """``op(x, bound)`` (np.maximum/np.minimum: a NaN on either side gives NaN), but ``x``
    itself where it equals the bound, so -0.0 survives a bound of 0.0 as in PyTorch."""
    out = op(x, bound, out=xp.empty_like(x))   # then a masked copy: np.where's select costs
    xp.copyto(out, x, where=x == bound)          # ~6x this on 4M floats
    return out


# x < 0 ? 0 : x, as PyTorch: NaN stays NaN and -0.0 stays -0.0
kernel("relu")(lambda xp, x: _bound(xp, x, 0, xp.maximum) if x.dtype.kind != "b" else x.copy())
kernel("floor")(lambda xp, x: xp.floor(x) if x.dtype.kind == "f" else x.copy())
kernel("ceil")(lambda xp, x: xp.ceil(x) if x.dtype.kind == "f" else x.copy())
kernel("round")(lambda xp, x: xp.round(x) if x.dtype.kind == "f" else x.copy())
kernel("trunc")(lambda xp, x: xp.trunc(x) if x.dtype.kind == "f" else x.copy())


def _bool_neg(x: Any) -> Any:
    raise DTypeError("neg: negation, the `-` operator, on a bool tensor is not supported; "
                     "use `~` or logical_not() instead")


kernel("exp")(_quiet(lambda xp, x: xp.exp(x)))
kernel("log")(_quiet(lambda xp, x: xp.log(x)))
kernel("log1p")(_quiet(lambda xp, x: xp.log1p(x)))
kernel("expm1")(_quiet(lambda xp, x: xp.expm1(x)))
kernel("sqrt")(_quiet(lambda xp, x: xp.sqrt(x)))
kernel("rsqrt")(_quiet(lambda xp, x: 1 / xp.sqrt(x)))
kernel("sin")(lambda xp, x: xp.sin(x))
kernel("cos")(lambda xp, x: xp.cos(x))
kernel("tanh")(lambda xp, x: xp.tanh(x))
kernel("erf")(_erf)
kernel("erfc")(_erfc)
kernel("reciprocal")(_quiet(lambda xp, x: 1 / x))
kernel("log2")(_quiet(lambda xp, x: xp.log2(x)))
kernel("exp2")(_quiet(lambda xp, x: xp.exp2(x)))


@kernel("sigmoid")
@_quiet
def _sigmoid(xp: Any, x: Any) -> Any:
    # 1/(1+exp(-x)) overflows harmlessly to 0 for very negative x; stays exact elsewhere
    return 1 / (1 + xp.exp(-x))


kernel("add")(lambda xp, a, b: a + b)
kernel("sub")(lambda xp, a, b: a - b)   # the type rule refuses bool operands
kernel("mul")(lambda xp, a, b: a * b)
kernel("div")(_quiet(lambda xp, a, b: a / b))


def _int_zero_divisor(a: Any, b: Any) -> None:
    """PyTorch raises for an integer division by zero (NumPy would give 0 and warn)."""
    kinds = [getattr(v, "dtype", np.asarray(v).dtype).kind for v in (a, b)]
    if all(k in "iub" for k in kinds) and not bool((b != 0).all() if hasattr(b, "all") else b):
        raise ArgumentValueError("ZeroDivisionError: integer division or remainder by zero")


@kernel("floor_divide")
@_quiet
def _floor_divide(xp: Any, a: Any, b: Any) -> Any:
    _int_zero_divisor(a, b)
    return xp.floor_divide(a, b)


@kernel("remainder")
@_quiet
def _remainder(xp: Any, a: Any, b: Any) -> Any:
    """Python's modulo, except that a zero result keeps the sign of ``a`` (PyTorch's fmod
    based remainder) where NumPy gives it the sign of ``b``."""
    _int_zero_divisor(a, b)
    out = xp.remainder(a, b)
    if getattr(out, "dtype", None) is None or out.dtype.kind != "f":
        return out
    return xp.where(out == 0, xp.copysign(out, a), out)


kernel("maximum")(lambda xp, a, b: xp.maximum(a, b))
kernel("minimum")(lambda xp, a, b: xp.minimum(a, b))
kernel("atan2")(lambda xp, a, b: xp.arctan2(a, b))


@kernel("pow")
@_quiet
def _pow(xp: Any, a: Any, b: Any) -> Any:
    # integer powers lower to multiplies: np.power(x, 3) costs ~100x x*x*x
    if type(b) in (int, float) and hasattr(a, "dtype"):
        if b == 2:
            return a * a
        if b == 3:
            return a * a * a
        if b == 1:
            return a.copy()
        if b == 0.5 and a.dtype.kind in "fc":
            return xp.sqrt(a)
        if b == -1 and a.dtype.kind in "fc":
            return 1 / a
        if a.dtype.kind in "iu" and b < 0:
            raise ArgumentValueError(NEGATIVE_POWER)
    elif getattr(b, "dtype", np.dtype(float)).kind == "i" and \
            getattr(a, "dtype", np.dtype(type(a))).kind in "iu":
        if isinstance(b, np.generic) and b < 0:      # a Python int, wrapped by run_kernel
            raise ArgumentValueError(NEGATIVE_POWER)
        return _int_pow_tensor(xp, a, b)
    return xp.power(a, b)


def _int_pow_tensor(xp: Any, a: Any, b: Any) -> Any:
    """An integer power with a tensor exponent, as PyTorch computes it: a negative exponent
    gives 1 for base 1, -1 or 1 for base -1 (odd or even exponent), else 0 (no error: only a
    Python number exponent is refused)."""
    negative = b < 0
    if not negative.any():
        return xp.power(a, b)
    out = xp.power(a, xp.where(negative, 0, b))
    one = xp.ones((), out.dtype)
    at_neg = xp.where(a == 1, one, 0)
    if out.dtype.kind == "i":
        at_neg = xp.where(a == -1, xp.where(b % 2 == 0, one, -one), at_neg)
    return xp.where(negative, at_neg, out)


for _name, _fn in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                   ("gt", "greater"), ("ge", "greater_equal"), ("logical_and", "logical_and"),
                   ("logical_or", "logical_or"), ("logical_xor", "logical_xor")):
    kernel(_name)(lambda xp, a, b, _f=_fn: getattr(xp, _f)(a, b))


def _bitwise(name: str) -> Any:
    def fn(xp: Any, a: Any, b: Any) -> Any:
        for v in (a, b):
            kind = getattr(v, "dtype", np.dtype(type(v))).kind
            if kind not in "biu":
                raise DTypeError(f"{name}: expected integer or bool tensors, got "
                                 f"{getattr(v, 'dtype', type(v).__name__)}")
        return getattr(xp, name)(a, b)
    return fn


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    kernel(_name)(_bitwise(_name))
kernel("logical_not")(lambda xp, x: xp.logical_not(x))
kernel("isnan")(lambda xp, x: xp.isnan(x))
kernel("isinf")(lambda xp, x: xp.isinf(x))


@kernel("isclose")
def _isclose(xp: Any, a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    """PyTorch's: equal, or both NaN with ``equal_nan``, or a finite |a - b| within
    atol + |rtol * b|; integers compare exactly, their distance is taken in float64."""
    a, b = xp.asarray(a), xp.asarray(b)
    close = a == b
    if equal_nan and a.dtype.kind in "fc":
        close = close | (xp.isnan(a) & xp.isnan(b))
    if rtol == 0 and atol == 0:
        return close
    if a.dtype.kind not in "fc":
        a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        err = xp.abs(a - b)
        return close | (xp.isfinite(err) & (err <= atol + xp.abs(rtol * b)))


@kernel("bitwise_not")
def _bitwise_not(xp: Any, x: Any) -> Any:
    if x.dtype.kind == "f":
        raise DTypeError(f"bitwise_not: expected an integer or bool tensor, got {x.dtype}")
    return xp.logical_not(x) if x.dtype == bool else xp.invert(x)


@kernel("where")
def _where(xp: Any, cond: Any, a: Any, b: Any) -> Any:
    if getattr(cond, "dtype", None) != bool:
        raise DTypeError(f"where: expected condition to be a bool tensor, got {cond.dtype}")
    return xp.where(cond, a, b)


@kernel("clamp")
def _clamp(xp: Any, x: Any, min: float | None = None, max: float | None = None) -> Any:
    if min is None and max is None:
        raise ArgumentValueError("clamp: at least one of 'min' or 'max' must not be None")
    # PyTorch's semantics: x NaN -> NaN, a NaN bound -> NaN, x equal to a bound stays x (the
    # sign of -0.0 survives clamp(min=0.0)); an int tensor's bounds are converted as PyTorch
    # converts them (uint8 with min=-2: 254)
    out = x
    for bound, op in ((min, xp.maximum), (max, xp.minimum)):
        if bound is not None:
            if x.dtype.kind in "iu":
                bound = checked_int(int(bound), from_np_dtype(x.dtype), "clamp")
            bound = xp.asarray(bound, dtype=x.dtype)
            out = _bound(xp, out, bound, op)
    return out


@kernel("copy_")
def _copy_(xp: Any, self: Any, src: Any) -> Any:
    """Write ``src`` into ``self``'s storage and return ``self`` (in place on an input)."""
    if src is not self:
        self[...] = src
    return self


@kernel("cast")
@_quiet
def _cast(xp: Any, x: Any, dtype: D.DType) -> Any:
    """NumPy's cast, which on x86-64 is PyTorch's: a NaN, infinite or out-of-range float
    becomes int64's minimum for int64 and int32's minimum, wrapped, for the narrower ints
    (0 for int8, uint8, int16); bool is ``x != 0`` (NaN is True)."""
    return x.astype(NP_DTYPE[dtype])
