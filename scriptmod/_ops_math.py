"""Functions and Tensor methods of elementwise math beyond the core, each published once with
``@public``: ``scriptmod.<name>`` (with ``out=``), ``Tensor.<name>`` and ``Tensor.<name>_``.

The registry ops of the family (``tan``, ``asinh``, ``copysign``, ``fmod``, ``hypot``, the
shifts, ...: ``ir/ops/math.py``) get their methods from ``_tensor_ops`` like every unary and
binary op; here are the unfused ones (``nextafter``, ``gcd``, ``lcm``, ``frexp``) and the
decompositions into elementwise primitives, which trace, fuse, differentiate and export
with no rows of their own. Each follows PyTorch's formula, so the results (NaN, infinities,
signed zeros) and gradients are PyTorch's:

    >>> import scriptmod as sm
    >>> sm.logaddexp(sm.tensor([0.0, 1000.0]), sm.tensor([0.0, 1000.0]))
    tensor([6.9315e-01, 1.0007e+03])
"""
from __future__ import annotations

import functools
import math
from collections import namedtuple
from typing import Any, Callable

from scriptmod._dispatch import dispatch
from scriptmod._public import public
from scriptmod._tensor_ops import _operand, where
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import KernelDTypeError
from scriptmod.tensor import Tensor

def _no_kernel(op: str, dtype: D.DType) -> KernelDTypeError:
    """PyTorch's NotImplementedError for an op without a kernel for ``dtype``."""
    return KernelDTypeError(f"\"{op}\" not implemented for '{dtype.short}'")


def _tensor_arg(op: str, name: str, position: int, value: Any) -> None:
    """PyTorch's TypeError for a non-tensor where a Tensor argument is required."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not "
                        f"{type(value).__name__}")


def _floating(op: str, *xs: Any) -> None:
    """Refuse operands whose promoted dtype is not floating point (PyTorch has no kernel
    for it: integers, bools, complex)."""
    dtype = functools.reduce(D.promote_types, [x.dtype for x in xs if isinstance(x, Tensor)])
    if not dtype.is_floating_point:
        raise _no_kernel(op, dtype)


def _all_true(x: Tensor) -> Tensor:
    """A bool tensor of ``x``'s shape, all True (elementwise, so it traces and fuses)."""
    return (x == x) | (x != x)


def _all_false(x: Tensor) -> Tensor:
    return (x != x) & (x == x)


_HALF = (D.float16, D.bfloat16)


def _opmath(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``fn`` computed in float32 for float16/bfloat16 tensors and its result rounded once
    to their dtype, as PyTorch's kernels compute these ops (rounding each step of the
    decomposition to the half dtype would drift: sinc(30) in bfloat16)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Tensor:
        dtypes = [a.dtype for a in args if isinstance(a, Tensor)]
        if not any(d in _HALF for d in dtypes):
            return fn(*args, **kwargs)
        want = functools.reduce(D.promote_types, dtypes)
        wide = [a.float() if isinstance(a, Tensor) and a.dtype in _HALF else a for a in args]
        out = fn(*wide, **kwargs)
        return out.to(want) if want in _HALF and out.dtype is D.float32 else out
    return wrapper


# ---- unary ---------------------------------------------------------------------------------
@public(inplace=True)
def frac(input: Tensor) -> Tensor:
    """``input - trunc(input)``: the fractional part, with the sign of ``input``."""
    _floating("frac_cpu", input)
    return input - input.trunc()


@public(inplace=True)
def deg2rad(input: Tensor) -> Tensor:
    """Degrees to radians; integer input gives the default float dtype."""
    if input.is_complex():
        raise RuntimeError("deg2rad is not supported for complex tensors.")
    return _to_float(input) * (math.pi / 180.0)


@public(inplace=True)
def rad2deg(input: Tensor) -> Tensor:
    """Radians to degrees; integer input gives the default float dtype."""
    if input.is_complex():
        raise RuntimeError("rad2deg is not supported for complex tensors.")
    return _to_float(input) * (180.0 / math.pi)


def _to_float(x: Tensor) -> Tensor:
    return x if x.dtype.category >= D.FLOAT else x.to(D.get_default_dtype())


@public(inplace=True)
def sgn(input: Tensor) -> Tensor:
    """``sign`` for real input; ``x / |x|`` (0 at 0) for complex."""
    if not input.is_complex():
        return input.sign()
    size = input.abs()
    zero = size == 0
    return where(zero, 0, input / where(zero, 1, size))


