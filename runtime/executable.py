"""What one specialization compiles to: an ``Executable``.

An ``Executable`` is built once from an optimized graph whose shapes are known, and owns
everything a call needs: the fused kernels of its fusion groups, the native segments
(``runtime.native``: matmuls, views and fusion groups as one machine-code function each,
intermediates at fixed offsets of a per-thread arena), and the Python steps for the nodes
that have no native lowering. IR objects carry no runtime state: the graph is only read.

How ops run is one swappable ``OpHandler``: ``ArrayOps`` runs them on NumPy/CuPy arrays with
the reference kernels (the frontend hands in its attribute callbacks once, at build time);
the frontend's autograd handler runs them through its dispatcher (``run_autograd``).

    >>> from scriptmod.ir import parse
    >>> from scriptmod.ir.passes import fuse_elementwise
    >>> graph = fuse_elementwise(parse('''graph(%x : Float(2, 4), %a : Float(4)):
    ...   %m : Float(2, 4) = sm::mul(%x, %a)
    ...   %y : Float(2, 4) = sm::relu(%m)
    ...   return (%y)
    ... '''))
    >>> x, a = np.ones((2, 4), np.float32), np.arange(4, dtype=np.float32) - 1
    >>> ex = Executable(graph)
    >>> ex.run(x, a)                                   # mul + relu: one native kernel
    array([[0., 0., 1., 2.],
           [0., 0., 1., 2.]], dtype=float32)
    >>> [k.llvm_ir[:28] for k in ex.kernels()]
    ['; ModuleID = "sm_ew_...']

A graph runs as one generated Python function (as ``torch.fx`` does): one line per Python
step or native segment, values in local variables, handlers bound once. Blocks become Python
control flow: ``prim::If`` an ``if``/``else``, ``prim::Loop`` a ``while`` loop whose carried
values are locals rebound per iteration. Every block has native segments of its own
(``runtime.native.plan_blocks``), pasted into the loop or branch like the top block's.

    >>> from scriptmod.ir.builder import Builder
    >>> from scriptmod.ir.graph import Graph
    >>> g = Graph(); b = Builder(g)
    >>> x = b.input(TensorType(D.float32, (2,)), "x")
    >>> y, = b.loop(3, [x], lambda i, acc: [b.op("add", acc, x)]); b.ret(y)
    >>> Executable(g).run(np.ones(2, np.float32))            # x + 3 * x
    array([4., 4.], dtype=float32)
"""
from __future__ import annotations

import math
import threading
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.errors import TraceGuardError
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from scriptmod.ir.passes.effects import has_side_effects
from scriptmod.ir.types import BoolType, FloatType, IntType, TensorType
from . import profiling, pycode, threads
from .fusion import TOPIC, FusedKernel
from .errors import node_failure, noted
from .interpreter import (DISPATCH, Interpreter, InterpreterError, OpHandler, RaisedException,
                          python_error)
from .kernels import KERNELS, run_kernel
from .kernels.nn import matmul_rows

Step = Callable[[list], Any]         # a Python step: its input values -> its output value(s)
_REFERENCE = "reference"             # marker: this fusion group runs on the reference kernels
CODEGEN = "codegen"                  # SCRIPTMOD_LOG topic: what became native, and why not


# ---- how ops run on arrays ------------------------------------------------------------------

class ArrayOps(OpHandler):
    """Ops on raw arrays with the reference kernels. The frontend passes its module
    callbacks once: ``get_attr(obj, name)`` (an array for a tensor attribute),
    ``set_attr(obj, name, value)`` and ``call_method(node, obj, args) -> list``."""

    def __init__(self, get_attr: Callable[[Any, str], Any] | None = None,
                 set_attr: Callable[[Any, str, Any], None] | None = None,
                 call_method: Callable[[Node, Any, list], list] | None = None) -> None:
        self._get_attr = get_attr or getattr
        self._set_attr = set_attr or setattr
        self._call_method = call_method

    def get_attr(self, node: Node, obj: Any) -> Any:
        return self._get_attr(obj, node.attrs["name"])

    def set_attr(self, node: Node, obj: Any, value: Any) -> None:
        self._set_attr(obj, node.attrs["name"], value)

    def call_method(self, node: Node, obj: Any, args: list) -> list:
        if self._call_method is None:
            raise InterpreterError(f"prim::CallMethod {node.attrs['name']!r}: no call_method "
                                   "callback was given")
        return self._call_method(node, obj, args)

    def step(self, node: Node) -> Step | None:
        """A fast single-output closure for ``node`` (see ``_op_step``), or None."""
        if node.is_op and S.REGISTRY[node.op_name].n_outputs == 1:
            return _op_step(node)
        if node.kind == Prim.GET_ATTR:
            name, read = node.attrs["name"], self._get_attr
            return lambda a: read(a[0], name)
        return None


