"""Pooling as ONNX nodes: MaxPool (with its Indices output), AveragePool,
GlobalAveragePool / GlobalMaxPool, and MaxUnpool.

ONNX pools take ``(N, C, *S)``: an unbatched ``(C, *S)`` input gets a batch dim of one and
loses it again. ONNX indices are flat over the whole tensor, ours (PyTorch's) over the last
``n`` dims of each plane: a ``Mod`` maps theirs to ours, an ``Add`` of plane offsets ours
to theirs (both need the static sizes they read).
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node

from ._context import Context, Sym
from ._table import emits, out_dtype, out_rank


def _rank(node: Node) -> int:
    """n of ``max_pool{n}d`` and the like."""
    return int(re.search(r"(\d)d", node.op_name).group(1))  # type: ignore[union-attr]


def _spatial(node: Node, n: int, cx: Context, output: bool = False) -> tuple[int, ...]:
    """The last ``n`` sizes of the op's first input (or output): static, or an error."""
    value = node.outputs[0] if output else node.inputs[0]
    shape = getattr(value.type, "shape", None)
    if shape is None or not all(isinstance(s, int) for s in shape[-n:]):
        raise cx.error(f"{node.op_name}: needs static sizes of the pooled dims, got {shape}")
    return tuple(shape[-n:])


class _Batched:
    """The input as ``(N, C, *S)`` for an ONNX pool, and its results back in its own rank."""

    def __init__(self, cx: Context, node: Node, x: Any, n: int) -> None:
        self.cx, self.unbatched = cx, out_rank(node) == n + 1
        self.name = cx.tensor(x)
        if self.unbatched:
            self.name = cx.op("Unsqueeze", [self.name, cx.ints([0])])

    def back(self, name: str, dtype: D.DType, rank: int | None) -> Sym:
        if self.unbatched:
            name = self.cx.op("Squeeze", [name, self.cx.ints([0])])
        return Sym(name, dtype, rank)


def _window_attrs(a: dict, n: int, dilation: bool = True) -> dict[str, Any]:
    pad = list(a.get("padding") or (0,) * n)
    kw = {"kernel_shape": list(a["kernel_size"]), "strides": list(a["stride"]),
          "pads": pad + pad, "ceil_mode": int(a.get("ceil_mode", False))}
    if dilation:
        kw["dilations"] = list(a.get("dilation") or (1,) * n)
    return kw


def _plane_indices(cx: Context, onnx_indices: str, spatial: Sequence[int]) -> str:
    """ONNX's flat indices over the whole tensor as flat indices within each plane."""
    return cx.op("Mod", [onnx_indices, cx.const(np.array(math.prod(spatial), dtype=np.int64))])


def _max_pool_node(cx: Context, node: Node, ins: list, n: int, attrs: dict[str, Any]) -> list:
    """MaxPool, with the Indices output when the op has two results."""
    x = _Batched(cx, node, ins[0], n)
    d = out_dtype(node)
    if len(node.outputs) == 1:
        return [x.back(cx.op("MaxPool", [x.name], **attrs), d, out_rank(node))]
    spatial = _spatial(node, n, cx)
    values, indices = cx.op("MaxPool", [x.name], outputs=2, **attrs)
    return [x.back(values, d, out_rank(node)),
            x.back(_plane_indices(cx, indices, spatial), D.int64, out_rank(node, 1))]


def _max_pool(cx: Context, node: Node, ins: list) -> list:
    n = _rank(node)
    return _max_pool_node(cx, node, ins, n, _window_attrs(node.attrs, n))


