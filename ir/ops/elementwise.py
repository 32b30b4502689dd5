"""Elementwise ops: one row each. Composite activations (gelu, silu, ...) are not here:
they are decompositions into these primitives (see ``scriptmod.nn.functional``)."""
from typing import Any, Sequence

from . import rules as R
from ..schema import BINARY, COMMUTATIVE, ELEMENTWISE, IMPURE, NONDIFF, UNARY, VIEW, op

EW, UN, BIN = ELEMENTWISE, UNARY, BINARY

# unary, same dtype
op("neg(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("abs(Tensor self) -> Tensor", R.real_of, R.same_shape, EW, UN)
op("sign(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("relu(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("floor(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("ceil(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("round(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)
op("trunc(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN)

# unary, computed in floating point (int inputs give the default float dtype)
for _name in ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
              "sigmoid", "erf", "erfc", "reciprocal", "log2", "exp2"):
    op(f"{_name}(Tensor self) -> Tensor", R.same_float, R.same_shape, EW, UN)

# binary arithmetic with PyTorch promotion
op("add(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("sub(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.sub_dtype, R.broadcast, EW, BIN)
op("mul(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("div(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote_float, R.broadcast, EW, BIN)
op("floor_divide(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, NONDIFF)
op("remainder(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN)
op("pow(Tensor|Scalar self, Tensor|Scalar exponent) -> Tensor", R.promote, R.broadcast, EW, BIN)
op("maximum(Tensor self, Tensor other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("minimum(Tensor self, Tensor other) -> Tensor", R.promote, R.broadcast, EW, BIN, COMMUTATIVE)
op("atan2(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote_float, R.broadcast, EW, BIN)

# comparisons and logic: bool results, no derivative
for _name, _comm in (("eq", True), ("ne", True), ("lt", False), ("le", False), ("gt", False),
                     ("ge", False), ("logical_and", True), ("logical_or", True),
                     ("logical_xor", True)):
    _flags = (EW, BIN, NONDIFF) + ((COMMUTATIVE,) if _comm else ())
    op(f"{_name}(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.to_bool, R.broadcast, *_flags)
op("logical_not(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF)
op("isnan(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF)
op("isinf(Tensor self) -> Tensor", R.to_bool, R.same_shape, EW, UN, NONDIFF)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    op(f"{_name}(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", R.promote, R.broadcast, EW, BIN, NONDIFF, COMMUTATIVE)
op("bitwise_not(Tensor self) -> Tensor", R.same, R.same_shape, EW, UN, NONDIFF)

# selection
op("where(Tensor condition, Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   lambda ops, attrs: R.promote(ops[1:], attrs), R.broadcast, EW)
op("clamp(Tensor self, *, float? min=None, float? max=None) -> Tensor", R.same, R.same_shape, EW, UN)
op("cast(Tensor self, *, ScalarType dtype) -> Tensor", R.from_attr(), R.same_shape, EW, UN)

# An in-place op on a traced graph's input (``ReLU(inplace=True)`` on an argument): the
# tracer writes the input's final value back with ``copy_``, whose output is that input's
# own storage. Not fused (impure); ``passes.inplace`` drops the copies nobody can observe.
def _copy_into(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> R.Shape | None:
    """``self``'s shape; ``src`` must broadcast to it (as ``Tensor.copy_`` requires)."""
    dst, src = ops[0][1], ops[1][1]
    out = R.broadcast_shapes(dst, src)
    if out is not None and dst is not None and (len(out) != len(dst) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(out, dst))):
        raise R.ShapeError(f"copy_: src of shape {tuple(src)} does not broadcast to the "
                           f"destination's shape {tuple(dst)}")
    return dst


op("copy_(Tensor self, Tensor src) -> Tensor", R.same, _copy_into, IMPURE, VIEW)