@public()
def signbit(input: Tensor) -> Tensor:
    """Whether the sign bit is set: True for -0.0 and a NaN with its sign bit, as in
    PyTorch (``x < 0`` would miss both)."""
    if input.is_complex():
        raise RuntimeError("signbit is not implemented for complex tensors.")
    if input.dtype is D.bool_:
        return _all_false(input)
    if not input.dtype.is_floating_point:
        return input < 0
    return dispatch("copysign", (1.0, input)) < 0


@public()
def positive(input: Tensor) -> Tensor:
    """``input`` itself (``+input``); refused for bool, as in PyTorch."""
    if input.dtype is D.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@public(inplace=True)
@_opmath
def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """``log(x / (1 - x))``, with ``x`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given
    (its gradient is then 0 outside that range, as in PyTorch)."""
    if input.is_complex():
        raise _no_kernel("logit_cpu", input.dtype)
    x = _to_float(input)
    if eps is not None:
        if not isinstance(eps, (int, float)) or isinstance(eps, bool):
            raise TypeError(f"logit(): argument 'eps' must be float, not {type(eps).__name__}")
        x = x.clamp(eps, 1.0 - eps)
    return (x / (1 - x)).log()


@public(inplace=True)
@_opmath
def sinc(input: Tensor) -> Tensor:
    """``sin(pi x) / (pi x)``, 1 at 0 (where the gradient is 0, as in PyTorch)."""
    zero = input == 0
    px = where(zero, 1.0, _to_float(input) * math.pi)
    return where(zero, 1.0, px.sin() / px)


