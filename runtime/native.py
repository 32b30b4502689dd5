"""Native segments: the straight-line parts of a specialization as machine code.

``plan_blocks`` walks each block of a specialized graph (every shape static) and decides,
node by node, what runs natively:

- a CPU fusion group becomes a ``KernelStep`` (its layout planned from the static strides of
  its inputs), unless it is large enough to be split across threads (then it runs through its
  ``FusedKernel`` and the thread pool);
- ``matmul`` of float32/float64 becomes a ``GemmStep`` (inline loops for small products, the
  CBLAS NumPy itself uses for the rest) when each operand has a unit stride in one of its two
  matrix dims;
- view ops (transpose, permute, reshape of a contiguous tensor, unsqueeze, squeeze, expand,
  narrow, basic indexing) cost nothing: the view is a new offset and strides over the same
  buffer, found by running the reference kernel on a stand-in array of that layout;
- module tensors (``prim::GetAttr`` of a parameter or buffer) are pointers taken from the
  ``state`` tuple the frontend passes each call.

Everything else is a Python step, and splits the native nodes into *segments* joined by
Python; ``SCRIPTMOD_LOG=codegen`` says which node split it and why. Each segment is one
``codegen.native.NativeProgram`` compiled to one function ``f(args, arena, fns)``; all the
segments of a specialization, and the kernels of its thread-split groups at their planned
layout, compile as one LLVM module (``llvm_jit.compile_together``): one optimization and
code generation run when cold, one object to load when warm.

Memory: every intermediate that does not escape the call lives at a fixed offset of one arena
(``runtime.memory_plan``: first fit over live ranges, checked by ``check_plan``); the arena and the
pointer table are per thread (``Frame``). A value that reaches an output, or a Python node
that could keep or return it, is *fresh*: allocated with ``np.empty`` on every call, so the
caller's results never alias memory the next call writes.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.record import Record
from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from scriptmod.ir.passes.effects import is_view
from scriptmod.ir.types import TensorType
from . import pycode, threads
from .arrays import NP_DTYPE
from .errors import article, describe_value, op_label, place, shape_text, worded
from .kernels import KERNELS
from .memory_plan import ALIGN, Buffer, PlanError, assign_offsets, check_plan  # noqa: F401

TOPIC = "codegen"
# A fresh buffer of at least this many bytes comes from a ``fusion.BufferPool`` (reused once
# nothing outside holds it): NumPy's allocator gives big arrays new pages each call, and the
# page faults of a 32 MB score matrix cost 5 ms; below it ``np.empty`` is cheaper than a call.
POOL_MIN_BYTES = 1 << 20
_i64_at = ctypes.c_int64.from_address
ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


# ---- where values live (``Buffer``: runtime/memory_plan.py) ------------------------------------------

class Layout(Record):
    """A tensor value over a buffer: byte offset, shape, element strides."""

    buf: Buffer
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def contiguous(self) -> bool:
        return self.strides == c_strides(self.shape) or _numel(self.shape) <= 1


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _static(v: Value) -> TensorType | None:
    """``v``'s type if it is a CPU tensor of concrete shape and a known dtype."""
    t = v.type
    if isinstance(t, TensorType) and t.device == "cpu" and t.dtype is not None \
            and t.is_concrete and t.dtype in NP_DTYPE:
        return t
    return None


# ---- planning --------------------------------------------------------------------------------------

class NativePlan(Record):
    """What ``Executable`` needs: the segments, the nodes they replace, the module tensors
    Python steps read from ``state``, the nodes nothing needs at run time."""

    segments: list["Segment"]
    native_nodes: frozenset[Node]
    state_reads: dict[Node, int]
    skipped: frozenset[Node]
    arena_bytes: int
    buffers: Sequence[Buffer] = ()


def plan_blocks(graph: Graph, state_index: Callable[[Node], int | None] | None,
                state: tuple = (), name: str = "graph") -> dict[Block, NativePlan]:
    """Plan the native segments of every block of ``graph`` (the top block, then the blocks
    of ``prim::If`` and ``prim::Loop`` at any depth, in program order) and compile them all
    as one LLVM module. Each block is planned on its own: values it reads from an enclosing
    block come in like inputs (from Python, per call), and what leaves it (its outputs, a
    loop's carried values, what a nested block reads) is a fresh array, never the arena, so
    a value kept across iterations is never overwritten by the next one. Blocks with
    nothing native have no plan; ``{}`` when native code is unavailable here."""
    try:
        from scriptmod.codegen.native import NativeProgram  # noqa: F401
    except ImportError as e:                                  # pragma: no cover
        irlog.log(TOPIC, f"{name}: no native code ({e})")
        return {}
    planned = []
    for block in _blocks(graph.block):
        p = _Planner(block, state_index, state, name)
        segments = p.analyze()
        if segments:
            planned.append((block, p, segments))
    if not planned:
        return {}
    from .llvm_jit import compile_together, spec_unit
    units = [s.prepare(p) for _, p, segs in planned for s in segs]
    fused = [spec_unit(spec) for _, p, _ in planned for spec in p.fused_specs]
    kernels = iter(compile_together(units + fused))
    return {block: p.finish([s.link(next(kernels)) for s in segs])
            for block, p, segs in planned}


