"""The generated program: a graph as one Python function (``Executable``'s hot path).

One line per Python step (``runtime.steps``) or native segment (``runtime.native``), values
in local variables dropped at their last use, ``prim::If`` an ``if``/``else`` and
``prim::Loop`` a ``while`` loop over locals. A failing line maps back to its node, so the
error names it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from scriptmod.ir.errors import TraceGuardError
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from . import profiling, pycode, threads
from .errors import node_failure, noted
from .interpreter import InterpreterError, RaisedException, python_error
from .steps import StepPlan

if TYPE_CHECKING:
    from .executable import Executable


def _calls_blas(segment: Any) -> bool:
    """Whether a native segment's program calls BLAS (a GEMM too large for inline loops)."""
    from scriptmod.codegen.native import GemmStep
    return any(isinstance(st, GemmStep) and not st.inline for st in segment.program.steps)



# ---- the program builder ----------------------------------------------------------------------

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
        self.plan: StepPlan = ex.steps             # how each node runs: the program obeys it
        self.native, self.skipped = self.plan.native, self.plan.skipped
        self.state_reads, self.epilogues = self.plan.state_reads, self.plan.epilogues
        self.deferred = self.plan.deferred
        self.seg_at = {s.nodes[0]: (s, j) for j, p in enumerate(plan_list) for s in p.segments}
        self.built: dict[Node, str] = {}           # node -> the row that built its step
        self.step_of: dict[Node, Any] = {}         # node -> the step its line calls
        self.dying = _last_uses(graph, [s for p in plan_list for s in p.segments],
                                {g: src.inputs() for g, src in self.epilogues.items()})
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
                for ln in _bind_sizes(plan_list[j], j, [self.name[v] for v in graph.inputs]):
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
        decision = self.plan.decisions[node]
        self.built[node] = decision.step
        if decision.step == "constant":          # its value, bound once
            self.ns[f"c{k}"] = node.attrs.get("value")
            self._emit(depth, node, f"{outs[0]} = c{k}")
            return
        step, single = self.plan.step(node)
        inputs = [self.name[v] for v in node.inputs]
        dead = [self.name[v] for v in self.dying.get(node, ())]
        if node in self.epilogues:              # the GEMM before it, with this as epilogue
            inputs, dead = self._epilogue_args(node, inputs, dead)
        self.ns[f"h{k}"] = self.step_of[node] = step
        call = f"h{k}([{', '.join(inputs)}])"
        target = outs[0] if single else ", ".join(outs) + ("," if len(outs) == 1 else "")
        line = f"{target} = {call}" if outs else call
        if self.profiled:
            fk = self.ex.fused_kernel(node) if node.kind == Prim.FUSION_GROUP else None
            self.ns[f"ev{k}"] = profiling.python_step_event(node, fk) \
                if node not in self.epilogues else \
                profiling.epilogue_step_event(self.epilogues[node].nodes, node, fk)
            self._emit(depth, node, "t_ = clock()")
        # drop values at their last use, so a large intermediate is freed (and its
        # memory reused) as soon as eager would
        self._emit(depth, node, line + (f"; del {', '.join(dead)}" if dead else ""))
        if self.profiled:
            self._emit(depth, node, f"ev{k}(t_)")

    def _epilogue_args(self, node: Node, inputs: list[str], dead: list[str]
                       ) -> tuple[list[str], list[str]]:
        """The arguments and dying values of a group run as an epilogue
        (``runtime.epilogue``): its producer chain's outside inputs, then the group's
        inputs (the product's slot a placeholder)."""
        src = self.epilogues[node]
        inner = {self.name[m.output] for m in src.nodes}
        inputs = [self.name[v] for v in src.inputs()] + \
            ["None" if i == src.slot else name for i, name in enumerate(inputs)]
        dead = [d for d in dead if d not in inner] + \
            [self.name[v] for m in src.nodes for v in self.dying.get(m, ())
             if self.name[v] not in inner]
        return inputs, dead

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


def _bind_sizes(plan: Any, j: int, inputs: Sequence[str]) -> list[str]:
    """A symbolic plan's lines: its symbol values read from the inputs' shapes, bound to
    ``frame{j}`` when they differ from the last call's (``Frame.set_env``)."""
    if plan.arena is None:
        return []
    dims = [f"{inputs[i]}.shape[{d}]" + (f" // {k}" if k != 1 else "") for i, d, k in plan.binds]
    return [f"e{j} = ({', '.join(dims)},)", f"if frame{j}.env != e{j}:",
            f"    frame{j}.set_env(e{j})"]


def _unbound(graph: Graph, absent: frozenset[Node], segments: Sequence[Any]) -> frozenset[Value]:
    """The values no line of the program assigns: the results of ``absent`` nodes (native,
    skipped, deferred to an epilogue) that no native segment exports."""
    exported = {v for seg in segments for v in seg.exports}
    return frozenset(v for n in graph.walk() if n in absent for v in n.outputs
                     if v not in exported)


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
