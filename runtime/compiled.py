"""The native executor: an ``Interpreter`` that runs ``prim::FusionGroup`` nodes as compiled
kernels (``runtime.fusion``) and every other node with the reference kernels (matmul stays
BLAS through ``run_kernel``). A control-flow-free graph is compiled once to a Python
function (``Program``) so the per-call path is one line per node.

    >>> from scriptmod.ir import parse
    >>> from scriptmod.ir.passes import fuse_elementwise
    >>> graph = fuse_elementwise(parse('''graph(%x : Float(B, 4), %a : Float(4)):
    ...   %m : Float(B, 4) = sm::mul(%x, %a)
    ...   %y : Float(B, 4) = sm::relu(%m)
    ...   return (%y)
    ... '''))
    >>> x, a = np.ones((2, 4), np.float32), np.arange(4, dtype=np.float32) - 1
    >>> CompiledInterpreter(graph).run(x, a)                # mul + relu: one native kernel
    array([[0., 0., 1., 2.],
           [0., 0., 1., 2.]], dtype=float32)
    >>> [k.llvm_ir[:28] for k in fused_kernels(graph)]
    ['; ModuleID = "sm_ew_...']

The ``FusedKernel`` of a group is built on first use and cached on the node itself
(``node.fused_kernel``), so every interpreter over the same specialized graph shares its
compiled kernels, plans and output buffers. A group typed on a CUDA device (CuPy arrays) runs
as a ``runtime.cuda_fusion.CudaFusedKernel``. A group that cannot be lowered (an op without a
scalar formula, mixed devices, CUDA without CuPy) is remembered as such and runs through the
reference path.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.errors import TraceGuardError
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.types import TensorType
from .cuda_fusion import CudaFusedKernel
from .fusion import TOPIC, FusedKernel
from .interpreter import DISPATCH, Interpreter, InterpreterError, RaisedException, failure
from .kernels import KERNELS, run_kernel
from .kernels.nn import matmul_rows

Handler = Callable[[Interpreter, Node, list], Any]
_NO_PROGRAM = "none"
_ATTR = "fused_kernel"          # the node attribute (not an IR attr) holding the kernel
_REFERENCE = "reference"        # marker: this group runs on the reference kernels


def group_name(node: Node) -> str:
    """``FusionGroup(<ops>) at <source>``: how errors and logs name a group."""
    ops = [n.op_name for n in node.attrs["subgraph"].nodes if n.kind != Prim.CONSTANT]
    head = f"FusionGroup({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})"
    return f"{head} at {node.source}" if node.source else head


def fused_kernel(node: Node) -> FusedKernel | None:
    """The node's ``FusedKernel`` (built once), or None when it runs on the reference path."""
    fk = node.__dict__.get(_ATTR)
    if fk is None:
        fk = node.__dict__[_ATTR] = _build(node)
    return fk if isinstance(fk, FusedKernel) else None


def _build(node: Node) -> FusedKernel | str:
    devices = {v.type.device for v in list(node.inputs) + node.outputs
               if isinstance(v.type, TensorType)}
    try:
        if devices and all(d.startswith("cuda") for d in devices):     # CuPy arrays
            return CudaFusedKernel(node.attrs["subgraph"], group_name(node))
        if devices - {"cpu"}:
            return _REFERENCE
        return FusedKernel(node.attrs["subgraph"], group_name(node))
    except NotImplementedError as e:
        irlog.log(TOPIC, f"{group_name(node)} runs on the reference kernels: {e}")
        return _REFERENCE


def fused_kernels(graph: Graph) -> list[FusedKernel]:
    """The compiled kernel object of every fusion group of ``graph`` (nested blocks too)."""
    out = []
    for node in graph.walk():
        if node.kind == Prim.FUSION_GROUP:
            fk = fused_kernel(node)
            if fk is not None:
                out.append(fk)
    return out


