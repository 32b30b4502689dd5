"""A stand-in for the parts of CuPy that ``runtime.targets.cuda`` uses, for machines without
a GPU: NumPy arrays posing as device arrays (``FakeArray``, with a ``.device``), a current
device (``cuda.Device``), ``empty``/``ascontiguousarray``, and a ``RawKernel`` that runs the
CUDA source it is given on the CPU.

``RawKernel(code, name)`` swaps the CUDA prelude for the CPU-shim prelude (the same kernel
text then compiles with g++) and adds a launcher generated from the kernel's *declared*
parameters that receives arguments the way ``cuLaunchKernel`` does: an array of pointers to
the argument values. A call checks every argument against its declared C type (device
arrays of the right dtype on the current device for pointers, ``numpy.int64`` for
``long long``) before running every (block, thread) of the grid.

    >>> cp = make_fake_cupy()
    >>> x = cp.asarray(np.ones(3, np.float32), device=1); x.device.id
    1
"""
from __future__ import annotations

import ctypes
import re
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from scriptmod.codegen.c_source import CPU_SHIM, CUDA
from tests.codegen.harness import build_library

C_TYPE = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short",
          "int32": "int", "int64": "long long", "float32": "float", "float64": "double",
          "float16": "unsigned short", "bfloat16": "unsigned short"}
_current = threading.local()


def current_device() -> int:
    return getattr(_current, "id", 0)


@dataclass(frozen=True)
class FakeDevice:
    id: int


class Device:
    """``cupy.cuda.Device``: ``Device(i)`` as a context manager makes ``i`` current."""

    def __init__(self, device: int | None = None) -> None:
        self.id = current_device() if device is None else int(device)
        self._saved: list[int] = []

    def __enter__(self) -> "Device":
        self._saved.append(current_device())
        _current.id = self.id
        return self

    def __exit__(self, *exc: Any) -> None:
        _current.id = self._saved.pop()


class FakeArray(np.ndarray):
    """A NumPy array that says it lives on device ``_dev`` (views inherit it)."""

    _dev: int = 0

    def __array_finalize__(self, obj: Any) -> None:
        self._dev = getattr(obj, "_dev", current_device())

    @property
    def device(self) -> FakeDevice:
        return FakeDevice(self._dev)


def asarray(a: Any, device: int | None = None) -> FakeArray:
    """A device copy of ``a`` (a test helper; real CuPy: ``with Device(i): cp.asarray(a)``)."""
    out = np.array(a, copy=True).view(FakeArray)
    out._dev = current_device() if device is None else device
    return out


def on_device(view: np.ndarray, device: int = 0) -> FakeArray:
    """``view`` (any strides) as a device array without copying."""
    out = view.view(FakeArray)
    out._dev = device
    return out


def empty(shape: Sequence[int], dtype: Any) -> FakeArray:
    """Filled with 0xAB bytes, so that an element the kernel never writes shows up."""
    out = np.empty(shape, dtype).view(FakeArray)
    out.reshape(-1).view(np.uint8)[...] = 0xAB
    out._dev = current_device()
    return out


def ascontiguousarray(a: FakeArray) -> FakeArray:
    return on_device(np.ascontiguousarray(a), a._dev)


@dataclass
class Launch:
    """What one kernel call received."""

    name: str
    grid: tuple
    block: tuple
    device: int
    args: tuple


@dataclass
class Recorder:
    launches: list[Launch] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)      # names, one per RawKernel built


def parse_params(code: str, name: str) -> list[str]:
    """The C types of kernel ``name``'s parameters, as declared in ``code``."""
    m = re.search(r'extern "C" __global__ void ' + re.escape(name) + r"\(([^)]*)\)", code)
    assert m, f"kernel {name} is not declared in the source"
    return [p.replace("__restrict__", "").rsplit(None, 1)[0].strip()
            for p in m.group(1).split(",")]


def shim_text(code: str, name: str, params: Sequence[str]) -> str:
    """The CUDA source on the CPU shim plus a ``cuLaunchKernel``-style launcher."""
    assert code.startswith(CUDA.prelude), "RawKernel source must be the CUDA dialect"
    call = ", ".join(f"*({t} *)args[{k}]" for k, t in enumerate(params))
    launcher = [f'extern "C" void fake_launch(void** args, unsigned grid, unsigned block) {{',
                "  blockDim.x = block; blockDim.y = blockDim.z = 1;",
                "  gridDim.x = grid; gridDim.y = gridDim.z = 1;",
                "  for (unsigned b = 0; b < grid; ++b)",
                "    for (unsigned t = 0; t < block; ++t) {",
                f"      blockIdx.x = b; threadIdx.x = t; {name}({call});", "    }", "}"]
    return CPU_SHIM.prelude + code[len(CUDA.prelude):] + "\n".join(launcher) + "\n"


class RawKernel:
    """``cupy.RawKernel(code, name)`` run on the CPU through the shim."""

    recorder: Recorder = Recorder()

    def __init__(self, code: str, name: str) -> None:
        self.code, self.name = code, name
        self.params = parse_params(code, name)
        lib = ctypes.CDLL(build_library(shim_text(code, name, self.params)))
        self._fn = lib.fake_launch
        self._fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self.recorder.kernels.append(name)

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        assert len(grid) == 1 and len(block) == 1, "1-d launches"
        assert len(args) == len(self.params), f"{len(args)} arguments for {self.params}"
        values = [self._value(k, a) for k, a in enumerate(args)]
        ptrs = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self.recorder.launches.append(Launch(self.name, grid, block, current_device(), args))
        self._fn(ptrs, int(grid[0]), int(block[0]))

    def _value(self, k: int, a: Any) -> ctypes._SimpleCData:
        """The argument's bytes as the kernel reads them, after checking its type."""
        want = self.params[k]
        if want.endswith("*"):
            assert isinstance(a, FakeArray), f"argument {k} ({want}): got {type(a).__name__}"
            assert a.device.id == current_device(), f"argument {k} is on another device"
            assert want.replace("const ", "").rstrip("* ") == C_TYPE[_dtype_name(a)], \
                f"argument {k}: declared {want}, got a {a.dtype} array"
            return ctypes.c_void_p(a.ctypes.data)
        assert want == "long long" and type(a) is np.int64, \
            f"argument {k}: declared {want}, got {type(a).__name__}"
        return ctypes.c_longlong(int(a))


def _dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name


def make_fake_cupy() -> types.ModuleType:
    """A fresh fake ``cupy`` module with its own launch recorder."""
    mod = types.ModuleType("cupy")
    rec = Recorder()
    kernel_cls = type("RawKernel", (RawKernel,), {"recorder": rec})
    mod.__dict__.update(ndarray=FakeArray, empty=empty, asarray=asarray,
                        ascontiguousarray=ascontiguousarray, RawKernel=kernel_cls,
                        recorder=rec, cuda=types.SimpleNamespace(Device=Device))
    return mod