def _avg_pool(cx: Context, node: Node, ins: list) -> list:
    n, a = _rank(node), node.attrs
    kw = _window_attrs(a, n, dilation=False)
    div = a.get("divisor_override")
    if div is not None and a.get("ceil_mode"):
        raise cx.error(f"{node.op_name} with divisor_override and ceil_mode has no ONNX "
                       f"AveragePool form")
    kw["count_include_pad"] = 1 if div is not None else int(a.get("count_include_pad", True))
    x = _Batched(cx, node, ins[0], n)
    d = out_dtype(node)
    y = cx.op("AveragePool", [x.name], **kw)
    if div is not None:       # every window divides by its full kernel size: rescale
        scale = math.prod(a["kernel_size"]) / div
        y = cx.op("Mul", [y, cx.tensor(scale, d)])
    return [x.back(y, d, out_rank(node))]


def _adaptive_kernel(cx: Context, node: Node, n: int) -> tuple[list[int], bool]:
    """The kernel of an adaptive pool whose windows are even (sizes divide), and whether it
    is global (output size 1 everywhere)."""
    size = _spatial(node, n, cx)
    out = list(node.attrs["output_size"])
    if any(o == 0 or s % o for s, o in zip(size, out)):
        raise cx.error(f"{node.op_name} from {size} to {tuple(out)} has uneven windows: no "
                       f"ONNX pool computes it")
    return [s // o for s, o in zip(size, out)], all(o == 1 for o in out)


def _adaptive_avg(cx: Context, node: Node, ins: list) -> list:
    n = _rank(node)
    k, is_global = _adaptive_kernel(cx, node, n)
    x = _Batched(cx, node, ins[0], n)
    y = cx.op("GlobalAveragePool", [x.name]) if is_global else cx.op(
        "AveragePool", [x.name], kernel_shape=k, strides=k)
    return [x.back(y, out_dtype(node), out_rank(node))]


def _adaptive_max(cx: Context, node: Node, ins: list) -> list:
    n = _rank(node)
    k, _ = _adaptive_kernel(cx, node, n)
    return _max_pool_node(cx, node, ins, n, {"kernel_shape": k, "strides": k})


def _plane_offsets(cx: Context, batched_indices: str, n: int, plane: int) -> str:
    """``(N, C, 1, ..)`` offsets ``(n * C + c) * plane`` of each plane's first element, from
    the run-time shape (the batch may be dynamic)."""
    lead = cx.op("Slice", [cx.op("Shape", [batched_indices]), cx.ints([0]), cx.ints([2])])
    count = cx.op("ReduceProd", [lead], keepdims=0)
    step, zero = (cx.const(np.array(v, dtype=np.int64)) for v in (plane, 0))
    starts = cx.op("Range", [zero, cx.op("Mul", [count, step]), step])
    return cx.op("Reshape", [starts, cx.op("Concat", [lead, cx.ints([1] * n)], axis=0)])


def _max_unpool(cx: Context, node: Node, ins: list) -> list:
    """MaxUnpool with ``output_shape``; the kernel and strides only shape a default output."""
    n = _rank(node)
    out = _spatial(node, n, cx, output=True)
    x = _Batched(cx, node, ins[0], n)
    idx = cx.tensor(ins[1], D.int64)
    if x.unbatched:
        idx = cx.op("Unsqueeze", [idx, cx.ints([0])])
    idx = cx.op("Add", [idx, _plane_offsets(cx, idx, n, math.prod(out))])
    lead = cx.op("Slice", [cx.op("Shape", [x.name]), cx.ints([0]), cx.ints([2])])
    full = cx.op("Concat", [lead, cx.ints(list(out))], axis=0)
    y = cx.op("MaxUnpool", [x.name, idx, full], kernel_shape=[1] * n, strides=[1] * n)
    return [x.back(y, out_dtype(node), out_rank(node))]


for _n in (1, 2, 3):
    emits(f"max_pool{_n}d", f"max_pool{_n}d_with_indices")(_max_pool)
    emits(f"avg_pool{_n}d")(_avg_pool)
    emits(f"adaptive_avg_pool{_n}d")(_adaptive_avg)
    emits(f"adaptive_max_pool{_n}d")(_adaptive_max)
    emits(f"max_unpool{_n}d")(_max_unpool)
