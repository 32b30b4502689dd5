"""Reference kernels of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views.

The view kernels return arrays that share memory with their input (writes through them show
in it, as PyTorch's views do); ``as_strided`` reads PyTorch's storage model off NumPy's: a
tensor's storage is the array that owns its memory (the end of its ``.base`` chain).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir.errors import ShapeError
from scriptmod.ir.ops.views import diagonal_dims, unfold_dim
from . import kernel


def _address(a: Any) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr   # cupy: a MemoryPointer


def _bounds(a: Any) -> tuple[int, int]:
    """The byte addresses ``[low, high)`` that ``a``'s elements occupy."""
    start = _address(a)
    if a.size == 0:
        return start, start
    span = [(n - 1) * s for n, s in zip(a.shape, a.strides)]
    return (start + sum(d for d in span if d < 0),
            start + sum(d for d in span if d > 0) + a.itemsize)


def storage_of(a: Any) -> Any:
    """The array whose memory is ``a``'s storage: its furthest ``.base`` ancestor whose
    memory holds ``a``'s (an owning array, for tensors made here)."""
    root, node = a, getattr(a, "base", None)
    low, high = _bounds(a)
    while node is not None:
        if hasattr(node, "shape") and hasattr(node, "strides"):
            start, end = _bounds(node)
            if not (start <= low and high <= end):
                break
            root = node
        node = getattr(node, "base", None)
    return root


def offset_in_storage(a: Any) -> int:
    """Elements from the start of ``a``'s storage to its first element."""
    return (_address(a) - _bounds(storage_of(a))[0]) // a.itemsize


def storage_size(a: Any) -> int:
    """Elements in ``a``'s storage."""
    low, high = _bounds(storage_of(a))
    return (high - low) // a.itemsize


def positions(shape: Sequence[int], strides: Sequence[int], offset: int) -> np.ndarray:
    """The storage positions of a layout's elements (element strides), in its order."""
    grid = np.full(tuple(shape), offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(shape, strides)):
        grid += (np.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(shape) - k - 1))
    return grid


def held_positions(a: Any) -> np.ndarray:
    """The storage positions of ``a``'s elements."""
    return positions(a.shape, [s // a.itemsize for s in a.strides], offset_in_storage(a))


class _Memory:
    """What ``np.asarray`` reads a view from (``__array_interface__``), keeping its source
    alive as ``.base``."""

    def __init__(self, interface: dict, base: Any) -> None:
        self.__array_interface__ = interface
        self.base = base


def strided(xp: Any, a: Any, shape: Sequence[int], strides: Sequence[int],
            offset: int = 0) -> Any:
    """A view of ``a``'s memory from ``offset`` bytes past its first element, with ``shape``
    and byte ``strides`` (writeable where ``a`` is). ml_dtypes' bfloat16 has no typestr
    NumPy reads back: it goes through a same-size integer view."""
    if xp is not np:
        return xp.ndarray(tuple(shape), a.dtype, a.data + offset, tuple(strides))
    raw = a if a.dtype.kind != "V" else a.view(np.dtype(f"u{a.itemsize}"))
    interface = {"shape": tuple(shape), "strides": tuple(strides), "typestr": raw.dtype.str,
                 "data": (_address(a) + offset, not a.flags.writeable), "version": 3}
    out = np.asarray(_Memory(interface, a))
    return out if raw is a else out.view(a.dtype)


@kernel("as_strided")
def _as_strided(xp: Any, x: Any, size: Sequence[int], stride: Sequence[int],
                offset: int = 0) -> Any:
    size, stride = [int(n) for n in size], [int(s) for s in stride]
    if any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise ShapeError(f"as_strided: negative sizes or strides are not supported, got size "
                         f"{size} and stride {stride}")
    start = offset_in_storage(x) + int(offset)
    if start < 0:
        raise ShapeError(f"as_strided: Negative storage offset {start}")
    needed = 0 if 0 in size else start + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    have = storage_size(x)
    if needed > have:
        raise ShapeError(f"setStorage: sizes {size}, strides {stride}, storage offset {start}, "
                         f"and itemsize {x.itemsize} requiring a storage size of "
                         f"{needed * x.itemsize} are out of bounds for storage of size "
                         f"{have * x.itemsize}")
    return strided(xp, x, size, [s * x.itemsize for s in stride], int(offset) * x.itemsize)


@kernel("diagonal")
def _diagonal(xp: Any, x: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
    d1, d2 = diagonal_dims(x.ndim, dim1, dim2)
    out = xp.diagonal(x, offset, d1, d2)
    if xp is np and x.flags.writeable and not out.flags.writeable:
        out.flags.writeable = True       # NumPy's diagonal is a read-only view
    return out


@kernel("unfold")
def _unfold(xp: Any, x: Any, dimension: int, size: int, step: int) -> Any:
    if step <= 0:
        raise ShapeError(f"unfold: step is {step} but must be > 0")
    d = unfold_dim(x.ndim, dimension)
    xs = x.reshape(1) if x.ndim == 0 else x
    if xs.shape[d] < size:
        raise ShapeError(f"maximum size for tensor at dimension {d} is {xs.shape[d]} but size "
                         f"is {size}")
    count = (xs.shape[d] - size) // step + 1
    shape = xs.shape[:d] + (count,) + xs.shape[d + 1:] + (size,)
    strides = xs.strides[:d] + (xs.strides[d] * step,) + xs.strides[d + 1:] + (xs.strides[d],)
    out = strided(xp, xs, shape, strides)
    return out.reshape(size) if x.ndim == 0 else out


kernel("real")(lambda xp, x: x.real)
kernel("imag")(lambda xp, x: x.imag if x.dtype.kind == "c" else xp.zeros_like(x))


@kernel("view_as_real")
def _view_as_real(xp: Any, x: Any) -> Any:
    if x.dtype.kind != "c":
        return xp.stack([x, xp.zeros_like(x)], -1)
    parts = x.real
    return strided(xp, parts, parts.shape + (2,), parts.strides + (parts.itemsize,))


@kernel("view_as_complex")
def _view_as_complex(xp: Any, x: Any) -> Any:
    if x.ndim == 0 or x.shape[-1] != 2:
        raise ShapeError("Tensor must have a last dimension of size 2")
    if x.strides[-1] != x.itemsize:
        raise ShapeError("Tensor must have a last dimension with stride 1")
    if any(s % (2 * x.itemsize) for s in x.strides[:-1]):
        raise ShapeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if offset_in_storage(x) % 2:
        raise ShapeError("Tensor must have a storage_offset divisible by 2")
    pairs = x.view(np.complex128 if x.dtype == np.float64 else np.complex64)
    return pairs[..., 0]


@kernel("complex")
def _complex(xp: Any, real: Any, imag: Any) -> Any:
    out = xp.empty(xp.broadcast_shapes(real.shape, imag.shape),
                   np.complex128 if real.dtype == np.float64 else np.complex64)
    out.real, out.imag = real, imag
    return out


kernel("conj_physical")(lambda xp, x: xp.conj(x) if x.dtype.kind == "c" else x.copy())