@public(inplace=True)
def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by default the
    dtype's largest and lowest finite values); integers and bools are returned as a copy;
    complex input has each part replaced."""
    if input.is_complex():
        import scriptmod
        parts = [nan_to_num(p, nan, posinf, neginf) for p in (input.real, input.imag)]
        return scriptmod.complex(*parts)
    if not input.dtype.is_floating_point:
        return input.clone()
    info = _finfo(input.dtype)
    hi = info[1] if posinf is None else posinf
    lo = info[0] if neginf is None else neginf
    out = where(input == math.inf, hi, where(input == -math.inf, lo, input))
    return where(input.isnan(), nan, out)


def _finfo(dtype: D.DType) -> tuple[float, float]:
    """(lowest, largest) finite value of a float dtype."""
    import ml_dtypes
    import numpy as np
    np_dtype = ml_dtypes.bfloat16 if dtype is D.bfloat16 else np.dtype(dtype.name)
    largest = float(ml_dtypes.finfo(np_dtype).max)
    return -largest, largest


def _real_only(op: str, input: Tensor) -> None:
    if input.is_complex():
        raise RuntimeError(f"{op} does not support complex inputs.")


@public()
def isfinite(input: Tensor) -> Tensor:
    """Neither NaN nor infinite (complex: both parts); integers and bools are always finite."""
    if input.dtype.category >= D.FLOAT:
        return (input == input) & (input.abs() != math.inf)
    return _all_true(input)


@public()
def isposinf(input: Tensor) -> Tensor:
    """Whether each element is +inf."""
    _real_only("isposinf", input)
    return input == math.inf if input.dtype.is_floating_point else _all_false(input)


@public()
def isneginf(input: Tensor) -> Tensor:
    """Whether each element is -inf."""
    _real_only("isneginf", input)
    return input == -math.inf if input.dtype.is_floating_point else _all_false(input)


@public(out=False)
def isreal(input: Tensor) -> Tensor:
    """Whether each element has a zero imaginary part (always, for real dtypes)."""
    if input.is_complex():
        return input.imag == 0
    return _all_true(input)


# ---- binary ------------------------------------------------------------------------------
@public(inplace=True)
def heaviside(input: Tensor, values: Tensor) -> Tensor:
    """0 where ``input`` < 0 (or NaN), ``values`` where it is 0, 1 where it is > 0."""
    _tensor_arg("heaviside", "values", 2, values)
    if input.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    if input.is_complex():
        raise _no_kernel("heaviside_cpu", input.dtype)
    return where(input == 0, values, (input > 0).to(input.dtype))


def _tensor_of(x: Any, like: Any) -> Tensor:
    """A Python number as a 0-d tensor (PyTorch's wrapped scalar: it promotes like one)."""
    if isinstance(x, Tensor):
        return x
    from scriptmod._creation import tensor
    device = like.device if isinstance(like, Tensor) else None
    return tensor(x, device=device)


@public(inplace=True)
@_opmath
def xlogy(input: Any, other: Any) -> Tensor:
    """``input * log(other)``, 0 where ``input`` is 0 (even where ``other`` is 0 or inf),
    NaN where ``other`` is NaN. Either may be a Python number."""
    x, y = _tensor_of(input, other), _tensor_of(other, input)
    if x.is_complex() or y.is_complex():
        raise _no_kernel("xlogy_cpu", D.promote_types(x.dtype, y.dtype))
    zero_x = x == 0
    bad = zero_x & ((y <= 0) | (y == math.inf))     # 0 * log(y) would be NaN there
    r = where(bad, 0, x * where(bad, 1, y).log())
    return where(y.isnan(), math.nan, r) if y.dtype.category >= D.FLOAT else r


@public(inplace=True)
def lerp(input: Tensor, end: Tensor, weight: Any) -> Tensor:
    """``input + weight * (end - input)``, in PyTorch's two-sided form (``end - (end -
    input) * (1 - weight)`` where |weight| >= 0.5, exact at weight 1)."""
    for name, t in (("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and t.dtype is not input.dtype:
            raise RuntimeError(f"expected dtype {input.dtype.short.lower()} for `{name}` but "
                               f"got dtype {t.dtype.short.lower()}")
    _tensor_arg("lerp", "end", 2, end)
    if not isinstance(weight, (Tensor, int, float, complex)) or isinstance(weight, bool):
        raise TypeError(f"lerp(): argument 'weight' must be Tensor or Number, not "
                        f"{type(weight).__name__}")
    if not input.dtype.category >= D.FLOAT:
        raise _no_kernel("lerp_kernel_scalar" if not isinstance(weight, Tensor)
                         else "lerp_kernel_tensor", input.dtype)
    return _lerp(input, end, weight)


@_opmath
def _lerp(a: Tensor, b: Tensor, w: Any) -> Tensor:
    diff = b - a
    if isinstance(w, Tensor):
        return where(w.abs() < 0.5, a + w * diff, b - diff * (1 - w))
    return a + w * diff if abs(w) < 0.5 else b - diff * (1 - w)


def _value(value: Any, *tensors: Tensor) -> Any:
    """``value`` as PyTorch reads it: truncated to an int when every tensor is integral."""
    if all(t.dtype.category <= D.INT for t in tensors) and isinstance(value, float):
        return int(value)
    return value


@public(inplace=True)
@_opmath
def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 * tensor2``."""
    if input.dtype is tensor1.dtype is tensor2.dtype is D.bool_:
        raise _no_kernel("addcmul_cpu_out", D.bool_)
    prod = tensor1 * tensor2
    value = _value(value, input, tensor1, tensor2)
    return input + (prod if value == 1 else prod * value)


@public(inplace=True)
def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 / tensor2`` (integer ``tensor1`` and ``tensor2`` refused,
    as in PyTorch)."""
    if tensor1.dtype.category <= D.INT and tensor2.dtype.category <= D.INT:
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
            "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2))"
            ".to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
            "for float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes.")
    return _addcdiv(input, tensor1, tensor2, value)


@_opmath
def _addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, value: Any) -> Tensor:
    quot = tensor1 / tensor2
    return input + (quot if value == 1 else quot * value)


@public()
def rsub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``other - alpha * input``."""
    if isinstance(other, Tensor):
        return other.sub(input, alpha=alpha)
    return dispatch("sub", (_operand(other), input if alpha == 1 else input * alpha))


@public(inplace=True)
def float_power(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` computed in float64 (complex128 if either is complex)."""
    wide = D.complex128 if any(
        isinstance(x, complex) or isinstance(x, Tensor) and x.is_complex()
        for x in (input, exponent)) else D.float64
    base, exp = (x.to(wide) if isinstance(x, Tensor) else x for x in (input, exponent))
    if not isinstance(base, Tensor):
        return dispatch("pow", (base, exp))
    return base.pow(exp)


def _float_power_(self: Tensor, exponent: Any) -> Tensor:
    """In-place ``float_power``: ``self`` must already have the result's dtype."""
    wide = D.complex128 if self.is_complex() or isinstance(exponent, complex) or (
        isinstance(exponent, Tensor) and exponent.is_complex()) else D.float64
    if self.dtype is not wide:
        raise RuntimeError(f"the base given to float_power_ has dtype {self.dtype.short} but "
                           f"the operation's result requires dtype {wide.short}")
    return self.copy_(float_power(self, exponent))


Tensor.float_power_ = _float_power_


def _common(op: str, input: Tensor, other: Tensor) -> tuple[Tensor, Tensor]:
    """Both operands in their promoted dtype, which must be floating or complex."""
    dtype = D.promote_types(input.dtype, other.dtype)
    if dtype.category < D.FLOAT:
        raise _no_kernel(op, dtype)
    return input.to(dtype), other.to(dtype)


@public()
@_opmath
def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """``log(exp(input) + exp(other))`` without overflow: max + log1p(exp(-|input - other|));
    equal infinities give themselves. Complex: the larger real part factored out."""
    a, b = _common("logaddexp_cpu", input, other)
    if a.is_complex():
        first = a.real >= b.real
        top, low = where(first, a, b), where(first, b, a)
        return top + (low - top).exp().log1p()
    r = a.maximum(b) + (-(a - b).abs()).exp().log1p()
    return where((a == b) & a.isinf(), a, r)


@public()
@_opmath
def logaddexp2(input: Tensor, other: Tensor) -> Tensor:
    """``log2(2**input + 2**other)`` without overflow (as ``logaddexp``, in base 2)."""
    a, b = _common("logaddexp2_cpu", input, other)
    if a.is_complex():
        raise _no_kernel("logaddexp2_cpu", a.dtype)
    r = a.maximum(b) + (-(a - b).abs()).exp2().log1p() * (1 / math.log(2.0))
    return where((a == b) & a.isinf(), a, r)


@public(inplace=True)
def ldexp(input: Tensor, other: Tensor) -> Tensor:
    """``input * 2**other`` in the operands' promoted float dtype (computed in float32 or
    float64, so a float16 result overflows to inf only as a whole)."""
    want = D.to_float(D.promote_types(input.dtype, other.dtype) if isinstance(other, Tensor)
                      else input.dtype)
    out = input * dispatch("pow", (2.0, other))
    return out if out.dtype is want else out.to(want)


def _fextremum(input: Tensor, other: Tensor, keep_input: Any) -> Tensor:
    """``input`` where ``keep_input`` holds or ``other`` is NaN, else ``other``: a NaN
    loses to a number (PyTorch's fmax/fmin; its gradient goes to the element picked)."""
    if input.is_complex() or other.is_complex():
        raise RuntimeError("fmax/fmin not implemented for complex tensors.")
    pick = keep_input
    if other.dtype.is_floating_point:
        pick = pick | other.isnan()
    return where(pick, input, other)


@public()
def fmax(input: Tensor, other: Tensor) -> Tensor:
    """The larger of each pair; a NaN only where both are NaN."""
    _tensor_arg("fmax", "other", 2, other)
    return _fextremum(input, other, input >= other)


@public()
def fmin(input: Tensor, other: Tensor) -> Tensor:
    """The smaller of each pair; a NaN only where both are NaN."""
    _tensor_arg("fmin", "other", 2, other)
    return _fextremum(input, other, input <= other)


def _tensor_pair_op(name: str, doc: str) -> Any:
    """``scriptmod.<name>(input, other)`` of registry op ``name``, which takes two tensors
    (a number for ``other`` is PyTorch's TypeError), published with its in-place form."""
    def fn(input: Tensor, other: Tensor) -> Tensor:
        _tensor_arg(name, "other", 2, other)
        return dispatch(name, (input, other))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return public(inplace=True)(fn)


hypot = _tensor_pair_op("hypot", "sqrt(input**2 + other**2) without overflow; inf if either "
                                 "is infinite.")
# ---- unfused registry ops ----------------------------------------------------------------
nextafter = _tensor_pair_op("nextafter", "The next representable value after ``input`` "
                                         "toward ``other``, in their dtype.")
gcd = _tensor_pair_op("gcd", "The non-negative greatest common divisor of integer tensors.")
lcm = _tensor_pair_op("lcm", "The non-negative least common multiple of integer tensors.")


FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])


@public()
def frexp(input: Tensor) -> Any:
    """(mantissa, exponent) with ``input = mantissa * 2**exponent``, |mantissa| in
    [0.5, 1) (int32 exponents; zero, inf and NaN give themselves and 0)."""
    return FrexpResult(*dispatch("frexp", (input,)))


# ---- whole-tensor helpers -----------------------------------------------------------------
@public(method=False)
def fill(input: Tensor, value: Any) -> Tensor:
    """A copy of ``input`` with every element ``value`` (converted to ``input``'s dtype; a
    0-d tensor ``value`` gets the gradient)."""
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError(f"fill only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    out = where(True, value, input)      # elementwise: any input layout, traces at any shape
    return out if out.dtype is input.dtype else out.to(input.dtype)


@public(out=False)
def equal(input: Tensor, other: Tensor) -> bool:
    """True if both have the same shape and equal elements (NaN is never equal)."""
    if not isinstance(other, Tensor):
        raise TypeError(f"equal(): argument 'other' (position 2) must be Tensor, not "
                        f"{type(other).__name__}")
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool((input == other).all())

