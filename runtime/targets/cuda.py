"""The CUDA target: ``KernelSpec`` -> CUDA C (``codegen.c_source``, grid-stride loop) ->
``cupy.RawKernel`` (one per source text in this process; CuPy keeps the binaries in its own
disk cache) -> a launch on the device that holds the inputs. Arrays are CuPy arrays.

    >>> fk = FusedKernel(subgraph, name="FusionGroup_0", target=CudaTarget())   # doctest: +SKIP
    >>> y, = fk([x_gpu, a_gpu]); print(fk.cuda_source[:60])                     # doctest: +SKIP

(Not run as doctests: they need a CUDA GPU and CuPy; ``tests/runtime`` runs the same source
through the CPU shim and a fake CuPy.)

Launch ABI (what ``render_c`` declares): input pointers, output pointers, ``long long n``,
then one ``long long`` per ``meta`` entry, all by value. Grid and block come from ``n``:
``BLOCK`` threads per block and at most ``MAX_GRID`` blocks; the grid-stride loop covers the
rest. Outputs are fresh ``cupy.empty`` arrays (CuPy's memory pool makes them cheap).

For tests without a GPU, both the array module (``cupy=``) and the kernel factory
(``make_kernel=``, ``CSource -> kernel(grid, block, args)``) can be injected.
"""
from __future__ import annotations

import threading
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.c_source import CUDA, CSource, render_c
from scriptmod.codegen.kernel import KernelSpec
from scriptmod.codegen.lower import can_lower
from scriptmod.ir.errors import DeviceError
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType
from .. import arrays as array_modules      # NumPy/CuPy
from ..errors import worded

BLOCK = 256                    # threads per block
MAX_GRID = 4096                # blocks per launch; the grid-stride loop does the rest
Kernel = Any                   # a launchable kernel: ``kernel(grid, block, args)``
KernelFactory = Callable[[CSource], Kernel]
Run = Callable[[Sequence[Any], Sequence[Any]], None]

# (id of the cupy module, CUDA source) -> (that module, its RawKernel), process-wide; holding
# the module keeps its id unique (an injected test module cannot alias a later one)
_RAW: dict[tuple[int, str], tuple[ModuleType, Kernel]] = {}
_RAW_LOCK = threading.Lock()


def raw_kernel(src: CSource, cupy: ModuleType) -> Kernel:
    """``cupy.RawKernel`` for ``src``, one per source text (CuPy compiles on first launch,
    once per device, and caches the binary on disk)."""
    key = (id(cupy), src.text)
    hit = _RAW.get(key)
    if hit is None:
        with _RAW_LOCK:
            hit = _RAW.get(key)
            if hit is None:
                hit = _RAW[key] = (cupy, cupy.RawKernel(src.text, src.name))
    return hit[1]


def launch_dims(n: int) -> tuple[int, int]:
    """(blocks, threads per block) for ``n`` elements (``BLOCK``, ``MAX_GRID``).

    >>> launch_dims(1000), launch_dims(10 ** 9)
    ((4, 256), (4096, 256))
    """
    return max(1, min(MAX_GRID, -(-n // BLOCK))), BLOCK


def _device_index(device: str) -> int | None:
    """``cuda:N`` -> N; plain ``cuda`` (any device) -> None."""
    return int(device.split(":", 1)[1]) if ":" in device else None


class CudaTarget:
    """Compile and launch fused kernels with CuPy (see the module docstring). Raises
    ``NotImplementedError`` when CuPy is not installed and none is injected. Elementwise
    fusion groups only: no native programs, no GEMM of our own, no row kernels (the class
    answers these, and ``can_lower``, without CuPy)."""

    name = "CUDA"
    device_kind = "cuda"
    array_name = "a CuPy array"
    key_fields: tuple[str, ...] = ("dtype", "shape", "strides", "device.id")
    pools_outputs = False
    texts: tuple[str, ...] = ("cuda_source",)
    native_program = False
    own_gemm = False
    row_kernels = False

    @classmethod
    def can_lower(cls, node: Node) -> bool:
        """Whether codegen lowers ``node`` for CUDA devices (``codegen.lower.can_lower``)."""
        return can_lower(node, cls.device_kind)

    def __init__(self, cupy: ModuleType | None = None,
                 make_kernel: KernelFactory | None = None) -> None:
        xp = cupy if cupy is not None else array_modules.cupy
        if xp is None:
            raise NotImplementedError("CUDA fusion needs CuPy, which is not installed")
        self.xp = xp
        self._make_kernel: KernelFactory = make_kernel or (lambda src: raw_kernel(src, xp))

    def compile(self, spec: KernelSpec) -> Kernel:
        """The launchable kernel of ``spec`` (``make_kernel`` of its CUDA source)."""
        return self._make_kernel(render_c(spec, CUDA))

    def text(self, what: str, kernel: Kernel, spec: KernelSpec) -> str:
        """``cuda_source``: the CUDA C text of ``spec``'s kernel."""
        return render_c(spec, CUDA).text

    # ---- guards: the device-specific part ------------------------------------------------------
    def admit(self, a: Any) -> Any:
        """``a`` when it is a CuPy array, else None."""
        return a if isinstance(a, self.xp.ndarray) else None

    def place(self, a: Any, t: TensorType, where: str) -> Any:
        """``a`` on the device ``t`` names (``DeviceError`` if not), strides whole elements."""
        index = _device_index(t.device)
        if index is not None and a.device.id != index:
            raise worded(DeviceError(f"{where}: expected an array on {t.device}, got one on "
                                     f"cuda:{a.device.id}"), internal=True)   # guards passed it
        if any(s % a.itemsize for s in a.strides):
            a = self.xp.ascontiguousarray(a)
        return a

    def device_of(self, arrays: Sequence[Any], name: str) -> int:
        """The device every input is on (the current one when there are none)."""
        devices = sorted({a.device.id for a in arrays})
        if len(devices) > 1:
            on = ", ".join(f"cuda:{d}" for d in devices)
            raise worded(DeviceError(f"{name}: inputs on different devices ({on})"),
                         f"expected all tensors on one device, got tensors on {on}")
        return devices[0] if devices else self.xp.cuda.Device().id

    # ---- launching -----------------------------------------------------------------------------
    def empty(self, device: int) -> Callable[[tuple[int, ...], np.dtype], Any]:
        """The output allocator: ``cupy.empty`` on ``device``."""
        xp = self.xp

        def empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
            with xp.cuda.Device(device):
                return xp.empty(shape, dtype)
        return empty

    def caller(self, kernel: Kernel, spec: KernelSpec, meta: Sequence[int], n: int,
               device: int) -> Run:
        """``run(inputs, outputs)``: one launch on ``device``; arguments: inputs, outputs,
        ``n``, meta (``np.int64`` each)."""
        xp = self.xp
        scalars = (np.int64(n),) + tuple(np.int64(m) for m in meta)
        grid, block = launch_dims(n)

        def run(arrays: Sequence[Any], outs: Sequence[Any]) -> None:
            with xp.cuda.Device(device):
                kernel((grid,), (block,), (*arrays, *outs, *scalars))
        return run

    def __repr__(self) -> str:
        return f"<CudaTarget {getattr(self.xp, '__name__', self.xp)}>"
