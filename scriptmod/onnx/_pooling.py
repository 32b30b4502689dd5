"""Pooling as ONNX nodes."""
from __future__ import annotations

from typing import Any

from scriptmod.ir.graph import Node

from ._context import Context
from ._table import emits, out_dtype


def _pool_attrs(a: dict) -> dict[str, Any]:
    pad = list(a.get("padding", (0, 0)))
    return {"kernel_shape": list(a["kernel_size"]), "strides": list(a["stride"]),
            "pads": pad + pad, "ceil_mode": int(a.get("ceil_mode", False))}


@emits("max_pool2d")
def _max_pool2d(cx: Context, node: Node, ins: list) -> list:
    kw = _pool_attrs(node.attrs) | {"dilations": list(node.attrs.get("dilation", (1, 1)))}
    return [cx.sym("MaxPool", [cx.tensor(ins[0])], out_dtype(node), 4, **kw)]


@emits("avg_pool2d")
def _avg_pool2d(cx: Context, node: Node, ins: list) -> list:
    if node.attrs.get("divisor_override") is not None:
        raise cx.error("avg_pool2d with divisor_override has no ONNX AveragePool form")
    kw = _pool_attrs(node.attrs) | {
        "count_include_pad": int(node.attrs.get("count_include_pad", True))}
    return [cx.sym("AveragePool", [cx.tensor(ins[0])], out_dtype(node), 4, **kw)]
