"""Native execution of ``prim::FusionGroup`` nodes: guards, layouts, one launcher.

A fusion group's subgraph is lowered once (``codegen.lower.lower_group``) to a ``KernelSpec``
without a layout. Each call then looks up a ``Launch`` keyed by the exact (type, dtype, shape,
strides; the device on CUDA) of every input; a miss runs the guards, lays out the kernel
(``codegen.lower.plan_layout``) and has the target compile (or fetch from its caches) the
kernel for that layout. A hit costs a tuple compare and the launch. The target
(``runtime.targets``: LLVM on the CPU, CUDA with CuPy) is chosen from the group's devices.

    >>> from scriptmod.ir import parse
    >>> from scriptmod.ir.passes import fuse_elementwise
    >>> graph = fuse_elementwise(parse('''graph(%x : Float(B, 4), %a : Float(4)):
    ...   %m : Float(B, 4) = sm::mul(%x, %a)
    ...   %y : Float(B, 4) = sm::relu(%m)
    ...   return (%y)
    ... '''))
    >>> x, a = np.ones((2, 4), np.float32), np.arange(4, dtype=np.float32) - 1
    >>> node = graph.nodes[0]; node.kind
    'prim::FusionGroup'
    >>> fk = FusedKernel(node.attrs["subgraph"], name="FusionGroup_0")
    >>> y, = fk([x, a]); y
    array([[0., 0., 1., 2.],
           [0., 0., 1., 2.]], dtype=float32)
    >>> fk.target.name, fk.spec.inputs[1].text()
    ('LLVM', 'float32:strided:1')
    >>> print(fk.llvm_ir[:36], "zmm" in fk.asm)    # zmm: AVX-512 hosts only   # doctest: +SKIP
    ; ModuleID = "sm_ew_5778afff1b019e14" True

Output buffers (targets that pool, i.e. the CPU): each launch keeps up to ``POOL`` arrays
per output (at most ``POOL_BYTES``, env ``SCRIPTMOD_POOL_MB``, over the process). A call
reuses one only when the pool holds the *only* reference to it (``sys.getrefcount``), i.e.
nothing outside this object (user code, a Tensor, a view's ``.base``, an executor's
environment) can observe it; otherwise a fresh array is allocated (NumPy's allocator, huge
pages for big arrays). Memory handed out as raw addresses without a Python reference
(``ctypes.data`` kept after the array is dropped) is not protected, exactly as with NumPy's
own allocator.
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.kernel import KernelSpec
from scriptmod.codegen.lower import DTYPES, c_strides, lower_group, plan_layout, static_layout
from scriptmod.codegen.kernel import broadcast_strides
from scriptmod.ir import env
from scriptmod.codegen.rows import (geometry, has_row_ops, lower_row_group, output_shapes,
                                    plan_row_layout, reduced_stride)
from scriptmod.ir import log as irlog
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph
from scriptmod.ir.types import TensorType
from . import pycode
from .arrays import NP_DTYPE
from .targets import Target, for_devices
from .errors import shape_text, worded
from .interpreter import Interpreter
from .llvm_jit import CompileBudgetError

__all__ = ["DTYPES", "FusedKernel", "FusionGuardError", "Launch", "layout_key",
           "pooled_bytes"]

TOPIC = "fusion"
POOL = 2                       # output buffers kept per output of a launch
POOL_BYTES = env.size_mb("SCRIPTMOD_POOL_MB", 1024)   # cap over all launches
_pooled = [0]
MAX_LAYOUTS = 64               # launches (layouts) kept per group before the table is reset
_getrefcount = sys.getrefcount


class FusionGuardError(RuntimeError, TypeError):
    """A fused kernel given an input it was not built for (count, kind or dtype); a shape it
    was not built for raises ``ShapeError``. Both are RuntimeErrors, as in PyTorch."""


# ---- the launcher ---------------------------------------------------------------------------

def _release(pools: tuple[tuple[list, np.dtype, tuple], ...]) -> None:
    """A launch died: its pooled bytes no longer count."""
    _pooled[0] -= sum(b.nbytes for pool, _, _ in pools for b in pool)


def pooled_bytes() -> int:
    """Bytes currently held in output-buffer pools (all groups of this process)."""
    return _pooled[0]


def _free_count() -> int:
    """``sys.getrefcount`` of a pooled buffer that only the pool holds, measured with the
    same code shape ``Launch.launch`` uses (pool list + loop variable + argument)."""
    pool = [np.empty(1)]
    for buf in pool:
        return _getrefcount(buf)
    raise AssertionError


_FREE = _free_count()


class BufferPool:
    """Up to ``POOL`` reusable arrays of one shape and dtype (counted in ``POOL_BYTES``):
    ``take()`` returns one that nothing but the pool references (``sys.getrefcount``, bound
    before it is counted, so two threads never take the same one), else a new one. A native
    segment takes its large fresh buffers from one (``runtime.native``): a 32 MB attention
    score matrix allocated per call cost 5 ms of page faults."""

    __slots__ = ("bufs", "shape", "dtype", "__weakref__")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.bufs: list[Any] = []
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        weakref.finalize(self, _release, ((self.bufs, self.dtype, self.shape),))

    def take(self) -> Any:
        for buf in self.bufs:
            if _getrefcount(buf) <= _FREE:
                return buf
        buf = np.empty(self.shape, self.dtype)
        if len(self.bufs) < POOL and _pooled[0] + buf.nbytes <= POOL_BYTES:
            self.bufs.append(buf)
            _pooled[0] += buf.nbytes
        return buf


def _nothing(arrays: Sequence[Any], outs: list[Any]) -> None:
    """The launch of an empty output."""


class Launch:
    """One laid-out kernel, ready per call: outputs (pooled when the target pools), then the
    target's call over ``[0, n)``. The one launcher of every target.

        >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
        >>> from scriptmod.ir import dtypes as D
        >>> from scriptmod.runtime.targets import LLVM
        >>> spec = KernelSpec([InputSpec(D.float32)], [OpStep("neg", (0,), {}, D.float32)],
        ...                   [1], [D.float32])
        >>> launch = Launch(LLVM, LLVM.compile(spec), spec, (), (2, 3))
        >>> launch.launch([np.ones((2, 3), np.float32)])[0][1]
        array([-1., -1., -1.], dtype=float32)

    ``launch(arrays)`` trusts ``arrays`` (guarded by ``FusedKernel``: right count, dtypes,
    layout and device); native code checks nothing. ``kernel`` may be None when ``out_shape``
    holds no element (nothing is launched).
    """

    __slots__ = ("spec", "meta", "n", "out_shape", "out_shapes", "pools", "pooled", "empty", "run",
                 "kernel", "__weakref__")

    def __init__(self, target: Target, kernel: Any, spec: KernelSpec, meta: Sequence[int],
                 out_shape: tuple[int, ...], device: Any = None,
                 out_shapes: Sequence[tuple[int, ...]] | None = None) -> None:
        self.spec, self.meta, self.out_shape = spec, tuple(meta), tuple(out_shape)
        self.n = int(np.prod(self.out_shape, dtype=np.int64))
        if spec.is_row:           # a row kernel counts rows; its reduced outputs are smaller
            self.n = int(np.prod(self.meta[:spec.rank - 1], dtype=np.int64)) if self.n else 0
        self.out_shapes = tuple(tuple(s) for s in out_shapes) if out_shapes is not None \
            else (self.out_shape,) * len(spec.out_dtypes)
        self.pools: tuple[tuple[list, np.dtype, tuple], ...] = tuple(
            ([], NP_DTYPE[d], s) for d, s in zip(spec.out_dtypes, self.out_shapes))
        self.pooled = target.pools_outputs
        weakref.finalize(self, _release, self.pools)
        self.empty = target.empty(device)
        self.kernel = kernel
        self.run: Callable[[Sequence[Any], list[Any]], None] = (
            target.caller(kernel, spec, self.meta, self.n, device) if self.n else _nothing)

    def launch(self, arrays: Sequence[Any]) -> list[Any]:
        """Run the kernel on guarded ``arrays``; returns the output arrays."""
        outs = self.outputs()
        self.run(arrays, outs)
        return outs

    def outputs(self) -> list[Any]:
        """This call's output arrays. A pooled buffer is reused only when its pool holds the
        only reference to it (bind first, then count: two threads can never both take one
        buffer)."""
        outs = []
        for pool, dt, shape in self.pools:
            for buf in pool:
                if _getrefcount(buf) <= _FREE:
                    break
            else:
                buf = self._fresh(pool, dt, shape)
            outs.append(buf)
        return outs

    def _fresh(self, pool: list, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        """A new output array, kept in ``pool`` while the process-wide pooled bytes stay under
        ``POOL_BYTES`` (so many specializations cannot pin unbounded memory)."""
        buf = self.empty(shape, dtype)
        if self.pooled:
            if len(pool) >= POOL:
                _pooled[0] -= pool.pop(0).nbytes
            if _pooled[0] + buf.nbytes <= POOL_BYTES:
                pool.append(buf)
                _pooled[0] += buf.nbytes
        return buf


def layout_key(n: int, fields: Sequence[str] = ("dtype", "shape", "strides")
               ) -> Callable[..., tuple]:
    """``key(a0, ..., a{n-1})``: a flat tuple of each input's type and ``fields`` (generated
    for the arity: about half the cost of a loop building nested tuples).

    >>> layout_key(2)(np.zeros(3), np.zeros((2, 2), np.float32))[:4]
    (<class 'numpy.ndarray'>, dtype('float64'), (3,), (8,))
    """
    fn = _KEY_FNS.get((n, tuple(fields)))
    if fn is None:
        names = [f"a{i}" for i in range(n)]
        body = "".join(f"type({a}), " + "".join(f"{a}.{f}, " for f in fields) for a in names)
        ns: dict[str, Any] = {}
        exec(pycode.code(f"def key({', '.join(names)}):\n    return ({body})\n",
                         "<scriptmod layout key>"), ns)
        fn = _KEY_FNS[(n, tuple(fields))] = ns["key"]
    return fn


_KEY_FNS: dict[tuple[int, tuple[str, ...]], Callable[..., tuple]] = {}


class ReferenceLaunch:
    """A layout whose kernel is over the compile-time budget (``runtime.llvm_jit``): the
    group's ops run one by one with the reference kernels, as eager would."""

    def __init__(self, subgraph: Graph) -> None:
        self._interpreter = Interpreter(subgraph)

    def launch(self, args: Sequence[Any]) -> list[Any]:
        out = self._interpreter.run(*args)
        return list(out) if isinstance(out, tuple) else [out]


