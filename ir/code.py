"""``.code``: a graph as readable Python, which runs: ``exec`` it in the namespace that
``scriptmod.jit.code_namespace(module)`` returns (``ops``, ``CONSTANTS``, ``dtypes``, ...).

Ops read ``ops.sm.add(a, b)`` with attributes as keywords, tensor constants read
``CONSTANTS.c0``, dtypes ``dtypes.float32``; unnamed pure values used once are inlined
into their user, control flow becomes ``if``/``for``/``while``, fusion groups become functions.
Sizes read ``x.size(0)``, integer arithmetic on them is infix (``x.size(0) // 2``, ``-n``,
``min(a, b)``, ``a > 2``) and a guard is ``assert <condition>, "traced with <what> at <where>"``.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(B, 4)):
    ...   %1 : Float(B, 4) = sm::neg(%x)
    ...   %2 : Float(B, 4) = sm::add(%1, %x)
    ...   return (%2)
    ... ''')
    >>> print(python_code(g))
    def forward(x: Tensor) -> Tensor:
        return ops.sm.add(ops.sm.neg(x), x)
    >>> g = parse('''graph(%x : Float(B, 4)):
    ...   %n : int = sm::size[dim=0](%x)
    ...   %2 : int = prim::Constant[value=2]()
    ...   %3 : bool = sm::int_gt(%n, %2)
    ...   %4 : bool = sm::guard[what="x.shape[0] > 2", where="model.py:12"](%3)
    ...   %h : int = sm::int_floordiv(%n, %2)
    ...   %y : Float(*, 4) = sm::narrow[dim=0](%x, %h, %h)
    ...   return (%y)
    ... ''')
    >>> print(python_code(g))
    def forward(x: Tensor) -> Tensor:
        n = x.size(0)
        assert n > 2, "traced with x.shape[0] > 2 at model.py:12"
        h = n // 2
        y = ops.sm.narrow(x, h, h, dim=0)
        return y
"""
from __future__ import annotations

import json
import keyword
import re
from typing import Any, Callable, Mapping

from . import schema as S
from .dtypes import DType
from .graph import Block, Graph, Node, Prim, Value
from .printer import _shown_attrs, subgraphs, tensor_constants
from .types import (AnyType, BoolType, DeviceType, DTypeType, FloatType, IntType, ListType,
                      ModuleType, NoneType, NumberType, OptionalType, StrType, TensorType,
                      TupleType, Type)

INDENT = "    "
_RESERVED = {"ops", "CONSTANTS", "dtypes", "print", "range", "float", "Tensor", "List", "Tuple",
             "Optional", "Any", "True", "False", "None"}
_SIMPLE_TYPES: dict[Type, str] = {IntType: "int", FloatType: "float", BoolType: "bool",
                                  StrType: "str", NoneType: "None", DeviceType: "Device",
                                  DTypeType: "dtype", NumberType: "number", AnyType: "Any"}
_PURE_PRIMS = {Prim.LIST_CONSTRUCT, Prim.TUPLE_CONSTRUCT, Prim.TUPLE_INDEX}

