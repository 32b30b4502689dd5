"""A fusion group's subgraph -> ``KernelSpec``: what can be lowered, the lowering itself, and
the layout of one set of input shapes and strides.

``lower_group`` numbers the subgraph's values as ``KernelSpec`` does (inputs, then one per op
step) and gives a spec without a layout (inputs of kind ``unknown``, the group's types kept on
it). ``plan_layout`` classifies each input for concrete shapes and strides (size 1:
``scalar``; C order over the output: ``contiguous``; else ``strided``), merges the
dimensions every strided input walks uniformly, and returns the laid-out spec with its
``meta`` array. A runtime backend does this per call layout; a whole-graph program once, for
static shapes.

    >>> from scriptmod.ir import parse
    >>> sub = parse('''graph(%x : Float(B, 4), %a : Float(4)):
    ...   %m : Float(B, 4) = sm::mul(%x, %a)
    ...   %y : Float(B, 4) = sm::relu(%m)
    ...   return (%y)
    ... ''')
    >>> spec = lower_group(sub)
    >>> print(spec.text())
    kernel rank=2
      %0 = input float32:unknown
      %1 = input float32:unknown
      %2 = float32 mul(%0, %1)
      %3 = float32 relu(%2)
      return %3:float32
    >>> laid, meta = plan_layout(spec, [(3, 4), (4,)], [(4, 1), (1,)], (3, 4))
    >>> [s.text() for s in laid.inputs], laid.rank, meta
    (['float32:contiguous', 'float32:strided:1'], 2, (3, 4, 0, 1))
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir import schema as S
from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.ops import rules as R
from scriptmod.ir.types import TensorType
from .formulas import FORMULAS
from .kernel import (SCALAR_INTS, UNKNOWN, Imm, InputSpec, KernelSpec, OpStep, broadcast_strides,
                     scalar_overflow)

DTYPES = frozenset({D.bool_, D.uint8, D.int8, D.int16, D.int32, D.int64, D.float16,
                    D.bfloat16, D.float32, D.float64})
_ATTRS = {"clamp": {"min", "max"}, "cast": {"dtype"}, "isclose": {"rtol", "atol", "equal_nan"}}
# Integer division by zero raises in PyTorch and in the reference kernel; a native kernel
# cannot raise, so these stay unfused on integers (their formula maps b == 0 to (a, 0)).
_RAISING_ON_INTS = frozenset({"floor_divide", "remainder"})


# ---- what can be lowered ---------------------------------------------------------------------

def supported_on(node: Node, on_device: Callable[[str], bool]) -> bool:
    """Whether ``node`` can join a fusion group that a backend running the devices accepted
    by ``on_device`` compiles: a scalar formula, every tensor on such a device, dtypes the
    code generators handle, and only attributes the formula reads.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(4)):
        ...   %y : Float(4) = sm::exp(%x)
        ...   return (%y)
        ... ''')
        >>> supported_on(g.nodes[0], lambda d: d == "cpu"), supported_on(g.nodes[0], str.isdigit)
        (True, False)
    """
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


def on_kind(device: str, kind: str) -> bool:
    """Whether ``device`` ("cpu", "cuda", "cuda:1") is of ``kind`` ("cpu", "cuda").

        >>> on_kind("cuda:1", "cuda"), on_kind("cpu", "cuda")
        (True, False)
    """
    return device == kind or device.startswith(kind + ":")


def can_lower(node: Node, device_kind: str) -> bool:
    """Whether codegen can lower ``node`` into a kernel for devices of ``device_kind``
    ("cpu": LLVM, "cuda": CUDA C): ``supported_on`` with every tensor on such a device. Each
    ``runtime.targets`` target's ``can_lower`` is this for its kind; the fusion passes get it
    from the target (``scriptmod.jit._fuser``).

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(4)):
        ...   %y : Float(4) = sm::exp(%x)
        ...   return (%y)
        ... ''')
        >>> can_lower(g.nodes[0], "cpu"), can_lower(g.nodes[0], "cuda")
        (True, False)
    """
    return supported_on(node, lambda device: on_kind(device, device_kind))


def _integer_result(node: Node) -> bool:
    t = node.outputs[0].type
    return isinstance(t, TensorType) and not t.dtype.is_floating_point


# ---- lowering: subgraph -> layout-free spec ----------------------------------------------------

def lower_group(subgraph: Graph) -> KernelSpec:
    """The ``KernelSpec`` of a fusion group's subgraph, inputs of kind ``unknown``, rank the
    outputs' rank; scalar constants become ``Imm`` arguments typed by the op's promotion rule.
    Raises ``NotImplementedError`` naming what cannot be lowered (see the module docstring)."""
    index: dict[Value, int] = {v: i for i, v in enumerate(subgraph.inputs)}
    ops: list[OpStep] = []
    rows = [n.op_name for n in subgraph.nodes if n.is_op and n.op_name not in FORMULAS
            and S.REGISTRY[n.op_name].has(S.ROW)]
    if rows:
        raise NotImplementedError(f"fusion: a row group ({', '.join(rows)}) runs as a row "
                                  f"kernel of a native program (codegen.rows), not as an "
                                  f"elementwise kernel")
    lower_nodes(subgraph, index, ops)
    for v in subgraph.outputs:
        if v not in index or index[v] < len(subgraph.inputs):
            raise NotImplementedError("fusion: a group output must be computed by the group")
    in_types = [_tensor(v) for v in subgraph.inputs]
    out_types = [_tensor(v) for v in subgraph.outputs]
    if len({t.shape for t in out_types}) != 1:
        raise NotImplementedError(f"fusion: outputs of different shapes "
                                  f"{sorted({str(t.shape) for t in out_types})}")
    names = [v.debug_name or f"input {i}" for i, v in enumerate(subgraph.inputs)]
    return KernelSpec([InputSpec(_dt(t), UNKNOWN) for t in in_types], ops,
                      [index[v] for v in subgraph.outputs], [_dt(t) for t in out_types],
                      rank=len(out_types[0].shape or ()) if out_types else 1,
                      in_types=in_types, in_names=names, out_types=out_types)


Expander = Callable[[Node, dict, list], "int | None"]


def lower_nodes(subgraph: Graph, index: dict[Value, int], ops: list[OpStep],
                expand: Expander | None = None, who: str = "fusion") -> None:
    """Append the subgraph's ops to ``ops`` as steps, numbering values in ``index`` (inputs
    first, as ``KernelSpec`` does); scalar constants become ``Imm`` arguments. ``expand(node,
    index, ops)``: steps of its own for a node (a row op), returning its value, or None."""
    consts: dict[Value, Any] = {}
    for node in subgraph.nodes:
        if node.kind == Prim.CONSTANT:
            consts[node.output] = node.attrs.get("value")
            continue
        if not node.is_op or len(node.outputs) != 1:
            raise NotImplementedError(f"{who}: cannot lower {node.kind} in a fusion group")
        got = expand(node, index, ops) if expand is not None else None
        scalar = _opmath_scalar(node, consts) if got is None else None
        if scalar is not None:
            got = _lower_opmath(node, scalar, index, consts, len(subgraph.inputs), ops)
        if got is None:
            args = tuple(_arg(node, v, index, consts) for v in node.inputs)
            if node.op_name in COMPARES_PROMOTED:
                args = _promoted(node, args, len(subgraph.inputs), ops)
            ops.append(OpStep(node.op_name, args, dict(node.attrs), _dt(_tensor(node.output))))
            got = len(subgraph.inputs) + len(ops) - 1
        index[node.output] = got


def _opmath_scalar(node: Node, consts: dict[Value, Any]) -> Value | None:
    """The input that a ``SCALAR_OPMATH`` node of a float16/bfloat16 result reads unrounded
    in float32, as eager does (``runtime.kernels``): ``other`` when it is a Python number or
    a 0-d tensor of another dtype, or a Python number ``self`` of a commutative op (``mul(2.5,
    x)`` is ``mul(x, 2.5)``); None when there is none."""
    if not S.REGISTRY[node.op_name].has(S.SCALAR_OPMATH) or \
            _dt(_tensor(node.output)) not in (D.float16, D.bfloat16):
        return None
    self, other = node.inputs[:2]
    t = other.type
    if isinstance(t, TensorType):
        if t.shape == () and t.dtype is not node.output.type.dtype:
            return other
    elif isinstance(consts.get(other), (bool, int, float)):
        return other
    commutative = S.REGISTRY[node.op_name].has(S.COMMUTATIVE)
    return self if commutative and isinstance(consts.get(self), (bool, int, float)) else None


def _lower_opmath(node: Node, scalar: Value, index: dict[Value, int], consts: dict[Value, Any],
                  n_inputs: int, ops: list[OpStep]) -> int:
    """``node`` as PyTorch's kernel computes it: both operands in float32 (the ``scalar``
    unrounded: float16 0 * 1e30 is 0, 3 * 1.1 is 3.3008), the op in float32, its result
    rounded to the half dtype once."""
    f32 = D.float32
    args = []
    for v in node.inputs:
        a = _arg(node, v, index, consts)
        if isinstance(a, Imm):
            if v is scalar:   # typed by promotion as the half dtype: read it as float32
                a = Imm(a.value, f32)
        elif _dt(_tensor(v)) is not f32:
            ops.append(OpStep("cast", (a,), {"dtype": f32}, f32))
            a = n_inputs + len(ops) - 1
        args.append(a)
    ops.append(OpStep(node.op_name, tuple(args), dict(node.attrs), f32))
    out = _dt(_tensor(node.output))
    ops.append(OpStep("cast", (n_inputs + len(ops) - 1,), {"dtype": out}, out))
    return n_inputs + len(ops) - 1


# ops whose bool result compares the operands in their promoted dtype (PyTorch's rules, so a
# 0-d int8 -1 against a uint8 tensor is 255, and int64 max against float16 is inf)
COMPARES_PROMOTED = frozenset(n for n, s in S.REGISTRY.items() if s.dtype_rule is R.to_bool
                              and S.ELEMENTWISE in s.flags and S.OWN_DTYPES not in s.flags)


def _promoted(node: Node, args: tuple, n_inputs: int, ops: list[OpStep]) -> tuple:
    """``args`` with each tensor operand not of the promoted dtype cast to it by a step."""
    dt = _imm_dtype(node, node.inputs[0])
    out = []
    for a, v in zip(args, node.inputs):
        if not isinstance(a, Imm) and _dt(_tensor(v)) is not dt:
            ops.append(OpStep("cast", (a,), {"dtype": dt}, dt))
            a = n_inputs + len(ops) - 1
        out.append(a)
    return tuple(out)


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
    if type(consts[v]) is int and consts[v] not in SCALAR_INTS:
        raise scalar_overflow(consts[v], node.op_name)
    return Imm(consts[v], _imm_dtype(node, v))


def _imm_dtype(node: Node, v: Value) -> DType:
    """The dtype a Python scalar operand computes in: the op's promoted dtype (PyTorch's
    weak scalars), or its float result when the op computes in float from int operands
    (true division, atan2: uint8 5 / -1 is -5.0, not 5 / 255), bool for ``where``'s
    condition."""
    operands = []
    for u in node.inputs:
        t = u.type
        operands.append((t.dtype, t.shape) if isinstance(t, TensorType)
                        else type(u.node.attrs.get("value")))
    if node.op_name == "where":
        if node.inputs[0] is v:
            return D.bool_
        operands = operands[1:]
    promoted, result = R.promote(operands, {}), _dt(_tensor(node.output))
    if promoted not in DTYPES or result.is_floating_point and not promoted.is_floating_point:
        return result
    return promoted


# ---- layouts: shapes and strides -> laid-out spec and meta ---------------------------------

def plan_layout(spec: KernelSpec, shapes: Sequence[Sequence[int]],
                elem_strides: Sequence[Sequence[int]],
                out_shape: Sequence[int]) -> tuple[KernelSpec, tuple[int, ...]]:
    """``(laid-out spec, meta)`` for inputs of ``shapes`` and element strides ``elem_strides``
    broadcast to ``out_shape``. The spec's rank is the coalesced rank (at least 1); ``meta``
    is ``()`` when no input is strided (the kernel then reads none).
    Raises ``ValueError`` when a shape does not broadcast to ``out_shape``."""
    if not len(shapes) == len(elem_strides) == len(spec.inputs):
        raise ValueError(f"plan_layout: expected {len(spec.inputs)} shapes and strides, got "
                         f"{len(shapes)} and {len(elem_strides)}")
    full = [broadcast_strides(sh, st, out_shape) for sh, st in zip(shapes, elem_strides)]
    keep = [d for d, n in enumerate(out_shape) if n != 1]
    scalar = [_numel(sh) == 1 for sh in shapes]
    shape, strides = _coalesce([out_shape[d] for d in keep],
                               [[st[d] for d in keep] for st in full], scalar)
    inputs, kept = classify_inputs(spec, shape, strides, scalar)
    laid = spec.with_layout(inputs, len(shape))
    return laid, tuple(laid.meta(shape, kept)) if laid.strided else ()


def classify_inputs(spec: KernelSpec, shape: Sequence[int], strides: Sequence[Sequence[int]],
                    scalar: Sequence[bool]) -> tuple[list[InputSpec], list[Any]]:
    """Each input's kind over the laid-out ``shape`` (one element: ``scalar``; C order:
    ``contiguous``; else ``strided``, its inner stride kept when it is 0 or 1), and the
    strides ``meta`` needs (None for inputs that read none)."""
    c_order = c_strides(shape)
    inputs, kept = [], []
    for s, st, sc in zip(spec.inputs, strides, scalar):
        kind = "scalar" if sc else "contiguous" if list(st) == c_order else "strided"
        inner = st[-1] if kind == "strided" and st[-1] in (0, 1) else None
        inputs.append(InputSpec(s.dtype, kind, inner))
        kept.append(st if kind == "strided" else None)
    return inputs, kept


def static_layout(spec: KernelSpec) -> tuple[KernelSpec, tuple[int, ...]]:
    """``plan_layout`` for C-contiguous inputs of the group's static shapes (a symbolic dim
    counts as 2), from ``spec.in_types``: the layout a kernel is shown with before any call.
    """
    if len(spec.in_types) != len(spec.inputs):
        raise ValueError("static_layout: the spec carries no input types (not from lower_group)")
    shapes = [tuple(d if isinstance(d, int) else 2 for d in t.shape or ()) for t in spec.in_types]
    out = _broadcast_shapes(shapes) if shapes else (1,)
    return plan_layout(spec, shapes, [c_strides(s) for s in shapes], out)


def _broadcast_shapes(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for d, n in enumerate(s, rank - len(s)):
            out[d] = n if out[d] == 1 else out[d]
    return tuple(out)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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


def c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``.

    >>> c_strides((2, 3, 4))
    [12, 4, 1]
    """
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]
