"""Targets: one object per kind of device that guards, compiles and calls kernels there, and
says what else that device can do.

``runtime.fusion.FusedKernel`` (guards, one launch per input layout) and its one launcher
(``runtime.fusion.Launch``: outputs, then the target's call) take any ``Target``:

- ``llvm.LLVM`` (``LLVMTarget``): CPU, NumPy arrays, LLVM machine code through ctypes;
- ``cuda.CudaTarget(cupy=None, make_kernel=None)``: CUDA, CuPy arrays, ``RawKernel``.

Capabilities a device may lack, asked instead of branching on the device:
``native_program`` (whole-program native segments), ``own_gemm`` (our GEMM and attention
microkernels), ``row_kernels`` (row groups: softmax, layer norm, reductions) and
``can_lower(node)`` (codegen can lower the node for this device: ``codegen.lower.can_lower``).
A new device is one file here with a class that has the ``Target`` attributes, and one line
in ``target_type``.

(The NumPy/CuPy array modules are ``xp``, ``runtime.arrays``.)

    >>> for_devices({"cpu"}) is LLVM
    True
    >>> LLVM.native_program, LLVM.own_gemm, LLVM.row_kernels
    (True, True, True)
    >>> for_devices({"cpu", "cuda:0"})
    Traceback (most recent call last):
      ...
    NotImplementedError: fusion: no backend runs one kernel on devices ['cpu', 'cuda:0']
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Protocol, Sequence

import numpy as np

from scriptmod.codegen.kernel import KernelSpec
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType
from .cuda import CudaTarget
from .llvm import LLVM, LLVMTarget

Run = Callable[[Sequence[Any], Sequence[Any]], None]


class Target(Protocol):
    """What ``FusedKernel``, ``Launch``, the fusion passes and the planner need from a device."""

    name: str                          # "LLVM", "CUDA": logs and reprs
    device_kind: str                   # "cpu", "cuda"
    array_name: str                    # "a NumPy array": guard messages
    key_fields: tuple[str, ...]        # array attributes a cached layout is keyed by
    pools_outputs: bool                # whether ``Launch`` reuses unreferenced outputs
    texts: tuple[str, ...]             # inspection texts ``text`` returns ("llvm_ir", ...)
    # ---- capabilities a device may lack
    native_program: bool               # whole-program native segments (runtime.native)
    own_gemm: bool                     # our own GEMM / attention microkernels
    row_kernels: bool                  # row groups (fuse_rows) compile for this device

    def can_lower(self, node: Node) -> bool:
        """Whether codegen can lower ``node`` for this device (the fusion passes' veto)."""
        ...

    # ---- compile
    def compile(self, spec: KernelSpec) -> Any:
        """The loaded, launchable kernel of a laid-out ``spec``."""
        ...

    def text(self, what: str, kernel: Any, spec: KernelSpec) -> str:
        """One of ``texts`` for ``kernel``."""
        ...

    # ---- guards
    def admit(self, a: Any) -> Any:
        """``a`` as an array of this target, or None when it is not one."""
        ...

    def place(self, a: Any, t: TensorType, where: str) -> Any:
        """Check the device of an admitted array of type ``t``; fix odd strides."""
        ...

    def device_of(self, arrays: Sequence[Any], name: str) -> Any:
        """The device a launch over ``arrays`` runs on (raises if they disagree)."""
        ...

    # ---- call
    def empty(self, device: Any) -> Callable[[tuple[int, ...], np.dtype], Any]:
        """The output allocator for ``device``."""
        ...

    def caller(self, kernel: Any, spec: KernelSpec, meta: Sequence[int], n: int,
               device: Any) -> Run:
        """``run(inputs, outputs)`` computing ``n`` elements of ``kernel`` on ``device``."""
        ...


def target_type(devices: Collection[str]) -> type:
    """The ``Target`` class for tensors on ``devices``, without making one: its capabilities
    and ``can_lower`` need no CuPy (the fusion passes ask them per node). ``LLVMTarget`` for
    the CPU (and no devices), ``CudaTarget`` for CUDA devices; ``NotImplementedError`` for a
    mix or another kind.

        >>> target_type({"cuda:0", "cuda:1"}).own_gemm
        False
    """
    kinds = {d.split(":", 1)[0] for d in devices}
    if kinds <= {"cpu"}:
        return LLVMTarget
    if kinds == {"cuda"}:
        return CudaTarget
    raise NotImplementedError(f"fusion: no backend runs one kernel on devices {sorted(devices)}")


def for_devices(devices: Collection[str]) -> Target:
    """The target for a group whose tensors are on ``devices``: LLVM for the CPU, CUDA
    (needs CuPy) for CUDA devices; ``NotImplementedError`` otherwise."""
    kind = target_type(devices)
    return LLVM if kind is LLVMTarget else kind()


__all__ = ["CudaTarget", "LLVM", "LLVMTarget", "Target", "for_devices", "target_type"]
