"""Convolution and its first-order backward ops."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import symdims as SD
from ..schema import NONDIFF, UPCAST, op
from ..types import Dim, Shape


def _out_size(size: Dim, k: Dim, s: int, p: int, d: int, ceil: bool = False) -> Dim:
    """A convolution's or pool's output size, ``(size + 2p - d(k-1) - 1) // s + 1`` (with
    ``ceil``: rounded up, less a last window that would start in the right padding)."""
    span = SD.sub(SD.add(size, 2 * p), SD.add(SD.mul(d, SD.sub(k, 1)), 1))
    n = SD.add(SD.ceildiv(span, s) if ceil else SD.floordiv(span, s), 1)
    # the last window starts at (n-1)*s < span + s <= size + p when p + s <= d(k-1) + 1
    # (k=2, s=2, p=0; k=3, s=2, p=1): never in the padding, at any size, symbolic ones too
    if ceil and not (isinstance(k, int) and p + s <= d * (k - 1) + 1):
        past = SD.compare(">=", SD.mul(SD.sub(n, 1), s), SD.add(size, p))
        n = None if past is None else SD.sub(n, 1) if past else n
    return n


def _conv2d(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x, w = ops[0][1], ops[1][1]
    if x is None or w is None:
        return None
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (w[2], w[3]), attrs["stride"], attrs["padding"], attrs["dilation"]
    return (x[0], w[0], _out_size(x[2], kh, sh, ph, dh), _out_size(x[3], kw, sw, pw, dw))


op("conv2d(Tensor input, Tensor weight, Tensor? bias, *, int[] stride=(1, 1), int[] padding=(0, 0), "
   "int[] dilation=(1, 1), int groups=1) -> Tensor", R.conv_dtype, _conv2d, UPCAST)

# The first-order backward kernels of convolution and pooling, as ops so that a compiled
# backward can record them (their own derivative is not defined: double backward through
# them runs op by op, which raises, as before). The size of the gradient they compute is an
# ``int[]`` input, not an attribute: a compiled backward computes it from ``sm::size`` nodes,
# so one backward of a symbolic specialization serves every batch and image size (its items
# may be symbolic), and a weight passed in as an argument may vary too.
_CONV = "int[] stride, int[] padding, int[] dilation, int groups"


def _size_input(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """The value of the last input, the result's size: sizes or symbolic dims (None where
    the graph does not know one)."""
    size = values[len(ops) - 1]
    return None if size is None else tuple(size)


op(f"conv2d_grad_input(Tensor grad, Tensor weight, int[] input_size, *, {_CONV}) -> Tensor",
   R.same, _size_input, NONDIFF)
op(f"conv2d_grad_weight(Tensor grad, Tensor input, int[] weight_size, *, {_CONV}) -> Tensor",
   R.same, _size_input, NONDIFF)
