"""Native execution of ``prim::FusionGroup`` nodes: lowering to ``KernelSpec``, guards, launch.

A fusion group's subgraph (elementwise ``sm::`` ops and scalar constants) is lowered once to a
layout-free ``GroupProgram``. Each call then looks up a ``LaunchPlan`` keyed by the exact
(type, dtype, shape, strides) of every input; a miss runs the guards, classifies each input
(``contiguous`` / ``strided`` / ``scalar``), coalesces dimensions, and compiles (or fetches
from ``runtime.kernel_cache``) the kernel for that layout. A hit costs a tuple compare, one
data-pointer read per input and one ctypes call.

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
    >>> print(fk.llvm_ir[:36], "zmm" in fk.asm)    # zmm: AVX-512 hosts only   # doctest: +SKIP
    ; ModuleID = "sm_ew_5778afff1b019e14" True

Output buffers: each plan keeps up to ``POOL`` arrays per output (at most ``POOL_BYTES``, env
``SCRIPTMOD_POOL_MB``, over the process). A call reuses one only when
the pool holds the *only* reference to it (``sys.getrefcount``), i.e. nothing outside this
object (user code, a Tensor, a view's ``.base``, the interpreter's environment) can observe
it; otherwise a fresh ``np.empty`` array is allocated (NumPy's allocator, huge pages for big
arrays). Memory handed out as raw addresses without a Python reference (``ctypes.data`` kept
after the array is dropped) is not protected, exactly as with NumPy's own allocator.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.formulas import FORMULAS
from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir.dtypes import DType
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.ops import rules as R
from scriptmod.ir.types import TensorType
from . import threads
from .backend import NP_DTYPE
from .llvm_jit import CompiledKernel, compile_spec

TOPIC = "fusion"
POOL = 2                       # output buffers kept per output of a plan
POOL_BYTES = int(os.environ.get("SCRIPTMOD_POOL_MB", "1024")) << 20   # cap over all plans
_pooled = [0]
MAX_PLANS = 64                 # layouts remembered per group before the table is reset
DTYPES = frozenset({D.bool_, D.uint8, D.int8, D.int16, D.int32, D.int64, D.float16,
                    D.bfloat16, D.float32, D.float64})
_ATTRS = {"clamp": {"min", "max"}, "cast": {"dtype"}}
_getrefcount = sys.getrefcount
_ndarray = np.ndarray
_i64_at = ctypes.c_int64.from_address
_MIN_SPLIT = threads.MIN_SPLIT


class FusionGuardError(RuntimeError, TypeError):
    """A fused kernel given an input it was not built for (count, kind or dtype); a shape it
    was not built for raises ``ShapeError``. Both are RuntimeErrors, as in PyTorch."""


def supported_on(node: Node, on_device: Callable[[str], bool]) -> bool:
    """A backend's veto for ``fuse_elementwise``: a scalar formula, every tensor on a device
    the backend runs (``on_device``), dtypes the code generator handles, and only
    attributes the formula reads."""
    if not node.is_op or node.op_name not in FORMULAS:
        return False
    if not set(node.attrs) <= _ATTRS.get(node.op_name, set()):
        return False
    if node.op_name in _RAISING_ON_INTS and _integer_result(node):
        return False
    for v in list(node.inputs) + node.outputs:
        t = v.type
        if isinstance(t, TensorType) and (not on_device(t.device) or t.dtype not in DTYPES):
            return False
    return True


# Integer division by zero raises in PyTorch and in our reference kernel; a native kernel
# cannot raise, so these stay unfused on integers (their formula maps b == 0 to (a, 0)).
_RAISING_ON_INTS = frozenset({"floor_divide", "remainder"})


def _integer_result(node: Node) -> bool:
    t = node.outputs[0].type
    return isinstance(t, TensorType) and not t.dtype.is_floating_point


def supported(node: Node) -> bool:
    """The CPU backend's veto: ``supported_on`` with every tensor on the CPU."""
    return supported_on(node, lambda device: device == "cpu")


# ---- lowering: subgraph -> layout-free program ------------------------------------------------

@dataclass(frozen=True)
class GroupProgram:
    """A fusion group's ops in ``KernelSpec`` terms, before input layouts are known."""

    in_types: tuple[TensorType, ...]
    in_names: tuple[str, ...]
    ops: tuple[OpStep, ...]
    outputs: tuple[int, ...]
    out_types: tuple[TensorType, ...]

    @property
    def in_dtypes(self) -> tuple[DType, ...]:
        return tuple(_dt(t) for t in self.in_types)

    @property
    def out_dtypes(self) -> tuple[DType, ...]:
        return tuple(_dt(t) for t in self.out_types)

    def spec(self, inputs: Sequence[InputSpec], rank: int) -> KernelSpec:
        return KernelSpec(inputs, self.ops, self.outputs, self.out_dtypes, rank=rank)


