"""Elementwise ops: one row each. Composite activations (gelu, silu, ...) are not here:
they are decompositions into these primitives (see ``scriptmod.nn.functional``)."""
from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..dtypes import DType
from ..schema import (ANY_RANK, BINARY, COMMUTATIVE, ELEMENTWISE, IMPURE, LONG, NONDIFF,
                      OWN_DTYPES, SCALAR_OPMATH, UNARY, VIEW, op)

EW, UN, BIN, OPMATH = ELEMENTWISE, UNARY, BINARY, SCALAR_OPMATH

# unary, same dtype
op("neg(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("abs(Tensor self) -> Tensor", R.real_of, R.same_shape, EW, UN)
op("sign(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("relu(Tensor self) -> Tensor", R.not_bool("relu"), R.same_shape, EW, UN)
op("floor(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("ceil(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("round(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("trunc(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)

# unary, computed in floating point (int inputs give the default float dtype)
op("exp(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("log(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("log1p(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("expm1(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("sqrt(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN)
op("rsqrt(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN)
op("sin(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("cos(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("tanh(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("sigmoid(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("erf(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("erfc(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("reciprocal(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN)
op("log2(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)
op("exp2(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN, LONG)

# binary arithmetic with PyTorch promotion
op("add(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("sub(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.sub_dtype, R.broadcast, EW, BIN)
op("mul(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE, OPMATH)
op("div(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote_float, R.broadcast, EW, BIN, OPMATH)
# differentiable with a zero gradient, as PyTorch's div(rounding_mode='floor') is
op("floor_divide(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, LONG, OPMATH)
op("remainder(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, LONG)
def _pow_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """``promote``, but like PyTorch refuse a bool tensor to a bool tensor's power."""
    out = R.promote(ops, attrs)
    if out is D.bool_ and all(isinstance(o, tuple) for o in ops):
        raise R.DTypeError("\"pow\" not implemented for 'Bool'")
    return out


op("pow(Tensor|Scalar self, Tensor|Scalar exponent) -> Tensor", _pow_dtype, R.broadcast, EW, BIN, LONG)
op("maximum(Tensor self, Tensor other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("minimum(Tensor self, Tensor other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("atan2(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote_float, R.broadcast, EW, BIN, LONG)

# comparisons and logic: bool results, no derivative
# (comparisons compute in their inputs' promoted dtype; logic and tests read each input as is)
_CMP = "(Tensor|Scalar self, Tensor|Scalar other) -> Tensor"
op(f"eq{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE)
op(f"ne{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE)
op(f"lt{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF)
op(f"le{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF)
op(f"gt{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF)
op(f"ge{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF)
op(f"logical_and{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE, OWN_DTYPES)
op(f"logical_or{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE, OWN_DTYPES)
op(f"logical_xor{_CMP}", R.to_bool, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE, OWN_DTYPES)
op("logical_not(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF, OWN_DTYPES)
op("isnan(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF, OWN_DTYPES)
op("isinf(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF, OWN_DTYPES)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    op(f"{_name}(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE)
op("bitwise_not(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN, NONDIFF)
# |self - other| <= atol + rtol * |other| in the operands' promoted dtype (ints: in float64)
op("isclose(Tensor|Scalar self, Tensor|Scalar other, *, float rtol=1e-05, float atol=1e-08, "
   "bool equal_nan=False) -> Tensor", R.to_bool, R.broadcast, EW, NONDIFF)

# selection
op("where(Tensor condition, Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   lambda ops, attrs: R.promote(ops[1:], attrs), R.broadcast, EW)
def _clamp_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """PyTorch's: ``self`` promoted with its bounds as Python scalars (an int tensor with a
    float bound is float; int bounds keep it int)."""
    bounds = [type(attrs[k]) for k in ("min", "max") if attrs.get(k) is not None]
    return R.promote(list(ops) + bounds, attrs)


op("clamp(Tensor self, *, float? min=None, float? max=None) -> Tensor", _clamp_dtype,
   R.same_shape, EW, UN)
op("cast(Tensor self, *, ScalarType dtype) -> Tensor", R.from_attr(), R.same_shape, EW, UN, OWN_DTYPES)

# An in-place op on a traced graph's input (``ReLU(inplace=True)`` on an argument): the
# tracer writes the input's final value back with ``copy_``, whose output is that input's
# own storage. Not fused (impure); ``passes.inplace`` drops the copies nobody can observe.
# It follows ``self``'s rank as eager's ``copy_`` does (a write-back follows its argument).
def _copy_into(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> R.Shape | None:
    """``self``'s shape; ``src`` must broadcast to it (as ``Tensor.copy_`` requires)."""
    dst, src = ops[0][1], ops[1][1]
    out = R.broadcast_shapes(dst, src)
    if out is not None and dst is not None and (len(out) != len(dst) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(out, dst))):
        raise R.ShapeError(f"copy_: src of shape {tuple(src)} does not broadcast to the "
                           f"destination's shape {tuple(dst)}")
    return dst


op("copy_(Tensor self, Tensor src) -> Tensor", R.same, _copy_into, IMPURE, VIEW, ANY_RANK)
