"""The op registry's IR half: one ``OpSchema`` per tensor op, declared once in ``ir/ops``.

A schema string reads like a Python signature. Arguments before ``*`` are *inputs* (IR
values: tensors, or scalars/int lists that may be computed at run time); arguments after
``*`` are *attributes* (static, printed in ``[...]``)::

    sum(Tensor self, *, int[]? dim=None, bool keepdim=False, ScalarType? dtype=None) -> Tensor

The runtime (reference kernels), codegen (scalar formulas) and autograd (derivatives) key
their own tables by the same op name; ``tests/test_registry.py`` checks the tables agree.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import dtypes as D
from .types import (AnyType, BoolType, DeviceType, DTypeType, FloatType, IntType, ListType,
                      NoneType, NumberType, OptionalType, StrType, TensorType, Type)

# ---- flags: named op groups that passes and emitters match on -------------------------
ELEMENTWISE = "elementwise"    # output[i] depends only on inputs[i] after broadcasting
UNARY = "unary"
BINARY = "binary"
REDUCTION = "reduction"
ROW = "row"                    # computed per row of its trailing dims by one row kernel: a
                               # reduction over the last dims, or a normalization along the
                               # last dim (softmax); ``ir.passes.fuse_rows`` groups them
COMMUTATIVE = "commutative"
VIEW = "view"                  # output may alias the first input's storage
IMPURE = "impure"              # random or otherwise not a pure function of its inputs
NONDIFF = "nondiff"            # no derivative (comparisons, argmax, int results)
FACTORY = "factory"            # makes a tensor from attributes only
ANY_RANK = "any_rank"          # means the same at every input rank: no attribute or size
                               # list encodes the rank it was traced at (elementwise ops and
                               # reductions are so by their flag; see ``rank_polymorphic``)
UPCAST = "upcast"              # computes in float32 for float16/bfloat16 inputs (elementwise
                               # ops and reductions are so by their flag; see ``upcasts``)
LONG = "long"                  # its scalar formula is a long dependency chain (exp, log, a
                               # division, a polynomial): fused loops of it are interleaved
OWN_DTYPES = "own_dtypes"      # elementwise, reads each input in its own dtype instead of
                               # casting all of them to one compute dtype (cast, isnan, logic)
SCALAR_OPMATH = "scalar_opmath"  # binary, float16/bfloat16 result: a scalar ``other`` (a Python
                               # number or a 0-d tensor; of a commutative op, a Python number
                               # ``self`` too) is read in float32 unrounded, as PyTorch's CPU
                               # mul/div/floor_divide kernels read it (opmath)


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()

_BASE_TYPES: dict[str, Type] = {
    "Tensor": TensorType(), "Scalar": NumberType, "int": IntType, "float": FloatType,
    "bool": BoolType, "str": StrType, "ScalarType": DTypeType, "Device": DeviceType,
    "Any": AnyType, "None": NoneType,
}


def parse_type(text: str) -> Type:
    """'int[]?' -> OptionalType(ListType(IntType)); 'Tensor|Scalar' -> AnyType-like union."""
    text = text.strip()
    if text.endswith("?"):
        return OptionalType(parse_type(text[:-1]))
    if text.endswith("..."):   # variadic: the op takes any number of these as inputs
        return parse_type(text[:-3])
    if text.endswith("[]"):
        return ListType(parse_type(text[:-2]))
    if "|" in text:   # Tensor|Scalar: a tensor or a Python number
        return _BASE_TYPES["Any"]
    try:
        return _BASE_TYPES[text]
    except KeyError:
        raise ValueError(f"schema: unknown type {text!r}") from None


@dataclass(frozen=True)
class Arg:
    name: str
    type_text: str
    type: Type
    default: Any = REQUIRED
    is_attr: bool = False

    @property
    def variadic(self) -> bool:
        return self.type_text.endswith("...")

    @property
    def accepts_tensor(self) -> bool:
        return self.type_text.split("?")[0].split("[")[0] in ("Tensor", "Tensor|Scalar")


DTypeRule = Callable[[Sequence[Any], dict], Any]          # operands, attrs -> DType | tuple
ShapeRule = Callable[[Sequence[Any], dict, Sequence[Any]], Any]
# input types, attrs, known input values -> output types: for ops on Python values (lists,
# dicts, numbers) whose result type the dtype/shape rules cannot state (``ir.ops.script``)
TypeRule = Callable[[Sequence[Type], dict, Sequence[Any]], Sequence[Type]]


@dataclass
class OpSchema:
    """One tensor op. ``dtype_rule`` is the eager fast path; ``infer`` the full IR type rule.

    Operands given to rules: a tensor is ``(dtype, shape)`` with shape a tuple (possibly
    holding symbolic ``str`` dims); a Python number is its type (``int``, ``float``...);
    other inputs (int lists, strings) are passed as ``None`` and their constant values, when
    known, arrive in ``values``.
    """

    name: str
    inputs: tuple[Arg, ...]
    attrs: tuple[Arg, ...]
    outputs: tuple[str, ...]                  # output type texts, e.g. ("Tensor", "Tensor")
    flags: frozenset[str]
    dtype_rule: DTypeRule
    shape_rule: ShapeRule
    doc: str = ""
    extra: dict = field(default_factory=dict)
    type_rule: TypeRule | None = None         # replaces the dtype/shape rules in ``infer``

    @property
    def kind(self) -> str:
        return f"sm::{self.name}"

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def bind_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults and reject unknown or missing attributes (names the op)."""
        out = {}
        for a in self.attrs:
            if a.name in given:
                out[a.name] = given[a.name]
            elif a.default is REQUIRED:
                raise TypeError(f"{self.name}(): missing required argument {a.name!r}")
            else:
                out[a.name] = a.default
        unknown = set(given) - {a.name for a in self.attrs}
        if unknown:
            raise TypeError(f"{self.name}(): unexpected argument(s) {sorted(unknown)}")
        return out

    def infer(self, input_types: Sequence[Type], attrs: dict[str, Any],
              values: Sequence[Any] | None = None) -> list[Type]:
        """Output types from input types. ``values``: constant values of inputs, if known."""
        values = list(values) if values is not None else [None] * len(input_types)
        if self.type_rule is not None:
            return list(self.type_rule(input_types, attrs, values))
        ops = [_operand(t) for t in input_types]
        dt = self.dtype_rule(ops, attrs)
        dts = dt if isinstance(dt, tuple) else (dt,)
        if any(isinstance(t, TensorType) and t.dtype is None for t in input_types) \
                and attrs.get("dtype") is None:
            # an operand of unknown dtype (scripted code before specialization): the
            # result's dtype is unknown too, unless the op always gives bool
            dts = tuple(d if d is D.bool_ else None for d in dts)
        shapes = self.shape_rule(ops, attrs, values)
        shapes = shapes if self.n_outputs > 1 else (shapes,)
        tensors = [t for t in input_types if isinstance(t, TensorType)]
        device = attrs.get("device") or (tensors[0].device if tensors else "cpu")
        grad = (not self.has(NONDIFF)) and any(t.requires_grad for t in tensors)
        out: list[Type] = []
        for text, d, s in zip(self.outputs, dts, shapes):
            if text == "Tensor":
                out.append(TensorType(d, s, device, grad and d is not None
                                      and d.category >= D.FLOAT))
            else:
                out.append(parse_type(text))
        return out

    @property
    def n_outputs(self) -> int:
        return len(self.outputs)