def lower_subgraph(sub: Graph) -> GroupProgram:
    """Number the subgraph's values as ``KernelSpec`` does (inputs, then one per op step);
    scalar constants become ``Imm`` arguments typed by the op's promotion rule."""
    index: dict[Value, int] = {v: i for i, v in enumerate(sub.inputs)}
    consts: dict[Value, Any] = {}
    ops: list[OpStep] = []
    for node in sub.nodes:
        if node.kind == Prim.CONSTANT:
            consts[node.output] = node.attrs.get("value")
            continue
        if not node.is_op or len(node.outputs) != 1:
            raise NotImplementedError(f"fusion: cannot lower {node.kind} in a fusion group")
        args = tuple(_arg(node, v, index, consts) for v in node.inputs)
        ops.append(OpStep(node.op_name, args, dict(node.attrs), _dt(_tensor(node.output))))
        index[node.output] = len(sub.inputs) + len(ops) - 1
    for v in sub.outputs:
        if v not in index or index[v] < len(sub.inputs):
            raise NotImplementedError("fusion: a group output must be computed by the group")
    in_types = tuple(_tensor(v) for v in sub.inputs)
    names = tuple(v.debug_name or f"input {i}" for i, v in enumerate(sub.inputs))
    return GroupProgram(in_types, names, tuple(ops), tuple(index[v] for v in sub.outputs),
                        tuple(_tensor(v) for v in sub.outputs))


def _dt(t: TensorType) -> DType:
    assert t.dtype is not None, "lowering checked every dtype"
    return t.dtype


def _tensor(v: Value) -> TensorType:
    t = v.type
    if not isinstance(t, TensorType) or t.dtype is None or t.shape is None:
        raise NotImplementedError(f"fusion: value {v!r} needs a known tensor dtype and rank")
    return t


def _arg(node: Node, v: Value, index: dict[Value, int], consts: dict[Value, Any]) -> int | Imm:
    if v in index:
        return index[v]
    if v not in consts or not isinstance(consts[v], (bool, int, float)):
        raise NotImplementedError(f"fusion: {node.kind} reads {v!r}, not a tensor or scalar")
    return Imm(consts[v], _imm_dtype(node, v))


def _imm_dtype(node: Node, v: Value) -> DType:
    """The dtype a Python scalar operand computes in: the op's promoted dtype (PyTorch's
    weak scalars), bool for ``where``'s condition."""
    operands = []
    for u in node.inputs:
        t = u.type
        operands.append((t.dtype, t.shape) if isinstance(t, TensorType)
                        else type(u.node.attrs.get("value")))
    if node.op_name == "where":
        if node.inputs[0] is v:
            return D.bool_
        operands = operands[1:]
    out = R.promote(operands, {})
    return out if out in DTYPES else _dt(_tensor(node.output))


# ---- layouts: shapes and strides -> (input specs, coalesced shape, strides) -----------------

@dataclass(frozen=True)
class Layout:
    """How one call's inputs are read: kinds, coalesced iteration shape, element strides."""

    inputs: tuple[InputSpec, ...]
    shape: tuple[int, ...]                      # coalesced iteration shape (rank >= 1)
    strides: tuple[tuple[int, ...] | None, ...]  # per input: strides if ``strided``