def _blocks(block: Block) -> list[Block]:
    """``block`` and every block nested in its nodes, in program order."""
    out = [block]
    for n in block:
        for b in n.blocks:
            out.extend(_blocks(b))
    return out


def _reads(node: Node) -> list[Value]:
    """What ``node`` reads: its inputs and, for a node with blocks, every value read inside
    them (nested nodes' inputs, blocks' outputs)."""
    if not node.blocks:
        return list(node.inputs)
    out: list[Value] = []
    for n in node.walk():
        out.extend(n.inputs)
        for b in n.blocks:
            out.extend(b.outputs)
    return out


class _Planner:
    """The native plan of one block (``plan_blocks``)."""

    def __init__(self, block: Block, state_index: Callable[[Node], int | None] | None,
                 state: tuple, name: str) -> None:
        self.block, self.state_index, self.state, self.name = block, state_index, state, name
        self.nodes = list(block)
        self.outputs = list(block.outputs)
        self.pos = {n: i for i, n in enumerate(self.nodes)}
        self.lay: dict[Value, Layout] = {}
        self.steps: dict[Node, Any] = {}             # compute node -> step builder
        self.views: set[Node] = set()                 # layout-only native nodes
        self.state_nodes: dict[Node, int] = {}
        self.python: set[Node] = set()
        self.why: dict[Node, str] = {}
        self.buffers: list[Buffer] = []
        self.fused_specs: list[Any] = []          # kernels of groups run by a FusedKernel
        self.own_gemms: set[Node] = set()         # matmuls left to ``runtime.gemm``

    # -- 1. what can be native --------------------------------------------------------------------
    def analyze(self) -> list["Segment"] | None:
        """Classify, find what Python needs and what escapes, cut segments and place the
        arena; None when nothing in the block runs natively."""
        for v in self.block.params:
            t = _static(v)
            if t is not None:
                self._arg(v, ("input", v), t)
        defined = set(self.block.params)
        for node in self.nodes:
            for v in node.inputs:                   # read from an enclosing block
                if v not in defined and v not in self.lay and self._outer(v) is None:
                    t = _static(v)
                    if t is not None:
                        self._arg(v, ("input", v), t)
            why = self._classify(node)
            if why is not None:
                self.python.add(node)
                self.why[node] = why
                for v in node.outputs:
                    t = _static(v)
                    if t is not None and v not in self.lay:
                        self._arg(v, ("python", v), t)
            defined.update(node.outputs)
        if not self.steps:
            return None
        self._python_needs()
        self._escapes()
        segments = self._segments()
        arena = [b for b in self.buffers if b.kind == "arena"]
        self.arena_bytes = assign_offsets(arena)
        check_plan(arena)
        self._log(segments)
        return segments

    def finish(self, segments: list["Segment"]) -> NativePlan:
        """The plan, once ``segments`` are compiled and linked."""
        return NativePlan(segments, frozenset(self.steps) | frozenset(self.views - self.python),
                          {n: i for n, i in self.state_nodes.items() if n in self.python_reads},
                          frozenset(self.skip), self.arena_bytes, self.buffers)

    def _outer(self, v: Value) -> Layout | None:
        """The layout of a value an enclosing block makes, when it is a module tensor, a
        graph input or a view of one (a weight's transpose hoisted out of a loop): read from
        ``state`` with its strides, or the input imported as it is, and the view laid over
        it, instead of the view imported from Python (and copied to a contiguous array) on
        every iteration. None for anything else."""
        lay = self.lay.get(v)
        if lay is not None:
            return lay
        n, t = v.node, _static(v)
        if t is None or n.owning_block is self.block:
            return None
        if n.kind == Prim.GET_ATTR:
            arr = self._state_array(n)
            if isinstance(arr, str):
                return None
            self._arg(v, ("state", arr[0]), t,
                      tuple(s // arr[1].itemsize for s in arr[1].strides))
            return self.lay[v]
        if v in self.block.graph.inputs:               # a Python local of every call
            self._arg(v, ("input", v), t)
            return self.lay[v]
        if not (n.is_op and _is_view(n)) or not n.inputs:
            return None
        src = self._outer(n.inputs[0])
        lay = _view_layout(n, src) if src is not None else None
        if isinstance(lay, Layout):
            self.lay[v] = lay
            return lay
        return None

    def _state_array(self, node: Node) -> tuple[int, np.ndarray] | str:
        """``(index, array)`` of a ``prim::GetAttr`` of a module tensor native code can
        read; else why not."""
        t = _static(node.output)
        i = self.state_index(node) if self.state_index is not None and t else None
        if i is None or i >= len(self.state):
            return "a module attribute that is not a parameter or buffer tensor"
        arr = self.state[i]
        if type(arr) is not np.ndarray or arr.strides is None or \
                any(s % arr.itemsize for s in arr.strides):
            return "a module tensor that is not an aligned NumPy array"
        return i, arr

    def _arg(self, v: Value, source: Any, t: TensorType, strides: tuple | None = None) -> None:
        shape = tuple(t.shape)                                      # type: ignore[arg-type]
        buf = Buffer("arg", _numel(shape) * t.dtype.itemsize, t.dtype, shape, source)
        self.buffers.append(buf)
        self.lay[v] = Layout(buf, 0, shape, strides if strides is not None else c_strides(shape))

    def _classify(self, node: Node) -> str | None:
        """None when ``node`` runs natively (or needs no code); else why it cannot."""
        kind = node.kind
        if kind == Prim.GET_ATTR:
            found = self._state_array(node)
            if isinstance(found, str):
                return found
            i, arr = found
            self.state_nodes[node] = i
            self._arg(node.output, ("state", i), _static(node.output),  # type: ignore[arg-type]
                      tuple(s // arr.itemsize for s in arr.strides))
            return None
        if kind == Prim.CONSTANT:
            value = node.attrs.get("value")
            t = _static(node.output)
            if t is None or type(value) is not np.ndarray:
                return "a constant that is not a CPU tensor"
            if any(s % value.itemsize for s in value.strides):
                return "an unaligned constant"
            self._arg(node.output, ("const", value), t,
                      tuple(s // value.itemsize for s in value.strides))
            return "constant"        # Python keeps it too (cheap); natively it is an arg
        if kind == Prim.FUSION_GROUP:
            return self._group(node)
        if node.is_op:
            if node.op_name == "matmul":
                return self._matmul(node)
            if _is_view(node):
                return self._view(node)
            return f"{node.op_name} has no native lowering yet"
        return f"{kind} runs in Python"

    def _inputs(self, node: Node) -> list[Layout] | None:
        out = []
        for v in node.inputs:
            lay = self.lay.get(v)
            if lay is None:
                return None
            out.append(lay)
        return out

    def _new(self, v: Value, node: Node) -> Layout:
        t = _static(v)
        assert t is not None
        shape = tuple(t.shape)                                      # type: ignore[arg-type]
        buf = Buffer("arena", _numel(shape) * t.dtype.itemsize, t.dtype, shape, v)
        buf.start = buf.end = self.pos[node]
        self.buffers.append(buf)
        lay = self.lay[v] = Layout(buf, 0, shape, c_strides(shape))
        return lay

    def _group(self, node: Node) -> str | None:
        outs = [_static(v) for v in node.outputs]
        if any(t is None for t in outs):
            return "a fusion group with an output of unknown shape or not on the CPU"
        ins = self._inputs(node)
        if ins is None:
            return "a fusion group reading a value native code does not hold"
        out_shape = tuple(outs[0].shape)                            # type: ignore[union-attr]
        from .gemm import epilogue_source
        source = epilogue_source(node)
        if source is not None and source[0] in self.own_gemms:
            return "a fusion group run as the epilogue of our GEMM (runtime.gemm)"
        if _has_row_ops(node):
            return self._row_group(node, ins, out_shape)
        if threads.get_num_threads() > 1 and _numel(out_shape) >= threads.MIN_SPLIT:
            try:                                   # its kernel compiles with the segments
                self.fused_specs.append(_group_spec(node, ins, out_shape)[0])
            except (NotImplementedError, ValueError):
                pass                               # (a head start only: FusedKernel decides)
            return f"a fusion group of {_numel(out_shape)} elements: split across threads"
        try:
            spec, meta = _group_spec(node, ins, out_shape)
        except NotImplementedError as e:
            return f"fusion group cannot be lowered: {e}"
        for v in node.outputs:
            self._new(v, node)
        self.steps[node] = ("kernel", spec, meta, _numel(out_shape))
        return None

    def _row_group(self, node: Node, ins: list[Layout], out_shape: tuple) -> str | None:
        """A fusion group of row ops (``ir.passes.fuse_rows``): one row kernel over all rows,
        on this thread; from ``MIN_SPLIT`` elements, its ``FusedKernel`` splits the rows over
        the thread pool (outside the program, as a large elementwise group)."""
        from scriptmod.codegen.rows import geometry, lower_row_group, plan_row_layout
        try:
            spec = lower_row_group(node.attrs["subgraph"])
            full = geometry(node.attrs["subgraph"])[0]
            _check_dtypes(ins, spec)
            spec, meta = plan_row_layout(spec, [l.shape for l in ins], [l.strides for l in ins],
                                         full)
            if threads.get_num_threads() > 1 and _numel(full) >= threads.MIN_SPLIT:
                self.fused_specs.append(spec)
                return f"a row group of {_numel(full)} elements: split across threads"
        except NotImplementedError as e:
            return f"row group cannot be lowered: {e}"
        for v in node.outputs:
            self._new(v, node)
        self.steps[node] = ("kernel", spec, meta, _numel(meta[:spec.rank - 1]))
        return None

    def _matmul(self, node: Node) -> str | None:
        from .blas import cblas
        ins = self._inputs(node)
        t = _static(node.output)
        if ins is None or t is None:
            return "matmul of a value native code does not hold"
        a, b = ins
        if t.dtype not in (D.float32, D.float64) or a.buf.dtype is not t.dtype \
                or b.buf.dtype is not t.dtype or node.attrs:
            return f"matmul of {a.buf.dtype.name} and {b.buf.dtype.name} (native: float32/float64)"
        gemm = _gemm_shape(a, b)
        if gemm is None:
            return "matmul operands without a unit stride in a matrix dim (no BLAS layout)"
        m, n, k = gemm["m"], gemm["n"], gemm["k"]
        if k == 0 and m * n:
            return "matmul with an empty contraction"
        if t.dtype is D.float32 and gemm["batch"] == 1 and not gemm["trans_a"]:
            from . import gemm as own
            if own.chosen(m, k, n):
                self.own_gemms.add(node)
                return (f"a {m}x{k} @ {k}x{n} float32 GEMM: our GEMM on the thread pool "
                        f"(runtime.gemm)")
        if m * n * k > _inline_max():
            blas = cblas()
            if blas is None:
                from .blas import why_not
                return f"matmul needs BLAS: {why_not()}"
            from scriptmod.codegen.native import blas_overflow
            too_big = blas_overflow(gemm, blas.int_bits)
            if too_big is not None:
                return f"matmul with {too_big}: more than a {blas.int_bits}-bit BLAS int holds"
        self._new(node.output, node)
        self.steps[node] = ("gemm", gemm, t.dtype)
        return None

    def _view(self, node: Node) -> str | None:
        src = self.lay.get(node.inputs[0])
        if src is None or _static(node.output) is None:
            return f"{node.op_name} of a value native code does not hold"
        lay = _view_layout(node, src)
        if isinstance(lay, str):
            if node.op_name == "reshape" and "computed at run time" not in lay:
                return self._copy(node, src)
            return lay
        self.lay[node.output] = lay
        self.views.add(node)
        return None

    def _copy(self, node: Node, src: Layout) -> str | None:
        """A reshape that is not a view of ``src`` (attention's heads merged back after a
        permute): a copy kernel into a C-ordered buffer, which the result then is."""
        from scriptmod.codegen.kernel import UNKNOWN, InputSpec, KernelSpec
        from scriptmod.codegen.lower import plan_layout
        dt = src.buf.dtype
        if dt is not node.output.type.dtype:                         # type: ignore[union-attr]
            return f"{node.op_name} changes the dtype"
        spec = KernelSpec([InputSpec(dt, UNKNOWN)], [], [0], [dt], rank=max(1, len(src.shape)))
        spec, meta = plan_layout(spec, [src.shape], [src.strides], src.shape)
        self._new(node.output, node)
        self.steps[node] = ("kernel", spec, meta, _numel(src.shape))
        return None

    # -- 2. what Python needs --------------------------------------------------------------------
    def _python_needs(self) -> None:
        """Values Python reads (its nodes' inputs, the outputs) come from Python, from the
        segment that makes them (exports), or, for a native view, from the same view run in
        Python too; module tensors Python reads come from ``state``."""
        producer = {v: n for n in self.nodes for v in n.outputs}
        need = [v for n in self.python for v in _reads(n)] + self.outputs
        self.exports: set[Value] = set()
        self.python_reads: set[Node] = set()
        seen: set[Value] = set()
        while need:
            v = need.pop()
            if v in seen:
                continue
            seen.add(v)
            n = producer.get(v)
            if n is None or n in self.python and n not in self.views:
                continue                                  # an input, or Python makes it
            if n in self.state_nodes:
                self.python_reads.add(n)
            elif n in self.views:
                self.python.add(n)                        # recompute the view in Python
                need.extend(n.inputs)
            elif n in self.steps:
                self.exports.add(v)
        # Python nodes whose results nothing in Python uses (module GetAttrs feeding only
        # native reads) are skipped
        used: set[Value] = set(self.outputs)
        self.skip: set[Node] = set()
        for n in reversed(self.nodes):
            if n in self.steps or (n in self.views and n not in self.python):
                used.update(n.inputs)                 # native code reads them
                continue
            if n in self.state_nodes and n not in self.python_reads:
                self.skip.add(n)                      # native code reads it from state
                continue
            effect = n.kind not in (Prim.GET_ATTR, Prim.CONSTANT) and not (
                n.is_op and not S.REGISTRY[n.op_name].has(S.IMPURE))
            if n in self.python and (effect or any(v in used for v in n.outputs)) \
                    or n in self.python_reads:
                if n not in self.python_reads:
                    used.update(_reads(n))
                continue
            self.skip.add(n)
        self.python -= self.skip
        self.python -= self.python_reads
        # only what a remaining Python node or an output reads is handed back
        read = set(self.outputs) | {v for n in self.python for v in _reads(n)}
        self.exports &= read

    # -- 3. which buffers escape -------------------------------------------------------------------
    def _escapes(self) -> None:
        """A buffer any output, or any value a Python node reads, may alias is fresh. Python
        nodes are taken to alias every tensor input to every output (``contiguous`` may
        return its input, a hook may keep it)."""
        parent: dict[Value, Value] = {}

        def find(v: Value) -> Value:
            while parent.get(v, v) is not v:
                v = parent[v]
            return v

        def union(a: Value, b: Value) -> None:
            ra, rb = find(a), find(b)
            if ra is not rb:
                parent[ra] = rb
        for n in self.nodes:
            if n in self.python or n in self.views:
                for o in n.outputs:
                    for i in _reads(n):
                        union(o, i)
        roots = {find(v) for v in self.outputs}
        roots |= {find(v) for n in self.python for v in _reads(n)}
        for v, lay in self.lay.items():
            if find(v) in roots and lay.buf.kind == "arena":
                lay.buf.kind = "fresh"
        tabled = [b for b in self.buffers if b.kind in ("arg", "fresh")]
        for slot, b in enumerate(tabled):
            b.slot = slot
        self.n_slots = len(tabled)
        # live ranges of arena buffers: from the node that makes them to their last reader
        for v, lay in self.lay.items():
            b = lay.buf
            if b.kind != "arena":
                continue
            for use in v.uses:
                k = self.pos.get(use.user)
                if k is not None:
                    b.end = max(b.end, k)

    # -- 4. segments -------------------------------------------------------------------------------
    def _segments(self) -> list["Segment"]:
        segs: list[Segment] = []
        cur: Segment | None = None
        for n in self.nodes:
            if n in self.steps:
                if cur is None:
                    cur = Segment(len(segs))
                    segs.append(cur)
                cur.nodes.append(n)
            elif n in self.python:
                if cur is not None and n.kind != Prim.CONSTANT:
                    irlog.log(TOPIC, f"{self.name}: native segment {cur.index} ends at "
                                     f"{n.kind}{' in ' + n.scope if n.scope else ''}"
                                     f"{' (' + n.source + ')' if n.source else ''}: "
                                     f"{self.why.get(n, 'a Python view of a native value')}")
                    cur = None
        return segs

    def _log(self, segs: list["Segment"]) -> None:
        if irlog.enabled(TOPIC):
            n = sum(len(s.nodes) for s in segs)
            irlog.log(TOPIC, f"{self.name}: {n} node(s) native in {len(segs)} segment(s), "
                             f"{len(self.python)} in Python")

    def ref(self, v: Value) -> Any:
        from scriptmod.codegen.native import Ref
        lay = self.lay[v]
        if lay.buf.kind == "arena":
            return Ref("arena", lay.buf.offset, lay.offset)
        return Ref("arg", lay.buf.slot, lay.offset)


def _is_view(node: Node) -> bool:
    """Ops whose result is a view of their first input (basic indexing too: its probe
    decides whether this layout gives a view; ``copy_`` returns its written input, which
    native code holds already)."""
    if node.op_name == "index":
        return all(e[0] != "tensor" for e in node.attrs["spec"])
    return is_view(node) and node.op_name != "copy_"


def _view_layout(node: Node, src: Layout) -> Layout | str:
    """The layout of view op ``node``'s (static) result over ``src``, or why it has none:
    its other operands must be constants, and the probe must give a view of the declared
    shape."""
    operands = []
    for v in node.inputs[1:]:
        if v.node.kind != Prim.CONSTANT:
            return f"{node.op_name} with a size computed at run time"
        operands.append(v.node.attrs.get("value"))
    if node.op_name == "reshape" and not src.contiguous:
        return "reshape of a non-contiguous tensor (a copy)"
    out = _probe_view(node, src, operands)
    if out is None or out[0] != tuple(node.output.type.shape):       # type: ignore[union-attr]
        return f"{node.op_name} is not a view of this layout"
    shape, strides, offset = out
    return Layout(src.buf, src.offset + offset, shape, strides)


def _inline_max() -> int:
    from scriptmod.codegen.native import INLINE_GEMM_MAX
    return INLINE_GEMM_MAX


# ---- lowering helpers ----------------------------------------------------------------------------

def _has_row_ops(node: Node) -> bool:
    from scriptmod.codegen.rows import has_row_ops
    return has_row_ops(node.attrs["subgraph"])


def _check_dtypes(ins: list[Layout], spec: Any) -> None:
    """``NotImplementedError`` unless each input layout holds the dtype the spec reads."""
    for lay, s in zip(ins, spec.inputs):
        if lay.buf.dtype is not s.dtype:
            raise NotImplementedError(f"input of dtype {lay.buf.dtype.name}, expected "
                                      f"{s.dtype.name}")


def _group_spec(node: Node, ins: list[Layout], out_shape: tuple[int, ...]) -> tuple[Any, tuple]:
    """The fusion group's ``KernelSpec`` for these static input layouts, and its meta."""
    from scriptmod.codegen.lower import lower_group, plan_layout
    spec = lower_group(node.attrs["subgraph"])
    _check_dtypes(ins, spec)
    return plan_layout(spec, [l.shape for l in ins], [l.strides for l in ins], out_shape)


def _matrix(shape: tuple, strides: tuple) -> tuple[bool, int] | None:
    """(transposed, leading dim) of a (rows, cols) matrix with these element strides, in
    BLAS terms; None without a unit stride."""
    (r, c), (sr, sc) = shape, strides
    if (c == 1 or sc == 1) and (r == 1 or sr >= max(1, c)):      # row-major
        return False, sr if r > 1 else max(1, c)
    if (r == 1 or sr == 1) and (c == 1 or sc >= max(1, r)):      # column-major: A^T stored
        return True, sc if c > 1 else max(1, r)
    return None


def _collapse(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int] | None:
    """Dims that walk memory as one: (count, stride), ignoring size-1 dims; else None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 1, 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return _numel(shape), dims[-1][1]


def _rows_and_batch(shape: Sequence[int], a_strides: Sequence[int], n: int,
                    k: int) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """For ``a @ b`` with a 2D ``b``: every row of ``a`` (dims ``shape``, element strides
    ``a_strides``, unit stride along ``k``) maps to a row of the contiguous result (``n``
    per row), so the dims may be split into the GEMM's rows and its batch any way that
    leaves each a single stride in ``a`` and in the result. The split with the most rows
    (fewest, largest GEMMs), as ``((rows, lda, ldc), (batch, stride_a, stride_c))``; None
    when there is none.

    A ``(T, B, C)`` view of a contiguous ``(B, T, C)`` tensor (attention's input
    projections) is ``B`` GEMMs of ``T`` rows, not ``T`` GEMMs of ``B`` rows:

    >>> _rows_and_batch((128, 8), (256, 32768), 256, 256)
    ((128, 256, 2048), (8, 32768, 256))
    """
    if 0 in shape:
        return (0, max(1, k), max(1, n)), (1, 0, 0)
    out_strides = [n * _numel(shape[i + 1:]) for i in range(len(shape))]
    runs: list[tuple[int, int, int]] = []     # maximal runs of dims that walk both as one
    for d, sa, sc in zip(shape, a_strides, out_strides):
        if d == 1:
            continue
        if runs and runs[-1][1] == sa * d and runs[-1][2] == sc * d:
            runs[-1] = (runs[-1][0] * d, sa, sc)
        else:
            runs.append((d, sa, sc))
    if not runs:
        return (1, max(1, k), max(1, n)), (1, 0, 0)
    if len(runs) > 2:      # the result's strides never join two runs around a third
        return None
    split = [(r, runs[1 - i] if len(runs) == 2 else (1, 0, 0)) for i, r in enumerate(runs)
             if r[0] == 1 or r[1] >= max(1, k)]                 # BLAS wants lda >= k
    if not split:
        return None
    (rows, lda, ldc), batch = max(split, key=lambda rb: rb[0][0])
    return (rows, lda if rows > 1 else max(1, k), ldc if rows > 1 else max(1, n)), batch


def _gemm_shape(a: Layout, b: Layout) -> dict | None:
    """``GemmStep`` fields (without refs) for ``a @ b`` into a contiguous result."""
    ash, ast = a.shape, a.strides
    bsh, bst = b.shape, b.strides
    if len(ash) == 1:
        ash, ast = (1,) + ash, (0,) + ast
    if len(bsh) == 1:
        bsh, bst = bsh + (1,), bst + (0,)
    m, k = ash[-2:]
    k2, n = bsh[-2:]
    if k != k2:
        return None
    abatch, bbatch = ash[:-2], bsh[:-2]
    ma = _matrix((m, k), ast[-2:])
    mb = _matrix((k, n), bst[-2:])
    if ma is None or mb is None:
        return None
    out = {"m": m, "n": n, "k": k, "trans_a": ma[0], "lda": ma[1], "trans_b": mb[0],
           "ldb": mb[1], "ldc": max(1, n), "batch": 1, "stride_a": 0, "stride_b": 0,
           "stride_c": 0, "a_off": 0, "b_off": 0}
    if not bbatch:
        if not abatch:
            return out
        if not ma[0] and (ast[-1] == 1 or k == 1):
            split = _rows_and_batch(abatch + (m,), ast[:-2] + (ast[-2],), n, k)
            if split is not None:
                (rows, lda, ldc), (nb, sa, sc) = split
                out.update(m=rows, lda=lda, ldc=ldc, batch=nb, stride_a=sa, stride_c=sc)
                return out
        batch = _collapse(abatch, ast[:-2])
        if batch is None:
            return None
        out.update(batch=batch[0], stride_a=batch[1], stride_c=m * n)
        return out
    nb = _numel(bbatch)
    full = tuple(np.broadcast_shapes(abatch, bbatch))
    if _numel(full) != nb or len(bbatch) != len(full):
        return None                                   # a broadcast ``b``: not yet
    bb = _collapse(bbatch, bst[:-2])
    if bb is None:
        return None
    if abatch and _numel(abatch) != 1:
        if tuple(abatch) != tuple(bbatch[-len(abatch):]) or len(abatch) != len(bbatch):
            return None
        ab = _collapse(abatch, ast[:-2])
        if ab is None:
            return None
        sa = ab[1]
    else:
        sa = 0
    out.update(batch=nb, stride_a=sa, stride_b=bb[1], stride_c=m * n)
    return out


def _probe_view(node: Node, src: Layout, operands: list) -> tuple | None:
    """(shape, element strides, byte offset) of ``node``'s result over ``src``'s layout,
    by running its reference kernel on a stand-in array that has that layout (view kernels
    never read data; reshape is only probed on a contiguous input, where it is a view)."""
    dt = NP_DTYPE[src.buf.dtype]
    base = np.zeros(1, dt)
    fake = np.lib.stride_tricks.as_strided(base, src.shape,
                                           [s * dt.itemsize for s in src.strides])
    try:
        out = KERNELS[node.op_name](np, fake, *operands, **node.attrs)
    except Exception:
        return None
    if not isinstance(out, np.ndarray) or any(s % dt.itemsize for s in out.strides):
        return None
    if out.base is None:                      # the kernel copied: not a view
        return None
    offset = out.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return tuple(out.shape), tuple(s // dt.itemsize for s in out.strides), offset


# ---- running ---------------------------------------------------------------------------------------

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

    def prepare(self, p: _Planner) -> tuple[str, Callable[[], str], str]:
        """Build the segment's ``NativeProgram`` from the plan; returns its compile unit
        ``(key_text, render, name)`` (``llvm_jit.compile_together``)."""
        from scriptmod.codegen.native import GemmStep, KernelStep, NativeProgram, \
            program_name, render_program, step_refs as _step_refs
        from .blas import cblas
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
                if count:
                    steps.append(KernelStep(spec, tuple(p.ref(v) for v in n.inputs
                                                        if v in p.lay),
                                            tuple(p.ref(v) for v in n.outputs), count, meta))
                    step_nodes.append(n)
            else:
                g, dt = info
                a, b = n.inputs
                fields = {k: v for k, v in g.items() if k not in ("a_off", "b_off")}
                if g["m"] * g["n"]:
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
        prog = NativeProgram(tuple(steps), max(1, p.n_slots),
                             blas.int_bits if blas is not None else 64, tuple(objects),
                             ARRAY_DATA_OFFSET)
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
        for i, (a, v, buf) in enumerate(zip(imports, self.imports, self.import_bufs)):
            dt = NP_DTYPE[buf.dtype]
            ns[f"dt{i}{t}"], ns[f"sh{i}{t}"] = dt, buf.shape
            ns[f"st{i}{t}"] = tuple(s * dt.itemsize for s in c_strides(buf.shape))
            ns[f"v{i}{t}"] = v
            x = f"x{i}{t}"       # a converted copy stays local: ``a`` may be returned as is
            lines.append(f"{x} = {a}")
            lines.append(f"if type({x}) is not np.ndarray or {x}.dtype is not dt{i}{t} or "
                         f"{x}.shape != sh{i}{t} or {x}.strides != st{i}{t}:")
            lines.append(f"    {x} = convert({x}, dt{i}{t}, sh{i}{t}, v{i}{t})")
            lines.append(f"{tbl}[{buf.slot}] = {ptr}({x})")
        fresh = {}
        for j, buf in enumerate(self.fresh):
            name = fresh[id(buf)] = f"f{j}{t}"
            ns[f"fdt{j}{t}"], ns[f"fsh{j}{t}"] = NP_DTYPE[buf.dtype], buf.shape
            if buf.nbytes >= POOL_MIN_BYTES:      # reused once nothing else holds it
                ns[f"take{j}{t}"] = self.pool(j).take
                lines.append(f"{name} = take{j}{t}()")
            else:
                lines.append(f"{name} = np.empty(fsh{j}{t}, fdt{j}{t})")
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

    def _profiled_calls(self, t: str, frame: str, ns: dict[str, Any]) -> list[str]:
        """Each step's own program on the same table and arena, between clock reads."""
        from .profiling import clock, native_step_event
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
                                     prog.object_data_offset))
        return out

    def pool(self, j: int) -> Any:
        """The ``BufferPool`` of fresh buffer ``j`` (one per segment and buffer, shared by
        the threads that run the segment)."""
        from .fusion import BufferPool
        pools = self.__dict__.setdefault("_pools", {})
        if j not in pools:
            buf = self.fresh[j]
            pools[j] = BufferPool(buf.shape, NP_DTYPE[buf.dtype])
        return pools[j]

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
    from .llvm_jit import compile_together
    progs = [p for s in todo for p in s.step_programs()]
    units = [(p.text(), (lambda p=p: render_program(p).text), program_name(p)) for p in progs]
    kernels = iter(compile_together(units))
    for s in todo:
        s.step_kernels = [next(kernels) for _ in s.program.steps]   # keeps the engines alive
        s.step_fns = [ENTRY_TYPE(k.address) for k in s.step_kernels]


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

    def __init__(self, plan: NativePlan) -> None:
        n = max((s.program.n_args for s in plan.segments), default=1)
        assert all(s.program.n_args == n for s in plan.segments), "one table layout"
        self.table = (ctypes.c_void_p * (n + 2))()        # + the arena and the fns table
        self.table_addr = ctypes.addressof(self.table)
        raw = np.empty(plan.arena_bytes + ALIGN, np.uint8)
        skip = (-raw.__array_interface__["data"][0]) % ALIGN
        self.arena = raw[skip:skip + plan.arena_bytes]
        self.arena_addr = raw.__array_interface__["data"][0] + skip
        self._raw = raw
        self.table[n] = self.arena_addr
        self.table[n + 1] = plan.segments[0].fns_addr if plan.segments else None
        self.state: Any = None
        self._state_slots = [(b.slot, b.source[1]) for b in plan.buffers
                             if b.kind == "arg" and isinstance(b.source, tuple)
                             and b.source[0] == "state"]
        for b in plan.buffers:
            if b.kind == "arg" and isinstance(b.source, tuple) and b.source[0] == "const":
                self.table[b.slot] = data_ptr(b.source[1])

    def bind_state(self, state: tuple) -> None:
        """Write the module tensors' pointers (the specialization's guards fixed their
        dtypes, shapes and strides)."""
        for slot, i in self._state_slots:
            self.table[slot] = data_ptr(state[i])
        self.state = state