def _operand(t: Type) -> Any:
    if isinstance(t, TensorType):
        return (t.dtype, t.shape)
    scalars: dict[Type, type] = {IntType: int, FloatType: float, BoolType: bool}
    return scalars.get(t)


REGISTRY: dict[str, OpSchema] = {}

_ARG_RE = re.compile(r"^(?P<type>[\w\[\]?|.]+)\s+(?P<name>\w+)(?:\s*=\s*(?P<default>.+))?$")


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def parse_schema(text: str) -> tuple[str, tuple[Arg, ...], tuple[Arg, ...], tuple[str, ...]]:
    m = re.match(r"^\s*(\w+)\((.*)\)\s*->\s*(.+)$", text)
    if not m:
        raise ValueError(f"schema: cannot parse {text!r}")
    name, args_text, ret = m.groups()
    inputs: list[Arg] = []
    attrs: list[Arg] = []
    in_attrs = False
    for part in _split_args(args_text):
        if part == "*":
            in_attrs = True
            continue
        am = _ARG_RE.match(part)
        if not am:
            raise ValueError(f"schema {name}: cannot parse argument {part!r}")
        default = REQUIRED if am["default"] is None else ast.literal_eval(am["default"])
        arg = Arg(am["name"], am["type"], parse_type(am["type"]), default, in_attrs)
        (attrs if in_attrs else inputs).append(arg)
    ret = ret.strip()
    outs = tuple(r.strip() for r in ret.strip("()").split(",")) if ret.startswith("(") else (ret,)
    return name, tuple(inputs), tuple(attrs), outs


def op(schema: str, dtype_rule: DTypeRule, shape_rule: ShapeRule, *flags: str,
       doc: str = "", type_rule: TypeRule | None = None, **extra: Any) -> OpSchema:
    """Declare an op. Registering a name twice is an error (one row per op). ``type_rule``,
    if given, is the op's whole IR type rule (``infer`` calls it instead of the dtype and
    shape rules, which then serve eager execution only)."""
    name, inputs, attrs, outs = parse_schema(schema)
    if name in REGISTRY:
        raise ValueError(f"op {name!r} declared twice")
    s = OpSchema(name, inputs, attrs, outs, frozenset(flags), dtype_rule, shape_rule, doc, extra,
                 type_rule)
    REGISTRY[name] = s
    return s


def get(name: str) -> OpSchema:
    """The schema of op ``name`` ('add' or 'sm::add')."""
    try:
        return REGISTRY[name.split("::")[-1]]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def rank_polymorphic(schema: OpSchema) -> bool:
    """Whether a traced call of the op may run at another input rank and still compute what
    eager would there (dims as the user wrote them, broadcasting, matmul's batch dims)."""
    return bool(schema.flags & {ELEMENTWISE, REDUCTION, ANY_RANK})


def upcasts(schema: OpSchema) -> bool:
    """Whether the op computes in float32 when given float16/bfloat16 tensors, as the
    compiled paths do: every elementwise op and reduction, and the ops flagged ``UPCAST``;
    not those flagged ``OWN_DTYPES`` (``cast``, ``isnan``), which read inputs as they are."""
    return bool(schema.flags & {ELEMENTWISE, REDUCTION, UPCAST}) and OWN_DTYPES not in schema.flags


def ops_with(*flags: str, without: tuple[str, ...] = ()) -> frozenset[str]:
    """Names of the declared ops that carry every flag in ``flags`` and none in ``without``.

    >>> import scriptmod.ir.ops
    >>> sorted(ops_with(VIEW, without=(IMPURE,)))[:3]
    ['as_strided', 'detach', 'diagonal']
    """
    want, refuse = frozenset(flags), frozenset(without)
    return frozenset(n for n, s in REGISTRY.items()
                     if want <= s.flags and not refuse & s.flags)
