"""Image resampling as ONNX nodes: ``upsample`` as Resize (area as AveragePool where the
sizes divide), ``grid_sampler`` as GridSample, ``affine_grid`` as AffineGrid (opset 20) or,
below it, a constant identity grid times theta."""
from __future__ import annotations

from typing import Any

import numpy as np

from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType

from ._context import Context, Sym, numpy_dtype
from ._table import emits, out_dtype, out_rank

# the op's mode -> (Resize mode, coordinate_transformation_mode without align_corners)
_RESIZE = {"nearest": ("nearest", "asymmetric"), "nearest-exact": ("nearest", "half_pixel"),
           "linear": ("linear", "half_pixel"), "cubic": ("cubic", "half_pixel")}


def _spatial_shape(t: Any) -> list[int] | None:
    """A tensor type's sizes after (N, C) when all are known."""
    shape = t.shape if isinstance(t, TensorType) else None
    return list(shape[2:]) if shape is not None and all(isinstance(d, int)
                                                        for d in shape[2:]) else None


@emits("upsample")
def _upsample(cx: Context, node: Node, ins: list) -> list:
    a = node.attrs
    x, size = ins[0], ins[1]
    if a["mode"] == "area":
        return [_area(cx, node, x)]
    if a["mode"] not in _RESIZE:
        raise cx.error(f"interpolate mode {a['mode']!r} has no ONNX Resize form")
    mode, transform = _RESIZE[a["mode"]]
    kw: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode":
                          "align_corners" if a["align_corners"] else transform}
    if a["mode"] == "nearest":
        kw["nearest_mode"] = "floor"
    elif a["mode"] == "nearest-exact":
        kw["nearest_mode"] = "round_prefer_ceil"
    if a["antialias"]:
        if cx.opset < 18:
            raise cx.error(f"antialiased interpolate needs opset_version >= 18, got {cx.opset}")
        kw["antialias"] = kw["exclude_outside"] = 1   # weights renormalized inside, as Pillow
        kw["cubic_coeff_a"] = -0.5           # Pillow's cubic, as PyTorch's antialiased bicubic
    elif mode == "cubic":
        kw["cubic_coeff_a"] = -0.75
    rank = out_rank(node) or 0
    if len(size):
        lead = cx.op("Slice", [cx.op("Shape", [cx.tensor(x)]), cx.ints([0]),
                               cx.ints([rank - len(size)])])
        sizes = cx.op("Concat", [lead, cx.ints(size)], axis=0)
        inputs = [cx.tensor(x), "", "", sizes]
    elif a["recompute_scale_factor"]:
        raise cx.error("interpolate with recompute_scale_factor=True has no ONNX Resize form "
                       "(give size instead)")
    else:
        n = len(a["scale_factor"])
        scales = np.array([1.0] * (rank - n) + [float(s) for s in a["scale_factor"]], np.float32)
        inputs = [cx.tensor(x), "", cx.const(scales)]
    return [cx.sym("Resize", inputs, out_dtype(node), out_rank(node), **kw)]


def _area(cx: Context, node: Node, x: Any) -> Sym:
    """Adaptive average pooling whose windows tile the input evenly is an AveragePool."""
    shape_in, shape_out = _spatial_shape(node.inputs[0].type), _spatial_shape(node.outputs[0].type)
    if shape_in is None or shape_out is None:
        raise cx.error("interpolate mode 'area' exports to ONNX for static image sizes only")
    n = len(shape_in)
    pairs = list(zip(shape_in, shape_out))
    if any(o == 0 or i % o for i, o in pairs):
        raise cx.error(f"interpolate mode 'area' from {shape_in} to {shape_out} has no ONNX "
                       f"AveragePool form (the sizes must divide)")
    kernel = [i // o for i, o in pairs]
    return cx.sym("AveragePool", [cx.tensor(x)], out_dtype(node), n + 2, kernel_shape=kernel,
                  strides=kernel)


@emits("grid_sampler")
def _grid_sampler(cx: Context, node: Node, ins: list) -> list:
    a = node.attrs
    rank = out_rank(node)
    if rank == 5 and cx.opset < 20:
        raise cx.error(f"5-D grid_sample needs opset_version >= 20, got {cx.opset}")
    mode = a["mode"]
    if cx.opset >= 20:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [cx.sym("GridSample", [cx.tensor(ins[0]), cx.tensor(ins[1])], out_dtype(node), rank,
                   mode=mode, padding_mode=a["padding_mode"],
                   align_corners=int(a["align_corners"]))]


@emits("affine_grid")
def _affine_grid(cx: Context, node: Node, ins: list) -> list:
    from scriptmod.runtime.kernels.vision import base_grid
    theta, size = ins[0], ins[1]
    d = out_dtype(node)
    if cx.opset >= 20:
        return [cx.sym("AffineGrid", [cx.tensor(theta), cx.ints(size)], d, out_rank(node),
                       align_corners=int(node.attrs["align_corners"]))]
    if not all(isinstance(s, int) for s in size):
        raise cx.error(f"affine_grid of a run-time size needs opset_version >= 20, got "
                       f"{cx.opset}")
    n = len(size) - 2
    base = base_grid(np, list(size[2:]), node.attrs["align_corners"],
                     np.dtype(numpy_dtype(d)).type).reshape(-1, n + 1)
    turned = cx.op("Transpose", [cx.tensor(theta)], perm=[0, 2, 1])
    grid = cx.op("MatMul", [cx.const(base), turned])
    return [cx.sym("Reshape", [grid, cx.ints([size[0], *size[2:], n])], d, n + 2)]
