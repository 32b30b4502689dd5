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


def storage_of(a: Any) -> Any:
    """The 1-d array of the memory ``a`` lives in (PyTorch's storage)."""
    root = a
    while getattr(root, "base", None) is not None and hasattr(root.base, "shape"):
        root = root.base
    return root.ravel(order="K") if root.ndim != 1 else root


def offset_in_storage(a: Any) -> int:
    """Elements from the start of ``a``'s storage to its first element."""
    return (_address(a) - _address(storage_of(a))) // a.itemsize


def strided(xp: Any, a: Any, shape: Sequence[int], strides: Sequence[int]) -> Any:
    """A view of ``a``'s memory from its first element with ``shape`` and byte ``strides``
    (writeable where ``a`` is). NumPy's ``as_strided`` cannot carry ml_dtypes' bfloat16
    through its buffer interface: it strides a same-size integer view of it instead."""
    raw = a if a.dtype.kind != "V" else a.view(np.dtype(f"u{a.itemsize}"))
    if xp is np:
        out = np.lib.stride_tricks.as_strided(raw, tuple(shape), tuple(strides),
                                              writeable=bool(a.flags.writeable))
    else:                                   # cupy's views are always writeable
        out = xp.lib.stride_tricks.as_strided(raw, tuple(shape), tuple(strides))
    return out if raw is a else out.view(a.dtype)


@kernel("as_strided")
def _as_strided(xp: Any, x: Any, size: Sequence[int], stride: Sequence[int],
                storage_offset: int | None = None) -> Any:
    size, stride = [int(n) for n in size], [int(s) for s in stride]
    if any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise ShapeError(f"as_strided: negative sizes or strides are not supported, got size "
                         f"{size} and stride {stride}")
    flat = storage_of(x)
    start = offset_in_storage(x) if storage_offset is None else int(storage_offset)
    if start < 0:
        raise ShapeError(f"as_strided: Negative storage offset {start}")
    needed = 0 if 0 in size else start + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if needed > flat.size:
        raise ShapeError(f"setStorage: sizes {size}, strides {stride}, storage offset {start}, "
                         f"and itemsize {x.itemsize} requiring a storage size of "
                         f"{needed * x.itemsize} are out of bounds for storage of size "
                         f"{flat.size * x.itemsize}")
    return strided(xp, flat[start:] if needed else flat[:0], size,
                   [s * x.itemsize for s in stride])


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
