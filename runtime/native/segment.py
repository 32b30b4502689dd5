"""Running native segments: a ``Segment`` is one compiled native function over a run of
planned nodes, plus the per-call Python that binds its imports, allocates its fresh outputs
and calls it; ``Frame`` is one thread's arena and pointer table; ``compile_steps`` compiles
each step alone for the profiler.

Per call, Python writes each import's address (or, where NumPy's object layout is checked,
the array object itself: ``data_ptr``, ``ARRAY_DATA_OFFSET``) into the table and calls the
entry ``f(table)``; the program reads the arena, the BLAS table and the sizes table from the
table's last three slots. A fresh buffer of ``POOL_MIN_BYTES`` or more comes from a
``fusion.BufferPool``. With symbolic sizes (``Frame.set_env``: the program binds the symbol
values once per call, from its inputs' shapes), imports are checked against, and fresh
buffers allocated at, the shapes those values give; the frame's arena grows to the largest
size seen and the sizes table (symbol values, arena offsets) follows the values.
"""
from __future__ import annotations

import ctypes
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from scriptmod.ir.graph import Node, Prim, Value
from .. import pycode
from ..arrays import NP_DTYPE
from ..errors import article, describe_value, op_label, place, shape_text, worded
from scriptmod.codegen.sizes import Poly
from ..memory_plan import ALIGN, Buffer
from .views import c_strides

if TYPE_CHECKING:
    from .plan import NativePlan, _Planner

# A fresh buffer of at least this many bytes comes from a ``fusion.BufferPool`` (reused once
# nothing outside holds it): NumPy's allocator gives big arrays new pages each call, and the
# page faults of a 32 MB score matrix cost 5 ms; below it ``np.empty`` is cheaper than a call.
POOL_MIN_BYTES = 1 << 20
SHAPES_POOLED = 4           # shapes of a symbolic fresh buffer with a pool at a time
POOL_PROBE = 1024           # symbol value at which a symbolic buffer is checked for pooling
_i64_at = ctypes.c_int64.from_address
ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


ARRAY_DATA_OFFSET = 16      # PyArrayObject: ob_refcnt, ob_type, then ``data``


def data_ptr(a: np.ndarray) -> int:
    """The array's data address (read from the PyArrayObject where that is checked to be
    NumPy's layout; else through ``__array_interface__``)."""
    if _FAST_PTR:
        return _i64_at(id(a) + ARRAY_DATA_OFFSET).value
    return a.__array_interface__["data"][0]


def _fast_pointers_work() -> bool:
    """Whether an array object keeps its data pointer at ``ARRAY_DATA_OFFSET`` (then native
    code reads it there: per call, Python writes ``id(array)`` into the table)."""
    probes = [np.arange(8.0)[3:], np.empty((3, 5), np.float32).T, np.zeros(0, np.int8)]
    return all(_i64_at(id(p) + ARRAY_DATA_OFFSET).value == p.__array_interface__["data"][0]
               for p in probes)


_FAST_PTR = _fast_pointers_work()


