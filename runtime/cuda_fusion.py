"""Transition shim (issue 12): CUDA fusion is ``runtime.fusion.FusedKernel`` with the backend
``runtime.backends.cuda.CudaBackend``; the veto is ``runtime.backends.cuda.supported``."""
from __future__ import annotations

from types import ModuleType

from scriptmod.ir.graph import Graph
from .backends.cuda import CudaBackend, KernelFactory, supported  # noqa: F401
from .fusion import FusedKernel


def CudaFusedKernel(subgraph: Graph, name: str = "fusion group",  # noqa: N802
                    cupy: ModuleType | None = None,
                    make_kernel: KernelFactory | None = None) -> FusedKernel:
    """``FusedKernel(subgraph, name, CudaBackend(cupy, make_kernel))``."""
    return FusedKernel(subgraph, name, CudaBackend(cupy, make_kernel))
