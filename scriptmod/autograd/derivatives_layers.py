"""Derivatives of embedding bags, padding, distances and other layers (rows of
``autograd.derivatives``' table).

``embedding_bag`` is linear in ``weight`` for ``sum``/``mean`` (piecewise linear for ``max``)
and, with ``sum``, in ``per_sample_weights``: its two NONDIFF backward ops
``embedding_bag_grad`` and ``embedding_bag_sample_weights_grad`` give the gradients; the
indices and offsets have none.
"""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


@derivative("embedding_bag", saves=(0, 1, 2, 3))
def _embedding_bag(ctx: Any, g: Tensor) -> tuple:
    weight, indices, offsets, per_sample = ctx.inputs
    a = ctx.attrs
    bags = dict(include_last_offset=a["include_last_offset"], padding_idx=a["padding_idx"])
    g_weight = _op("embedding_bag_grad", g, weight, indices, offsets, per_sample,
                   mode=a["mode"], scale_grad_by_freq=a["scale_grad_by_freq"], **bags)
    g_sample = None if per_sample is None else \
        _op("embedding_bag_sample_weights_grad", g, weight, indices, offsets, **bags)
    return g_weight, None, None, g_sample