# Python operator precedence, loosest first: an operand is parenthesized when it binds looser
# than its slot needs (``(a + b) * c``, ``a - (b - c)``, ``-(a + b)``, ``(a < b) == c``).
LOOSEST, COMPARE, ADD, MUL, UNARY, ATOM = range(6)
# Size arithmetic as a person writes it: op -> (template, precedence of the result, precedence
# each operand needs). ``{0}``.. are operands, ``{dim}`` etc. attributes. A size reads
# ``x.size(0)``, not torch's ``torch.size(x, 0)``: it is what the traced code wrote, and it is
# a real Tensor method, while ``torch.size`` is not a public function.
_SIZE_OPS: dict[str, tuple[str, int, tuple[int, ...]]] = {
    "sm::size": ("{0}.size({dim})", ATOM, (ATOM,)),
    "sm::int_add": ("{0} + {1}", ADD, (ADD, ADD + 1)),
    "sm::int_sub": ("{0} - {1}", ADD, (ADD, ADD + 1)),
    "sm::int_mul": ("{0} * {1}", MUL, (MUL, MUL + 1)),
    "sm::int_floordiv": ("{0} // {1}", MUL, (MUL, MUL + 1)),
    "sm::int_mod": ("{0} % {1}", MUL, (MUL, MUL + 1)),
    "sm::int_neg": ("-{0}", UNARY, (UNARY + 1,)),
    "sm::int_min": ("min({0}, {1})", ATOM, (LOOSEST, LOOSEST)),
    "sm::int_max": ("max({0}, {1})", ATOM, (LOOSEST, LOOSEST)),
    # comparisons chain in Python (``a < b < c``): a comparison operand is always wrapped
    "sm::int_eq": ("{0} == {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
    "sm::int_ne": ("{0} != {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
    "sm::int_lt": ("{0} < {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
    "sm::int_le": ("{0} <= {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
    "sm::int_gt": ("{0} > {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
    "sm::int_ge": ("{0} >= {1}", COMPARE, (COMPARE + 1, COMPARE + 1)),
}


def _guard(cond: str, attrs: dict[str, Any]) -> str:
    """``assert cond, "traced with <what> at <where>"``: a guard checks what the trace assumed."""
    where = f" at {attrs['where']}" if attrs.get("where") else ""
    message = f"traced with {attrs.get('what', '')}{where}"
    return f"assert {cond}, {_quoted(message)}"


# ops printed as a statement: op -> (the statement from its operand texts and attributes,
# what its result reads as afterwards: a guard that passed returns True)
_STATEMENT_OPS: dict[str, tuple[Callable[[str, dict[str, Any]], str], str]] = {
    "sm::guard": (_guard, "True"),
}


def annotation(t: Type) -> str:
    """A Python annotation for an IR type (``Tensor``, ``List[int]``, ``Tuple[...]``)."""
    if isinstance(t, TensorType):
        return "Tensor"
    if isinstance(t, ListType):
        return f"List[{annotation(t.element)}]"
    if isinstance(t, TupleType):
        return f"Tuple[{', '.join(annotation(e) for e in t.elements) or '()'}]"
    if isinstance(t, OptionalType):
        return f"Optional[{annotation(t.element)}]"
    if isinstance(t, ModuleType):
        return t.class_name.split(".")[-1]
    return _SIMPLE_TYPES.get(t, "Any")


def literal(value: Any) -> str:
    """Python source for an attribute or constant value."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f'float("{value}")'
    if isinstance(value, DType):
        return f"dtypes.{value.name}"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def is_identifier(name: str) -> bool:
    """``name`` can follow a dot in Python source (``self.fc``, never ``self.0``)."""
    return name.isidentifier() and not keyword.iskeyword(name)


def attribute(obj: str, name: str) -> str:
    """``obj.name``, or ``getattr(obj, "0")`` for a Sequential child or any non-identifier."""
    return f"{obj}.{name}" if is_identifier(name) else f"getattr({obj}, {_quoted(name)})"


def _quoted(text: str) -> str:
    """A double-quoted Python string literal (torch's ``getattr(self, "0")`` style)."""
    return json.dumps(text)


def function_name(name: str) -> str:
    """A valid Python function name for ``def`` (``<lambda>`` -> ``_lambda``, as torch)."""
    name = re.sub(r"\W", "", name) or "_"
    return name if is_identifier(name) else "_" + name


class PyNamer:
    """Valid, unique Python identifiers from debug names (``x.1`` -> ``x_1``)."""

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self._taken: set[str] = set(_RESERVED)
        self._counter = 0

    def define(self, v: Value) -> str:
        self.names[v] = self.fresh(v.debug_name)
        return self.names[v]

    def fresh(self, base: str | None) -> str:
        """A new unique identifier (numbered when ``base`` is None)."""
        if base is None:
            name = f"_{self._counter}"
            self._counter += 1
        else:
            name = re.sub(r"\W", "_", base)
            name = name + "_" if keyword.iskeyword(name) else name
        stem, k = name, 0
        while name in self._taken:
            k += 1
            name = f"{stem}_{k}"
        self._taken.add(name)
        return name


class CodePrinter:
    def __init__(self, graph: Graph, constants: dict[Node, str], fusions: list[Graph],
                 defaults: Mapping[int, Any] | None = None) -> None:
        self.graph = graph
        self.defaults = dict(defaults or {})   # graph input index -> its default value
        self.constants = constants
        self.fusions = fusions
        self.names = PyNamer()
        self.exprs: dict[Value, str] = {}
        self.precedence: dict[Value, int] = {}   # of an inlined expression; a name is ATOM
        self.lines: list[str] = []
        self.mutates = any(n.kind in (Prim.SET_ATTR, Prim.CALL_METHOD) for n in graph.walk())

    def ref(self, v: Value) -> str:
        return self.exprs.get(v) or self.names.names.get(v) or self.names.define(v)

    def operand(self, v: Value, need: int) -> str:
        """``v``'s text, parenthesized when it binds looser than its slot needs."""
        text = self.ref(v)
        return f"({text})" if self.precedence.get(v, ATOM) < need else text

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def function(self, name: str) -> list[str]:
        params = []
        for i, v in enumerate(self.graph.inputs):
            pname = self.names.define(v)
            is_self = i == 0 and isinstance(v.type, ModuleType)
            param = pname if is_self else f"{pname}: {annotation(v.type)}"
            params.append(f"{param}={literal(self.defaults[i])}" if i in self.defaults else param)
        outs = self.graph.outputs
        ret = annotation(outs[0].type) if len(outs) == 1 else \
            "None" if not outs else f"Tuple[{', '.join(annotation(v.type) for v in outs)}]"
        self.emit(0, f"def {function_name(name)}({', '.join(params)}) -> {ret}:")
        self.block(self.graph.block, 1)
        values = ", ".join(self.ref(v) for v in outs)
        self.emit(1, f"return {values}" if outs else "return None")
        return self.lines

    def block(self, block: Block, depth: int) -> None:
        for node in block:
            self.statement(node, depth)

    def inlinable(self, node: Node) -> bool:
        if len(node.outputs) != 1 or node.blocks:
            return False
        if node.output.debug_name is not None:   # a user's name says more than an expression
            return False
        uses = node.output.uses
        # ``x.size(0)`` is as short as a name and says more: a size read inlines at every use
        if len(uses) != 1 and not (uses and node.kind == "sm::size"):
            return False
        if any(u.user.owning_block is not node.owning_block for u in uses):
            return False
        if node.kind != "sm::size" and _effect_between(node, uses[0].user):
            return False      # its read would move past a write (``x.add_(1)``'s copy_)
        if node.is_op and node.op_name in S.REGISTRY:
            return not S.REGISTRY[node.op_name].has(S.IMPURE)
        return node.kind in _PURE_PRIMS or (node.kind == Prim.GET_ATTR and not self.mutates)

    def statement(self, node: Node, depth: int) -> None:
        if node.kind == Prim.IF:
            return self.if_(node, depth)
        if node.kind == Prim.LOOP:
            return self.loop(node, depth)
        if node.kind == Prim.CONSTANT and node not in self.constants:
            value = self.exprs[node.output] = literal(node.attrs.get("value"))
            self.precedence[node.output] = UNARY if value.startswith("-") else ATOM
            return None
        if node.kind in _STATEMENT_OPS:
            form, result = _STATEMENT_OPS[node.kind]
            self.emit(depth, form(self.ref(node.inputs[0]), node.attrs))
            self.exprs.update((v, result) for v in node.outputs)
            return None
        text = self.expression(node)
        if text is None:
            return None
        if node.kind in (Prim.SET_ATTR, Prim.RAISE):
            self.emit(depth, text)
        elif len(node.outputs) == 1 and self.inlinable(node):
            self.exprs[node.output] = text
            self.precedence[node.output] = _SIZE_OPS[node.kind][1] if node.kind in _SIZE_OPS \
                else ATOM
        elif not node.outputs:
            self.emit(depth, text)
        else:
            self.emit(depth, f"{self.targets(node)} = {text}")
        return None

    def targets(self, node: Node) -> str:
        names = [self.names.define(v) for v in node.outputs]
        unpack = node.kind in (Prim.TUPLE_UNPACK, Prim.LIST_UNPACK) and len(names) == 1
        return names[0] + "," if unpack else ", ".join(names)

    def expression(self, node: Node) -> str | None:
        a = [self.ref(v) for v in node.inputs]
        k = node.kind
        if k == Prim.CONSTANT:
            return f"CONSTANTS.{self.constants[node]}"
        if k == Prim.GET_ATTR:
            return attribute(a[0], node.attrs["name"])
        if k == Prim.SET_ATTR:
            name = node.attrs["name"]
            if is_identifier(name):
                return f"{a[0]}.{name} = {a[1]}"
            return f"setattr({a[0]}, {_quoted(name)}, {a[1]})"
        if k == Prim.CALL_METHOD:
            return f"{attribute(a[0], node.attrs['name'])}({', '.join(a[1:])})"
        if k == Prim.LIST_CONSTRUCT:
            return f"[{', '.join(a)}]"
        if k == Prim.TUPLE_CONSTRUCT:
            return f"({a[0]},)" if len(a) == 1 else f"({', '.join(a)})"
        if k == Prim.TUPLE_INDEX:
            return f"{a[0]}[{node.attrs['index']}]"
        if k in (Prim.TUPLE_UNPACK, Prim.LIST_UNPACK):
            return a[0]
        if k == Prim.RAISE:      # the message computed at run time (an f-string), if any
            message = a[0] if a else repr(node.attrs.get("message", ""))
            return f"raise {node.attrs.get('kind', 'RuntimeError')}({message})"
        if k == Prim.PRINT:
            return f"print({', '.join(a)})"
        if k == Prim.CALL_FUNCTION:
            return _library_call(node, a)
        if k == Prim.UNINITIALIZED:
            return "uninitialized()"
        if k in _SIZE_OPS:
            template, _, needs = _SIZE_OPS[k]
            return template.format(*(self.operand(v, p) for v, p in zip(node.inputs, needs)),
                                   **node.attrs)
        if k == Prim.FUSION_GROUP:
            index = next(i for i, g in enumerate(self.fusions) if g is node.attrs["subgraph"])
            return f"FusionGroup_{index}({', '.join(a)})"
        kwargs = [f"{n}={literal(v)}" for n, v in _shown_attrs(node)]
        return f"ops.{node.namespace}.{node.op_name}({', '.join(a + kwargs)})"

    def assign(self, depth: int, targets: list[str], values: list[str]) -> None:
        if targets:
            self.emit(depth, f"{', '.join(targets)} = {', '.join(values)}")

    def if_(self, node: Node, depth: int) -> None:
        cond = self.ref(node.inputs[0])
        outs = [self.names.define(v) for v in node.outputs]
        for i, b in enumerate(node.blocks):
            self.emit(depth, f"if {cond}:" if i == 0 else "else:")
            start = len(self.lines)
            self.block(b, depth + 1)
            self.assign(depth + 1, outs, [self.ref(v) for v in b.outputs])
            if len(self.lines) == start:
                self.emit(depth + 1, "pass")

    def loop(self, node: Node, depth: int) -> None:
        body = node.blocks[0]
        trip, cond = self.ref(node.inputs[0]), self.ref(node.inputs[1])
        params = [self.names.define(p) for p in body.params]
        self.assign(depth, params[1:], [self.ref(v) for v in node.inputs[2:]])
        simple = cond == "True" and _is_true(body.outputs[0])
        if simple:
            self.emit(depth, f"for {params[0]} in range({trip}):")
        else:
            flag = self.names.fresh("_continue")
            self.emit(depth, f"{flag}, {params[0]} = {cond}, 0")
            self.emit(depth, f"while {flag} and {params[0]} < {trip}:")
        start = len(self.lines)
        self.block(body, depth + 1)
        outs = [self.ref(v) for v in body.outputs]
        if simple:
            self.assign(depth + 1, params[1:], outs[1:])
        else:
            self.assign(depth + 1, [flag] + params[1:] + [params[0]], outs + [f"{params[0]} + 1"])
        if len(self.lines) == start:
            self.emit(depth + 1, "pass")
        self.assign(depth, [self.names.define(v) for v in node.outputs], params[1:])


def _library_call(node: Node, a: list[str]) -> str:
    """A scripted library call as Python: ``F.gelu(x)``, ``x.softmax(-1)``, ``self.fc(x)``."""
    def arg(entry: Any) -> str:
        kind, payload = entry
        return a[payload] if kind == "v" else literal(payload)
    args = [arg(e) for e in node.attrs.get("args", [])]
    args += [f"{k}={arg(e)}" for k, e in node.attrs.get("kwargs", [])]
    name = node.attrs["name"]
    if name.startswith("python:"):                   # a jit.ignore'd Python function
        return f"{name.rsplit('.', 1)[-1]}({', '.join(args)})"
    if node.attrs.get("method"):
        return f"{args[0]}.{node.attrs['method']}({', '.join(args[1:])})"
    if name.startswith("Tensor.") and name[7:] in _PROPERTIES and len(args) == 1:
        # ``x.real``: a property, no call
        return f"{args[0]}.{name[7:]}"
    if name.startswith("Tensor.") and args:
        return f"{args[0]}.{name[7:]}({', '.join(args[1:])})"
    short = name.replace("scriptmod.nn.functional.", "F.").replace("scriptmod.", "torch.")
    return f"{short}({', '.join(args)})"


# Tensor attributes that scripted code reads as library calls (``Tensor.real``): properties
_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})

_EFFECT_PRIMS = {Prim.SET_ATTR, Prim.CALL_METHOD, Prim.CALL_FUNCTION, Prim.PRINT, Prim.RAISE,
                 Prim.IF, Prim.LOOP}


def _effect_between(node: Node, user: Node) -> bool:
    """A node after ``node`` and before ``user`` (same block) may write memory, draw random
    numbers or raise: an expression inlined into ``user`` would run after it."""
    n = node.next
    while n is not None and n is not user and n.kind != Prim.RETURN:
        if n.kind in _EFFECT_PRIMS or (n.is_op and n.op_name in S.REGISTRY and n.kind !=
                                       "sm::guard" and S.REGISTRY[n.op_name].has(S.IMPURE)):
            return True
        n = n.next
    return False


def _is_true(v: Value) -> bool:
    return v.node.kind == Prim.CONSTANT and v.node.attrs.get("value") is True


def code_with_constants(graph: Graph, name: str = "forward",
                        defaults: Mapping[int, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``(code, {"c0": payload, ...})``: the Python view and the tensor constants it names.
    ``defaults`` maps a graph input's index to the default its parameter prints with
    (``mask: Optional[Tensor]=None``, as torch's ``.code``: a scripted method's defaults).

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%x : Float(2)):
        ...   %c : Float(2) = prim::Constant[value=<Tensor>]()
        ...   %y : Float(2) = sm::add(%x, %c)
        ...   return (%y)
        ... ''', constants=[np.ones(2, np.float32)])
        >>> text, consts = code_with_constants(g)
        >>> print(text)
        def forward(x: Tensor) -> Tensor:
            c = CONSTANTS.c0
            y = ops.sm.add(x, c)
            return y
        >>> consts
        {'c0': array([1., 1.], dtype=float32)}
    """
    nodes = tensor_constants(graph)
    names = {n: f"c{i}" for i, n in enumerate(nodes)}
    fusions = subgraphs(graph)
    lines = CodePrinter(graph, names, fusions, defaults).function(name)
    for i, sub in enumerate(fusions):
        lines += [""] + CodePrinter(sub, names, fusions).function(f"FusionGroup_{i}")
    return "\n".join(lines) + "\n", {names[n]: n.attrs["value"] for n in nodes}


def python_code(graph: Graph, name: str = "forward",
                defaults: Mapping[int, Any] | None = None) -> str:
    """The graph as a Python function (see the module docstring); ``graph.code`` calls this."""
    return code_with_constants(graph, name, defaults)[0]
