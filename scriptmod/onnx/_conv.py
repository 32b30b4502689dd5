"""Convolution as ONNX nodes: ``Conv``, ``ConvTranspose`` (``conv{r}d_grad_input``, the
transposed convolution, with ``output_padding``), fold as ``Col2Im`` (opset 18; before it a
``ConvTranspose``) and unfold as a ``Conv`` by one-hot kernels (ONNX has no Im2Col node)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from scriptmod.ir.graph import Node
from scriptmod.ir.ops.conv import RANKS
from scriptmod.ir.types import TensorType

from ._context import Context, numpy_dtype
from ._table import emits, out_dtype


def _conv_kw(a: dict, rank: int) -> dict[str, Any]:
    pad = list(a.get("padding", (0,) * rank))
    return {"strides": list(a.get("stride", (1,) * rank)),
            "dilations": list(a.get("dilation", (1,) * rank)),
            "group": a.get("groups", 1), "pads": pad + pad}


@emits(*(f"conv{r}d" for r in RANKS))
def _conv(cx: Context, node: Node, ins: list) -> list:
    d = out_dtype(node)
    rank = len(node.attrs["stride"])
    inputs = [cx.tensor(v, d) for v in ins if v is not None]
    return [cx.sym("Conv", inputs, d, rank + 2, **_conv_kw(node.attrs, rank))]


def _static_dims(cx: Context, node: Node, value: Any, what: str, start: int) -> list[int]:
    """The sizes of ``value`` from dim ``start`` on, which the ONNX node needs as constants
    (the batch dim may stay dynamic)."""
    t = value.type
    shape = t.shape if isinstance(t, TensorType) else None
    if shape is None or not all(isinstance(n, int) for n in shape[start:]):
        raise cx.error(f"{node.kind}: the {what}'s sizes from dim {start} on must be known at "
                       f"export, got {shape}")
    return list(shape[start:])


@emits(*(f"conv{r}d_grad_input" for r in RANKS))
def _conv_transpose(cx: Context, node: Node, ins: list) -> list:
    """``ConvTranspose`` with ``output_padding``: the extra size the result has over the
    default one, ``(in - 1) * s - 2p + d(k - 1) + 1`` per dim."""
    a, d = node.attrs, out_dtype(node)
    rank = len(a["stride"])
    kw = _conv_kw(a, rank)
    size_in = _static_dims(cx, node, node.inputs[0], "input", 2)
    size_out = _static_dims(cx, node, node.outputs[0], "output", 2)
    k = _static_dims(cx, node, node.inputs[1], "weight", 2)
    default = [(n - 1) * s - 2 * p + dl * (kk - 1) + 1
               for n, s, p, dl, kk in zip(size_in, kw["strides"], a["padding"], kw["dilations"], k)]
    extra = [o - n for o, n in zip(size_out, default)]
    if any(extra):
        kw["output_padding"] = extra
    inputs = [cx.tensor(ins[0], d), cx.tensor(ins[1], d)]
    return [cx.sym("ConvTranspose", inputs, d, rank + 2, **kw)]


def _blocks_kw(a: dict) -> dict[str, Any]:
    pad = list(a["padding"])
    return {"dilations": list(a["dilation"]), "pads": pad + pad, "strides": list(a["stride"])}


def _one_hot_taps(cx: Context, channels: int, k: list[int], dtype: Any) -> str:
    """(C * prod(k), 1, *k) kernels that each pick one tap, channel-major (unfold's row
    order): a grouped ``Conv`` by them is unfold, a ``ConvTranspose`` fold."""
    taps = math.prod(k)
    pick = np.tile(np.eye(taps, dtype=numpy_dtype(dtype)), (channels, 1))
    return cx.const(pick.reshape(channels * taps, 1, *k))


@emits("col2im")
def _col2im(cx: Context, node: Node, ins: list) -> list:
    """``Col2Im`` from opset 18; before it, the adjoint of unfold's ``Conv``: a grouped
    ``ConvTranspose`` of the blocks laid out on their grid."""
    a, d = node.attrs, out_dtype(node)
    k, kw = list(a["kernel_size"]), _blocks_kw(a)
    rank = 2 + len(k)
    if cx.opset >= 18:
        inputs = [cx.tensor(ins[0], d), cx.ints(ins[1]), cx.ints(k)]
        return [cx.sym("Col2Im", inputs, d, rank, **kw)]
    size = _static_dims(cx, node, node.outputs[0], "output", 1)
    channels, spatial = size[0], size[1:]
    grid = [(n + 2 * p - dl * (kk - 1) - 1) // s + 1 for n, kk, s, p, dl in
            zip(spatial, k, kw["strides"], a["padding"], kw["dilations"])]
    default = [(g - 1) * s - 2 * p + dl * (kk - 1) + 1 for g, kk, s, p, dl in
               zip(grid, k, kw["strides"], a["padding"], kw["dilations"])]
    blocks = cx.op("Reshape", [cx.tensor(ins[0], d), cx.ints([0, channels * math.prod(k), *grid])])
    kw |= {"group": channels, "kernel_shape": k,
           "output_padding": [n - m for n, m in zip(spatial, default)]}
    return [cx.sym("ConvTranspose", [blocks, _one_hot_taps(cx, channels, k, d)], d, rank, **kw)]


@emits("im2col")
def _im2col(cx: Context, node: Node, ins: list) -> list:
    """A grouped ``Conv`` by one-hot kernels, reshaped to (N, C*prod(kernel), L) (exact for
    finite values; an inf in a block gives NaN in its other rows' zero products)."""
    a, d = node.attrs, out_dtype(node)
    k = list(a["kernel_size"])
    channels = _static_dims(cx, node, node.inputs[0], "input", 1)[0]
    kw = _blocks_kw(a) | {"group": channels, "kernel_shape": k}
    conv = cx.op("Conv", [cx.tensor(ins[0], d), _one_hot_taps(cx, channels, k, d)], **kw)
    return [cx.sym("Reshape", [conv, cx.ints([0, channels * math.prod(k), -1])], d, 3)]
