"""Normalization and the dropout variants as ONNX nodes. The norm layers are decompositions
into primitives (exported op by op); what is here is the one registry op they add to a graph:
``dropout_mask``, the channel-wise dropout's multiplier."""
from __future__ import annotations

import numpy as np

from scriptmod.ir.graph import Node

from ._context import Context, numpy_dtype
from ._table import emits, out_dtype, out_rank


@emits("dropout_mask")
def _dropout_mask(cx: Context, node: Node, ins: list) -> list:
    """In eval the multiplier is ones of the input's shape; training draws are not exported."""
    if ins[1] is not False:
        raise cx.error("dropout in training mode: call model.eval() before exporting")
    d = out_dtype(node)
    one = cx.const(np.ones((), numpy_dtype(d)))
    return [cx.sym("Expand", [one, cx.op("Shape", [cx.tensor(ins[0], d)])], d, out_rank(node))]
