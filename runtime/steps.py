"""How a node runs when it is not in a native segment: one registry of steps.

Each ``Row`` of ``ROWS`` is one way a node can run: its ``name`` (what the plan prints),
``applies(node, site)`` (why it applies, a short reason, or None) and ``build(node, site)``
(the ``Step``: a closure from the node's input values to its output value(s)). The rows are
tried in order and the first that applies wins (``choose``). ``StepPlan`` asks the registry
once per node of an ``Executable`` and records every decision with its reason, also for
the nodes native segments run (``runtime.native``); the generated program
(``runtime.program``) builds each line's step from the plan's row and decides nothing.

A new fast way to run an op is one ``Row`` in ``ROWS``, before the rows it should win over.
Rules that depend on the device ask the node's target (``runtime.targets``) for its
capabilities (``own_gemm``: our GEMM and attention kernels) instead of naming a device.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(2, 3), %w : Float(3, 4)):
    ...   %y : Float(2, 4) = sm::matmul(%x, %w)
    ...   %t : Float(4, 3) = sm::transpose[dim0=0, dim1=1](%w)
    ...   return (%y, %t)
    ... ''')
    >>> [choose(n, ARRAYS)[0].name for n in g.nodes]
    ['matmul', 'kernel']
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.graph import Block, Graph, Node, Prim
from scriptmod.ir.passes.effects import has_side_effects
from scriptmod.ir.types import BoolType, FloatType, IntType, TensorType
from . import profiling, pycode
from .fusion import TOPIC, FusedKernel
from .interpreter import DISPATCH, Interpreter, OpHandler
from .kernels import KERNELS, run_kernel
from .kernels.nn import matmul_rows
from .targets import target_type

Step = Callable[[list], Any]         # a Python step: its input values -> its output value(s)
Built = tuple[Step, bool]            # (step, whether it returns the one output itself)


# ---- the registry ---------------------------------------------------------------------------

@dataclass
class Site:
    """What a row may ask about the executable it plans for. ``ops``: the handler Python
    steps run through; ``array_steps``: it is ``ArrayOps`` with its own fast steps (the op
    rows below); ``plain_arrays``: exactly ``ArrayOps`` (a GEMM may take an epilogue);
    ``ex``: the ``Executable`` (its fusion groups' kernels); ``epilogues``: fusion group ->
    its ``runtime.epilogue.Source`` (the GEMM or convolution it runs after), and
    ``deferred``: each node of such a source -> its group."""
    ops: Any = None
    array_steps: bool = False
    plain_arrays: bool = False
    ex: Any = None
    graph: Graph | None = None
    epilogues: dict[Node, Any] = field(default_factory=dict)
    deferred: dict[Node, Node] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One way a node runs (see the module docstring). ``compiled``: its step runs machine
    code generated for the node's target; else NumPy/CuPy or Python."""
    name: str
    applies: Callable[[Node, Site], str | None]
    build: Callable[[Node, Site], Built]
    compiled: bool = False


ARRAYS = Site(array_steps=True)     # what ``ArrayOps.step`` asks for an op


def choose(node: Node, site: Site, after: str | None = None) -> tuple[Row, str]:
    """The first row (after the row named ``after``, if given) that applies to ``node``,
    and why."""
    start = 0 if after is None else [r.name for r in ROWS].index(after) + 1
    for row in ROWS[start:]:
        why = row.applies(node, site)
        if why is not None:
            return row, why
    raise NotImplementedError(f"the executor cannot run {node.kind}")   # (the last row applies)


def build(node: Node, site: Site, after: str | None = None) -> Built:
    """The step of the row ``choose`` picks."""
    return choose(node, site, after)[0].build(node, site)


def op_step(node: Node) -> Step:
    """``ArrayOps.step`` of a single-output op: the first op row that applies."""
    return build(node, ARRAYS)[0]


def target_of(node: Node) -> Any | None:
    """The target class (``runtime.targets``) of the devices of ``node``'s tensors; None for
    a mix of devices or a kind no target serves. The one place the rows ask for it."""
    try:
        return target_type(_devices(node))
    except NotImplementedError:
        return None


def _devices(node: Node) -> set[str]:
    return {v.type.device for v in list(node.inputs) + node.outputs
            if isinstance(v.type, TensorType) and v.type.device is not None}


def where(node: Node, compiled: bool) -> str:
    """The plan's target column: the target's name for compiled code, else the array
    library (NumPy, CuPy) or plain Python for a node without tensors."""
    devices = _devices(node)
    if compiled:
        t = target_of(node)
        return t.name if t is not None else "?"
    if not devices:
        return "Python"
    kinds = {d.split(":", 1)[0] for d in devices}
    return "NumPy" if kinds == {"cpu"} else "CuPy" if kinds == {"cuda"} else "/".join(sorted(kinds))


def _single(node: Node, fn: Callable[[list], Any]) -> Built:
    """A list-returning ``fn`` as the step of ``node``: its one output, or all of them."""
    if len(node.outputs) == 1:
        return (lambda a: fn(a)[0]), True
    return fn, False


# ---- rows: structure-free nodes the program binds or defers -----------------------------------

def _is_constant(node: Node, site: Site) -> str | None:
    if node.kind == Prim.CONSTANT and len(node.outputs) == 1 and \
            type(site.ops).constant is OpHandler.constant:
        return "bound once into the program's namespace"
    return None


def _constant(node: Node, site: Site) -> Built:
    value = node.attrs.get("value")
    return (lambda a: value), True


_PRODUCER = {"gemm": "our GEMM", "conv": "our convolution"}


def _is_epilogue(node: Node, site: Site) -> str | None:
    src = site.epilogues.get(node)
    if src is not None:
        what = " and ".join(n.kind for n in src.nodes)
        if node.kind != Prim.FUSION_GROUP:
            return f"folded into {_PRODUCER[src.kind]} ({what}) per call on running " \
                   f"statistics: one pass over the output fewer"
        return f"the epilogue of {_PRODUCER[src.kind]} ({what} feeding input {src.slot}): " \
               f"applied per block of its output while it is in cache"
    group = site.deferred.get(node)
    if group is not None:
        return f"deferred to its epilogue group's line: " \
               f"{_PRODUCER[site.epilogues[group].kind]}, the group per block of its output"
    return None


def _epilogue(node: Node, site: Site) -> Built:
    """The group's step with its producer chain (``runtime.epilogue``), called with the
    chain's outside inputs then the group's inputs; for a deferred node, its own step."""
    from .epilogue import chain_fallback
    if node in site.deferred:
        return build(node, site, "epilogue")
    src = site.epilogues[node]
    fallback = chain_fallback(src, [build(n, site, "epilogue")[0] for n in src.nodes])
    if node.kind != Prim.FUSION_GROUP:                  # a BatchNorm folded into its conv
        from .conv_epilogue import conv_batch_norm_step
        return conv_batch_norm_step(node, build(node, site, "epilogue")[0], fallback), True
    group = group_fn(node, site)
    fk = site.ex.fused_kernel(node)
    if src.kind == "gemm":
        from .gemm import epilogue_step
        return epilogue_step(src.slot, fk, lambda a: [group(a)[0]], fallback), True
    from .conv_epilogue import conv_epilogue_step
    return conv_epilogue_step(src, fk, lambda a: [group(a)[0]], fallback), True


# ---- rows: fusion groups ----------------------------------------------------------------------

def _has_kernel(node: Node, site: Site) -> str | None:
    if node.kind != Prim.FUSION_GROUP or site.ex.fused_kernel(node) is None:
        return None
    ops = [n for n in node.attrs["subgraph"].nodes if n.kind != Prim.CONSTANT]
    return f"one generated kernel for its {len(ops)} op(s) (FusedKernel)"


def _on_reference(node: Node, site: Site) -> str | None:
    if node.kind != Prim.FUSION_GROUP:
        return None
    return f"the reference kernels, op by op: {site.ex.fusion_reason(node)}"


def group_fn(node: Node, site: Site) -> Callable[[list], list]:
    """A fusion group's outputs (a list): its ``FusedKernel``, or its subgraph on the
    reference kernels where it has none."""
    fk = site.ex.fused_kernel(node)
    if fk is None:
        sub = node.attrs["subgraph"]
        return lambda a: Interpreter(sub, ops=site.ops).run_graph(sub, a)
    return fk


def _group(node: Node, site: Site) -> Built:
    return _single(node, group_fn(node, site))


def group_name(node: Node) -> str:
    """``FusionGroup(<ops>) at <source>``: how errors and logs name a group."""
    head = profiling.node_label(node)
    return f"{head} at {node.source}" if node.source else head


def _build_fused(node: Node) -> FusedKernel | str:
    """The group's ``FusedKernel``, or why it runs on the reference kernels."""
    devices = {v.type.device for v in list(node.inputs) + node.outputs
               if isinstance(v.type, TensorType)}
    if not devices or not (all(d.startswith("cuda") for d in devices) or devices == {"cpu"}):
        return f"no one device for its tensors ({sorted(map(str, devices))})"
    try:
        return FusedKernel(node.attrs["subgraph"], group_name(node))
    except NotImplementedError as e:
        irlog.log(TOPIC, f"{group_name(node)} runs on the reference kernels: {e}")
        return f"no lowering: {e}"


# ---- rows: single-output ops on arrays (ArrayOps) ---------------------------------------------

_PY_SCALARS = (IntType, FloatType, BoolType)


def _array_op(node: Node, site: Site) -> bool:
    """``ArrayOps`` runs this op with a fast step of its own (one output)."""
    return site.array_steps and node.is_op and len(node.outputs) == 1 \
        and S.REGISTRY[node.op_name].n_outputs == 1


def _is_scalar_kernel(node: Node, site: Site) -> str | None:
    if _array_op(node, site) and node.output.type in _PY_SCALARS and node.op_name in KERNELS \
            and not S.REGISTRY[node.op_name].has(S.FACTORY):
        # the type rule gives no dtype, so ``run_kernel`` would return the value untouched
        return f"a {node.output.type} result: the reference kernel's value as it is"
    return None


def _scalar_kernel(node: Node, site: Site) -> Built:
    fn, attrs = KERNELS[node.op_name], node.attrs
    if attrs:
        return (lambda a: fn(np, *a, **attrs)), True
    return (lambda a: fn(np, *a)), True


def _is_view_memo(node: Node, site: Site) -> str | None:
    if not (_array_op(node, site) and _memoizable(node)):
        return None
    inner, _ = choose(node, site, "view-memo")
    return f"a view of module attribute {node.inputs[0].node.attrs['name']!r}, reused " \
           f"while it is the same array; else {inner.name}"


def _view_memo(node: Node, site: Site) -> Built:
    return _memo_view(build(node, site, "view-memo")[0]), True


def _is_attention(node: Node, site: Site) -> str | None:
    out = node.outputs[0].type if node.outputs else None
    if _array_op(node, site) and node.op_name == "attention" and \
            isinstance(out, TensorType) and out.dtype is D.float32 and _own_kernels(node):
        return "float32: our fused attention kernel where the arrays fit, else the unfused chain"
    return None


def _attention(node: Node, site: Site) -> Built:
    return _attention_step(node.attrs["scale"]), True


def _own_kernels(node: Node) -> bool:
    """Whether the node's target runs our own GEMM and attention microkernels."""
    t = target_of(node)
    return t is not None and bool(t.own_gemm)


def _direct(node: Node, site: Site) -> D.DType | None:
    """The result dtype when the reference kernel may be called directly (``_direct_dtype``)."""
    return _direct_dtype(node, S.REGISTRY[node.op_name]) if _array_op(node, site) else None


def _plain(node: Node, site: Site) -> D.DType | None:
    """The dtype of a matmul ``np.matmul`` computes exactly (``_plain_matmul``), or None."""
    if not _array_op(node, site) or node.op_name != "matmul" or node.attrs:
        return None
    dt = _direct(node, site)
    return dt if dt is not None and _plain_matmul(node, dt) else None


def _is_own_gemm(node: Node, site: Site) -> str | None:
    if _plain(node, site) is D.float32 and _own_kernels(node) and _own_gemm(node):
        from . import gemm
        return f"float32, large enough, our GEMM beats BLAS here (SCRIPTMOD_GEMM={gemm.choice()})"
    return None


def _own_gemm_step(node: Node, site: Site) -> Built:
    from .gemm import matmul_step
    return matmul_step(_matmul_fn(node, D.float32)), True


def _is_matmul(node: Node, site: Site) -> str | None:
    dt = _plain(node, site)
    if dt is None:
        return None
    how = "matmul_rows: a stack of rows by a matrix as few GEMMs" if \
        _stack_by_matrix(node, dt) else "np.matmul"
    return f"{dt.name} operands and contraction dims fixed by the guards: {how}"


def _matmul(node: Node, site: Site) -> Built:
    fn = _matmul_fn(node, _plain(node, site))
    return (lambda a: fn(a[0], a[1])), True


def _matmul_fn(node: Node, dt: Any) -> Callable[[Any, Any], Any]:
    return matmul_rows if _stack_by_matrix(node, dt) else np.matmul


def _is_basic_index(node: Node, site: Site) -> str | None:
    if node.op_name == "index" and _direct(node, site) is not None and \
            _index_parts(node.attrs["spec"]) is not None:
        return "basic indexing (ints, slices with a positive step): one generated expression"
    return None


def _is_kernel(node: Node, site: Site) -> str | None:
    dt = _direct(node, site)
    if dt is None:
        return None
    return f"every operand already {dt.name} on the CPU: the reference kernel, called directly"


def _kernel(node: Node, site: Site) -> Built:
    """The reference kernel itself, its result made an array of the static dtype."""
    name, attrs = node.op_name, node.attrs
    fn, want = KERNELS[name], np.dtype(_direct(node, site).name)
    if name == "index":
        fn = _basic_index(attrs["spec"]) or fn

    def step(a: list) -> Any:
        out = fn(np, *a, **attrs)
        if type(out) is not np.ndarray or out.dtype != want:
            out = np.asarray(out, dtype=want)
        return out
    return step, True


def _is_op(node: Node, site: Site) -> str | None:
    if _array_op(node, site):
        return f"run_kernel: {_direct_check(node, S.REGISTRY[node.op_name])}"
    return None


def _op(node: Node, site: Site) -> Built:
    name, attrs = node.op_name, node.attrs
    return (lambda a: run_kernel(name, a, attrs)), True


# ---- rows: what the handler or the interpreter runs -----------------------------------------

def _is_get_attr(node: Node, site: Site) -> str | None:
    if site.array_steps and node.kind == Prim.GET_ATTR and len(node.outputs) == 1:
        return "the frontend's attribute callback"
    return None


def _handler_step(node: Node, site: Site) -> Built:
    return site.ops.step(node), True


def _is_handler_step(node: Node, site: Site) -> str | None:
    if not site.array_steps and len(node.outputs) == 1 and \
            type(site.ops).step is not OpHandler.step and site.ops.step(node) is not None:
        return f"{type(site.ops).__name__}.step, the handler's own fast step"
    return None


def _is_kind(kind: str, why: str) -> Callable[[Node, Site], str | None]:
    return lambda node, site: why if node.kind == kind else None


def _is_interpreted(node: Node, site: Site) -> str:
    method = DISPATCH.get(node.kind)
    if method is None:
        return f"{type(site.ops).__name__}.call_op" if node.is_op else "no way to run it"
    return f"Interpreter.{method}"


def _interpreted(node: Node, site: Site) -> Built:
    """The interpreter's method for the node's kind (ops: ``call_op``), through ``ops``."""
    interp = Interpreter(site.graph, ops=site.ops)
    method = DISPATCH.get(node.kind)
    if method is None and not node.is_op:
        raise NotImplementedError(f"the executor cannot run {node.kind}")
    run = getattr(interp, method) if method is not None else interp.call_op
    if len(node.outputs) == 1:
        return (lambda a: run(node, a)[0]), True       # one call per step, not two
    return (lambda a: run(node, a)), False


ROWS: list[Row] = [
    Row("constant", _is_constant, _constant),
    Row("epilogue", _is_epilogue, _epilogue, compiled=True),
    Row("fusion-group", _has_kernel, _group, compiled=True),
    Row("reference-kernel", _on_reference, _group),
    Row("scalar-kernel", _is_scalar_kernel, _scalar_kernel),
    Row("view-memo", _is_view_memo, _view_memo),
    Row("attention", _is_attention, _attention, compiled=True),
    Row("own-gemm", _is_own_gemm, _own_gemm_step, compiled=True),
    Row("matmul", _is_matmul, _matmul),
    Row("basic-index", _is_basic_index, _kernel),
    Row("kernel", _is_kernel, _kernel),
    Row("op", _is_op, _op),
    Row("get-attr", _is_get_attr, _handler_step),
    Row("handler-step", _is_handler_step, _handler_step),
    Row("call-method", _is_kind(Prim.CALL_METHOD, "the handler's call_method: a kept "
                                "submodule or library call"), _interpreted),
    Row("call-function", _is_kind(Prim.CALL_FUNCTION, "a Python function called at run "
                                  "time (the frontend's hook)"), _interpreted),
    Row("interpreter", _is_interpreted, _interpreted),
]


# ---- the plan: every node's step, target and reason --------------------------------------------

@dataclass(frozen=True)
class Decision:
    """How one node runs: ``step`` (a row's name, or ``native``, ``skipped``, ``state-read``,
    ``if``, ``loop``), ``target`` (where), ``reason`` (why), ``row`` (the registry row that
    builds its step; None for the rest) and ``depth`` (block nesting, for printing)."""
    node: Node
    step: str
    target: str
    reason: str
    row: Row | None = None
    depth: int = 0


class StepPlan:
    """How every node of ``graph`` runs, decided once for an ``Executable``: native segments
    (``plans``, block -> ``runtime.native.NativePlan``), module tensors read from the call's
    ``state`` tuple, GEMMs deferred into their epilogue group, and a registry row for each
    other node. ``decisions`` is in graph order, nested blocks after their node."""

    def __init__(self, graph: Graph, ex: Any, plans: dict[Block, Any]) -> None:
        plan_list = list(plans.values())
        self.native = frozenset().union(*(p.native_nodes for p in plan_list))
        self.skipped = frozenset().union(*(p.skipped for p in plan_list))
        self.state_reads = {n: i for p in plan_list for n, i in p.state_reads.items()}
        self._unread: frozenset[Node] = frozenset()
        self._read_state(graph, ex)
        self.site = Site(ex.ops, ex.array_steps, ex.plain_arrays, ex, graph)
        self.site.epilogues = self._epilogues(graph)
        self.site.deferred = {m: g for g, src in self.site.epilogues.items() for m in src.nodes}
        self.epilogues, self.deferred = self.site.epilogues, frozenset(self.site.deferred)
        self._why = {n: w for p in plan_list for n, w in getattr(p, "why", {}).items()}
        self._segment = {n: s.index for p in plan_list for s in p.segments for n in s.nodes}
        self.decisions: dict[Node, Decision] = {}
        self._decide(graph.block, 0)

    def step(self, node: Node) -> Built:
        """The node's step, built by its row (the generated program calls this)."""
        row = self.decisions[node].row
        assert row is not None, f"{node.kind} has no Python step ({self.decisions[node].step})"
        return row.build(node, self.site)

    # ---- deciding ---------------------------------------------------------------------------
    def _decide(self, block: Block, depth: int) -> None:
        for node in block:
            self.decisions[node] = self._decision(node, depth)
            for b in node.blocks:
                self._decide(b, depth + 1)

    def _decision(self, node: Node, depth: int) -> Decision:
        why = self._why.get(node)
        if node in self.native:
            reason = why or f"native segment {self._segment.get(node, '?')}"
            return Decision(node, "native", where(node, True), reason, None, depth)
        if node in self.skipped:
            reason = why or ("not run: its users read module tensors from state"
                             if node in self._unread else "not run: native code reads it")
            return Decision(node, "skipped", "-", reason, None, depth)
        if node in self.state_reads:
            return Decision(node, "state-read", "Python", f"module tensor {self.state_reads[node]}"
                            " of the call's state tuple", None, depth)
        if node.kind in (Prim.IF, Prim.LOOP):
            what = "an if/else" if node.kind == Prim.IF else "a while loop over locals"
            return Decision(node, node.kind.split("::")[-1].lower(), "Python",
                            f"{what} in the program; its blocks below", None, depth)
        row, reason = choose(node, self.site)
        if why is not None and row.name != "constant":
            reason += f" (not native: {why})"
        return Decision(node, row.name, where(node, row.compiled), reason, row, depth)

    def _read_state(self, graph: Graph, ex: Any) -> None:
        """Python steps read module tensors from ``state`` too (a tuple index, where the
        attribute callback walks the module), unless the graph assigns attributes."""
        index = ex.state_index
        if index is None or any(n.kind == Prim.SET_ATTR for n in graph.walk()):
            return
        for n in graph.walk():
            if n.kind == Prim.GET_ATTR and isinstance(n.output.type, TensorType) \
                    and n not in self.state_reads and n not in self.native:
                i = index(n)
                if i is not None and i < ex.n_state:
                    self.state_reads[n] = i
        # a submodule read only for its tensors, now read from ``state``, is not read at all
        unread = set(self.skipped)
        for n in reversed(list(graph.walk())):
            if n.kind == Prim.GET_ATTR and n not in self.native and n.output.uses and all(
                    u.user in self.state_reads or u.user in unread for u in n.output.uses):
                unread.add(n)
        self._unread = frozenset(unread) - self.skipped
        self.skipped = frozenset(unread)

    def _epilogues(self, graph: Graph) -> dict[Node, Any]:
        """Fusion groups that run as the epilogue of the GEMM or convolution before them
        (``runtime.epilogue.find``), with that producer chain: all Python steps, the
        producer one our kernels take, plain array ops. The chain's lines move to the
        group's (nothing else reads their results)."""
        from .epilogue import batch_norm_source, find
        if not self.site.plain_arrays:
            return {}
        out: dict[Node, Any] = {}
        claimed: set[Node] = set()
        for n in graph.walk():
            if n.kind == Prim.FUSION_GROUP:
                src = find(n)
            elif n.is_op and n.op_name == "batch_norm" and n not in claimed:
                src = batch_norm_source(n)
            else:
                src = None
            if src is None or n in self.native or any(
                    m in self.native or m in self.skipped for m in src.nodes):
                continue
            m = src.head
            if not (_own_kernels(m) and _movable(src.nodes, n)):
                continue
            if src.kind == "gemm" and not (_plain_matmul(m, D.float32) and _own_gemm(m)):
                continue
            out[n] = src
            claimed.update(src.nodes)
        return out


def _movable(nodes: Sequence[Node], to: Node) -> bool:
    """Whether ``nodes`` (a chain in graph order, same block) may run at ``to``'s place
    instead: nothing else between them has a side effect (an in-place write could change
    their operands)."""
    chain = set(nodes)
    n = nodes[0].next
    while n is not None and n is not to:
        if n not in chain and has_side_effects(n):
            return False
        n = n.next
    return n is to


# ---- helpers of the op rows ---------------------------------------------------------------------

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
    parts = _index_parts(spec)
    if parts is None:
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


def _index_parts(spec: Sequence[tuple]) -> list[str] | None:
    """The subscript of each ``spec`` entry as Python text (``int(ops[0])``, ``slice(1,
    None, None)``, ``None``, ``...``), or None where ``_basic_index`` does not apply."""
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
    return parts


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
    """The result dtype when the reference kernel may be called without ``run_kernel``
    (no input cast, no result conversion), else None (``_direct_check`` says why)."""
    found = _direct_check(node, schema)
    return found if isinstance(found, D.DType) else None


def _direct_check(node: Node, schema: S.OpSchema) -> D.DType | str:
    """``_direct_dtype``'s answer: the dtype, or why ``run_kernel`` must run the op."""
    if schema.has(S.ELEMENTWISE):
        return "an elementwise op: dtype promotion"
    if schema.has(S.FACTORY) or node.op_name not in KERNELS:
        return "a factory: its dtype and device from its arguments" \
            if schema.has(S.FACTORY) else "no reference kernel of its own"
    t = node.outputs[0].type
    if not isinstance(t, TensorType) or t.dtype is None or t.device != "cpu":
        return "not a CPU tensor result of a known dtype"
    if t.dtype in (D.float16, D.bfloat16) or t.dtype.category == D.COMPLEX:
        return f"a {t.dtype.name} result: converted"
    tensors = [v.type for v in node.inputs if isinstance(v.type, TensorType)]
    if not tensors or any(u.dtype is not t.dtype or u.device != "cpu" for u in tensors):
        return "operands of another dtype or device: cast"
    if len(tensors) != len(node.inputs):
        return "scalar or list operands may steer the dtype rule"
    return t.dtype
