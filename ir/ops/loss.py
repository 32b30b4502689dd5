"""Schemas of losses that are not decompositions: CTC (a dynamic-programming recursion over
time) and its first-order backward op."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from ..errors import ShapeError
from ..schema import NONDIFF, op
from ..types import Shape


def _ctc_loss(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """One loss per batch entry of (T, N, C) log-probabilities."""
    lp = ops[0][1]
    if lp is None:
        return None
    if len(lp) != 3:
        raise ShapeError(f"ctc_loss: expected (T, N, C) log_probs, got shape {tuple(lp)}")
    return (lp[1],)


# ``targets``: (N, S) padded or 1-D concatenated class indices; the lengths are (N,) ints.
# The result is each sequence's negative log likelihood (0 where it is inf and zero_infinity).
op("ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, "
   "*, int blank=0, bool zero_infinity=False) -> Tensor", R.same, _ctc_loss)
op("ctc_loss_grad(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, "
   "Tensor target_lengths, *, int blank=0, bool zero_infinity=False) -> Tensor", R.same,
   lambda ops, attrs, values: ops[1][1], NONDIFF)