# ---- the fused kernel ---------------------------------------------------------------------------

class FusedKernel:
    """A fusion group compiled by a target: call it with the group's input arrays.

        >>> from scriptmod.ir import parse
        >>> subgraph = parse('''graph(%x : Float(B, 4), %a : Float(4)):
        ...   %y : Float(B, 4) = sm::mul(%x, %a)
        ...   return (%y)
        ... ''')
        >>> fk = FusedKernel(subgraph, name="FusionGroup_0 (model.py:7)")
        >>> y, = fk([np.ones((3, 4), np.float32), np.full(4, 2, np.float32)]); y[0]
        array([2., 2., 2., 2.], dtype=float32)
        >>> fk([np.ones((3, 4)), np.ones(4, np.float32)])
        Traceback (most recent call last):
          ...
        scriptmod.runtime.fusion.FusionGuardError: FusionGroup_0 (model.py:7): argument 'x' (input 0): expected dtype float32 (Float(B, 4)), got float64

    ``target``: a ``runtime.targets`` object; None picks it from the group's devices (CPU:
    LLVM; CUDA: ``CudaTarget()``, ``NotImplementedError`` without CuPy); ``backend`` is its
    older name (argument and attribute). Guards: every
    input is an array of the target (NumPy on the CPU, CuPy on CUDA, all on one device, the
    one the group's types name) of the subgraph's dtype and rank whose concrete dims match
    the subgraph's types (else ``TypeError`` / ``ValueError`` / ``DeviceError`` naming the
    argument); a new shape/stride combination gets its own launch (and kernel, when the
    layout kinds differ). Native code only ever sees inputs that passed these checks.

    ``lowered`` is the group's layout-free spec (``codegen.lower.lower_group``); ``spec`` the
    laid-out one of the latest kernel; ``kernels`` every kernel compiled so far.
    """

    def __init__(self, subgraph: Graph, name: str = "fusion group",
                 target: Target | None = None, *, backend: Target | None = None) -> None:
        self.subgraph, self.name = subgraph, name
        self.lowered = lower_row_group(subgraph) if has_row_ops(subgraph) \
            else lower_group(subgraph)
        target = target or backend
        if target is None:
            types = self.lowered.in_types + self.lowered.out_types
            target = for_devices({t.device for t in types})
        self.target: Target = target
        self._np_in = tuple(NP_DTYPE[s.dtype] for s in self.lowered.inputs)
        self._launches: dict[tuple, Launch] = {}
        self._key = layout_key(len(self.lowered.inputs), target.key_fields)
        self._kernels: dict[str, Any] = {}
        self._last: Any = None
        self._last_spec: KernelSpec | None = None

    def __call__(self, args: Sequence[Any]) -> list[Any]:
        try:
            launch = self._launches.get(self._key(*args))
        except (AttributeError, TypeError):
            launch = None
        if launch is None:
            return self._slow_call(args)
        return launch.launch(args)

    # ---- first call with a layout: guards, layout, compile --------------------------------------
    def launch_for(self, args: Sequence[Any]) -> tuple[Launch, Sequence[Any]]:
        """The launch for ``args`` (guarded, laid out and compiled on first sight of their
        layout) and the arrays to pass it, without running it (``runtime.gemm``'s epilogue
        calls the kernel itself). The launch may be a ``ReferenceLaunch``."""
        try:
            launch = self._launches.get(self._key(*args))
        except (AttributeError, TypeError):
            launch = None
        if launch is not None:
            return launch, args
        return self._prepare(args)

    def _slow_call(self, args: Sequence[Any]) -> list[Any]:
        launch, arrays = self._prepare(args)
        return launch.launch(arrays)

    def _prepare(self, args: Sequence[Any]) -> tuple[Launch, Sequence[Any]]:
        arrays = self.check(args)
        out_shape = self._out_shape(arrays)
        if self.lowered.is_row:
            arrays = self._rows_walk(arrays, out_shape)
        if all(a is b for a, b in zip(arrays, args)):
            key = self._key(*arrays)
            if len(self._launches) >= MAX_LAYOUTS:
                self._launches.clear()
            launch = self._launches[key] = self._launch_for(arrays, out_shape)
        else:                                   # converted inputs: never cached as a layout
            launch = self._launch_for(arrays, out_shape)
        return launch, arrays

    def check(self, args: Sequence[Any]) -> list[Any]:
        """The guards: returns the arrays (0-d NumPy scalars and odd strides made arrays)."""
        n = len(self.lowered.inputs)
        if len(args) != n:
            raise FusionGuardError(f"{self.name}: expected {n} input(s), got {len(args)}")
        arrays = [self._check_one(i, a) for i, a in enumerate(args)]
        self.target.device_of(arrays, self.name)
        return arrays

    def _check_one(self, i: int, a: Any) -> Any:
        t = self.lowered.in_types[i]
        where = f"{self.name}: argument '{self.lowered.in_names[i]}' (input {i})"
        got = self.target.admit(a)
        if got is None:
            raise FusionGuardError(f"{where}: expected {self.target.array_name} on {t.device} "
                                   f"like {t!r}, got {type(a).__module__}.{type(a).__name__}")
        if got.dtype != self._np_in[i]:
            raise FusionGuardError(f"{where}: expected dtype {self.lowered.inputs[i].dtype.name} "
                                   f"({t!r}), got {got.dtype}")
        if got.ndim != len(t.shape or ()) or any(
                isinstance(d, int) and d != n for d, n in zip(t.shape or (), got.shape)):
            raise worded(ShapeError(f"{where}: expected shape {t!r}, got {tuple(got.shape)}"),
                         internal=True)                 # the specialization's guards passed it
        return self.target.place(got, t, where)

    def _out_shape(self, arrays: Sequence[Any]) -> tuple[int, ...]:
        t = self.lowered.out_types[0]
        if self.lowered.is_row:                      # the full shape the row ops read
            t = TensorType(t.dtype, geometry(self.subgraph)[0])
        if not arrays:
            if not t.is_concrete:
                raise NotImplementedError(f"{self.name}: no inputs and a symbolic shape {t!r}")
            return tuple(t.shape)                               # type: ignore[arg-type]
        try:
            shape = tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
        except ValueError:
            shapes = ", ".join(shape_text(a.shape) for a in arrays)
            raise worded(ShapeError(f"{self.name}: input shapes {shapes} do not broadcast "
                                    f"together"), f"shapes {shapes} do not broadcast") from None
        if len(shape) != len(t.shape or ()) or any(
                isinstance(d, int) and d != n for d, n in zip(t.shape or (), shape)):
            raise worded(ShapeError(f"{self.name}: inputs broadcast to {shape}, but the group "
                                    f"was specialized for outputs {t!r}"), internal=True)
        return shape

    def _launch_for(self, arrays: Sequence[Any], out_shape: tuple[int, ...]) -> Launch:
        shapes = [a.shape for a in arrays]
        strides = [[s // a.itemsize for s in a.strides] for a in arrays]
        outs = None
        if self.lowered.is_row:
            if not self.target.row_kernels:
                raise NotImplementedError(f"{self.name}: row kernels run on the CPU only")
            spec, meta = plan_row_layout(self.lowered, shapes, strides, out_shape)
            outs = output_shapes(self.lowered, out_shape)
        else:
            spec, meta = plan_layout(self.lowered, shapes, strides, out_shape)
        empty = 0 in out_shape
        try:
            kernel = None if empty else self._compile(spec)
        except CompileBudgetError as exc:
            irlog.log(TOPIC, f"{self.name}: reference kernels ({exc})")
            return ReferenceLaunch(self.subgraph)       # type: ignore[return-value]
        device = self.target.device_of(arrays, self.name)
        return Launch(self.target, kernel, spec, meta, out_shape, device, outs)

    def _rows_walk(self, arrays: list[Any], out_shape: tuple[int, ...]) -> list[Any]:
        """The arrays, each input that does not walk the reduced dims as one (a broadcast
        inside them, a slice with a step) replaced by a C-ordered copy of its broadcast (a
        layout with copies is never cached)."""
        k = self.lowered.cols
        lead = len(out_shape) - k
        out = []
        for a in arrays:
            st = broadcast_strides(a.shape, [s // a.itemsize for s in a.strides], out_shape)
            if a.size > 1 and reduced_stride(out_shape[lead:], st[lead:]) is None:
                a = np.ascontiguousarray(np.broadcast_to(a, out_shape))
            out.append(a)
        return out

    def _compile(self, spec: KernelSpec) -> Any:
        """The target's kernel for ``spec``, built once per layout."""
        key = spec.key()
        kernel = self._kernels.get(key)
        if kernel is None:
            if irlog.enabled(TOPIC):
                irlog.log(TOPIC, f"{self.name}: {self.target.name} kernel for layout "
                                 f"{[s.text() for s in spec.inputs]} rank {spec.rank}")
            kernel = self._kernels[key] = self.target.compile(spec)
        self._last, self._last_spec = kernel, spec
        return kernel

    # ---- inspection ------------------------------------------------------------------------------
    @property
    def backend(self) -> Target:
        """``target`` under its older name (``kernels_for`` hands these objects to users)."""
        return self.target

    @property
    def kernels(self) -> list[Any]:
        """Every kernel compiled for this group so far (one per input layout kind)."""
        return list(self._kernels.values())

    @property
    def kernel(self) -> Any:
        """The most recently compiled kernel (compiled for the static layout if none ran)."""
        if self._last is None:
            self._compile(self.static_spec())
        return self._last

    @property
    def spec(self) -> KernelSpec:
        """The laid-out ``KernelSpec`` of ``kernel``."""
        self.kernel
        assert self._last_spec is not None
        return self._last_spec

    def static_spec(self) -> KernelSpec:
        """The spec for C-contiguous inputs of the subgraph's static shapes."""
        if self.lowered.is_row:
            shapes = [tuple(d if isinstance(d, int) else 2 for d in t.shape or ())
                      for t in self.lowered.in_types]
            full = tuple(d if isinstance(d, int) else 2 for d in geometry(self.subgraph)[0])
            return plan_row_layout(self.lowered, shapes, [c_strides(s) for s in shapes],
                                   full)[0]
        return static_layout(self.lowered)[0]

    def _text(self, what: str) -> str:
        if what not in self.target.texts:
            raise AttributeError(f"{self.name} runs on {self.target.name}: see "
                                 f"{', '.join('.' + t for t in self.target.texts)}")
        return self.target.text(what, self.kernel, self.spec)

    @property
    def llvm_ir(self) -> str:
        """LLVM IR text of ``kernel`` (CPU target)."""
        return self._text("llvm_ir")

    @property
    def asm(self) -> str:
        """Host assembly of ``kernel`` (CPU target)."""
        return self._text("asm")

    @property
    def cuda_source(self) -> str:
        """CUDA C text of ``kernel`` (CUDA target)."""
        return self._text("cuda_source")

    def __repr__(self) -> str:
        return f"<FusedKernel {self.name} on {self.target.name}: " \
               f"{len(self.lowered.ops)} op(s), {len(self._kernels)} kernel(s)>"
