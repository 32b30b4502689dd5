"""Memory formats (``torch.memory_format``): the order in which a tensor's elements lie in
its storage, whatever its sizes say.

A scriptmod tensor is a strided NumPy (CuPy) array, so an NCHW tensor can keep its elements
in NHWC order (``channels_last``; NDHWC for ``channels_last_3d``) as PyTorch's does. Such a
tensor is made by registry ops (``permute`` to NHWC, ``contiguous``, ``permute`` back), so
it is differentiable and traces; every op reads strides, so results never depend on the
layout. Elementwise eager ops keep it (NumPy's ``order='K'``, as TensorIterator does);
matmul, convolution and compiled kernels return contiguous tensors.

    >>> import scriptmod as sm
    >>> x = sm.zeros(2, 3, 4, 5).contiguous(memory_format=sm.channels_last)
    >>> x.stride(), x.is_contiguous(), x.is_contiguous(memory_format=sm.channels_last)
    ((60, 1, 15, 3), False, True)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from scriptmod.ir.errors import ShapeError


class memory_format:
    """One of ``contiguous_format``, ``channels_last``, ``channels_last_3d``,
    ``preserve_format`` (compared by identity, as torch's)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"scriptmod.{self.name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")

# the channels-last formats: (rank, permutation to the channels-last order, its inverse)
_CHANNELS_LAST = {channels_last: (4, (0, 2, 3, 1), (0, 3, 1, 2)),
                  channels_last_3d: (5, (0, 2, 3, 4, 1), (0, 4, 1, 2, 3))}


def check(fmt: Any, who: str) -> memory_format:
    """``fmt`` if it is a memory format, else a ``TypeError`` naming the call."""
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{who}: argument 'memory_format' must be a scriptmod.memory_format "
                        f"(scriptmod.contiguous_format, channels_last, channels_last_3d or "
                        f"preserve_format), got {fmt!r}")
    return fmt


def _permutation(fmt: memory_format, shape: Sequence[int], who: str) -> tuple:
    rank, perm, inverse = _CHANNELS_LAST[fmt]
    if len(shape) != rank:
        raise ShapeError(f"{who}: required rank {rank} tensor to use {fmt.name} format, got a "
                         f"tensor of shape {tuple(shape)}")
    return perm, inverse


def _geometry(t: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The array's own sizes and element strides (plain ints: while tracing, ``t.shape``
    holds traced sizes, and a layout test must not guard on them)."""
    arr = t._data
    return tuple(arr.shape), tuple(s // arr.itemsize for s in arr.strides)


def is_in(t: Any, fmt: memory_format) -> bool:
    """Whether ``t``'s elements lie densely in ``fmt``'s order."""
    return _strides_match(*_geometry(t), fmt)


def _strides_match(shape: Sequence[int], strides: Sequence[int], fmt: memory_format) -> bool:
    """Dims of size 1 may have any stride (torch's rule)."""
    if fmt is contiguous_format or fmt is preserve_format:
        order: Sequence[int] = range(len(shape) - 1, -1, -1)
    else:
        rank, perm, _ = _CHANNELS_LAST[fmt]
        if len(shape) != rank:
            return False
        order = perm[::-1]
    expected = 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def suggest(t: Any) -> memory_format:
    """The format ``preserve_format`` keeps: a channels-last one ``t`` is in (and is not
    also contiguous in), else ``contiguous_format``."""
    if t._data.flags.c_contiguous:
        return contiguous_format
    geometry = _geometry(t)
    return next((f for f in _CHANNELS_LAST if _strides_match(*geometry, f)), contiguous_format)


def relayout(t: Any, fmt: memory_format, copy: Callable[[Any], Any], who: str) -> Any:
    """``copy(t)`` laid out in the channels-last ``fmt``: ``copy`` (contiguous or clone) of
    ``t`` permuted to NHWC order, permuted back to NCHW sizes."""
    perm, inverse = _permutation(fmt, tuple(t.shape), who)
    return copy(t.permute(perm)).permute(inverse)


def created(make: Callable[[list], Any], shape: Sequence[int], fmt: memory_format,
            who: str) -> Any:
    """A new tensor of ``shape`` made by ``make(sizes)`` in ``fmt``'s storage order."""
    if fmt is contiguous_format:
        return make(list(shape))
    perm, inverse = _permutation(fmt, tuple(shape), who)
    return make([shape[d] for d in perm]).permute(inverse)