class Segment:
    """A run of native nodes: one native function, the Python values it reads (imports:
    pointers written into the table per call, checked first), the buffers it allocates
    fresh, and the values it hands back to Python (exports)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.nodes: list[Node] = []
        self.imports: list[Value] = []
        self.exports: list[Value] = []
        self.step_fns: list[Any] | None = None    # each step alone (``compile_steps``)
        self.placement: Any = None                # the plan's ``SymbolicArena``, if any

    def prepare(self, p: "_Planner") -> tuple[str, Callable[[], str], str]:
        """Build the segment's ``NativeProgram`` from the plan; returns its compile unit
        ``(key_text, render, name)`` (``llvm_jit.compile_units``)."""
        from scriptmod.codegen.native import GemmStep, KernelStep, NativeProgram, \
            program_name, render_program, step_refs as _step_refs
        from ..blas import cblas
        steps: list[Any] = []
        step_nodes: list[Node] = []                # the node of each step
        imports: dict[Value, Buffer] = {}
        fresh: list[Buffer] = []
        for n in self.nodes:
            for v in n.inputs:
                lay = p.lay.get(v)                     # (a reshape's shape list has none)
                if lay is None:
                    continue
                src = lay.buf.source
                if lay.buf.kind == "arg" and isinstance(src, tuple) and \
                        src[0] in ("input", "python"):
                    imports.setdefault(src[1], lay.buf)
            kind, *info = p.steps[n]
            if kind == "kernel":
                spec, meta, count = info
                if _may_be_nonzero(count):
                    steps.append(KernelStep(spec, tuple(p.ref(v) for v in n.inputs
                                                        if v in p.lay),
                                            tuple(p.ref(v) for v in n.outputs), count, meta))
                    step_nodes.append(n)
            else:
                g, dt = info
                a, b = n.inputs
                fields = {k: v for k, v in g.items() if k not in ("a_off", "b_off")}
                if _may_be_nonzero(g["m"] * g["n"]):
                    steps.append(GemmStep(dt, a=p.ref(a), b=p.ref(b), c=p.ref(n.output),
                                          **fields))
                    step_nodes.append(n)
            for v in n.outputs:
                if p.lay[v].buf.kind == "fresh":
                    fresh.append(p.lay[v].buf)
        self.imports = list(imports)
        self.import_bufs = [imports[v] for v in self.imports]
        self.fresh = fresh
        self.exports = [v for n in self.nodes for v in n.outputs if v in p.exports]
        # what Python reads is never in the arena (``_escapes``): exports are fresh buffers
        self.export_bufs = [p.lay[v].buf for v in self.exports]
        assert all(b.kind == "fresh" for b in self.export_bufs), "an arena value escapes"
        blas = cblas()
        # per-call tensors (any segment's imports and fresh buffers) go into the table as
        # array objects: the entry reads their data pointers, for the slots its steps use
        per_call = {b.slot for b in p.buffers if b.kind == "fresh" or (
            b.kind == "arg" and isinstance(b.source, tuple) and b.source[0] in ("input", "python"))}
        used = {r.index for st in steps for r in _step_refs(st) if r.space == "arg"}
        objects = sorted(per_call & used) if _FAST_PTR else []
        self.placement = p.arena
        if p.arena is not None:              # the shapes its per-call Python checks and makes
            for buf in self.import_bufs + self.fresh:
                p.arena.shape_index(buf.shape)
                p.arena.shape_index(_byte_strides(buf))
        prog = NativeProgram(tuple(steps), max(1, p.n_slots),
                             blas.int_bits if blas is not None else 64, tuple(objects),
                             ARRAY_DATA_OFFSET, p.symbols,
                             len(p.arena.buffers) if p.arena is not None else 0)
        self.program, self.step_nodes = prog, step_nodes
        self._blas = blas
        return prog.text(), lambda: render_program(prog).text, program_name(prog)

    def link(self, kernel: Any) -> "Segment":
        """Bind the compiled program (a ``llvm_jit.CompiledKernel``) and the BLAS table."""
        self.kernel = kernel
        self.fn = ENTRY_TYPE(kernel.address)
        blas = self._blas
        self._fns = blas.fns() if blas is not None else (ctypes.c_void_p * 4)()
        self.fns_addr = ctypes.addressof(self._fns)
        return self

    @property
    def run(self) -> Callable[..., Any]:
        """``run(frame, *imports) -> exports``, generated on first use (an ``Executable``
        pastes ``source`` into its own program instead)."""
        run = self.__dict__.get("_run")
        if run is None:
            run = self.__dict__["_run"] = self._make_runner()
        return run

    def _make_runner(self) -> Callable[..., Any]:
        """The per-call Python of this segment as one generated function (what ``source``
        writes, standalone: ``run(frame, *imports) -> exports``)."""
        args = [f"a{i}" for i in range(len(self.imports))]
        outs = [f"o{i}" for i in range(len(self.exports))]
        body, ns = self.source("", args, outs)
        lines = [f"def run(frame{''.join(', ' + a for a in args)}):", "    tbl = frame.table"]
        lines += ["    " + ln for ln in body]
        lines.append(f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"
                     if outs else "    return None")
        exec(pycode.code("\n".join(lines) + "\n", f"<scriptmod segment {self.index}>"), ns)
        return ns["run"]

    def source(self, tag: str, imports: Sequence[str], exports: Sequence[str],
               frame: str = "frame", tbl: str = "tbl",
               profiled: bool = False) -> tuple[list[str], dict[str, Any]]:
        """The per-call Python of this segment, to be pasted into a generated function
        where ``frame`` and ``tbl = frame.table`` are bound: check and bind the imports
        (local names ``imports``), allocate the fresh outputs, call, and bind the exports
        to the local names ``exports``. Names it adds end in ``tag``; returns (lines,
        namespace to merge). ``profiled``: call the steps one by one, each timed
        (``compile_steps`` first)."""
        t = tag
        ptr = "id" if self.program.objects else "ptr"      # see ``NativeProgram.objects``
        ns: dict[str, Any] = {"np": np, "ptr": data_ptr, "convert": _convert, f"fn{t}": self.fn}
        lines: list[str] = []
        shape = functools.partial(self._shape_text, frame)
        for i, (a, v, buf) in enumerate(zip(imports, self.imports, self.import_bufs)):
            dt = NP_DTYPE[buf.dtype]
            ns[f"dt{i}{t}"], ns[f"v{i}{t}"] = dt, v
            sh = shape(f"sh{i}{t}", buf.shape, ns)
            st = shape(f"st{i}{t}", _byte_strides(buf), ns)
            x = f"x{i}{t}"       # a converted copy stays local: ``a`` may be returned as is
            lines.append(f"{x} = {a}")
            lines.append(f"if type({x}) is not np.ndarray or {x}.dtype is not dt{i}{t} or "
                         f"{x}.shape != {sh} or {x}.strides != {st}:")
            lines.append(f"    {x} = convert({x}, dt{i}{t}, {sh}, v{i}{t})")
            lines.append(f"{tbl}[{buf.slot}] = {ptr}({x})")
        fresh = {}
        for j, buf in enumerate(self.fresh):
            name = fresh[id(buf)] = f"f{j}{t}"
            ns[f"fdt{j}{t}"] = NP_DTYPE[buf.dtype]
            fsh = shape(f"fsh{j}{t}", buf.shape, ns)
            symbolic = isinstance(buf.nbytes, Poly)
            big = _may_pool(buf.nbytes) if symbolic else buf.nbytes >= POOL_MIN_BYTES
            if big and symbolic:                    # a pool per shape, when large
                ns[f"take{j}{t}"] = self.sized_take(j)
                lines.append(f"{name} = take{j}{t}({fsh})")
            elif big:                               # reused once nothing else holds it
                ns[f"take{j}{t}"] = self.pool(j).take
                lines.append(f"{name} = take{j}{t}()")
            else:
                lines.append(f"{name} = np.empty({fsh}, fdt{j}{t})")
            lines.append(f"{tbl}[{buf.slot}] = {ptr}({name})")
        if profiled:
            lines += self._profiled_calls(t, frame, ns)
        else:
            lines.append(f"fn{t}({frame}.table_addr)")
        if imports:                               # a converted copy is freed now
            lines.append(f"del {', '.join(f'x{i}{t}' for i in range(len(imports)))}")
        for out, buf in zip(exports, self.export_bufs):
            lines.append(f"{out} = {fresh[id(buf)]}")
        return lines, ns

    def _shape_text(self, frame: str, name: str, shape: tuple, ns: dict[str, Any]) -> str:
        """A shape (or strides) as Python text: the constant ``name`` bound in ``ns``, or,
        with symbolic sizes, its value for the call's sizes, which ``Frame.set_env`` keeps
        in ``frame.shapes`` (``SymbolicArena.shape_index``)."""
        if not any(isinstance(d, Poly) for d in shape):
            ns[name] = shape
            return name
        return f"{frame}.shapes[{self.placement.shape_index(shape)}]"

    def _profiled_calls(self, t: str, frame: str, ns: dict[str, Any]) -> list[str]:
        """Each step's own program on the same table and arena, between clock reads."""
        from ..profiling import clock, native_step_event
        ns["clock"] = clock
        lines = []
        assert self.step_fns is not None, "compile_steps first"
        for j, (fn, node, step) in enumerate(zip(self.step_fns, self.step_nodes,
                                                 self.program.steps)):
            ns[f"sfn{j}{t}"], ns[f"sev{j}{t}"] = fn, native_step_event(node, step)
            lines += ["t_ = clock()", f"sfn{j}{t}({frame}.table_addr)", f"sev{j}{t}(t_)"]
        return lines

    def step_programs(self) -> list[Any]:
        """One ``NativeProgram`` per step, with the segment's table layout (the profiler
        runs them one at a time: the same kernels, timed apart)."""
        from scriptmod.codegen.native import NativeProgram, step_refs
        prog = self.program
        out = []
        for step in prog.steps:
            used = {r.index for r in step_refs(step) if r.space == "arg"}
            out.append(NativeProgram((step,), prog.n_args, prog.blas_int_bits,
                                     tuple(i for i in prog.objects if i in used),
                                     prog.object_data_offset, prog.symbols, prog.n_placed))
        return out

    def pool(self, j: int) -> Any:
        """The ``BufferPool`` of fresh buffer ``j`` (one per segment and buffer, shared by
        the threads that run the segment)."""
        from ..fusion import BufferPool
        pools = self.__dict__.setdefault("_pools", {})
        if j not in pools:
            buf = self.fresh[j]
            pools[j] = BufferPool(buf.shape, NP_DTYPE[buf.dtype])
        return pools[j]

    def sized_take(self, j: int) -> Callable[[tuple], np.ndarray]:
        """``take(shape)`` for fresh buffer ``j`` of symbolic shape: ``np.empty``, or from
        a ``BufferPool`` of that shape from ``POOL_MIN_BYTES`` on (pools of the last
        ``SHAPES_POOLED`` shapes)."""
        from ..fusion import BufferPool
        dt = NP_DTYPE[self.fresh[j].dtype]
        pools: dict[tuple, BufferPool] = {}

        def take(shape: tuple) -> np.ndarray:
            if math.prod(shape) * dt.itemsize < POOL_MIN_BYTES:
                return np.empty(shape, dt)
            pool = pools.get(shape)
            if pool is None:
                if len(pools) >= SHAPES_POOLED:
                    pools.clear()
                pool = pools[shape] = BufferPool(shape, dt)
            return pool.take()
        return take

    def __call__(self, frame: "Frame", state: tuple, *imports: Any) -> Any:
        """Run the segment on ``frame`` (``run`` skips the state check: the caller binds)."""
        if state is not frame.state:
            frame.bind_state(state)
        return self.run(frame, *imports)

    @property
    def llvm_ir(self) -> str:
        """The LLVM IR of the segment's program (rendered on demand)."""
        from scriptmod.codegen.native import render_program
        return render_program(self.program).text

    def __repr__(self) -> str:
        return f"<Segment {self.index}: {len(self.nodes)} node(s), {len(self.program.steps)} " \
               f"step(s)>"


