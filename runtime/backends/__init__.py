"""Backends: small objects that compile, load and launch fused kernels for one kind of device.

``runtime.fusion.FusedKernel`` (guards, one launch per input layout) and its one launcher
(``runtime.fusion.Launch``: outputs, then the backend's call) take any ``Backend``:

- ``llvm.LLVM`` (``LLVMBackend``): CPU, NumPy arrays, LLVM machine code through ctypes;
- ``cuda.CudaBackend(cupy=None, make_kernel=None)``: CUDA, CuPy arrays, ``RawKernel``.

("Backend" means only this here; the NumPy/CuPy array modules are ``xp``.)

    >>> for_devices({"cpu"}) is LLVM
    True
    >>> for_devices({"cpu", "cuda:0"})
    Traceback (most recent call last):
      ...
    NotImplementedError: fusion: no backend runs one kernel on devices ['cpu', 'cuda:0']
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Protocol, Sequence

import numpy as np

from scriptmod.codegen.kernel import KernelSpec
from scriptmod.ir.types import TensorType
from .cuda import CudaBackend
from .llvm import LLVM, LLVMBackend

Run = Callable[[Sequence[Any], Sequence[Any]], None]


class Backend(Protocol):
    """What ``FusedKernel`` and ``Launch`` need from a backend."""

    name: str                          # "LLVM", "CUDA": logs and reprs
    device_kind: str                   # "cpu", "cuda"
    array_name: str                    # "a NumPy array": guard messages
    key_fields: tuple[str, ...]        # array attributes a cached layout is keyed by
    pools_outputs: bool                # whether ``Launch`` reuses unreferenced outputs
    texts: tuple[str, ...]             # inspection texts ``text`` returns ("llvm_ir", ...)

    def compile(self, spec: KernelSpec) -> Any:
        """The loaded, launchable kernel of a laid-out ``spec``."""
        ...

    def text(self, what: str, kernel: Any, spec: KernelSpec) -> str:
        """One of ``texts`` for ``kernel``."""
        ...

    def admit(self, a: Any) -> Any:
        """``a`` as an array of this backend, or None when it is not one."""
        ...

    def place(self, a: Any, t: TensorType, where: str) -> Any:
        """Check the device of an admitted array of type ``t``; fix odd strides."""
        ...

    def device_of(self, arrays: Sequence[Any], name: str) -> Any:
        """The device a launch over ``arrays`` runs on (raises if they disagree)."""
        ...

    def empty(self, device: Any) -> Callable[[tuple[int, ...], np.dtype], Any]:
        """The output allocator for ``device``."""
        ...

    def caller(self, kernel: Any, spec: KernelSpec, meta: Sequence[int], n: int,
               device: Any) -> Run:
        """``run(inputs, outputs)`` computing ``n`` elements of ``kernel`` on ``device``."""
        ...


def for_devices(devices: Collection[str]) -> Backend:
    """The backend for a group whose tensors are on ``devices``: LLVM for the CPU, CUDA
    (needs CuPy) for CUDA devices; ``NotImplementedError`` otherwise."""
    kinds = {d.split(":", 1)[0] for d in devices}
    if kinds <= {"cpu"}:
        return LLVM
    if kinds == {"cuda"}:
        return CudaBackend()
    raise NotImplementedError(f"fusion: no backend runs one kernel on devices {sorted(devices)}")


__all__ = ["Backend", "CudaBackend", "LLVM", "LLVMBackend", "for_devices"]
