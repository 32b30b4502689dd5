"""Schemas of image resampling (interpolate, grid_sample, affine_grid) and their first-order
backward ops. Pixel and channel shuffles are reshapes and permutes (decompositions in
``nn._functional_vision``): no op of their own. The kernels compute float16/bfloat16 inputs
in float32 themselves (the registry test pins the set of ``UPCAST`` ops)."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import symdims as SD
from ..schema import NONDIFF, op
from ..types import Dim, Shape

from .conv import _size_input

# The modes of ``upsample``: torch's names, except that linear/bilinear/trilinear are one
# mode (the input's rank says which) and bicubic is ``cubic``.
UPSAMPLE_MODES = ("nearest", "nearest-exact", "linear", "cubic", "area", "lanczos")


def scaled_size(size: Dim, scale: float) -> Dim:
    """``floor(size * scale)`` in double precision, as PyTorch sizes an output from a scale
    factor; for a symbolic size only an integral scale gives a known dim."""
    if isinstance(size, int):
        return int(size * scale)
    if size is not None and float(scale).is_integer():
        return SD.mul(size, int(scale))
    return None


def _upsample(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x, size = ops[0][1], values[1]
    if x is None:
        return None
    scales = attrs["scale_factor"]
    n = len(size) if size else len(scales) if scales else None
    if n is None:
        return None
    if size:
        return tuple(x[:-n]) + tuple(size)
    return tuple(x[:-n]) + tuple(scaled_size(d, s) for d, s in zip(x[-n:], scales))


# ``size``: the output's spatial size, or ``[]`` to size it as ``floor(input size *
# scale_factor)`` at run time (so that a trace follows the input's size). ``scale_factor``
# also places the source coordinates unless ``recompute_scale_factor`` (then the ratio of
# the sizes does, as when ``size`` is given).
op("upsample(Tensor self, int[] size, *, str mode, float[]? scale_factor=None, "
   "bool recompute_scale_factor=False, bool align_corners=False, bool antialias=False) -> Tensor",
   R.same, _upsample)
# ``scales``: the scale factors that placed the forward's source coordinates (None: the
# ratio of the sizes); the output's size is the last input, read at run time
op("upsample_grad(Tensor grad, int[] input_size, *, str mode, float[]? scales=None, "
   "bool align_corners=False, bool antialias=False) -> Tensor", R.same, _size_input, NONDIFF)


def _grid_sampler(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x, grid = ops[0][1], ops[1][1]
    if x is None or grid is None:
        return None
    return (x[0], x[1]) + tuple(grid[1:-1])


_GRID = "str mode='bilinear', str padding_mode='zeros', bool align_corners=False"
op(f"grid_sampler(Tensor input, Tensor grid, *, {_GRID}) -> Tensor", R.same, _grid_sampler)
op(f"grid_sampler_grad(Tensor grad, Tensor input, Tensor grid, *, {_GRID}) -> (Tensor, Tensor)",
   lambda ops, attrs: (R.same(ops, attrs),) * 2,
   lambda ops, attrs, values: (ops[1][1], ops[2][1]), NONDIFF)


def _affine_grid(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    size = values[1]
    if size is None:
        return None
    return (size[0],) + tuple(size[2:]) + (len(size) - 2,)


# ``size``: the (N, C, H, W) or (N, C, D, H, W) size of the images the grid samples
op("affine_grid(Tensor theta, int[] size, *, bool align_corners=False) -> Tensor", R.same,
   _affine_grid)
