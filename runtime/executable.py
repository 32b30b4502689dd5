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

``explain()`` says per node how it runs (a ``runtime.steps`` row, or native), where and why,
then prints every generated source (``sources()``):

    >>> print("\\n".join(ex.explain().splitlines()[:4]))
    <Executable graph: 1 node(s), 1 native in 1 segment(s)>
    inputs: v0 : Float(2, 4), v1 : Float(4)
      outputs = kind                    step    target  reason
      v2      = FusionGroup(mul, relu)  native  LLVM    ...

A graph runs as one generated Python function (``runtime.program``, as ``torch.fx`` does):
one line per Python step (a row of the ``runtime.steps`` registry, decided once per node by
``StepPlan``) or native segment, values in local variables, handlers bound once. Blocks
become Python control flow: ``prim::If`` an ``if``/``else``, ``prim::Loop`` a ``while`` loop
whose carried values are locals rebound per iteration. Every block has native segments of its own
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

import threading
from typing import Any, Callable, Sequence

import numpy as np  # noqa: F401  (doctests)

from scriptmod.ir import dtypes as D  # noqa: F401  (doctests)
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.graph import Block, Graph, Node, Prim
from scriptmod.ir.types import TensorType  # noqa: F401  (doctests)
from . import profiling, pycode
from .fusion import FusedKernel
from .interpreter import Interpreter, InterpreterError, OpHandler
from .program import _Program
from .steps import (Decision, Step, StepPlan, _basic_index, _build_fused,  # noqa: F401
                    group_fn, op_step)

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
        """A fast single-output closure for ``node`` (the op rows of ``runtime.steps``),
        or None."""
        if node.is_op and S.REGISTRY[node.op_name].n_outputs == 1:
            return op_step(node)
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
        self.plain_arrays = type(self.ops) is ArrayOps    # GEMM epilogues need plain arrays
        self.array_steps = isinstance(self.ops, ArrayOps) and type(self.ops).step is ArrayOps.step
        self._fused: dict[Node, FusedKernel | str] = {}
        self.state_index, self.n_state = state_index, len(state)
        self.plans: dict[Block, Any] = {}        # block -> runtime.native.NativePlan
        self._local = threading.local()
        if native:
            from .native import plan_blocks
            self.plans = plan_blocks(graph, state_index, state, name)
        self.plan: Any = self.plans.get(graph.block)     # the top block's plan, or None
        self.segments: list[Any] = [s for p in self.plans.values() for s in p.segments]
        self.steps = StepPlan(graph, self, self.plans)   # how every node runs, and why
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

    def fusion_reason(self, node: Node) -> str:
        """Why the group has no ``FusedKernel`` ("" when it has one)."""
        return "" if self.fused_kernel(node) is not None else str(self._fused[node])

    def kernels(self) -> list[FusedKernel]:
        """The ``FusedKernel`` of every fusion group, in graph order (for inspection:
        groups that run inside a native segment get one built on demand)."""
        return [fk for node in self.graph.walk() if node.kind == Prim.FUSION_GROUP
                for fk in [self.fused_kernel(node)] if fk is not None]

    def group_step(self, node: Node) -> Step:
        """The group's outputs (a list) for its inputs: its kernel or the reference kernels."""
        return group_fn(node, self.steps.site)

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

    # ---- what runs where, and why --------------------------------------------------------
    @property
    def plan_rows(self) -> list[Decision]:
        """Every node of every block, nested blocks after their node: how it runs
        (``step``: a ``runtime.steps`` row, ``native``, ...), where (``target``) and why
        (``reason``), as the planner decided (``self.plan`` is the top block's native plan)."""
        return list(self.steps.decisions.values())

    def explain(self) -> str:
        """One line per node (blocks indented): its outputs' names in the program, its kind,
        then step, target and reason in columns; then the source of every generated
        function this executable holds (``sources``).
        """
        names = self._program.name
        rows = [("  outputs", "kind", "step", "target", "reason")]
        rows += [("  " * (1 + d.depth) + (", ".join(names[v] for v in d.node.outputs) or "-"),
                 _label(d.node), d.step, d.target, d.reason)
                for d in self.plan_rows]
        inputs = ", ".join(f"{names[v]} : {v.type}" for v in self.graph.inputs)
        head = [f"{self}", f"inputs: {inputs}", *_columns(rows)]
        return "\n".join(head + [f"\n---- {title}\n{src.rstrip()}"
                                 for title, src in self.sources().items()]) + "\n"

    def sources(self) -> dict[str, str]:
        """Title -> source of every generated function: the program, each native segment's
        steps and runner, and the generated Python its steps and kernels hold (index
        functions, layout key functions, launchers: those made so far)."""
        out = {"program": self._program.source}
        for seg in self.segments:
            out[f"native segment {seg.index}: steps"] = seg.program.text()
            runner = pycode.source_of(seg.run)
            if runner is not None:
                out[f"native segment {seg.index}: runner"] = runner
        roots: list[Any] = [(n, s) for n, s in self._program.step_of.items()]
        roots += [(n, fk) for n, fk in self._fused.items() if isinstance(fk, FusedKernel)]
        for node, root in roots:
            for title, src in _generated(root).items():
                out.setdefault(f"{title} ({profiling.node_label(node)})", src)
        return out

    def __repr__(self) -> str:
        native = sum(len(s.nodes) for s in self.segments)
        return f"<Executable {self.name}: {len(self.graph.nodes)} node(s), {native} native " \
               f"in {len(self.segments)} segment(s)>"