def compile_steps(segments: Sequence[Segment]) -> None:
    """Compile every step of ``segments`` as a program of its own (``Segment.step_fns``),
    all as one LLVM module; once per segment (the profiler's first call)."""
    todo = [s for s in segments if s.step_fns is None]
    if not todo:
        return
    from scriptmod.codegen.native import program_name, render_program
    from ..llvm_jit import compile_units
    progs = [p for s in todo for p in s.step_programs()]
    units = [(p.text(), (lambda p=p: render_program(p).text), program_name(p)) for p in progs]
    kernels = iter(compile_units(units))
    for s in todo:
        s.step_kernels = [next(kernels) for _ in s.program.steps]   # keeps the engines alive
        s.step_fns = [ENTRY_TYPE(k.address) for k in s.step_kernels]


def _may_pool(nbytes: Poly) -> bool:
    """Whether a fresh buffer of symbolic size reaches ``POOL_MIN_BYTES`` at sizes worth
    a check per call (every symbol ``POOL_PROBE``); below, ``np.empty`` without one."""
    return nbytes.evaluate({s: POOL_PROBE for s in nbytes.symbols}) >= POOL_MIN_BYTES


def _byte_strides(buf: Buffer) -> tuple:
    """The C-order strides, in bytes, of a buffer's shape."""
    return tuple(s * buf.dtype.itemsize for s in c_strides(buf.shape))


