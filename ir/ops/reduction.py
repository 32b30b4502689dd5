"""Reductions over ``dim`` (None: all dims) with ``keepdim``; softmax-like normalizations."""
from . import rules as R
from ..schema import ANY_RANK, NONDIFF, REDUCTION, ROW, UPCAST, op

RED = REDUCTION
_DIMS = "int[]? dim=None, bool keepdim=False"

op(f"sum(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.sum_like, R.reduce, RED, ROW)
op(f"prod(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.sum_like, R.reduce, RED)
op(f"mean(Tensor self, *, {_DIMS}, ScalarType? dtype=None) -> Tensor", R.float_only("mean"), R.reduce, RED, ROW)
op(f"var(Tensor self, *, {_DIMS}, float correction=1) -> Tensor", R.float_only("var"), R.reduce, RED, ROW)
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
op("softmax(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor", R.float_only("softmax"), R.same_shape,
   ANY_RANK, UPCAST, ROW)
op("log_softmax(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor", R.float_only("log_softmax"),
   R.same_shape, ANY_RANK, UPCAST, ROW)
op("cumsum(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor", R.sum_like, R.same_shape,
   ANY_RANK, UPCAST)
