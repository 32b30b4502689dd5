"""Convolution as ONNX nodes."""
from __future__ import annotations

from typing import Any

from scriptmod.ir.graph import Node

from ._context import Context
from ._table import emits, out_dtype


@emits("conv2d")
def _conv2d(cx: Context, node: Node, ins: list) -> list:
    a = node.attrs
    pad = a.get("padding", (0, 0))
    d = out_dtype(node)
    inputs = [cx.tensor(v, d) for v in ins if v is not None]
    kw: dict[str, Any] = {"strides": list(a.get("stride", (1, 1))),
                          "dilations": list(a.get("dilation", (1, 1))),
                          "group": a.get("groups", 1)}
    if isinstance(pad, str):
        kw["auto_pad"] = "SAME_UPPER" if pad == "same" else "VALID"
    else:
        kw["pads"] = [*pad, *pad]
    return [cx.sym("Conv", inputs, d, 4, **kw)]