class CompiledInterpreter(Interpreter):
    """Fusion groups run natively; everything else as in ``Interpreter``.

    A graph without control flow runs through a ``Program`` (one generated Python function)
    built on its first run and cached on the graph; graphs with blocks run node by node.
    """

    @classmethod
    def fast_handler(cls, node: Node) -> Handler | None:
        """A subclass may return a faster single-output handler for ``node`` (same result
        as its method for that node kind); None keeps the method."""
        return None

    def run(self, *args: Any) -> Any:
        program = Program.of(self.graph, type(self))
        if program is None:
            return super().run(*args)
        outs = program.run(self, args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fusion_group(self, node: Node, args: list[Any]) -> Sequence[Any]:
        fk = node.__dict__.get(_ATTR) or fused_kernel(node)
        if fk is _REFERENCE or fk is None:
            return self.run_graph(node.attrs["subgraph"], args)
        return fk(args)


# ---- straight-line programs ------------------------------------------------------------------

def _last_uses(graph: Graph) -> dict[int, list[Value]]:
    """Node index -> the values whose last use is that node (graph outputs never die)."""
    nodes = graph.nodes
    last: dict[Value, int] = {}
    for k, node in enumerate(nodes):
        for v in node.outputs:
            last[v] = k                      # an unused result dies where it is made
        for v in node.inputs:
            last[v] = k
    keep = set(graph.outputs)
    out: dict[int, list[Value]] = {}
    for v, k in last.items():
        if v not in keep:
            out.setdefault(k, []).append(v)
    return out


class Program:
    """A control-flow-free graph compiled to one Python function (as ``torch.fx`` does):
    one line per node, values in local variables, each node's handler bound once, constants
    inlined. A failing line is mapped back to its node for the error message."""

    def __init__(self, graph: Graph, cls: type[CompiledInterpreter]) -> None:
        name: dict[Value, str] = {v: f"v{i}" for i, v in enumerate(graph.inputs)}
        ns: dict[str, Any] = {}
        self.nodes: list[Node] = []
        lines = [f"def program(it, {', '.join(name[v] for v in graph.inputs)}):"]
        dying = _last_uses(graph)
        for k, node in enumerate(graph.nodes):
            for v in node.outputs:
                name[v] = f"v{len(name)}"
            outs = [name[v] for v in node.outputs]
            self.nodes.append(node)
            if node.kind == Prim.CONSTANT and len(outs) == 1 and \
                    getattr(cls, "constant") is Interpreter.constant:
                ns[f"c{k}"] = node.attrs.get("value")
                lines.append(f"    {outs[0]} = c{k}")
                continue
            handler, single = _handler(node, cls)
            ns[f"h{k}"], ns[f"n{k}"] = handler, node
            call = f"h{k}(it, n{k}, [{', '.join(name[v] for v in node.inputs)}])"
            target = outs[0] if single else ", ".join(outs) + ("," if len(outs) == 1 else "")
            line = f"    {target} = {call}" if outs else f"    {call}"
            dead = [name[v] for v in dying.get(k, ())]
            # drop values at their last use (same line: line k + 2 is still node k), so a
            # large intermediate is freed, and its memory reused, as soon as eager would
            lines.append(line + (f"; del {', '.join(dead)}" if dead else ""))
        lines.append(f"    return [{', '.join(name[v] for v in graph.outputs)}]")
        self.n_inputs = len(graph.inputs)
        self.source = "\n".join(lines) + "\n"
        exec(compile(self.source, "<scriptmod program>", "exec"), ns)
        self.fn = ns["program"]

    @staticmethod
    def of(graph: Graph, cls: type[CompiledInterpreter]) -> "Program | None":
        """The cached program of ``graph`` for interpreter class ``cls`` (None: has blocks)."""
        cache = graph.__dict__.setdefault("_sm_programs", {})
        prog = cache.get(cls)
        if prog is None:
            ok = all(not n.blocks for n in graph.nodes)
            prog = cache[cls] = Program(graph, cls) if ok else _NO_PROGRAM
        return None if prog is _NO_PROGRAM else prog

    def run(self, interp: Interpreter, args: Sequence[Any]) -> list[Any]:
        if len(args) != self.n_inputs:
            raise TypeError(f"graph takes {self.n_inputs} argument(s), got {len(args)}")
        try:
            return self.fn(interp, *args)
        except (InterpreterError, RaisedException, TraceGuardError):
            raise
        except Exception as e:
            node = self._failing_node(e)
            if node is None:
                raise
            where = f" ({node.source})" if node.source else ""
            raise failure(e)(f"{node.kind} failed{where}: {type(e).__name__}: {e}\n"
                             f"    {node!r}") from e

    def _failing_node(self, e: BaseException) -> Node | None:
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code is self.fn.__code__:
                line = tb.tb_lineno
            tb = tb.tb_next
        k = None if line is None else line - 2            # line 1 is the ``def``
        return self.nodes[k] if k is not None and 0 <= k < len(self.nodes) else None


def _handler(node: Node, cls: type[CompiledInterpreter]) -> tuple[Handler, bool]:
    """How one node runs: a fast closure for ops and fusion groups, else the class's method."""
    single = len(node.outputs) == 1
    if node.is_op:
        return _op_handler(node), S.REGISTRY[node.op_name].n_outputs == 1
    fast = cls.fast_handler(node) if single else None
    if fast is not None:
        return fast, True
    method = DISPATCH.get(node.kind)
    if method is None:
        raise NotImplementedError(f"the interpreter cannot run {node.kind}")
    fn = getattr(cls, method)
    if node.kind == Prim.FUSION_GROUP and fn is CompiledInterpreter.fusion_group and single:
        return _group_handler(node), True
    if single:
        return (lambda it, n, a: fn(it, n, a)[0]), True
    return fn, False


def _group_handler(node: Node) -> Handler:
    fk = fused_kernel(node)
    if fk is None:
        return lambda it, n, a: it.run_graph(n.attrs["subgraph"], a)[0]
    return lambda it, n, a: fk(a)[0]


def _op_handler(node: Node) -> Handler:
    """``run_kernel``; or the reference kernel itself when the static types show that
    ``run_kernel`` would neither cast an input nor convert the result (a CPU op, not
    elementwise or a factory, every tensor operand already of the result dtype, no halves).
    View ops of module state are memoized (see ``_memo_view``)."""
    name, attrs = node.op_name, node.attrs
    schema = S.REGISTRY[name]
    if schema.n_outputs > 1:
        return lambda it, n, a: run_kernel(name, a, attrs)
    dt = _direct_dtype(node, schema)
    if dt is None:
        handler: Handler = lambda it, n, a: run_kernel(name, a, attrs)   # noqa: E731
    elif name == "matmul" and not attrs and _plain_matmul(node, dt):
        # the guards already proved what ``_matmul`` checks; a stack times a float matrix
        # takes the few-GEMMs path of the kernel
        matmul = matmul_rows if _stack_by_matrix(node, dt) else np.matmul

        def handler(it: Interpreter, n: Node, a: list) -> Any:
            return matmul(a[0], a[1])
    else:
        fn, want = KERNELS[name], np.dtype(dt.name)

        def handler(it: Interpreter, n: Node, a: list) -> Any:
            out = fn(np, *a, **attrs)
            if type(out) is not np.ndarray or out.dtype != want:
                out = np.asarray(out, dtype=want)
            return out
    return _memo_view(node, handler) if _memoizable(node) else handler


VIEW_OPS = frozenset({"transpose", "permute", "unsqueeze", "squeeze", "narrow", "expand",
                      "reshape"})


def _memoizable(node: Node) -> bool:
    """A view op of a module attribute (a weight): same input object, same view."""
    ins = node.inputs
    return (node.op_name in VIEW_OPS and bool(ins) and ins[0].node.kind == Prim.GET_ATTR
            and all(v.node.kind == Prim.CONSTANT for v in ins[1:]))


def _memo_view(node: Node, handler: Handler) -> Handler:
    """Reuse the last result while the input is the same array object and the result was a
    view of it (in-place updates of the weight show through; a new ``.data`` misses).
    One tuple slot, replaced atomically, so threads never see a mismatched pair."""
    memo: list = [None]

    def view(it: Interpreter, n: Node, a: list) -> Any:
        x, last = a[0], memo[0]
        if last is not None and last[0] is x:
            return last[1]
        out = handler(it, n, a)
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