def _convert(a: Any, dt: np.dtype, shape: tuple, v: Value) -> np.ndarray:
    """An import that is not the exact contiguous array native code was built for: a
    C-contiguous copy when only the layout differs; an error otherwise."""
    if isinstance(a, np.generic):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray) or a.dtype != dt or tuple(a.shape) != tuple(shape):
        # what the step before produced is not what the types promised: our bug, named by
        # the op that made the value (``node_failure`` words it for the user)
        made = f"{op_label(v.node)}{place(v.node)}" if v.node.kind != Prim.PARAM else "an input"
        raise worded(TypeError(f"compiled code expected {article(f'{dt} tensor')} of shape "
                               f"{shape_text(shape)} from {made}, got {describe_value(a)}"),
                     internal=True)
    return np.ascontiguousarray(a.view(np.ndarray) if type(a) is not np.ndarray else a)


class Frame:
    """One thread's arena and pointer table for an Executable's segments; module tensors
    are bound when the ``state`` tuple changes, constants once."""

    def __init__(self, plan: "NativePlan") -> None:
        n = max((s.program.n_args for s in plan.segments), default=1)
        assert all(s.program.n_args == n for s in plan.segments), "one table layout"
        self.n_args = n
        self.table = (ctypes.c_void_p * (n + 3))()     # + the arena, fns and sizes tables
        self.table_addr = ctypes.addressof(self.table)
        self._grow(plan.arena_bytes)
        self.table[n + 1] = plan.segments[0].fns_addr if plan.segments else None
        self.placement = plan.arena
        self.env: tuple[int, ...] | None = None          # the symbol values bound
        self.sizes: np.ndarray | None = None             # their sizes table
        self.shapes: tuple = ()                          # and shapes (``SymbolicArena``)
        self.state: Any = None
        self._state_slots = [(b.slot, b.source[1]) for b in plan.buffers
                             if b.kind == "arg" and isinstance(b.source, tuple)
                             and b.source[0] == "state"]
        for b in plan.buffers:
            if b.kind == "arg" and isinstance(b.source, tuple) and b.source[0] == "const":
                self.table[b.slot] = data_ptr(b.source[1])

    def _grow(self, nbytes: int) -> None:
        """A new arena of ``nbytes`` (64-byte aligned), its base in the table."""
        raw = np.empty(nbytes + ALIGN, np.uint8)
        skip = (-raw.__array_interface__["data"][0]) % ALIGN
        self.arena = raw[skip:skip + nbytes]
        self.arena_addr = raw.__array_interface__["data"][0] + skip
        self._raw = raw
        self.table[self.n_args] = self.arena_addr

    def set_env(self, env: tuple[int, ...]) -> None:
        """Bind a call's symbol values: the sizes table for them (symbols, arena offsets),
        the arena grown when they need more than it has (never shrunk)."""
        sizes, nbytes, self.shapes = self.placement.at(env)
        if nbytes > self.arena.nbytes:
            self._grow(nbytes)
        self.sizes, self.env = sizes, env
        self.table[self.n_args + 2] = sizes.__array_interface__["data"][0]

    def bind_state(self, state: tuple) -> None:
        """Write the module tensors' pointers (the specialization's guards fixed their
        dtypes, shapes and strides)."""
        for slot, i in self._state_slots:
            self.table[slot] = data_ptr(state[i])
        self.state = state


def _may_be_nonzero(count: Any) -> bool:
    """Whether a step over ``count`` elements can have work: a symbolic count that may be 0
    at some sizes keeps its step (its loops run zero times there); only a count known to be
    0 drops it."""
    from scriptmod.codegen.sizes import SizeDependent
    try:
        return bool(count)
    except SizeDependent:
        return True
