"""Derivatives of losses (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


@derivative("ctc_loss", saves=(0, 1, 2, 3))
def _ctc_loss(ctx: Any, g: Tensor) -> tuple:
    """First-order only (``ctc_loss_grad`` has no derivative, as torch's has none); the
    targets and lengths are integers, without gradients."""
    log_probs, targets, input_lengths, target_lengths = ctx.inputs
    return (_op("ctc_loss_grad", g, log_probs, targets, input_lengths, target_lengths,
                blank=ctx.attrs["blank"], zero_infinity=ctx.attrs["zero_infinity"]),
            None, None, None)
