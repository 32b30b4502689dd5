"""Native execution of ``prim::FusionGroup`` nodes on CUDA: CuPy arrays in, CuPy arrays out.

The same lowering, layout planning, guards and plan cache as the CPU path
(``runtime.fusion.FusedKernel``, which ``CudaFusedKernel`` extends); what differs is the
back end: the ``KernelSpec`` is rendered as CUDA C (``codegen.c_source``, grid-stride loop),
compiled with ``cupy.RawKernel`` (one object per source text in this process; CuPy keeps the
binaries in its own on-disk cache) and launched on the device that holds the inputs.

    >>> fk = CudaFusedKernel(node.attrs["subgraph"], name="FusionGroup_0")   # doctest: +SKIP
    >>> y, = fk([x_gpu, a_gpu]); print(fk.cuda_source[:60])                 # doctest: +SKIP

(Not run as doctests: they need a CUDA GPU and CuPy; ``tests/runtime`` runs the same source
through the CPU shim.)

Launch ABI (what ``render_c`` declares): input pointers, output pointers, ``long long n``,
then one ``long long`` per ``meta`` entry, all by value. Grid and block come from ``n``:
``BLOCK`` threads per block and at most ``MAX_GRID`` blocks; the grid-stride loop covers
the rest.

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
from scriptmod.ir.graph import Graph, Node
from . import backend
from scriptmod.ir.errors import DeviceError, ShapeError
from .fusion import FusedKernel, FusionGuardError, Layout, plan_layout, supported_on

BLOCK = 256                    # threads per block
MAX_GRID = 4096                # blocks per launch; the grid-stride loop does the rest
Kernel = Any                   # a launchable kernel: ``kernel(grid, block, args)``
KernelFactory = Callable[[CSource], Kernel]

# (id of the cupy module, CUDA source) -> (that module, its RawKernel), process-wide; holding
# the module keeps its id unique (an injected test module cannot alias a later one)
_RAW: dict[tuple[int, str], tuple[ModuleType, Kernel]] = {}
_RAW_LOCK = threading.Lock()


def supported(node: Node) -> bool:
    """The CUDA backend's veto: ``runtime.fusion.supported_on`` with every tensor on CUDA."""
    return supported_on(node, lambda device: device.startswith("cuda"))


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


class CudaLaunchPlan:
    """One layout's launch, computed once: kernel, device, grid, scalar arguments."""

    __slots__ = ("xp", "kernel", "spec", "n", "out_shape", "out_dtypes", "device", "grid",
                 "block", "scalars")

    def __init__(self, xp: ModuleType, kernel: Kernel | None, spec: KernelSpec, layout: Layout,
                 out_shape: tuple[int, ...], out_dtypes: Sequence[np.dtype], device: int) -> None:
        self.xp, self.spec = xp, spec
        self.kernel: Kernel = kernel                 # None only when there is nothing to run
        self.n = int(np.prod(out_shape, dtype=np.int64))
        self.out_shape, self.out_dtypes, self.device = out_shape, tuple(out_dtypes), device
        meta = spec.meta(layout.shape, layout.strides) if spec.strided else []
        self.scalars = (np.int64(self.n),) + tuple(np.int64(m) for m in meta)
        self.grid, self.block = launch_dims(self.n)

    def launch(self, arrays: Sequence[Any]) -> list[Any]:
        """Allocate the outputs on the plan's device and launch (nothing to launch when
        empty). Arguments: inputs, outputs, ``n``, meta."""
        xp = self.xp
        with xp.cuda.Device(self.device):
            outs = [xp.empty(self.out_shape, dt) for dt in self.out_dtypes]
            if self.n:
                self.kernel((self.grid,), (self.block,), (*arrays, *outs, *self.scalars))
        return outs


