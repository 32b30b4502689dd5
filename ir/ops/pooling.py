"""Pooling and its first-order backward ops."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from ..schema import NONDIFF, UPCAST, op
from ..types import Shape

from .conv import _out_size, _size_input


def _pool2d(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x = ops[0][1]
    if x is None:
        return None
    (kh, kw), (sh, sw), (ph, pw) = attrs["kernel_size"], attrs["stride"], attrs["padding"]
    dh, dw = attrs.get("dilation", (1, 1))
    c = attrs["ceil_mode"]
    return tuple(x[:-2]) + (_out_size(x[-2], kh, sh, ph, dh, c), _out_size(x[-1], kw, sw, pw, dw, c))


op("max_pool2d(Tensor self, *, int[] kernel_size, int[] stride, int[] padding=(0, 0), "
   "int[] dilation=(1, 1), bool ceil_mode=False) -> Tensor", R.same, _pool2d)
op("avg_pool2d(Tensor self, *, int[] kernel_size, int[] stride, int[] padding=(0, 0), "
   "bool ceil_mode=False, bool count_include_pad=True) -> Tensor", R.same, _pool2d, UPCAST)
op("max_pool2d_grad(Tensor grad, Tensor self, *, int[] kernel_size, int[] stride, "
   "int[] padding, int[] dilation, bool ceil_mode) -> Tensor", R.same,
   lambda ops, attrs, values: ops[1][1], NONDIFF)
op("avg_pool2d_grad(Tensor grad, int[] input_size, *, int[] kernel_size, int[] stride, "
   "int[] padding, bool ceil_mode, bool count_include_pad) -> Tensor", R.same,
   _size_input, NONDIFF)
