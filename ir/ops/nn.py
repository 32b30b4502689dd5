"""Linear algebra and neural-network primitives (those that are not decompositions)."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError, ShapeError
from ..schema import ANY_RANK, IMPURE, NONDIFF, UPCAST, op
from ..types import Dim, Shape


def matmul_shape(a: Shape | None, b: Shape | None) -> Shape | None:
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("matmul: both arguments need at least 1 dimension, got 0-dim tensor")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    k1, k2 = a2[-1], b2[-2]
    if SD.compare("!=", k1, k2):        # sizes, or symbolic ones that provably differ
        raise ShapeError(f"matmul: shapes {tuple(a)} and {tuple(b)} cannot be multiplied "
                         f"({k1} != {k2})")
    batch = R.broadcast_shapes(a2[:-2], b2[:-2]) or ()
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return matmul_shape(ops[0][1], ops[1][1])


def _embedding(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    w, idx = ops[0][1], ops[1][1]
    return None if w is None or idx is None else tuple(idx) + (w[1],)


op("matmul(Tensor self, Tensor other) -> Tensor", R.matmul_dtype, _matmul, ANY_RANK, UPCAST)


def _attention_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    q, k, v = (o[0] for o in ops[:3])
    if not q is k is v or q.category != D.FLOAT:
        raise DTypeError(f"attention: query, key and value must have one floating dtype, got "
                         f"{q.name}, {k.name} and {v.name}")
    mask = ops[3][0] if len(ops) > 3 and R.is_tensor(ops[3]) else None
    if mask is not None and mask is not q:
        raise DTypeError(f"attention: mask must have the query's dtype {q.name}, got "
                         f"{mask.name}")
    return q


def _attention(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    q, k, v = (o[1] for o in ops[:3])
    if k is not None and len(k) < 2:
        raise ShapeError(f"attention: key needs at least 2 dims, got shape {tuple(k)}")
    kt = None if k is None else tuple(k[:-2]) + (k[-1], k[-2])
    return matmul_shape(matmul_shape(q, kt), v)


# ``softmax(query @ key.transpose(-2, -1) * scale + mask) @ value`` (matmul's broadcasting;
# ``mask`` additive, of the scores' dtype, broadcasting to the scores without widening them).
# Eager never emits it: ``fuse_attention`` writes the unfused chain of a traced graph as this
# op, which runs as one native kernel on float32 CPU tensors (``runtime.attention``).
op("attention(Tensor query, Tensor key, Tensor value, Tensor? mask, *, float scale=1.0) -> Tensor",
   _attention_dtype, _attention, ANY_RANK)
op("embedding(Tensor weight, Tensor indices, *, int? padding_idx=None) -> Tensor", R.embedding_dtype, _embedding,
   ANY_RANK)
op("dropout(Tensor self, bool train, *, float p=0.5) -> Tensor", R.same, R.same_shape, IMPURE, ANY_RANK)
# dropout's multiplier (kept elements 1/(1-p), dropped 0; ones when not training), from the
# same draw: the compiled backward splits dropout into x * dropout_mask(x) and saves the mask
op("dropout_mask(Tensor self, bool train, *, float p=0.5) -> Tensor", R.same, R.same_shape, IMPURE,
   NONDIFF, ANY_RANK)


def _mse_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    if attrs["reduction"] not in ("none", "mean", "sum"):
        raise ValueError(f"{attrs['reduction']} is not a valid value for reduction")
    return R.broadcast(ops, attrs, values) if attrs["reduction"] == "none" else ()


# (x - t)**2 reduced: one op, so eager runs it in two passes (and its gradient in two) where
# the composite took a dozen over fresh arrays
op('mse_loss(Tensor self, Tensor target, *, str reduction="mean") -> Tensor', R.promote_float,
   _mse_shape)
def _batch_norm_backward_shapes(ops: Sequence[Any], attrs: dict, values: Sequence[Any]
                                ) -> tuple:
    x = ops[1][1]
    c = None if x is None or len(x) < 2 else (x[1],)
    return x, c, c


# In training with running stats, the kernel also updates them and ``num_batches_tracked``
# (in place), so the bookkeeping follows the graph's ``training`` value after tracing;
# ``momentum=None`` is a cumulative average (1 / num_batches_tracked).
op("batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight, "
   "Tensor? bias, bool training, Tensor? num_batches_tracked, *, float? momentum=0.1, "
   "float eps=1e-05) -> Tensor",
   R.norm_params_dtype("batch_norm"), R.same_shape, IMPURE)
# its first-order backward in one op (two passes over the tensors): the derivative rule uses
# it where no higher derivative is taken (the composite formula stays for create_graph)
op("batch_norm_backward(Tensor grad, Tensor input, Tensor? running_mean, "
   "Tensor? running_var, Tensor? weight, bool training, *, float eps=1e-05) "
   "-> (Tensor, Tensor, Tensor)", lambda ops, attrs: (ops[1][0],) * 3,
   _batch_norm_backward_shapes, NONDIFF,
   doc="(grad_input, grad_weight, grad_bias) of batch_norm at output gradient grad.")


# ---- singular values (the matrix 2-norms and the nuclear norm) ------------------------------
def _svd_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    a = R.same(ops, attrs)
    if a.category < D.FLOAT:
        raise DTypeError(f"linalg.svd: Expected a floating point or complex tensor as input. "
                         f"Got {a.name}")
    if a in (D.float16, D.bfloat16):     # as torch's CPU kernels: LAPACK has no half types
        raise DTypeError(f"linalg.svd: {a.name} is not supported (LAPACK computes in float32 "
                         f"or float64); convert with .float()")
    return D.to_real(a)


def check_matrices(shape: Sequence[Dim]) -> None:
    """A stack of matrices: at least 2 dims (the eager kernels check it too)."""
    if len(shape) < 2:
        raise ShapeError(f"linalg.svd: The input tensor A must have at least 2 dimensions, got "
                         f"shape {tuple(shape)}")


def _svdvals(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(..., m, n) -> (..., min(m, n))."""
    a = ops[0][1]
    if a is None:
        return None
    check_matrices(a)
    m, n = a[-2], a[-1]
    k = SD.minimum(m, n)
    return tuple(a[:-2]) + (k,)


op("linalg_svdvals(Tensor A) -> Tensor", _svd_dtype, _svdvals, ANY_RANK,
   doc="The singular values of the matrices in the last two dims, in descending order.")
# U diag(grad) Vh: the first-order derivative of the singular values (no derivative itself)
op("linalg_svdvals_grad(Tensor A, Tensor grad) -> Tensor", R.same, R.same_shape, ANY_RANK,
   NONDIFF)
