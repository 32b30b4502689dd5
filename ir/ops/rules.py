"""Reusable dtype and shape rules for op declarations (see ``ir.schema``).

Operands: a tensor is ``(dtype, shape)``; a Python number is its type; anything else None.
Shapes may hold symbolic dims (``str``) and unknown dims (``None``).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..dtypes import DType
from ..types import Dim, Shape


def is_tensor(o: Any) -> bool:
    return isinstance(o, tuple)


def tensors(ops: Sequence[Any]) -> list[tuple]:
    return [o for o in ops if isinstance(o, tuple)]


# ---- dtype rules ---------------------------------------------------------------------

def same(ops: Sequence[Any], attrs: dict) -> DType:
    return tensors(ops)[0][0]


def promote(ops: Sequence[Any], attrs: dict) -> DType:
    dim: list[DType] = []
    zero: list[DType] = []
    scalars: list[type] = []
    for o in ops:
        if isinstance(o, tuple):
            (zero if o[1] is not None and len(o[1]) == 0 else dim).append(o[0])
        elif o in (bool, int, float, complex):
            scalars.append(o)
    return D.result_type(dim, zero, scalars)


def promote_float(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_float(promote(ops, attrs))


def same_float(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_float(same(ops, attrs))


def to_bool(ops: Sequence[Any], attrs: dict) -> DType:
    return D.bool_


def to_int64(ops: Sequence[Any], attrs: dict) -> DType:
    return D.int64


def real_of(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_real(same(ops, attrs))


def from_attr(default: str = "default") -> Any:
    """dtype taken from the ``dtype`` attribute; else the default float (or the input's)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        d = attrs.get("dtype")
        if d is not None:
            return d if isinstance(d, DType) else D.BY_NAME[d]
        if default == "input":
            return same(ops, attrs)
        return D.get_default_dtype()
    return rule


def sum_like(ops: Sequence[Any], attrs: dict) -> DType:
    d = attrs.get("dtype")
    if d is not None:
        return d if isinstance(d, DType) else D.BY_NAME[d]
    t = same(ops, attrs)
    return D.int64 if t.category <= D.INT else t


def float_only(opname: str) -> Any:
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        d = attrs.get("dtype")
        if d is not None:
            return d if isinstance(d, DType) else D.BY_NAME[d]
        t = same(ops, attrs)
        if t.category < D.FLOAT:
            raise DTypeError(f"{opname}(): expected a floating point or complex input, "
                             f"got {t.name}; pass dtype= or convert with .float()")
        return t
    return rule


def pair(first: Any, second: Any) -> Any:
    def rule(ops: Sequence[Any], attrs: dict) -> tuple:
        return first(ops, attrs), second(ops, attrs)
    return rule


def no_dtype(ops: Sequence[Any], attrs: dict) -> None:
    return None


# ---- shape rules ---------------------------------------------------------------------

def broadcast_dims(a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ShapeError(f"sizes {a} and {b} do not broadcast")
    if isinstance(a, int):   # symbolic vs concrete: the concrete size wins (guards check)
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(*shapes: Shape | None) -> Shape | None:
    known = [s for s in shapes if s is not None]
    if len(known) != len(shapes):
        return None
    n = max((len(s) for s in known), default=0)
    out: list[Dim] = [1] * n
    for s in known:
        for i, d in enumerate(s, start=n - len(s)):
            try:
                out[i] = broadcast_dims(out[i], d)
            except ValueError:
                raise ShapeError(f"shapes {_fmt(shapes)} do not broadcast "
                                 f"(dim {i - n}: {out[i]} vs {d})") from None
    return tuple(out)


def _fmt(shapes: Sequence[Shape | None]) -> str:
    return ", ".join("(" + ", ".join(map(str, s)) + ")" if s is not None else "?" for s in shapes)


def same_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return tensors(ops)[0][1]


def broadcast(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return broadcast_shapes(*(t[1] for t in tensors(ops)))


def scalar_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape:
    return ()


def norm_dim(dim: int, rank: int, op: str = "") -> int:
    lo, hi = (-1, 0) if rank == 0 else (-rank, rank - 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not lo <= dim <= hi:
        where = f"{op}: " if op else ""   # dispatch prefixes the op's name when not given
        raise IndexError(f"{where}dim expected to be in range of [{lo}, {hi}], but got {dim!r}")
    return dim % rank if rank else 0


def reduce_dims(attrs: dict, rank: int, op: str = "") -> tuple[int, ...]:
    dim = attrs.get("dim")
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted({norm_dim(d, rank, op) for d in dims}))


def reduce(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = tensors(ops)[0][1]
    if s is None:
        return None
    dims = reduce_dims(attrs, len(s))
    if attrs.get("keepdim"):
        return tuple(1 if i in dims else d for i, d in enumerate(s))
    return tuple(d for i, d in enumerate(s) if i not in dims)


def reduce_pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    s = reduce(ops, attrs, values)
    return s, s
