"""Convolution (1-D, 2-D and 3-D), its first-order backward ops, and the sliding-block ops
``im2col``/``col2im`` (``unfold``/``fold``).

``conv1d``/``conv2d``/``conv3d`` are one op per spatial rank, as PyTorch's are (and as saved
archives name ``conv2d``): the same shape rule, kernel, derivative and ONNX emitter serve
all three. A transposed convolution is ``conv{r}d_grad_input`` (the adjoint of a
convolution), so it has no op of its own.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import symdims as SD
from ..schema import UPCAST, op
from ..types import Dim, Shape

RANKS = (1, 2, 3)


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


def _conv(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(N, O, *out) of an (N, C, *spatial) input and an (O, C/groups, *kernel) weight."""
    x, w = ops[0][1], ops[1][1]
    if x is None or w is None or len(x) != len(w):
        return None
    st, pad, dil = attrs["stride"], attrs["padding"], attrs["dilation"]
    return (x[0], w[0], *(_out_size(x[2 + i], w[2 + i], st[i], pad[i], dil[i])
                          for i in range(len(w) - 2)))


def _size_input(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """The value of the last input, the result's size: sizes or symbolic dims (None where
    the graph does not know one)."""
    size = values[len(ops) - 1]
    return None if size is None else tuple(size)


# The backward kernels of convolution are ops so that a compiled backward can record them.
# The size of the gradient they compute is an ``int[]`` input, not an attribute: a compiled
# backward computes it from ``sm::size`` nodes, so one backward of a symbolic specialization
# serves every batch and image size (its items may be symbolic), and a weight passed in as an
# argument may vary too. ``conv{r}d_grad_input`` is also the transposed convolution, so it
# and ``_grad_weight`` are differentiable (each one's derivative is the other two ops).
_CONV = "int[] stride, int[] padding, int[] dilation, int groups"

for _r in RANKS:
    _one, _zero = (1,) * _r, (0,) * _r
    op(f"conv{_r}d(Tensor input, Tensor weight, Tensor? bias, *, int[] stride={_one}, "
       f"int[] padding={_zero}, int[] dilation={_one}, int groups=1) -> Tensor",
       R.conv_dtype, _conv, UPCAST)
    op(f"conv{_r}d_grad_input(Tensor grad, Tensor weight, int[] input_size, *, {_CONV}) "
       "-> Tensor", R.same, _size_input)
    op(f"conv{_r}d_grad_weight(Tensor grad, Tensor input, int[] weight_size, *, {_CONV}) "
       "-> Tensor", R.same, _size_input)


def _im2col(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(N, C * prod(kernel), L) of an (N, C, *spatial) input; L counts the blocks."""
    x = ops[0][1]
    k = attrs["kernel_size"]
    if x is None or len(x) != len(k) + 2:
        return None
    blocks: Dim = 1
    for i, ki in enumerate(k):
        blocks = SD.mul(blocks, _out_size(x[2 + i], ki, attrs["stride"][i], attrs["padding"][i],
                                          attrs["dilation"][i]))
    channels: Dim = x[1]
    for ki in k:
        channels = SD.mul(channels, ki)
    return (x[0], channels, blocks)


def _col2im(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(N, C, *output_size) of an (N, C * prod(kernel), L) input."""
    x, size = ops[0][1], values[1]
    if x is None or size is None or len(x) != 3:
        return None
    k = 1
    for ki in attrs["kernel_size"]:
        k *= ki
    return (x[0], SD.floordiv(x[1], k), *size)


_BLOCKS = "int[] kernel_size, int[] dilation, int[] padding, int[] stride"
op(f"im2col(Tensor self, *, {_BLOCKS}) -> Tensor", R.same, _im2col)
op(f"col2im(Tensor self, int[] output_size, *, {_BLOCKS}) -> Tensor", R.same, _col2im)
