"""How a node runs when it is not in a native segment: its Python step.

``_step`` answers for one node of a generated program (``runtime.program``): a fusion
group's kernel (or the reference kernels), the handler's fast step for an op, or the
interpreter's method.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir import log as irlog
from scriptmod.ir import schema as S
from scriptmod.ir.graph import Node, Prim
from scriptmod.ir.types import BoolType, FloatType, IntType, TensorType
from . import profiling, pycode
from .fusion import TOPIC, FusedKernel
from .interpreter import DISPATCH, Interpreter
from .kernels import KERNELS, run_kernel
from .kernels.nn import matmul_rows

if TYPE_CHECKING:
    from .executable import Executable

Step = Callable[[list], Any]         # a Python step: its input values -> its output value(s)
_REFERENCE = "reference"             # marker: this fusion group runs on the reference kernels


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