# ---- the executable ---------------------------------------------------------------------------

class Executable:
    """One specialization: build once from an optimized graph, then call.

    ``ops``: how Python steps run (default ``ArrayOps()``); ``grad_ops``: the handler
    ``run_autograd`` uses; ``state_index(node) -> int | None``: for a ``prim::GetAttr`` of a
    module tensor, its position in the ``state`` tuple each call passes (the frontend's
    parameters and buffers, read once per call), so native code takes its pointer from there;
    ``native``: build native segments (off: fusion groups still run their kernels).
    """

    def __init__(self, graph: Graph, ops: OpHandler | None = None, *,
                 grad_ops: OpHandler | None = None,
                 state_index: Callable[[Node], int | None] | None = None,
                 state: tuple = (), native: bool = True, name: str = "graph") -> None:
        self.graph, self.name = graph, name
        self.ops = ops if ops is not None else ArrayOps()
        self.grad_ops = grad_ops
        self._fused: dict[Node, FusedKernel | str] = {}
        self.state_index, self.n_state = state_index, len(state)
        self.plans: dict[Block, Any] = {}        # block -> runtime.native.NativePlan
        self._local = threading.local()
        if native:
            from .native import plan_blocks
            self.plans = plan_blocks(graph, state_index, state, name)
        self.plan: Any = self.plans.get(graph.block)     # the top block's plan, or None
        self.segments: list[Any] = [s for p in self.plans.values() for s in p.segments]
        self._program = _Program(graph, self, self.plans)
        self._profiled: _Program | None = None   # built on the first call under a profiler
        if irlog.enabled(CODEGEN):
            self._log_code()

    # ---- calling ------------------------------------------------------------------------
    def __call__(self, args: Sequence[Any], state: tuple = ()) -> list[Any]:
        """The graph's outputs (a list) for inputs ``args`` and module ``state``; under a
        profiler (``runtime.profiling``), through the profiled program."""
        if profiling.ACTIVE:
            return self.profiled_program().run(args, state)
        return self._program.run(args, state)

    def direct(self, profiled: bool = False) -> tuple[Callable[..., list],
                                                      Callable[[Exception], Exception]]:
        """``(fn, error)``, for a caller that checked the arguments itself: ``fn(*args,
        state)`` runs the program (no count check; ``profiled``: the profiled program) and
        ``error(e)`` is the exception to raise for one ``fn`` raised (naming the failing
        node)."""
        prog = self.profiled_program() if profiled else self._program
        return prog.fn, prog.error

    def profiled_program(self) -> "_Program":
        """The program again, each step between clock reads that record an event (its
        node, source line, input shapes, kernel) and every step of a native segment a
        call of its own: the same compiled kernels, on the same arena, timed apart. Built
        (and its per-step programs compiled) on the first call under a profiler; the
        plain program never pays for it."""
        prog = self._profiled
        if prog is None:
            from .native import compile_steps
            start = profiling.clock()
            compile_steps(self.segments)
            prog = self._profiled = _Program(self.graph, self, self.plans, profiled=True)
            profiling.emit(f"{self.name}: build the profiled program", profiling.COMPILE, start)
        return prog

    def run(self, *args: Any) -> Any:
        """``Interpreter.run``'s convention: one output, or a tuple of several."""
        outs = self(args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_autograd(self, args: Sequence[Any], ops: OpHandler | None = None) -> list[Any]:
        """Op by op through ``ops`` (default ``grad_ops``: the frontend's autograd
        dispatcher, which records every op)."""
        ops = ops if ops is not None else self.grad_ops
        if ops is None:
            raise InterpreterError(f"{self.name}: built without an autograd op handler")
        return Interpreter(self.graph, ops=ops).run_graph(self.graph, list(args))

    def _log_code(self) -> None:
        """``SCRIPTMOD_LOG=codegen``: the generated Python program, then each native
        segment's program and LLVM IR."""
        irlog.log(CODEGEN, f"{self.name}: Python program\n{self._program.source}")
        for seg in self.segments:
            irlog.log(CODEGEN, f"{self.name}: native segment {seg.index} "
                               f"({len(seg.nodes)} node(s))\n{seg.program.text()}\n"
                               f"{seg.llvm_ir}")

    # ---- fusion groups ------------------------------------------------------------------
    def fused_kernel(self, node: Node) -> FusedKernel | None:
        """The group's ``FusedKernel`` (built once), or None when it runs on the reference
        kernels (an op without a lowering, mixed devices, CUDA without CuPy)."""
        fk = self._fused.get(node)
        if fk is None:
            fk = self._fused[node] = _build_fused(node)
        return fk if isinstance(fk, FusedKernel) else None

    def kernels(self) -> list[FusedKernel]:
        """The ``FusedKernel`` of every fusion group, in graph order (for inspection:
        groups that run inside a native segment get one built on demand)."""
        return [fk for node in self.graph.walk() if node.kind == Prim.FUSION_GROUP
                for fk in [self.fused_kernel(node)] if fk is not None]

    def group_step(self, node: Node) -> Step:
        fk = self.fused_kernel(node)
        if fk is None:
            sub = node.attrs["subgraph"]
            return lambda a: Interpreter(sub, ops=self.ops).run_graph(sub, a)
        return fk

    def frames(self) -> list[Any]:
        """This thread's arena and pointer table of each plan (``runtime.native.Frame``, in
        the order of ``plans``), made on its first call."""
        frs = getattr(self._local, "frames", None)
        if frs is None:
            from .native import Frame
            frs = self._local.frames = [Frame(p) for p in self.plans.values()]
        return frs

    def frame(self, block: Block | None = None) -> Any:
        """This thread's ``Frame`` of the plan of ``block`` (default: the top block)."""
        block = self.graph.block if block is None else block
        return self.frames()[list(self.plans).index(block)]

    def __repr__(self) -> str:
        native = sum(len(s.nodes) for s in self.segments)
        return f"<Executable {self.name}: {len(self.graph.nodes)} node(s), {native} native " \
               f"in {len(self.segments)} segment(s)>"


def _calls_blas(segment: Any) -> bool:
    """Whether a native segment's program calls BLAS (a GEMM too large for inline loops)."""
    from scriptmod.codegen.native import GemmStep
    return any(isinstance(st, GemmStep) and not st.inline for st in segment.program.steps)


def group_name(node: Node) -> str:
    """``FusionGroup(<ops>) at <source>``: how errors and logs name a group."""
    head = profiling.node_label(node)
    return f"{head} at {node.source}" if node.source else head


def _build_fused(node: Node) -> FusedKernel | str:
    devices = {v.type.device for v in list(node.inputs) + node.outputs
               if isinstance(v.type, TensorType)}
    if not devices or not (all(d.startswith("cuda") for d in devices) or devices == {"cpu"}):
        return _REFERENCE
    try:
        return FusedKernel(node.attrs["subgraph"], group_name(node))
    except NotImplementedError as e:
        irlog.log(TOPIC, f"{group_name(node)} runs on the reference kernels: {e}")
        return _REFERENCE


# ---- the generated program -------------------------------------------------------------------

class _Program:
    """A graph as one generated Python function: one line per Python step or native segment
    (``runtime.native``), ``if``/``else`` for a ``prim::If`` and a ``while`` loop over locals
    for a ``prim::Loop`` (carried values rebound per iteration), nested to any depth. Values
    live in locals, dropped at their last use; a failing line is mapped back to its node for
    the error message. ``profiled``: every step and native step timed (see
    ``Executable.profiled_program``), the whole call an event of its own too."""

    def __init__(self, graph: Graph, ex: Executable, plans: dict[Block, Any],
                 profiled: bool = False) -> None:
        self.ex, self.profiled = ex, profiled
        self.ns: dict[str, Any] = {}
        self.lines: list[str] = []
        self.line_nodes: list[Node | None] = []
        self.name: dict[Value, str] = {}
        self._count = 0
        for v in list(graph.inputs) + [v for n in graph.walk() for v in _defs(n)]:
            self.name.setdefault(v, f"v{len(self.name)}")
        plan_list = list(plans.values())
        self.native = frozenset().union(*(p.native_nodes for p in plan_list))
        self.skipped = frozenset().union(*(p.skipped for p in plan_list))
        self.state_reads = {n: i for p in plan_list for n, i in p.state_reads.items()}
        self._read_state(graph)
        self.seg_at = {s.nodes[0]: (s, j) for j, p in enumerate(plan_list) for s in p.segments}
        self.epilogues = self._epilogues(graph)
        self.deferred = frozenset(m for m, _ in self.epilogues.values())
        self.dying = _last_uses(graph, [s for p in plan_list for s in p.segments],
                                {g: list(m.inputs) for g, (m, _) in self.epilogues.items()})
        self.unbound = _unbound(graph, self.native | self.skipped | self.deferred,
                                [s for p in plan_list for s in p.segments])
        args = "".join(f"{self.name[v]}, " for v in graph.inputs)
        self._emit(0, None, f"def program({args}state):")
        if profiled:
            self.ns["clock"] = profiling.clock
            self.ns["call_event"] = profiling.event(ex.name, profiling.CALL)
            self._emit(1, None, "t_call = clock()")
        if any(_calls_blas(s) for p in plan_list for s in p.segments):
            # BLAS threads follow the load of other processes (``threads.follow_load``: a
            # clock read between samples) before the GEMMs of this call
            self.ns["follow_load"] = threads.follow_load
            self._emit(1, None, "follow_load()")
        if plan_list:            # this thread's arenas, the module state bound to each
            self.ns["LOCAL"], self.ns["frames_of"] = ex._local, ex.frames
            for ln in ("try:", "    frames = LOCAL.frames", "except AttributeError:",
                       "    frames = frames_of()"):
                self._emit(1, None, ln)
            for j in range(len(plan_list)):
                for ln in (f"frame{j} = frames[{j}]", f"if frame{j}.state is not state:",
                           f"    frame{j}.bind_state(state)", f"tbl{j} = frame{j}.table"):
                    self._emit(1, None, ln)
        self._block(graph.block, 1)
        outs = f"[{', '.join(self.name[v] for v in graph.outputs)}]"
        if profiled:
            for ln in (f"outs_ = {outs}", "call_event(t_call)", "return outs_"):
                self._emit(1, None, ln)
        else:
            self._emit(1, None, f"return {outs}")
        self.n_inputs = len(graph.inputs)
        self.source = "\n".join(self.lines) + "\n"
        exec(pycode.code(self.source, "<scriptmod program>"), self.ns)
        self.fn = self.ns["program"]

    def _read_state(self, graph: Graph) -> None:
        """Python steps read module tensors from ``state`` too (a tuple index, where the
        attribute callback walks the module), unless the graph assigns attributes."""
        index = self.ex.state_index
        if index is None or any(n.kind == Prim.SET_ATTR for n in graph.walk()):
            return
        for n in graph.walk():
            if n.kind == Prim.GET_ATTR and isinstance(n.output.type, TensorType) \
                    and n not in self.state_reads and n not in self.native:
                i = index(n)
                if i is not None and i < self.ex.n_state:
                    self.state_reads[n] = i
        # a submodule read only for its tensors, now read from ``state``, is not read at all
        unread = set(self.skipped)
        for n in reversed(list(graph.walk())):
            if n.kind == Prim.GET_ATTR and n not in self.native and n.output.uses and all(
                    u.user in self.state_reads or u.user in unread for u in n.output.uses):
                unread.add(n)
        self.skipped = frozenset(unread)

    def _epilogues(self, graph: Graph) -> dict[Node, tuple[Node, int]]:
        """Fusion groups that run as the epilogue of the GEMM before them
        (``runtime.gemm.epilogue_source``), with that matmul node and the group's input slot
        it fills: both Python steps, the matmul one ``runtime.gemm`` takes, plain array ops.
        The matmul's line moves to the group's (nothing else reads its result)."""
        from .gemm import epilogue_source
        if type(self.ex.ops) is not ArrayOps:
            return {}
        out = {}
        for n in graph.walk():
            src = epilogue_source(n) if n.kind == Prim.FUSION_GROUP else None
            if src is None or n in self.native or src[0] in self.native \
                    or src[0] in self.skipped:
                continue
            m = src[0]
            if _plain_matmul(m, D.float32) and _own_gemm(m) and _movable(m, n):
                out[n] = src
        return out

    # ---- emitting ------------------------------------------------------------------------
    def _emit(self, depth: int, node: Node | None, line: str) -> None:
        self.lines.append("    " * depth + line)
        self.line_nodes.append(node)

    def _assign(self, depth: int, node: Node, targets: Sequence[str], sources: Sequence[str]) -> None:
        if targets:
            self._emit(depth, node, f"{', '.join(targets)} = {', '.join(sources)}")

    def _del(self, depth: int, node: Node, at: Node) -> None:
        """``del`` the values whose last use is ``at`` (a node or a block's return) that the
        program bound: a nested block's reads count as uses of the ``if``/``while`` that holds
        it, also where the reader runs natively or not at all (a module ``GetAttr`` outside an
        unrolled loop's ``if``, whose weights the branch's native code reads from ``state``)."""
        dead = [self.name[v] for v in self.dying.get(at, ()) if v not in self.unbound]
        if dead:
            self._emit(depth, node, f"del {', '.join(dead)}")

    def _block(self, block: Block, depth: int) -> None:
        for node in block:
            self._node(node, depth)

    def _node(self, node: Node, depth: int) -> None:
        k = self._count
        self._count += 1
        seg = self.seg_at.get(node)
        if seg is not None:
            self._segment(*seg, k, depth)
        if node in self.native or node in self.skipped or node in self.deferred:
            return
        if node in self.state_reads:
            self.ns[f"i{k}"] = self.state_reads[node]
            self._emit(depth, node, f"{self.name[node.output]} = state[i{k}]")
        elif node.kind == Prim.IF:
            self._if(node, depth)
            self._del(depth, node, node)
        elif node.kind == Prim.LOOP:
            self._loop(node, k, depth)
            self._del(depth, node, node)
        else:
            self._step_line(node, k, depth)

    def _segment(self, seg: Any, j: int, k: int, depth: int) -> None:
        """A native segment of plan ``j``, pasted in; its imports that die in it, dropped."""
        body, seg_ns = seg.source(f"_{k}", [self.name[v] for v in seg.imports],
                                  [self.name[v] for v in seg.exports], f"frame{j}", f"tbl{j}",
                                  self.profiled)
        self.ns.update(seg_ns)
        imported = set(seg.imports)
        dead = [self.name[v] for n in seg.nodes for v in self.dying.get(n, ()) if v in imported]
        if dead:
            body.append(f"del {', '.join(dead)}")
        for ln in body:
            self._emit(depth, seg.nodes[0], ln)

    def _step_line(self, node: Node, k: int, depth: int) -> None:
        outs = [self.name[v] for v in node.outputs]
        if node.kind == Prim.CONSTANT and len(outs) == 1 and \
                type(self.ex.ops).constant is OpHandler.constant:
            self.ns[f"c{k}"] = node.attrs.get("value")
            self._emit(depth, node, f"{outs[0]} = c{k}")
            return
        step, single = _step(node, self.ex)
        inputs = [self.name[v] for v in node.inputs]
        dead = [self.name[v] for v in self.dying.get(node, ())]
        if node in self.epilogues:              # the GEMM before it, with this as epilogue
            step, inputs, dead = self._epilogue(node, step, inputs, dead)
        self.ns[f"h{k}"] = step
        call = f"h{k}([{', '.join(inputs)}])"
        target = outs[0] if single else ", ".join(outs) + ("," if len(outs) == 1 else "")
        line = f"{target} = {call}" if outs else call
        if self.profiled:
            fk = self.ex.fused_kernel(node) if node.kind == Prim.FUSION_GROUP else None
            self.ns[f"ev{k}"] = profiling.python_step_event(node, fk)
            self._emit(depth, node, "t_ = clock()")
        # drop values at their last use, so a large intermediate is freed (and its
        # memory reused) as soon as eager would
        self._emit(depth, node, line + (f"; del {', '.join(dead)}" if dead else ""))
        if self.profiled:
            self._emit(depth, node, f"ev{k}(t_)")

    def _epilogue(self, node: Node, group: Step, inputs: list[str], dead: list[str]
                  ) -> tuple[Step, list[str], list[str]]:
        """The step, arguments and dying values of a group run as its GEMM's epilogue."""
        from .gemm import epilogue_step
        m, slot = self.epilogues[node]
        mstep = _step(m, self.ex)[0]
        product = self.name[m.output]
        inputs = [self.name[v] for v in m.inputs] + ["None" if i == slot else name
                                                     for i, name in enumerate(inputs)]
        dead = [d for d in dead if d != product] + \
            [self.name[v] for v in self.dying.get(m, ())]
        step = epilogue_step(slot, self.ex.fused_kernel(node), lambda a: [group(a)],
                             lambda x, w: mstep([x, w]))
        return step, inputs, dead

    def _if(self, node: Node, depth: int) -> None:
        """``if cond:`` / ``else:``, each branch assigning its outputs to the node's."""
        outs = [self.name[v] for v in node.outputs]
        self._emit(depth, node, f"if {self.name[node.inputs[0]]}:")
        for j, block in enumerate(node.blocks):
            if j:
                self._emit(depth, node, "else:")
            n = len(self.lines)
            self._block(block, depth + 1)
            self._assign(depth + 1, node, outs, [self.name[v] for v in block.outputs])
            self._del(depth + 1, node, block.return_node)
            if len(self.lines) == n:
                self._emit(depth + 1, node, "pass")

    def _loop(self, node: Node, k: int, depth: int) -> None:
        """The interpreter's loop over locals: the trip count and the entry condition read
        once, the body's parameters rebound from its outputs after each iteration (0 trips:
        the outputs are the initial carried values)."""
        body = node.blocks[0]
        trip, go, it = f"trip{k}", f"go{k}", f"it{k}"
        ins = [self.name[v] for v in node.inputs]
        index, *carried = [self.name[p] for p in body.params]
        self._emit(depth, node, f"{trip}, {go}, {it} = {ins[0]}, {ins[1]}, 0")
        self._assign(depth, node, carried, ins[2:])
        self._emit(depth, node, f"while {go} and {it} < {trip}:")
        if body.params[0].uses:
            self._emit(depth + 1, node, f"{index} = {it}")
        self._block(body, depth + 1)
        self._assign(depth + 1, node, [go] + carried, [self.name[v] for v in body.outputs])
        self._emit(depth + 1, node, f"{it} += 1")
        self._del(depth + 1, node, body.return_node)
        self._assign(depth, node, [self.name[v] for v in node.outputs], carried)
        if carried:
            self._emit(depth, node, f"del {', '.join(carried)}")

    # ---- running -------------------------------------------------------------------------
    def run(self, args: Sequence[Any], state: tuple) -> list[Any]:
        if len(args) != self.n_inputs:
            raise TypeError(f"graph takes {self.n_inputs} argument(s), got {len(args)}")
        try:
            return self.fn(*args, state)
        except Exception as e:
            raise self.error(e)

    def error(self, e: Exception) -> Exception:
        """The exception to raise for ``e`` raised by ``fn``: itself, or one that names the
        node whose line failed."""
        if isinstance(e, (InterpreterError, TraceGuardError)):
            return e
        node = self._failing_node(e)
        if node is None:
            return e
        if isinstance(e, RaisedException) or getattr(e, "scripted_raise", False) \
                or python_error(node, e):
            return noted(node, e)
        err = node_failure(node, e)
        err.__cause__ = e
        return err

    def _failing_node(self, e: BaseException) -> Node | None:
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code is self.fn.__code__:
                line = tb.tb_lineno
            tb = tb.tb_next
        k = None if line is None else line - 1            # line 1 is the ``def``
        return self.line_nodes[k] if k is not None and 0 <= k < len(self.line_nodes) else None


def _defs(node: Node) -> list[Value]:
    """The values a node defines: its blocks' parameters, then its outputs."""
    return [p for b in node.blocks for p in b.params] + list(node.outputs)


def _unbound(graph: Graph, absent: frozenset[Node], segments: Sequence[Any]) -> frozenset[Value]:
    """The values no line of the program assigns: the results of ``absent`` nodes (native,
    skipped, deferred to an epilogue) that no native segment exports."""
    exported = {v for seg in segments for v in seg.exports}
    return frozenset(v for n in graph.walk() if n in absent for v in n.outputs
                     if v not in exported)


def _movable(node: Node, to: Node) -> bool:
    """Whether ``node`` may run at ``to``'s place instead (same block): nothing between them
    has a side effect (an in-place write could change its operands)."""
    n = node.next
    while n is not None and n is not to:
        if has_side_effects(n):
            return False
        n = n.next
    return n is to


def _last_uses(graph: Graph, segments: Sequence[Any],
               reads: dict[Node, list[Value]] | None = None) -> dict[Node, list[Value]]:
    """Node (or a block's return node) -> the values to drop after it; graph outputs never
    die. Per block: a value dies in the block that defines it, after the node of that block
    whose nested blocks or inputs read it last, so a value defined outside a loop and read
    inside it lives until the loop is done. A loop body's parameters are never dropped at
    its return (they are rebound there). A native segment reads its imports on its first
    node's line, which may be later than any graph use (a view's base, when the view itself
    runs natively). ``reads``: more values a node's line reads (a GEMM deferred to the line
    of its epilogue group reads the GEMM's operands there)."""
    imports: dict[Node, list[Value]] = {n: list(vs) for n, vs in (reads or {}).items()}
    for seg in segments:
        imports.setdefault(seg.nodes[0], []).extend(seg.imports)
    out: dict[Node, list[Value]] = {}
    _block_last_uses(graph.block, imports, out)
    out.pop(graph.block.return_node, None)
    return out


def _block_last_uses(block: Block, imports: dict[Node, list[Value]],
                     out: dict[Node, list[Value]]) -> None:
    defined = set(block.params)
    for node in block:
        defined.update(node.outputs)
    last: dict[Value, Node] = {}
    for node in block:
        for v in node.outputs:
            last[v] = node                  # an unused result dies where it is made
        for n in node.walk():               # reads here or in nested blocks, at any depth
            for v in (*n.inputs, *imports.get(n, ())):   # (a segment's imports too)
                if v in defined:
                    last[v] = node
            for b in n.blocks:
                for v in b.outputs:
                    if v in defined:
                        last[v] = node
        for b in node.blocks:
            _block_last_uses(b, imports, out)
    for v in block.outputs:
        if v in defined:
            last[v] = block.return_node
    loop_body = block.owning_node is not None and block.owning_node.kind == Prim.LOOP
    for v, node in last.items():
        if not (loop_body and node is block.return_node and v.node is block.param_node):
            out.setdefault(node, []).append(v)


def _step(node: Node, ex: Executable) -> tuple[Step, bool]:
    """How one Python node runs: (step, single output)."""
    single = len(node.outputs) == 1
    ops = ex.ops
    if node.kind == Prim.FUSION_GROUP:
        fn = ex.group_step(node)
        if single:
            return (lambda a: fn(a)[0]), True
        return fn, False
    fast = ops.step(node) if single else None
    if fast is not None:
        return fast, True
    interp = Interpreter(ex.graph, ops=ops)
    method = DISPATCH.get(node.kind)
    if method is None and not node.is_op:
        raise NotImplementedError(f"the executor cannot run {node.kind}")
    run = getattr(interp, method) if method is not None else interp.call_op
    if single:
        return (lambda a: run(node, a)[0]), True
    return (lambda a: run(node, a)), False


# ---- fast array steps for ops ------------------------------------------------------------------

_PY_SCALARS = (IntType, FloatType, BoolType)


def _op_step(node: Node) -> Step:
    """``run_kernel``; or the reference kernel itself when the static types show that
    ``run_kernel`` would neither cast an input nor convert the result (a CPU op, not
    elementwise or a factory, every tensor operand already of the result dtype, no halves).
    View ops of module state are memoized (see ``_memo_view``)."""
    name, attrs = node.op_name, node.attrs
    schema = S.REGISTRY[name]
    if len(node.outputs) == 1 and node.output.type in _PY_SCALARS and name in KERNELS \
            and not schema.has(S.FACTORY):
        # an int/float/bool result (loop counters, comparisons, ``float(t)``): the type rule
        # gives no dtype, so ``run_kernel`` would return the kernel's value untouched
        fn = KERNELS[name]
        if attrs:
            return lambda a: fn(np, *a, **attrs)             # noqa: E731
        return lambda a: fn(np, *a)                          # noqa: E731
    dt = _direct_dtype(node, schema)
    out = node.outputs[0].type
    if name == "attention" and isinstance(out, TensorType) and out.dtype is D.float32 \
            and out.device == "cpu":
        step = _attention_step(attrs["scale"])
    elif dt is None:
        step: Step = lambda a: run_kernel(name, a, attrs)   # noqa: E731
    elif name == "matmul" and not attrs and _plain_matmul(node, dt):
        # the guards already proved what ``_matmul`` checks; a stack times a float matrix
        # takes the few-GEMMs path of the kernel
        matmul = matmul_rows if _stack_by_matrix(node, dt) else np.matmul
        step = lambda a: matmul(a[0], a[1])                  # noqa: E731
        if dt is D.float32 and _own_gemm(node):
            from .gemm import matmul_step
            step = matmul_step(matmul)
    else:
        fn, want = KERNELS[name], np.dtype(dt.name)
        if name == "index":
            fn = _basic_index(attrs["spec"]) or fn

        def step(a: list) -> Any:
            out = fn(np, *a, **attrs)
            if type(out) is not np.ndarray or out.dtype != want:
                out = np.asarray(out, dtype=want)
            return out
    return _memo_view(step) if _memoizable(node) else step


def _attention_step(scale: float) -> Step:
    """The fused attention kernel (``runtime.attention``) for the arrays it takes; the
    reference kernel (the unfused chain) for the rest (broadcast batch dims, rank > 4)."""
    from .attention import run_checked, supported
    ref = KERNELS["attention"]

    def step(a: list) -> Any:
        if supported(*a):
            return run_checked(*a, scale)
        return ref(np, *a, scale=scale)
    return step


def _own_gemm(node: Node) -> bool:
    """Whether this float32 matmul of static shape is one ``runtime.gemm`` takes
    (``gemm.chosen``): a ``(..., K)`` stack of rows times a ``(K, N)`` matrix."""
    from . import gemm
    a, b = (v.type for v in node.inputs)
    assert isinstance(a, TensorType) and isinstance(b, TensorType)
    if b.shape is None or len(b.shape) != 2 or a.shape is None or len(a.shape) < 2:
        return False
    dims = [*a.shape, b.shape[1]]
    if not all(isinstance(d, int) for d in dims):
        return gemm.preferred()             # symbolic rows: decided per call by the step
    return gemm.chosen(math.prod(dims[:-2]), dims[-2], dims[-1])


def _basic_index(spec: Sequence[tuple]) -> Callable[..., Any] | None:
    """The ``index`` kernel for a basic-indexing ``spec`` as one generated expression
    (``x[:, t]`` in a loop: the spec is read once, not per call); None for tensor indices
    or a step not known to be positive (the kernel's own checks and messages apply)."""
    def val(v: Any) -> str | None:
        if isinstance(v, tuple):
            return f"int(ops[{v[1]}])"
        return repr(v) if v is None or type(v) is int else None
    parts = []
    for entry in spec:
        kind = entry[0]
        if kind in ("int", "slice"):
            vals = [val(v) for v in entry[1:]]
            step = entry[3] if kind == "slice" else None
            if None in vals or not (step is None or (type(step) is int and step > 0)):
                return None
            parts.append(vals[0] if kind == "int" else f"slice({', '.join(vals)})")
        elif kind in ("none", "ellipsis"):
            parts.append("None" if kind == "none" else "...")
        else:
            return None
    source = ("def index(xp, x, *ops, spec=spec):\n"
              "    try:\n"
              f"        out = x[({', '.join(parts)},)]\n"
              "    except IndexError:\n"
              "        return kernel(xp, x, *ops, spec=spec)\n"
              "    return out if type(out) is ndarray else xp.asarray(out)\n")
    ns: dict[str, Any] = {"kernel": KERNELS["index"], "spec": spec, "ndarray": np.ndarray}
    exec(pycode.code(source, "<scriptmod index>"), ns)
    return ns["index"]


def _memoizable(node: Node) -> bool:
    """A view op of a module attribute (a weight): same input object, same view."""
    ins = node.inputs
    return (S.REGISTRY[node.op_name].has(S.VIEW) and node.op_name != "copy_" and bool(ins)
            and ins[0].node.kind == Prim.GET_ATTR
            and all(v.node.kind == Prim.CONSTANT for v in ins[1:]))


def _memo_view(step: Step) -> Step:
    """Reuse the last result while the input is the same array object and the result was a
    view of it (in-place updates of the weight show through; a new ``.data`` misses).
    One tuple slot, replaced atomically, so threads never see a mismatched pair."""
    memo: list = [None]

    def view(a: list) -> Any:
        x, last = a[0], memo[0]
        if last is not None and last[0] is x:
            return last[1]
        out = step(a)
        base = getattr(out, "base", None)
        if out is x or (base is not None and (base is x or base is getattr(x, "base", 0))):
            memo[0] = (x, out)
        return out
    return view


def _plain_matmul(node: Node, dt: D.DType) -> bool:
    """``np.matmul`` alone is exactly the ``matmul`` kernel here: a float/int dtype NumPy
    multiplies natively (both operands already of it, see ``_direct_dtype``), operands of
    rank >= 1 with static contraction dims that agree. The specialization's guards (input
    signature and module state) make the static types hold at run time."""
    if dt not in (D.float32, D.float64, D.int32, D.int64):
        return False
    a, b = (v.type for v in node.inputs)
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)) or a.shape is None \
            or b.shape is None or not a.shape or not b.shape:
        return False
    k1, k2 = a.shape[-1], (b.shape[-2] if len(b.shape) > 1 else b.shape[0])
    return isinstance(k1, int) and k1 == k2


def _stack_by_matrix(node: Node, dt: D.DType) -> bool:
    a, b = (v.type for v in node.inputs)
    assert isinstance(a, TensorType) and isinstance(b, TensorType)
    return dt in (D.float32, D.float64) and len(a.shape or ()) >= 3 and len(b.shape or ()) == 2


def _direct_dtype(node: Node, schema: S.OpSchema) -> D.DType | None:
    if schema.has(S.ELEMENTWISE) or schema.has(S.FACTORY) or node.op_name not in KERNELS:
        return None
    t = node.outputs[0].type
    if not isinstance(t, TensorType) or t.dtype is None or t.device != "cpu":
        return None
    if t.dtype in (D.float16, D.bfloat16) or t.dtype.category == D.COMPLEX:
        return None
    tensors = [v.type for v in node.inputs if isinstance(v.type, TensorType)]
    if not tensors or any(u.dtype is not t.dtype or u.device != "cpu" for u in tensors):
        return None
    if len(tensors) != len(node.inputs):
        return None                        # scalars/lists may steer the dtype rule
    return t.dtype