class CudaFusedKernel(FusedKernel):
    """A fusion group compiled for CUDA: call it with the group's input CuPy arrays.

        >>> fk = CudaFusedKernel(subgraph, name="FusionGroup_0 (model.py:7)")  # doctest: +SKIP
        >>> y, = fk([x, a, b]); fk.cuda_source                                 # doctest: +SKIP

    (Not run as doctests: they need a CUDA GPU and CuPy.)

    Guards as on the CPU (count, dtype, rank and concrete dims, with the same messages),
    plus: every input is a CuPy array, all on one device (the one the group's types name,
    when they name one). Outputs are new ``cupy.empty`` arrays on that device (CuPy's memory
    pool makes them cheap). ``cupy`` / ``make_kernel``: injectable for tests.
    """

    def __init__(self, subgraph: Graph, name: str = "fusion group",
                 cupy: ModuleType | None = None, make_kernel: KernelFactory | None = None) -> None:
        xp = cupy if cupy is not None else backend.cupy
        if xp is None:
            raise NotImplementedError("CUDA fusion needs CuPy, which is not installed")
        super().__init__(subgraph, name)
        self.xp = xp
        self._make_kernel: KernelFactory = make_kernel or (lambda src: raw_kernel(src, xp))
        self._sources: dict[str, CSource] = {}
        cpu_key = self._key
        self._key = lambda *a: (cpu_key(*a), tuple([x.device.id for x in a]))

    # ---- guards ---------------------------------------------------------------------------------
    def check(self, args: Sequence[Any]) -> list[Any]:
        arrays: list[Any] = super().check(args)
        devices = sorted({a.device.id for a in arrays})
        if len(devices) > 1:
            raise DeviceError(f"{self.name}: inputs on different devices "
                             f"({', '.join(f'cuda:{d}' for d in devices)})")
        return arrays

    def _check_one(self, i: int, a: Any) -> Any:
        t, want = self.program.in_types[i], self._np_in[i]
        where = f"{self.name}: argument '{self.program.in_names[i]}' (input {i})"
        if not isinstance(a, self.xp.ndarray):
            raise FusionGuardError(f"{where}: expected a CuPy array on {t.device} like {t!r}, "
                                   f"got {type(a).__module__}.{type(a).__name__}")
        if a.dtype != want:
            raise FusionGuardError(f"{where}: expected dtype {self.program.in_dtypes[i].name} "
                                   f"({t!r}), got {a.dtype}")
        if a.ndim != len(t.shape or ()) or any(
                isinstance(d, int) and d != n for d, n in zip(t.shape or (), a.shape)):
            raise ShapeError(f"{where}: expected shape {t!r}, got {tuple(a.shape)}")
        index = _device_index(t.device)
        if index is not None and a.device.id != index:
            raise DeviceError(f"{where}: expected an array on {t.device}, got one on "
                             f"cuda:{a.device.id}")
        if any(s % a.itemsize for s in a.strides):
            a = self.xp.ascontiguousarray(a)
        return a

    # ---- plans and kernels ----------------------------------------------------------------------
    def _plan(self, arrays: Sequence[Any],  # type: ignore[override]
              out_shape: tuple[int, ...]) -> CudaLaunchPlan:
        layout = plan_layout(self.program, [a.shape for a in arrays],
                             [[s // a.itemsize for s in a.strides] for a in arrays], out_shape)
        spec = self.program.spec(layout.inputs, len(layout.shape))
        n = int(np.prod(out_shape, dtype=np.int64))
        kernel = self._compile(spec) if n else None
        device = arrays[0].device.id if arrays else self.xp.cuda.Device().id
        return CudaLaunchPlan(self.xp, kernel, spec, layout, out_shape, self._np_out, device)

    BACKEND = "CUDA"

    def _build(self, spec: KernelSpec) -> Kernel:
        src = self._sources[spec.key()] = render_c(spec, CUDA)
        return self._make_kernel(src)

    # ---- inspection -----------------------------------------------------------------------------
    @property
    def cuda_source(self) -> str:
        """CUDA C text of ``kernel``."""
        return self._sources[self.spec.key()].text

    @property
    def llvm_ir(self) -> str:
        raise AttributeError(f"{self.name} runs on CUDA: see .cuda_source")

    @property
    def asm(self) -> str:
        raise AttributeError(f"{self.name} runs on CUDA: see .cuda_source")

    def __repr__(self) -> str:
        return f"<CudaFusedKernel {self.name}: {len(self.program.ops)} op(s), " \
               f"{len(self._kernels)} kernel(s)>"
