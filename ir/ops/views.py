"""Schemas of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views.

Most of the family is decompositions (``scriptmod/_ops_views.py``) over ``reshape``,
``narrow``, ``index``/``index_put``, ``cat``; the rows here are the views no existing op can
express (a diagonal, sliding windows, an arbitrary stride pattern, the real/imaginary parts
of complex storage) and the two complex element constructors.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError, ShapeError
from ..schema import ANY_RANK, VIEW, op
from ..types import Dim, Shape


def diagonal_len(n1: Dim, n2: Dim, offset: int) -> Dim:
    """The length of the ``offset`` diagonal of an ``(n1, n2)`` matrix (0 when it misses)."""
    rows = SD.add(n1, min(offset, 0))
    cols = SD.sub(n2, max(offset, 0))
    return SD.maximum(SD.minimum(rows, cols), 0)


def diagonal_dims(rank: int, dim1: int, dim2: int) -> tuple[int, int]:
    """``dim1``/``dim2`` of ``diagonal`` normalized; they must differ."""
    d1, d2 = R.norm_dim(dim1, rank, "diagonal"), R.norm_dim(dim2, rank, "diagonal")
    if d1 == d2:
        raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


def _diagonal(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    d1, d2 = diagonal_dims(len(s), attrs["dim1"], attrs["dim2"])
    rest = tuple(n for i, n in enumerate(s) if i not in (d1, d2))
    return rest + (diagonal_len(s[d1], s[d2], attrs["offset"]),)


def unfold_dim(rank: int, dimension: int) -> int:
    """``Tensor.unfold``'s dim (a 0-d tensor unfolds along its one implicit dim)."""
    return R.norm_dim(dimension, max(rank, 1), "unfold")


def _unfold(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    size, step = attrs["size"], attrs["step"]
    if step <= 0:
        raise ShapeError(f"unfold: step is {step} but must be > 0")
    if not s:
        return (size,)
    d = unfold_dim(len(s), attrs["dimension"])
    if isinstance(s[d], int) and s[d] < size:
        raise ShapeError(f"maximum size for tensor at dimension {d} is {s[d]} but size is {size}")
    windows = SD.add(SD.floordiv(SD.sub(s[d], size), step), 1)
    return tuple(s[:d]) + (windows,) + tuple(s[d + 1:]) + (size,)


def _as_strided(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape:
    size, stride = attrs["size"], attrs["stride"]
    if len(size) != len(stride):
        raise ShapeError(f"mismatch in length of strides and shape: {len(size)} sizes and "
                         f"{len(stride)} strides")
    return tuple(size)


def _complex_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    """``complex(real, imag)``: both float16, float32 or float64 (one dtype)."""
    a, b = ops[0][0], ops[1][0]
    if a not in (D.float32, D.float64) or b is not a:   # numpy has no complex32
        raise DTypeError(f"complex(): expected both inputs to be Float or Double tensors "
                         f"of one dtype, but got {a.short} and {b.short}")
    return D._complex_of(a)


def _to_complex(ops: Sequence[Any], attrs: dict) -> D.DType:
    d = ops[0][0]
    if d not in (D.float32, D.float64):
        raise DTypeError(f"view_as_complex is only supported for float and double tensors, "
                         f"but got a tensor of scalar type: {d.short}")
    return D._complex_of(d)


def _real_part(ops: Sequence[Any], attrs: dict) -> D.DType:
    """The real dtype of a complex (or floating) input."""
    if ops[0][0].category < D.FLOAT:
        raise DTypeError(f"expected a complex tensor, got {ops[0][0].short}")
    return D.to_real(ops[0][0])


def _with_pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    return None if s is None else tuple(s) + (2,)


def _without_pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    if not s or SD.compare("!=", s[-1], 2):
        raise ShapeError("Tensor must have a last dimension of size 2")
    return tuple(s[:-1])


op("diagonal(Tensor self, *, int offset=0, int dim1=0, int dim2=1) -> Tensor",
   R.same, _diagonal, VIEW)
# ``Tensor.unfold``: windows of ``size`` every ``step`` along ``dimension``, as a new last dim
op("unfold(Tensor self, *, int dimension, int size, int step) -> Tensor", R.same, _unfold, VIEW)
# sizes and strides in elements of ``self``'s storage, from ``offset`` elements after self's
# first (``scriptmod.as_strided`` turns PyTorch's storage offset into it: a compiled graph's
# intermediate may sit anywhere in an arena, so only an offset relative to it means the same)
op("as_strided(Tensor self, *, int[] size, int[] stride, int offset=0) -> Tensor",
   R.same, _as_strided, VIEW)
# The parts of complex storage. On a floating tensor (PyTorch's functions refuse ``imag`` and
# ``view_as_real`` of one; these ops serve the table's real-valued gradcheck) they read it as
# complex with a zero imaginary part: ``real`` is the tensor, the rest are new arrays.
op("real(Tensor self) -> Tensor", _real_part, R.same_shape, VIEW, ANY_RANK)
op("imag(Tensor self) -> Tensor", _real_part, R.same_shape, VIEW, ANY_RANK)
op("view_as_real(Tensor self) -> Tensor", _real_part, _with_pair, VIEW, ANY_RANK)
op("view_as_complex(Tensor self) -> Tensor", _to_complex, _without_pair, VIEW, ANY_RANK)
op("complex(Tensor real, Tensor imag) -> Tensor", _complex_dtype, R.broadcast, ANY_RANK)
op("conj_physical(Tensor self) -> Tensor", R.same, R.same_shape, ANY_RANK)
