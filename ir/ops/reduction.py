"""Reductions over ``dim`` (None: all dims) with ``keepdim``; softmax-like normalizations."""
from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..errors import ArgumentValueError, DTypeError
from ..schema import ANY_RANK, NONDIFF, REDUCTION, ROW, UPCAST, op

RED = REDUCTION
_DIMS = "int[]? dim=None, bool keepdim=False"

op(f"sum(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.sum_like, R.reduce, RED, ROW)
op(f"prod(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.sum_like, R.reduce, RED)
op(f"mean(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.float_only("mean"), R.reduce, RED, ROW)
op(f"var(Tensor self, *, {_DIMS}, float correction=1) -> Tensor",
   lambda ops, attrs: D.to_real(R.float_only("var")(ops, attrs)), R.reduce, RED, ROW,
   doc="Real for a complex input: the mean squared modulus of the deviations.")
op(f"amax(Tensor self, *, {_DIMS}) -> Tensor", R.same, R.reduce, RED, ROW)
op(f"amin(Tensor self, *, {_DIMS}) -> Tensor", R.same, R.reduce, RED, ROW)
op(f"logsumexp(Tensor self, *, {_DIMS}) -> Tensor", R.same_float, R.reduce, RED, ROW)
op("max_dim(Tensor self, *, int dim, bool keepdim=False) -> (Tensor, Tensor)",
   R.pair(R.same, R.to_int64), R.reduce_pair, RED)
op("min_dim(Tensor self, *, int dim, bool keepdim=False) -> (Tensor, Tensor)",
   R.pair(R.same, R.to_int64), R.reduce_pair, RED)
op("argmax(Tensor self, *, int? dim=None, bool keepdim=False) -> Tensor", R.to_int64, R.reduce, RED, NONDIFF)
op("argmin(Tensor self, *, int? dim=None, bool keepdim=False) -> Tensor", R.to_int64, R.reduce, RED, NONDIFF)
op("any(Tensor self, *, int[]? dim=None, bool keepdim=False) -> Tensor", R.to_bool, R.reduce, RED, NONDIFF)
op("all(Tensor self, *, int[]? dim=None, bool keepdim=False) -> Tensor", R.to_bool, R.reduce, RED, NONDIFF)

# along one dim, same shape out
op("softmax(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor",
   R.float_only("softmax", kernel=True), R.same_shape, ANY_RANK, UPCAST, ROW)
op("log_softmax(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor",
   R.float_only("log_softmax", kernel=True), R.same_shape, ANY_RANK, UPCAST, ROW)
op("cumsum(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor", R.sum_like, R.same_shape,
   ANY_RANK, UPCAST)


# ---- norms ----------------------------------------------------------------------------
def _vector_norm_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    """A floating or complex input; ``dtype`` (if given) widens it; the result is real."""
    x, want = R.same(ops, attrs), attrs.get("dtype")
    if x.category < D.FLOAT:
        raise DTypeError(f"linalg.vector_norm: Expected a floating point or complex tensor as "
                         f"input. Got {x.name}")
    if want is None:
        return D.to_real(x)
    want = want if isinstance(want, D.DType) else D.BY_NAME[want]
    if want.category < D.FLOAT:
        raise DTypeError(f"linalg.vector_norm: dtype should be floating point or complex, but "
                         f"got {want.name}")
    if D.promote_types(x, want) is not want:
        raise DTypeError(f"linalg.vector_norm: the dtype of the input ({x.name}) should be "
                         f"convertible without narrowing to the specified dtype ({want.name})")
    return D.to_real(want)


# One op, not a composite of abs/pow/sum/sqrt: its derivative (``scriptmod.autograd``) is
# torch's, which is 0 at a zero vector where sqrt(sum(x * x)) would give NaN; it is still a
# ROW op, so ``codegen.rows`` expands it into a row reduction that fuses with its neighbours.
op(f"linalg_vector_norm(Tensor self, *, float ord=2.0, {_DIMS}, ScalarType? dtype=None) -> Tensor",
   _vector_norm_dtype, R.reduce, RED, ROW)


# sorting along one dim: (values, int64 indices); NaN sorts as the largest value
def _sortable(opname: str) -> Any:
    def rule(ops: Sequence[Any], attrs: dict) -> tuple:
        t = R.same(ops, attrs)
        if t.category == D.COMPLEX:
            raise DTypeError(f"{opname}(): expected a real (bool, integer or floating point) "
                             f"input, got {t.name}")
        return t, D.int64
    return rule


def _sorted_shape(opname: str) -> Any:
    """The input's shape, with ``dim`` cut to ``k`` for topk (which needs k <= its size)."""
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
        s = ops[0][1]
        if s is None:
            return None, None
        d = R.norm_dim(attrs["dim"], len(s), opname)
        k = attrs.get("k")
        if k is not None:
            check_k(k, s[d] if s else 1, attrs["dim"])
            s = tuple(k if i == d else n for i, n in enumerate(s))
        return s, s
    return rule


def check_k(k: Any, size: Any, dim: int) -> None:
    """topk's ``k``: an int from 0 to the size of ``dim`` (a symbolic size: checked later)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0 or (
            isinstance(size, int) and k > size):
        raise ArgumentValueError(f"topk(): expected k in [0, {size}] (the size of dim {dim}), "
                                 f"got k={k!r}")


op("sort(Tensor self, *, int dim=-1, bool descending=False) -> (Tensor, Tensor)",
   _sortable("sort"), _sorted_shape("sort"), ANY_RANK,
   doc="Stable: equal values keep their order (also when descending).")
op("topk(Tensor self, *, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor, Tensor)",
   _sortable("topk"), _sorted_shape("topk"), ANY_RANK,
   doc="The k largest (smallest) values along dim, in sorted order; ties in index order.")
