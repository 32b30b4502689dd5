"""Planning native segments: which nodes of a block run as machine code, and why not.

``plan_blocks`` walks each block of a specialized graph (every shape static) and decides,
node by node, what runs natively:

- a CPU fusion group becomes a ``KernelStep`` (its layout planned from the static strides of
  its inputs), unless it is large enough to be split across threads (then it runs through its
  ``FusedKernel`` and the thread pool);
- ``matmul`` of float32/float64 becomes a ``GemmStep`` (inline loops for small products, the
  CBLAS NumPy itself uses for the rest) when each operand has a unit stride in one of its two
  matrix dims;
- view ops cost nothing: the view is a new offset and strides over the same buffer
  (``runtime.native.views``);
- module tensors (``prim::GetAttr`` of a parameter or buffer) are pointers taken from the
  ``state`` tuple the frontend passes each call.

Everything else is a Python step, and splits the native nodes into *segments* joined by
Python; ``SCRIPTMOD_LOG=codegen`` says which node split it and why, and ``NativePlan.why``
keeps the reason of every node. Each segment (``runtime.native.segment``) is one
``codegen.native.NativeProgram`` compiled to one function ``f(args, arena, fns)``; all the
segments of a specialization, and the kernels of its thread-split groups at their planned
layout, compile as one LLVM module: one optimization and code generation run when cold, one
object to load when warm.

Symbolic specializations (dims like ``B`` or ``16*B`` in their types) are planned the same
way with sizes as ``codegen.sizes.Poly``: the layout helpers written for concrete sizes run
through ``lift`` (at several sizes, each integer fitted to a polynomial, the structure
checked to be the same), the segments compile once and compute their sizes from the symbol
values each call binds from the graph's inputs (``NativePlan.binds``), and the arena is
placed per set of symbol values (``memory_plan.SymbolicArena``). A choice that depends on
the sizes and cannot be made per call (a thread split, our GEMM on the thread pool) is made
for ``SIZE_HINT``; one that cannot be made at all keeps its node in Python.

Memory: every intermediate that does not escape the call lives at a fixed offset of one arena
(``runtime.memory_plan``: first fit over live ranges, checked by ``check_plan``); the arena and
the pointer table are per thread (``Frame``). A value that reaches an output, or a Python node
that could keep or return it, is *fresh*: allocated with ``np.empty`` on every call, so the
caller's results never alias memory the next call writes.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from scriptmod.codegen.record import Record
from scriptmod.codegen.sizes import Poly, SizeDependent, dim, lift, symbols_of
from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from .. import threads
from ..memory_plan import Buffer, SymbolicArena, assign_offsets, check_plan
from ..targets import target_type
from .segment import Segment
from .views import (Layout, c_strides, gemm_shape, inline_max, is_view_op, numel, sizes,
                    static_type, view_layout)

TOPIC = "codegen"
SIZE_HINT = 8        # the symbol value for size choices made once for every size


class NativePlan(Record):
    """What ``Executable`` needs: the segments, the nodes they replace, the module tensors
    Python steps read from ``state``, the nodes nothing needs at run time; and ``why``, per
    node of the block, what it became natively ("segment 0: matmul (gemm 64x32x32)") or why
    it runs in Python (the planner's reason), for ``explain()``."""

    segments: list[Segment]
    native_nodes: frozenset[Node]
    state_reads: dict[Node, int]
    skipped: frozenset[Node]
    arena_bytes: int
    buffers: Sequence[Buffer] = ()
    why: Mapping[Node, str] = {}       # every node of the block: what it became, or why not
    # symbolic sizes: the arena per set of symbol values, and where each symbol is read
    # per call: (graph input index, dim, factor) as in ``x.shape[dim] // factor``
    arena: SymbolicArena | None = None
    binds: tuple[tuple[int, int, int], ...] = ()


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
        if segments and p.symbols:
            p.binds = _binds(graph, p.symbols)
            if p.binds is None:
                irlog.log(TOPIC, f"{name}: no native code for a block: a symbolic dim of "
                                 f"{', '.join(p.symbols)} is no input's dim")
                continue
        if segments:
            planned.append((block, p, segments))
    if not planned:
        return {}
    from ..llvm_jit import compile_units, spec_unit
    units = [s.prepare(p) for _, p, segs in planned for s in segs]
    fused = [spec_unit(spec) for _, p, _ in planned for spec in p.fused_specs]
    kernels = iter(compile_units(units + fused))
    return {block: p.finish([s.link(next(kernels)) for s in segs])
            for block, p, segs in planned}


def _binds(graph: Graph, symbols: Sequence[str]) -> tuple[tuple[int, int, int], ...] | None:
    """Where each symbol is read per call: the first graph input with a dim ``k*symbol``,
    as ``(input index, dim, k)``; None when some symbol is in no input's shape."""
    found: dict[str, tuple[int, int, int]] = {}
    for i, v in enumerate(graph.inputs):
        t = static_type(v)
        for d, size in enumerate(sizes(t) if t is not None else ()):
            if isinstance(size, Poly) and len(size.terms) == 1:
                (mono, k), = size.terms
                if len(mono) == 1 and k > 0:
                    found.setdefault(mono[0], (i, d, k))
    if any(s not in found for s in symbols):
        return None
    return tuple(found[s] for s in symbols)


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
        self.what: dict[Node, str] = {}           # native node -> what it became
        self.symbols: tuple[str, ...] = ()        # symbolic dims of the plan's sizes
        self.arena: SymbolicArena | None = None
        self.binds: Any = ()
        self.limits: list[tuple[Poly, int, str]] = []   # symbolic BLAS ints (``SymbolicArena``)

    # -- 1. what can be native --------------------------------------------------------------------
    def analyze(self) -> list[Segment] | None:
        """Classify, find what Python needs and what escapes, cut segments and place the
        arena; None when nothing in the block runs natively."""
        for v in self.block.params:
            t = static_type(v)
            if t is not None:
                self._arg(v, ("input", v), t)
        defined = set(self.block.params)
        for node in self.nodes:
            for v in node.inputs:                   # read from an enclosing block
                if v not in defined and v not in self.lay and self._outer(v) is None:
                    t = static_type(v)
                    if t is not None:
                        self._arg(v, ("input", v), t)
            why = self._classify(node)
            if why is not None:
                self.python.add(node)
                self.why[node] = why
                for v in node.outputs:
                    t = static_type(v)
                    if t is not None and v not in self.lay:
                        self._arg(v, ("python", v), t)
            defined.update(node.outputs)
        if not self.steps:
            return None
        self._python_needs()
        self._escapes()
        segments = self._segments()
        arena = [b for b in self.buffers if b.kind == "arena"]
        self.symbols = tuple(sorted(symbols_of(list(self.lay.values()))))
        if self.symbols:                      # placed per call (``SymbolicArena``)
            for j, b in enumerate(arena):
                b.slot = j
            self.arena = SymbolicArena(self.symbols, arena, self.limits)
            self.arena_bytes = 0
        else:
            self.arena_bytes = assign_offsets(arena)
            check_plan(arena)
        self._log(segments)
        return segments

    def finish(self, segments: list[Segment]) -> NativePlan:
        """The plan, once ``segments`` are compiled and linked."""
        return NativePlan(segments, frozenset(self.steps) | frozenset(self.views - self.python),
                          {n: i for n, i in self.state_nodes.items() if n in self.python_reads},
                          frozenset(self.skip), self.arena_bytes, self.buffers,
                          self._reasons(segments), self.arena, self.binds)

    def _reasons(self, segments: list[Segment]) -> dict[Node, str]:
        """``NativePlan.why``: for each node of the block, its segment and what it became
        there, or why Python runs it (or why nothing does)."""
        seg_of = {n: s.index for s in segments for n in s.nodes}
        return {n: self._reason(n, seg_of) for n in self.nodes}

    def _reason(self, n: Node, seg_of: dict[Node, int]) -> str:
        """One node's line of ``why`` (see ``_reasons``)."""
        if n in seg_of:
            return f"segment {seg_of[n]}: {self.what[n]}"
        if n in self.views and n not in self.python:
            return f"native: {self.what[n]}"
        if n in self.state_nodes:
            reader = "Python and native code read" if n in self.python_reads \
                else "native code reads"
            return f"module tensor: {reader} it from state"
        why = self.why.get(n, "a view of a native value, recomputed in Python (Python reads it)")
        if why == "constant":
            why = "constant (native code holds it as an argument)"
        return f"not run: {why}; nothing in Python needs its result" if n in self.skip else why

    def _outer(self, v: Value) -> Layout | None:
        """The layout of a value an enclosing block makes, when it is a module tensor, a
        graph input or a view of one (a weight's transpose hoisted out of a loop): read from
        ``state`` with its strides, or the input imported as it is, and the view laid over
        it, instead of the view imported from Python (and copied to a contiguous array) on
        every iteration. None for anything else."""
        lay = self.lay.get(v)
        if lay is not None:
            return lay
        n, t = v.node, static_type(v)
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
        if not (n.is_op and is_view_op(n)) or not n.inputs:
            return None
        src = self._outer(n.inputs[0])
        lay = view_layout(n, src) if src is not None else None
        if isinstance(lay, Layout):
            self.lay[v] = lay
            return lay
        return None

    def _state_array(self, node: Node) -> tuple[int, np.ndarray] | str:
        """``(index, array)`` of a ``prim::GetAttr`` of a module tensor native code can
        read; else why not."""
        t = static_type(node.output)
        i = self.state_index(node) if self.state_index is not None and t else None
        if i is None or i >= len(self.state):
            return "a module attribute that is not a parameter or buffer tensor"
        arr = self.state[i]
        if type(arr) is not np.ndarray or arr.strides is None or \
                any(s % arr.itemsize for s in arr.strides):
            return "a module tensor that is not an aligned NumPy array"
        return i, arr

    def _arg(self, v: Value, source: Any, t: TensorType, strides: tuple | None = None) -> None:
        shape = sizes(t)
        buf = Buffer("arg", numel(shape) * t.dtype.itemsize, t.dtype, shape, source)
        self.buffers.append(buf)
        self.lay[v] = Layout(buf, 0, shape, strides if strides is not None else c_strides(shape))

    def _classify(self, node: Node) -> str | None:
        """None when ``node`` runs natively (or needs no code); else why it cannot."""
        try:
            return self._classify_node(node)
        except SizeDependent as e:
            return f"{node.kind}: a choice that depends on the symbolic sizes ({e})"

    def _classify_node(self, node: Node) -> str | None:
        kind = node.kind
        if kind == Prim.GET_ATTR:
            found = self._state_array(node)
            if isinstance(found, str):
                return found
            i, arr = found
            self.state_nodes[node] = i
            self._arg(node.output, ("state", i), static_type(node.output),  # type: ignore[arg-type]
                      tuple(s // arr.itemsize for s in arr.strides))
            return None
        if kind == Prim.CONSTANT:
            value = node.attrs.get("value")
            t = static_type(node.output)
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
            if is_view_op(node):
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
        t = static_type(v)
        assert t is not None
        shape = sizes(t)
        buf = Buffer("arena", numel(shape) * t.dtype.itemsize, t.dtype, shape, v)
        buf.start = buf.end = self.pos[node]
        self.buffers.append(buf)
        lay = self.lay[v] = Layout(buf, 0, shape, c_strides(shape))
        return lay

    def _group(self, node: Node) -> str | None:
        outs = [static_type(v) for v in node.outputs]
        if any(t is None for t in outs):
            return "a fusion group with an output of unknown shape or not on the CPU"
        ins = self._inputs(node)
        if ins is None:
            return "a fusion group reading a value native code does not hold"
        out_shape = sizes(outs[0])                                  # type: ignore[arg-type]
        from ..epilogue import find
        source = find(node)
        if source is not None and source.kind == "gemm" and source.head in self.own_gemms:
            return "a fusion group run as the epilogue of our GEMM (runtime.gemm)"
        if source is not None and source.kind == "conv" and _own_conv(source.head):
            return "a fusion group run as the epilogue of our convolution (runtime.conv)"
        if _has_row_ops(node):
            return self._row_group(node, ins, out_shape)
        if _splits(numel(out_shape)):
            try:                                   # its kernel compiles with the segments
                self.fused_specs.append(_group_spec(node, ins, out_shape)[0])
            except (NotImplementedError, ValueError):
                pass                               # (a head start only: FusedKernel decides)
            return f"a fusion group of {numel(out_shape)} elements: split across threads"
        try:
            spec, meta = _group_spec(node, ins, out_shape)
        except NotImplementedError as e:
            return f"fusion group cannot be lowered: {e}"
        for v in node.outputs:
            self._new(v, node)
        self.steps[node] = ("kernel", spec, meta, numel(out_shape))
        self.what[node] = f"fusion group as an elementwise kernel ({numel(out_shape)} elements)"
        return None

    def _row_group(self, node: Node, ins: list[Layout], out_shape: tuple) -> str | None:
        """A fusion group of row ops (``ir.passes.fuse_rows``): one row kernel over all rows,
        on this thread; from ``MIN_SPLIT`` elements, its ``FusedKernel`` splits the rows over
        the thread pool (outside the program, as a large elementwise group)."""
        from scriptmod.codegen.rows import geometry, lower_row_group, plan_row_layout
        try:
            full_dims, k = geometry(node.attrs["subgraph"])
            spec = lower_row_group(node.attrs["subgraph"])
            full = tuple(dim(d) for d in full_dims)
            _check_dtypes(ins, spec)
            spec, meta = lift(plan_row_layout, spec, [l.shape for l in ins],
                              [l.strides for l in ins], full)
            if _splits(numel(full)):
                self.fused_specs.append(spec)
                return f"a row group of {numel(full)} elements: split across threads"
        except NotImplementedError as e:
            return f"row group cannot be lowered: {e}"
        for v in node.outputs:
            self._new(v, node)
        self.steps[node] = ("kernel", spec, meta, numel(meta[:spec.rank - 1]))
        self.what[node] = f"fusion group as a rows kernel ({numel(meta[:spec.rank - 1])} rows)"
        return None

    def _matmul(self, node: Node) -> str | None:
        from ..blas import cblas
        ins = self._inputs(node)
        t = static_type(node.output)
        if ins is None or t is None:
            return "matmul of a value native code does not hold"
        a, b = ins
        if t.dtype not in (D.float32, D.float64) or a.buf.dtype is not t.dtype \
                or b.buf.dtype is not t.dtype or node.attrs:
            return f"matmul of {a.buf.dtype.name} and {b.buf.dtype.name} (native: float32/float64)"
        try:
            gemm = lift(gemm_shape, a, b)
        except SizeDependent:       # which dims are the rows: one choice for every size
            gemm = lift(gemm_shape, a, b, True)
        if gemm is None:
            return "matmul operands without a unit stride in a matrix dim (no BLAS layout)"
        m, n, k = gemm["m"], gemm["n"], gemm["k"]
        if k == 0 and m * n:
            return "matmul with an empty contraction"
        if t.dtype is D.float32 and gemm["batch"] == 1 and not gemm["trans_a"] \
                and target_type({t.device}).own_gemm:
            from .. import gemm as own
            if own.chosen(*(_hinted(v) for v in (m, k, n))):
                self.own_gemms.add(node)
                return (f"a {m}x{k} @ {k}x{n} float32 GEMM: our GEMM on the thread pool "
                        f"(runtime.gemm)")
        if any(isinstance(v, Poly) for v in gemm.values()):
            _check_gemm(gemm, t.dtype)
            blas = cblas()
            if blas is None:
                from ..blas import why_not
                return f"matmul of symbolic sizes needs BLAS: {why_not()}"
            from scriptmod.codegen.native import BLAS_INTS
            self.limits += [(gemm[f], (1 << (blas.int_bits - 1)) - 1,
                             f"the BLAS argument {f} of a matmul{place_of(node)}")
                            for f in BLAS_INTS if isinstance(gemm[f], Poly)]
        elif m * n * k > inline_max():
            blas = cblas()
            if blas is None:
                from ..blas import why_not
                return f"matmul needs BLAS: {why_not()}"
            from scriptmod.codegen.native import blas_overflow
            too_big = blas_overflow(gemm, blas.int_bits)
            if too_big is not None:
                return f"matmul with {too_big}: more than a {blas.int_bits}-bit BLAS int holds"
        batch = f", batch {gemm['batch']}" if gemm["batch"] != 1 else ""
        self._new(node.output, node)
        self.steps[node] = ("gemm", gemm, t.dtype)
        self.what[node] = f"matmul (gemm {m}x{n}x{k}{batch}, {t.dtype.name})"
        return None

    def _view(self, node: Node) -> str | None:
        src = self.lay.get(node.inputs[0])
        if src is None or static_type(node.output) is None:
            return f"{node.op_name} of a value native code does not hold"
        lay = view_layout(node, src)
        if isinstance(lay, str):
            if node.op_name == "reshape" and "computed at run time" not in lay:
                return self._copy(node, src)
            return lay
        self.lay[node.output] = lay
        self.views.add(node)
        self.what[node] = f"{node.op_name} as a view (offset and strides over its input, no code)"
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
        spec, meta = lift(plan_layout, spec, [src.shape], [src.strides], src.shape)
        self._new(node.output, node)
        self.steps[node] = ("kernel", spec, meta, numel(src.shape))
        self.what[node] = f"{node.op_name} as a copy kernel (not a view of this layout)"
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
    def _segments(self) -> list[Segment]:
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

    def _log(self, segs: list[Segment]) -> None:
        if irlog.enabled(TOPIC):
            n = sum(len(s.nodes) for s in segs)
            irlog.log(TOPIC, f"{self.name}: {n} node(s) native in {len(segs)} segment(s), "
                             f"{len(self.python)} in Python")

    def ref(self, v: Value) -> Any:
        from scriptmod.codegen.native import Ref
        lay = self.lay[v]
        if lay.buf.kind == "arena" and self.arena is not None:
            return Ref("placed", lay.buf.slot, lay.offset)
        if lay.buf.kind == "arena":
            return Ref("arena", lay.buf.offset, lay.offset)
        return Ref("arg", lay.buf.slot, lay.offset)



# ---- lowering helpers ----------------------------------------------------------------------------

def _own_conv(node: Node) -> bool:
    """Whether the convolution ``node`` is one our convolution kernels may run with an
    epilogue: its target runs our own microkernels (``epilogue.conv_source`` took only
    float32 CPU tensors; the arrays are checked per call)."""
    return bool(target_type({node.output.type.device}).own_gemm)


def _has_row_ops(node: Node) -> bool:
    from scriptmod.codegen.rows import has_row_ops
    return has_row_ops(node.attrs["subgraph"])


def _check_dtypes(ins: list[Layout], spec: Any) -> None:
    """``NotImplementedError`` unless each input layout holds the dtype the spec reads."""
    for lay, s in zip(ins, spec.inputs):
        if lay.buf.dtype is not s.dtype:
            raise NotImplementedError(f"input of dtype {lay.buf.dtype.name}, expected "
                                      f"{s.dtype.name}")


def _group_spec(node: Node, ins: list[Layout], out_shape: tuple) -> tuple[Any, tuple]:
    """The fusion group's ``KernelSpec`` for these static input layouts, and its meta."""
    from scriptmod.codegen.lower import lower_group, plan_layout
    spec = lower_group(node.attrs["subgraph"])
    _check_dtypes(ins, spec)
    return lift(plan_layout, spec, [l.shape for l in ins], [l.strides for l in ins], out_shape)


def place_of(node: Node) -> str:
    """`` (at <source line>)`` for messages, or nothing."""
    return f" (at {node.source})" if node.source else ""


def _hinted(size: int | Poly) -> int:
    """A size for a choice made once for every size: its value at ``SIZE_HINT``."""
    if isinstance(size, Poly):
        return size.evaluate({s: SIZE_HINT for s in size.symbols})
    return size


def _splits(count: int | Poly) -> bool:
    """Whether a group of ``count`` elements is split across threads (outside native
    code), as ``threads.MIN_SPLIT`` decides (at ``SIZE_HINT`` for a symbolic count)."""
    return threads.get_num_threads() > 1 and _hinted(count) >= threads.MIN_SPLIT


def _check_gemm(fields: dict, dtype: Any) -> None:
    """``SizeDependent`` when a ``GemmStep`` of symbolic ``fields`` is not valid for every
    size (its leading dims checked against its sizes)."""
    from scriptmod.codegen.native import GemmStep, Ref
    refs = {r: Ref("arg", 0) for r in ("a", "b", "c")}
    try:
        GemmStep(dtype, **refs, **{k: v for k, v in fields.items()
                                   if k not in ("a_off", "b_off")})
    except ValueError as e:
        raise SizeDependent(str(e)) from e
