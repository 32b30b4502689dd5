"""Schemas of embedding bags, padding modes, distances and other layer primitives.

``embedding_bag`` reduces the rows of ``weight`` picked by the 1-D ``indices`` over bags
``[offsets[b], offsets[b + 1])`` (the last bag ends at the end of ``indices``, or at the
last offset with ``include_last_offset``): ``mode`` ``sum`` (each row scaled by
``per_sample_weights`` when given), ``mean`` or ``max``; rows at ``padding_idx`` are left
out (and not counted by ``mean``); an empty bag is zeros. ``F.embedding`` with
``scale_grad_by_freq`` is the same op over bags of one index. Its two backward ops are
NONDIFF: the weight's gradient (each index's row of ``grad`` scaled as the forward scaled
it, divided by the index's count with ``scale_grad_by_freq``; for ``max`` to the row that
won, the first on ties) and the per-sample weights' (the dot of each picked row with its
bag's row of ``grad``).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError
from ..schema import NONDIFF, op
from ..types import Shape

EMBEDDING_BAG_MODES = ("sum", "mean", "max")


def check_bag_mode(mode: str, has_weights: bool) -> None:
    """PyTorch's refusals of an embedding bag's ``mode``, shared by ``F.embedding_bag`` (which
    must raise them before its other checks) and the kernel (an op called from a graph)."""
    if mode not in EMBEDDING_BAG_MODES:
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")
    if has_weights and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}')")
_BAG = ("str mode='sum', bool include_last_offset=False, int? padding_idx=None, "
        "bool scale_grad_by_freq=False")


def _bag_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    """The weight's dtype; integer indices and offsets, per-sample weights of that dtype."""
    weight, indices, offsets, per_sample = ops[0][0], ops[1][0], ops[2][0], ops[3]
    for name, d in (("indices", indices), ("offsets", offsets)):
        if d.category != D.INT:
            raise DTypeError(f"embedding_bag: expected {name} of an integer dtype (Long or "
                             f"Int), got {d.name}")
    if isinstance(per_sample, tuple) and per_sample[0] is not weight:
        raise DTypeError(f"embedding_bag: expected per_sample_weights of the weight's dtype "
                         f"({weight.name}), got {per_sample[0].name}")
    return weight


def _bags(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(bags, embedding_dim): one bag per offset, less one with ``include_last_offset``."""
    weight, offsets = ops[0][1], ops[2][1]
    if weight is None or offsets is None:
        return None
    bags = SD.sub(offsets[0], 1) if attrs.get("include_last_offset") else offsets[0]
    return (bags, weight[1])


op(f"embedding_bag(Tensor weight, Tensor indices, Tensor offsets, Tensor? per_sample_weights, "
   f"*, {_BAG}) -> Tensor", _bag_dtype, _bags)
op(f"embedding_bag_grad(Tensor grad, Tensor weight, Tensor indices, Tensor offsets, "
   f"Tensor? per_sample_weights, *, {_BAG}) -> Tensor",
   lambda ops, attrs: ops[0][0], lambda ops, attrs, values: ops[1][1], NONDIFF)
op("embedding_bag_sample_weights_grad(Tensor grad, Tensor weight, Tensor indices, "
   "Tensor offsets, *, bool include_last_offset=False, int? padding_idx=None) -> Tensor",
   lambda ops, attrs: ops[0][0], lambda ops, attrs, values: ops[2][1], NONDIFF)