def plan_layout(prog: GroupProgram, shapes: Sequence[tuple[int, ...]],
                elem_strides: Sequence[Sequence[int]], out_shape: tuple[int, ...]) -> Layout:
    """Classify inputs (size 1: scalar; C order over the output: contiguous; else strided)
    and merge the dimensions that every strided input walks uniformly."""
    full = [_broadcast(sh, st, out_shape) for sh, st in zip(shapes, elem_strides)]
    keep = [d for d, n in enumerate(out_shape) if n != 1]
    scalar = [_numel(sh) == 1 for sh in shapes]
    shape, strides = _coalesce([out_shape[d] for d in keep],
                               [[st[d] for d in keep] for st in full], scalar)
    c_order = _c_strides(shape)
    specs, kept = [], []
    for dt, st, sc in zip(prog.in_dtypes, strides, scalar):
        kind = "scalar" if sc else "contiguous" if st == c_order else "strided"
        inner = st[-1] if kind == "strided" and st[-1] in (0, 1) else None
        specs.append(InputSpec(dt, kind, inner))
        kept.append(tuple(st) if kind == "strided" else None)
    return Layout(tuple(specs), tuple(shape), tuple(kept))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _broadcast(shape: Sequence[int], st: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    pad = len(out_shape) - len(shape)
    return [0] * pad + [0 if n == 1 else s for n, s in zip(shape, st)]


def _coalesce(shape: list[int], strides: list[list[int]],
              scalar: list[bool]) -> tuple[list[int], list[list[int]]]:
    """Merge dims d-1, d when every non-scalar input has stride[d-1] == stride[d] * shape[d]."""
    if not shape:
        return [1], [[0] for _ in strides]
    out_shape, out_st = [shape[0]], [[st[0]] for st in strides]
    for d in range(1, len(shape)):
        if all(sc or o[-1] == st[d] * shape[d] for o, st, sc in zip(out_st, strides, scalar)):
            out_shape[-1] *= shape[d]
            for o, st in zip(out_st, strides):
                o[-1] = st[d]
        else:
            out_shape.append(shape[d])
            for o, st in zip(out_st, strides):
                o.append(st[d])
    return out_shape, out_st


def _c_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


# ---- launching -----------------------------------------------------------------------------------

def _fast_pointers_work() -> bool:
    """Whether the data address can be read straight from the PyArrayObject (the field after
    the 16-byte object header): checked against NumPy's own interface on this build."""
    probe = np.arange(8.0)[3:]
    return _i64_at(id(probe) + 16).value == probe.__array_interface__["data"][0]


def _data_ptr(a: np.ndarray) -> int:
    if _FAST_PTR:
        return _i64_at(id(a) + 16).value
    return a.__array_interface__["data"][0]


def _fresh(pool: list, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new output array, kept in ``pool`` while the process-wide pooled bytes stay under
    ``POOL_BYTES`` (so many specializations cannot pin unbounded memory)."""
    buf = np.empty(shape, dtype)
    if len(pool) >= POOL:
        _pooled[0] -= pool.pop(0).nbytes
    if _pooled[0] + buf.nbytes <= POOL_BYTES:
        pool.append(buf)
        _pooled[0] += buf.nbytes
    return buf


def _release(pools: tuple[tuple[list, np.dtype], ...]) -> None:
    """A plan died: its pooled bytes no longer count."""
    _pooled[0] -= sum(b.nbytes for pool, _ in pools for b in pool)


def pooled_bytes() -> int:
    """Bytes currently held in output-buffer pools (all groups of this process)."""
    return _pooled[0]


def _free_count() -> int:
    """``sys.getrefcount`` of a pooled buffer that only the pool holds, measured with the
    same code shape ``LaunchPlan.launch`` uses (pool list + loop variable + argument)."""
    pool = [np.empty(1)]
    for buf in pool:
        return _getrefcount(buf)
    raise AssertionError


_FAST_PTR = _fast_pointers_work()
_FREE = _free_count()


def layout_key(n: int) -> Callable[..., tuple]:
    """``key(a0, ..., a{n-1})``: a flat tuple of each input's type, dtype, shape and strides
    (generated for the arity: about half the cost of a loop building nested tuples)."""
    fn = _KEY_FNS.get(n)
    if fn is None:
        names = [f"a{i}" for i in range(n)]
        body = "".join(f"type({a}), {a}.dtype, {a}.shape, {a}.strides, " for a in names)
        ns: dict[str, Any] = {}
        exec(f"def key({', '.join(names)}):\n    return ({body})\n", ns)
        fn = _KEY_FNS[n] = ns["key"]
    return fn


_KEY_FNS: dict[int, Callable[..., tuple]] = {}


class LaunchPlan:
    """Everything one layout needs per call, computed once: kernel, meta, output pools."""

    __slots__ = ("kernel", "spec", "fn", "n", "out_shape", "out_dtypes", "pools", "meta",
                 "meta_addr", "ptrs", "ptrs_addr", "owner", "ptr_type", "__weakref__")

    def __init__(self, kernel: CompiledKernel | None, spec: KernelSpec, layout: Layout,
                 out_shape: tuple[int, ...], out_dtypes: Sequence[np.dtype]) -> None:
        self.kernel, self.spec = kernel, spec
        self.fn: Any = kernel.cfunc if kernel is not None else None
        self.n = _numel(out_shape)
        self.out_shape, self.out_dtypes = out_shape, tuple(out_dtypes)
        self.pools: tuple[tuple[list, np.dtype], ...] = tuple(([], d) for d in out_dtypes)
        weakref.finalize(self, _release, self.pools)
        meta = spec.meta(layout.shape, layout.strides) if spec.strided else []
        self.meta = (ctypes.c_int64 * max(1, len(meta)))(*meta)
        self.meta_addr = ctypes.addressof(self.meta)
        self.ptr_type = ctypes.c_void_p * (len(spec.inputs) + len(out_dtypes))
        self.ptrs = self.ptr_type()
        self.ptrs_addr = ctypes.addressof(self.ptrs)
        self.owner = threading.get_ident()

    def launch(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the kernel on guarded ``arrays``; returns the output arrays.

        An output buffer is reused only when its pool holds the only reference to it
        (bind first, then count: two threads can never both take one buffer)."""
        outs = []
        for pool, dt in self.pools:
            for buf in pool:
                if _getrefcount(buf) <= _FREE:
                    break
            else:
                buf = _fresh(pool, self.out_shape, dt)
            outs.append(buf)
        if not self.n:
            return outs
        if threading.get_ident() == self.owner:
            ptrs, addr = self.ptrs, self.ptrs_addr
        else:                                   # another thread: a private pointer array
            ptrs = self.ptr_type()
            addr = ctypes.addressof(ptrs)
        i = 0
        if _FAST_PTR:
            for a in arrays:
                ptrs[i] = _i64_at(id(a) + 16).value
                i += 1
            for a in outs:
                ptrs[i] = _i64_at(id(a) + 16).value
                i += 1
        else:
            for a in list(arrays) + outs:
                ptrs[i] = _data_ptr(a)
                i += 1
        if self.n < _MIN_SPLIT:
            self.fn(0, self.n, addr, self.meta_addr)
        else:
            self._run(addr)
        return outs

    def _run(self, addr: int) -> None:
        n, fn, meta = self.n, self.fn, self.meta_addr
        if threads.get_num_threads() > 1:
            threads.parallel_for(lambda lo, hi: fn(lo, hi, addr, meta), n)
        else:
            fn(0, n, addr, meta)


class FusedKernel:
    """A fusion group compiled for the CPU: call it with the group's input arrays.

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

    Guards: every input must be a CPU NumPy array of the subgraph's dtype and rank whose
    concrete dims match the subgraph's types (else ``TypeError`` / ``ValueError`` naming the
    argument); a new shape/stride combination gets its own plan (and kernel, when the layout
    kinds differ). Native code only ever sees inputs that passed these checks.
    """

    def __init__(self, subgraph: Graph, name: str = "fusion group") -> None:
        self.subgraph, self.name = subgraph, name
        self.program = lower_subgraph(subgraph)
        shapes = {t.shape for t in self.program.out_types}
        if len(shapes) != 1:
            raise NotImplementedError(f"fusion: outputs of different shapes {shapes}")
        self._np_in = tuple(NP_DTYPE[d] for d in self.program.in_dtypes)
        self._np_out = tuple(NP_DTYPE[d] for d in self.program.out_dtypes)
        self._plans: dict[tuple, LaunchPlan] = {}
        self._key = layout_key(len(self.program.in_types))
        self._kernels: dict[str, CompiledKernel] = {}
        self._last: CompiledKernel | None = None
        self._last_spec: KernelSpec | None = None

    def __call__(self, args: Sequence[Any]) -> list[np.ndarray]:
        try:
            plan = self._plans.get(self._key(*args))
        except (AttributeError, TypeError):
            plan = None
        if plan is None:
            return self._slow_call(args)
        return plan.launch(args)

    # ---- first call with a layout: guards, plan, compile ----------------------------------------
    def _slow_call(self, args: Sequence[Any]) -> list[np.ndarray]:
        arrays = self.check(args)
        out_shape = self._out_shape(arrays)
        if all(a is b for a, b in zip(arrays, args)):
            key = self._key(*arrays)
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            plan = self._plans[key] = self._plan(arrays, out_shape)
        else:                                   # converted inputs: never cached as a layout
            plan = self._plan(arrays, out_shape)
        return plan.launch(arrays)

    def check(self, args: Sequence[Any]) -> list[np.ndarray]:
        """The guards: returns the arrays (0-d NumPy scalars and odd strides made arrays)."""
        prog = self.program
        if len(args) != len(prog.in_types):
            raise FusionGuardError(f"{self.name}: expected {len(prog.in_types)} input(s), "
                                   f"got {len(args)}")
        return [self._check_one(i, a) for i, a in enumerate(args)]

    def _check_one(self, i: int, a: Any) -> np.ndarray:
        t, want = self.program.in_types[i], self._np_in[i]
        where = f"{self.name}: argument '{self.program.in_names[i]}' (input {i})"
        if isinstance(a, np.generic):
            a = np.asarray(a)
        if not isinstance(a, np.ndarray):
            raise FusionGuardError(f"{where}: expected a NumPy array on cpu like {t!r}, got "
                                   f"{type(a).__module__}.{type(a).__name__}")
        if a.dtype != want:
            raise FusionGuardError(f"{where}: expected dtype {_dt(t).name} ({t!r}), got {a.dtype}")
        if a.ndim != len(t.shape or ()) or any(
                isinstance(d, int) and d != n for d, n in zip(t.shape or (), a.shape)):
            raise ShapeError(f"{where}: expected shape {t!r}, got {tuple(a.shape)}")
        if type(a) is not np.ndarray:
            a = a.view(np.ndarray)
        if any(s % a.itemsize for s in a.strides) or not a.flags.aligned:
            a = np.ascontiguousarray(a)
        return a

    def _out_shape(self, arrays: Sequence[np.ndarray]) -> tuple[int, ...]:
        t = self.program.out_types[0]
        if not arrays:
            if not t.is_concrete:
                raise NotImplementedError(f"{self.name}: no inputs and a symbolic shape {t!r}")
            return tuple(t.shape)                               # type: ignore[arg-type]
        try:
            shape = tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
        except ValueError:
            raise ShapeError(f"{self.name}: input shapes {[a.shape for a in arrays]} do not "
                             f"broadcast together") from None
        if len(shape) != len(t.shape or ()) or any(
                isinstance(d, int) and d != n for d, n in zip(t.shape or (), shape)):
            raise ShapeError(f"{self.name}: inputs broadcast to {shape}, but the group was "
                             f"specialized for outputs {t!r}")
        return shape

    def _plan(self, arrays: Sequence[np.ndarray], out_shape: tuple[int, ...]) -> LaunchPlan:
        layout = plan_layout(self.program, [a.shape for a in arrays],
                             [[s // a.itemsize for s in a.strides] for a in arrays], out_shape)
        spec = self.program.spec(layout.inputs, len(layout.shape))
        kernel = self._compile(spec) if _numel(out_shape) else None
        return LaunchPlan(kernel, spec, layout, out_shape, self._np_out)

    BACKEND = "LLVM"

    def _compile(self, spec: KernelSpec) -> Any:
        """The kernel for ``spec``, built once per layout (``_build`` is the backend's part)."""
        key = spec.key()
        kernel = self._kernels.get(key)
        if kernel is None:
            if irlog.enabled(TOPIC):
                irlog.log(TOPIC, f"{self.name}: {self.BACKEND} kernel for layout "
                                 f"{[s.text() for s in spec.inputs]} rank {spec.rank}")
            kernel = self._kernels[key] = self._build(spec)
        self._last, self._last_spec = kernel, spec
        return kernel

    def _build(self, spec: KernelSpec) -> Any:
        return compile_spec(spec)

    # ---- inspection ------------------------------------------------------------------------------
    @property
    def kernels(self) -> list[CompiledKernel]:
        """Every kernel compiled for this group so far (one per input layout kind)."""
        return list(self._kernels.values())

    @property
    def kernel(self) -> CompiledKernel:
        """The most recently compiled kernel (compiled for the static layout if none ran)."""
        if self._last is None:
            self._compile(self.static_spec())
        assert self._last is not None
        return self._last

    @property
    def spec(self) -> KernelSpec:
        """The ``KernelSpec`` of ``kernel``."""
        self.kernel
        assert self._last_spec is not None
        return self._last_spec

    @property
    def llvm_ir(self) -> str:
        """LLVM IR text of ``kernel``."""
        return self.kernel.llvm_ir

    @property
    def asm(self) -> str:
        """Host assembly of ``kernel``."""
        return self.kernel.asm

    def static_spec(self) -> KernelSpec:
        """The spec for C-contiguous inputs of the subgraph's static shapes."""
        shapes = [tuple(d if isinstance(d, int) else 2 for d in t.shape or ())
                  for t in self.program.in_types]
        out = tuple(np.broadcast_shapes(*shapes)) if shapes else (1,)
        layout = plan_layout(self.program, shapes, [_c_strides(s) for s in shapes], out)
        return self.program.spec(layout.inputs, len(layout.shape))

    def __repr__(self) -> str:
        return f"<FusedKernel {self.name}: {len(self.program.ops)} op(s), " \
               f"{len(self._kernels)} kernel(s)>"
