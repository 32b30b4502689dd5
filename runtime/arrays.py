"""Array modules: NumPy on the CPU, CuPy on CUDA when present. Reference kernels are written
against the array module ``xp`` that ``array_module`` returns, never against NumPy by name.
(Not to be confused with ``runtime.targets``, which compile and launch fused kernels.)

    >>> array_module(np.zeros(3)) is np
    True
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

try:  # CuPy is optional; a machine without a GPU runs everything on NumPy
    import cupy as _cp  # type: ignore
    try:
        _N_GPUS = int(_cp.cuda.runtime.getDeviceCount())
    except Exception:
        _N_GPUS = 0
except Exception:
    _cp = None
    _N_GPUS = 0

cupy: ModuleType | None = _cp

class _ArrayDTypes(dict):
    """DType -> NumPy dtype; a dtype scriptmod only names (``D.NAME_ONLY``) or that is not a
    DType at all is a TypeError saying so, wherever a tensor of it would be made."""

    def __missing__(self, d: Any) -> np.dtype:
        if d in D.NAME_ONLY:
            raise TypeError(f"scriptmod has no {d.name} tensors: PyTorch's unsigned {d.name} "
                            f"(a dtype of limited support there) is only a name here, for "
                            f"comparisons and annotations; use int32 or int64")
        raise TypeError(f"expected a scriptmod dtype ({', '.join(x.name for x in D.ALL)}), "
                        f"got {d!r}")


NP_DTYPE: dict[DType, np.dtype] = _ArrayDTypes(
    {d: np.dtype(d.name) for d in D.ALL if d is not D.bfloat16})
NP_DTYPE[D.bfloat16] = np.dtype(ml_dtypes.bfloat16)
NP_DTYPE[D.bool_] = np.dtype(bool)
_FROM_NP: dict[np.dtype, DType] = {v: k for k, v in NP_DTYPE.items()}


def np_dtype(d: DType) -> np.dtype:
    return NP_DTYPE[d]


def from_np_dtype(dt: Any) -> DType:
    """The scriptmod dtype of a NumPy/CuPy dtype; a clear error for unsupported ones."""
    try:
        return _FROM_NP[dt]
    except (KeyError, TypeError):
        pass
    try:
        return _FROM_NP[np.dtype(dt)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported array dtype {dt!r}; supported: "
                        f"{', '.join(d.name for d in D.ALL)}") from None


def cuda_available() -> bool:
    return _cp is not None and _N_GPUS > 0


def device_count() -> int:
    return _N_GPUS


def is_cupy(a: Any) -> bool:
    return _cp is not None and isinstance(a, _cp.ndarray)


def array_module(*arrays: Any) -> ModuleType:
    """CuPy if any argument is a CuPy array, else NumPy."""
    if _cp is not None:
        for a in arrays:
            if isinstance(a, _cp.ndarray):
                return _cp
    return np


def module_for_device(device: str) -> ModuleType:
    if device.startswith("cuda"):
        require_cuda(device)
        return _cp  # type: ignore[return-value]
    return np


def device_of(a: Any) -> str:
    if is_cupy(a):
        return f"cuda:{a.device.id}"
    return "cpu"


def require_cuda(device: str = "cuda") -> None:
    if _cp is None:
        raise RuntimeError(f"device {device!r} needs CuPy, which is not installed "
                           "(pip install 'scriptmod[cuda]')")
    if _N_GPUS == 0:
        raise RuntimeError(f"device {device!r} is not available: CuPy found no CUDA GPU")
    idx = int(device.split(":")[1]) if ":" in device else 0
    if idx >= _N_GPUS:
        raise RuntimeError(f"device {device!r} is not available: only {_N_GPUS} CUDA device(s)")


def to_device(a: Any, device: str) -> Any:
    """Copy ``a`` to ``device`` ('cpu' or 'cuda:N'); returns ``a`` itself if already there."""
    if device == "cpu":
        return _cp.asnumpy(a) if is_cupy(a) else a
    require_cuda(device)
    idx = int(device.split(":")[1]) if ":" in device else 0
    if is_cupy(a) and a.device.id == idx:
        return a
    with _cp.cuda.Device(idx):
        return _cp.asarray(a)


TRANSPOSE_ROWS = 32     # rows per block of ``transposed``


def transposed(a: Any) -> Any:
    """``a.T`` of a 2-D array as a new C-contiguous array. A NumPy one is copied in blocks of
    ``TRANSPOSE_ROWS`` rows, each written as columns of the result while its rows are in
    cache: a 2048 x 512 float32 weight in 1.5 ms against ``np.ascontiguousarray(a.T)``'s
    5.0 ms, which walks the whole source by columns.

        >>> a = np.arange(12.0).reshape(3, 4)
        >>> bool((transposed(a) == a.T).all()), transposed(a).flags.c_contiguous
        (True, True)
    """
    if type(a) is not np.ndarray or a.ndim != 2 or a.size < 1 << 16:
        return array_module(a).ascontiguousarray(a.T)
    out = np.empty(a.shape[::-1], a.dtype)
    for i in range(0, a.shape[0], TRANSPOSE_ROWS):
        out[:, i:i + TRANSPOSE_ROWS] = a[i:i + TRANSPOSE_ROWS].T
    return out
