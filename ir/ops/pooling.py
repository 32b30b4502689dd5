"""Pooling over the last 1, 2 or 3 dims (``max_pool1d`` .. ``max_unpool3d``) and the
first-order backward ops of the ones whose derivative is not a composite of other ops.

One family of rows per rank, as PyTorch's own ops are named (``aten::max_pool3d``): the
rank is in the name, so a pooling node means the same at a batched and an unbatched input
(``(N, C, *S)`` or ``(C, *S)``; every dim before the last ``n`` is a batch dim). Max pooling
with indices returns flat indices into the last ``n`` dims of each plane, as PyTorch does;
``max_pool{n}d_with_indices_grad`` (their scatter-add) is the backward of every pooling that
returns indices (``adaptive_max_pool``, ``fractional_max_pool``).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from . import rules as R
from ..schema import NONDIFF, UPCAST, op
from ..types import Shape

from .conv import _out_size, _size_input

ShapeRule = Callable[[Sequence[Any], dict, Sequence[Any]], Any]


def _windowed(n: int) -> ShapeRule:
    """The shape of a pool with ``kernel_size``/``stride``/``padding``/``dilation`` over the
    last ``n`` dims (``ceil_mode``: the last window may start in the input's last stride)."""
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
        x = ops[0][1]
        if x is None:
            return None
        k, s, p = attrs["kernel_size"], attrs["stride"], attrs["padding"]
        d = attrs.get("dilation") or (1,) * n
        c = attrs["ceil_mode"]
        return tuple(x[:-n]) + tuple(_out_size(x[len(x) - n + i], k[i], s[i], p[i], d[i], c)
                                     for i in range(n))
    return rule


def _sized(n: int, sizes: Callable[[dict, Sequence[Any]], Any]) -> ShapeRule:
    """The input's batch dims and the ``n`` sizes ``sizes(attrs, values)`` gives."""
    def rule(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
        x, out = ops[0][1], sizes(attrs, values)
        if x is None or out is None:
            return None
        return tuple(x[:-n]) + tuple(out)
    return rule


def _pair_of(rule: ShapeRule) -> ShapeRule:
    """Values and their indices: two results of one shape."""
    def pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
        s = rule(ops, attrs, values)
        return s, s
    return pair


_WITH_INDICES = R.pair(R.same, R.to_int64)
_attr_size = (lambda attrs, values: attrs["output_size"])
_input_size = (lambda attrs, values: values[2])


def _declare(n: int) -> None:
    """The pooling rows of rank ``n``."""
    ones, zeros = repr((1,) * n), repr((0,) * n)
    win = f"int[] kernel_size, int[] stride, int[] padding={zeros}"
    maxw = f"{win}, int[] dilation={ones}, bool ceil_mode=False"
    avgw = f"{win}, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None"
    pool = _windowed(n)
    # avg_pool2d keeps the UPCAST flag it always had; the new rows compute in float32 for
    # half inputs in their kernels (the registry test pins the set of UPCAST ops)
    avg_flags = (UPCAST,) if n == 2 else ()
    op(f"max_pool{n}d(Tensor self, *, {maxw}) -> Tensor", R.same, pool)
    op(f"max_pool{n}d_with_indices(Tensor self, *, {maxw}) -> (Tensor, Tensor)",
       _WITH_INDICES, _pair_of(pool))
    op(f"avg_pool{n}d(Tensor self, *, {avgw}) -> Tensor", R.same, pool, *avg_flags)
    op(f"adaptive_avg_pool{n}d(Tensor self, *, int[] output_size) -> Tensor", R.same,
       _sized(n, _attr_size))
    op(f"adaptive_max_pool{n}d(Tensor self, *, int[] output_size) -> (Tensor, Tensor)",
       _WITH_INDICES, _pair_of(_sized(n, _attr_size)))
    op(f"max_unpool{n}d(Tensor self, Tensor indices, int[] output_size) -> Tensor", R.same,
       _sized(n, _input_size),
       doc="Each value written at its flat index into the last n dims of a zero plane.")
    # first-order backward ops; the sizes they produce are inputs (symbolic in a compiled
    # backward), as conv2d_grad_input's are
    op(f"max_pool{n}d_grad(Tensor grad, Tensor self, *, int[] kernel_size, int[] stride, "
       f"int[] padding, int[] dilation, bool ceil_mode) -> Tensor", R.same,
       lambda ops, attrs, values: ops[1][1], NONDIFF)
    op(f"max_pool{n}d_with_indices_grad(Tensor grad, Tensor indices, int[] input_size) -> Tensor",
       R.same, _size_input, NONDIFF,
       doc="grad added at the flat indices into the input's last n dims of each plane.")
    op(f"avg_pool{n}d_grad(Tensor grad, int[] input_size, *, int[] kernel_size, int[] stride, "
       f"int[] padding, bool ceil_mode, bool count_include_pad, int? divisor_override=None) "
       f"-> Tensor", R.same, _size_input, NONDIFF)
    op(f"adaptive_avg_pool{n}d_grad(Tensor grad, int[] input_size) -> Tensor", R.same,
       _size_input, NONDIFF)


for _n in (1, 2, 3):
    _declare(_n)

for _n in (2, 3):
    op(f"fractional_max_pool{_n}d(Tensor self, Tensor random_samples, *, int[] kernel_size, "
       f"int[] output_size) -> (Tensor, Tensor)", _WITH_INDICES, _pair_of(_sized(_n, _attr_size)),
       doc="random_samples (N, C, n) in [0, 1) place each plane's pseudo-random windows.")