# ---- explain -----------------------------------------------------------------------------------

def _label(node: Node) -> str:
    """``profiling.node_label``, with the attribute an attribute read or write names."""
    if node.kind in (Prim.GET_ATTR, Prim.SET_ATTR):
        return f"{node.kind}[{node.attrs['name']}]"
    return profiling.node_label(node)


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """``outputs = kind  step  target  reason``, each column padded to its widest entry."""
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(len(rows[0]) - 1)] \
        if rows else []
    out = []
    for outs, kind, *rest in rows:
        cells = [f"{outs:<{widths[0]}} = {kind:<{widths[1]}}"] + \
            [f"{c:<{w}}" for c, w in zip(rest[:-1], widths[2:])] + [rest[-1]]
        out.append("  ".join(cells).rstrip())
    return out


_SKIP = (str, bytes, int, float, bool, type(None), np.ndarray)


def _generated(root: Any, depth: int = 5) -> dict[str, str]:
    """``co_filename co_name`` -> source of the generated functions (``pycode.source_of``)
    reachable from ``root``: through closures, defaults, bound objects, containers and the
    attributes of runtime objects (kernels, launches), ``depth`` links deep."""
    found: dict[str, str] = {}
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(root, depth)]
    while todo:
        obj, d = todo.pop()
        if d < 0 or id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        todo += [(x, d - 1) for x in _links(obj, found)]
    return found


def _links(obj: Any, found: dict[str, str]) -> list[Any]:
    """What ``_generated`` follows from ``obj`` (recording it in ``found`` if generated)."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        src = pycode.source_of(code)
        if src is not None:
            found[f"{code.co_filename} {code.co_name}"] = src
        cells = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        return cells + list(obj.__defaults__ or ())
    if hasattr(obj, "__self__") and hasattr(obj, "__func__"):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, dict):
        return list(obj.values())[:64]
    if isinstance(obj, (list, tuple)):
        return list(obj)[:64]
    if type(obj).__module__.startswith("scriptmod.runtime"):     # kernels, launches
        slots = [s for k in type(obj).__mro__ for s in getattr(k, "__slots__", ())]
        return list(getattr(obj, "__dict__", {}).values()) + \
            [getattr(obj, s) for s in slots if s != "__weakref__" and hasattr(obj, s)]
    return []


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
