"""Graph invariants: scoping/dominance, use lists, block signatures and op types.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(2)):
    ...   %y : Float(3) = sm::neg(%x)
    ...   return (%y)
    ... ''')
    >>> verify(g)            # raises IRVerifyError naming the node, its line and source
    Traceback (most recent call last):
      ...
    scriptmod.ir.verify.IRVerifyError: output 0 is typed Float(3) but neg() gives Float(2)
        %y : Float(3) = sm::neg(%x)
"""
from __future__ import annotations

from typing import Callable

from . import ops  # noqa: F401  (fills the registry)
from . import schema as S
from .builder import constant_type, infer_op_types
from .graph import Block, Graph, Node, Prim, Value
from .printer import describe, is_payload
from .types import (AnyType, BoolType, DictType, FloatType, IntType, ListType, ModuleType, NoneType,
                      NumberType, OptionalType, TensorType, TupleType, Type)


class IRVerifyError(Exception):
    """A broken invariant; the message quotes the offending node's printed line."""

    def __init__(self, message: str, node: Node | None = None) -> None:
        self.node = node
        if node is not None:
            where = f"{node.source}: " if node.source else ""
            message = f"{where}{message}\n    {_safe_describe(node)}"
        super().__init__(message)


def _safe_describe(node: Node) -> str:
    try:
        return describe(node)
    except Exception:   # a graph broken badly enough not to print still gets a message
        return f"{node.kind}(...)"


def is_subtype(actual: Type, declared: Type) -> bool:
    """Whether a value of type ``actual`` may flow where ``declared`` is expected."""
    if actual == declared or declared == AnyType or actual == AnyType:
        return True
    if isinstance(declared, TensorType):
        return isinstance(actual, TensorType) and _tensor_fits(actual, declared)
    if declared == NumberType:
        return actual in (IntType, FloatType, BoolType, NumberType)
    if isinstance(declared, OptionalType):
        inner = actual.element if isinstance(actual, OptionalType) else actual
        return actual == NoneType or is_subtype(inner, declared.element)
    if isinstance(declared, ListType):
        return isinstance(actual, ListType) and is_subtype(actual.element, declared.element)
    if isinstance(declared, DictType):
        return isinstance(actual, DictType) and actual.key == declared.key and is_subtype(
            actual.value, declared.value)
    if isinstance(declared, TupleType):
        return (isinstance(actual, TupleType) and len(actual.elements) == len(declared.elements)
                and all(is_subtype(a, d) for a, d in zip(actual.elements, declared.elements)))
    if isinstance(declared, ModuleType):
        return isinstance(actual, ModuleType) and actual.class_name == declared.class_name
    return False


def _tensor_fits(a: TensorType, d: TensorType) -> bool:
    if d.dtype is not None and a.dtype is not None and a.dtype is not d.dtype:
        return False
    if d.device != a.device:
        return False
    if d.shape is None or a.shape is None:
        return True
    return len(a.shape) == len(d.shape) and all(
        x is None or y is None or x == y for x, y in zip(a.shape, d.shape))


def types_agree(declared: Type, inferred: Type) -> bool:
    """Dtype, rank and concrete sizes agree where both sides know them."""
    if isinstance(declared, TensorType) and isinstance(inferred, TensorType):
        if declared.dtype is not None and inferred.dtype is not None and declared.dtype is not inferred.dtype:
            return False
        if declared.shape is None or inferred.shape is None:
            return True
        return len(declared.shape) == len(inferred.shape) and all(
            not (isinstance(x, int) and isinstance(y, int) and x != y)
            for x, y in zip(declared.shape, inferred.shape))
    return is_subtype(inferred, declared) or is_subtype(declared, inferred)


class Verifier:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.defined: list[Value] = []
        self.live: set[Node] = set()

    def run(self) -> None:
        self.check_block(self.graph.block, [set()], None)
        for v in self.defined:
            self.check_uses(v)

    def check_block(self, block: Block, scopes: list[set[Value]], owner: Node | None) -> None:
        if block.owning_node is not owner or block.graph is not self.graph:
            raise IRVerifyError("block is attached to the wrong node or graph", owner)
        scope: set[Value] = set()
        scopes = scopes + [scope]
        self.define_all(block.param_node, scope)
        prev = block.return_node
        for node in block:
            if node.owning_block is not block or node.prev is not prev or node.graph is not self.graph:
                raise IRVerifyError("node list links are inconsistent (owning block, prev or graph)", node)
            prev = node
            self.check_inputs(node, scopes)
            CHECKS.get(node.kind, _check_kind)(self, node)
            for b in node.blocks:
                self.check_block(b, scopes, node)
            self.define_all(node, scope)
        self.check_inputs(block.return_node, scopes, owner)

    def define_all(self, node: Node, scope: set[Value]) -> None:
        self.live.add(node)
        for i, v in enumerate(node.outputs):
            if v.node is not node or v.index != i:
                raise IRVerifyError(f"output {i} does not point back at its node", node)
            scope.add(v)
            self.defined.append(v)

    def check_inputs(self, node: Node, scopes: list[set[Value]], owner: Node | None = None) -> None:
        self.live.add(node)
        for i, v in enumerate(node.inputs):
            if not any(v in s for s in scopes):
                what = "block output" if node.kind == Prim.RETURN else f"input {i}"
                raise IRVerifyError(f"{what} uses a value not defined before it in an enclosing "
                                    f"block (dominance/scoping), typed {v.type!r}",
                                    owner if node.kind == Prim.RETURN else node)
            if sum(1 for u in v.uses if u.user is node and u.index == i) != 1:
                raise IRVerifyError(f"input {i} is missing from (or repeated in) its value's "
                                    "use list", owner or node)

    def check_uses(self, v: Value) -> None:
        for u in v.uses:
            if u.user not in self.live:
                raise IRVerifyError(f"output {v.index} has a dangling use by a removed "
                                    f"{u.user.kind} node", v.node)
            if u.index >= len(u.user.inputs) or u.user.inputs[u.index] is not v:
                raise IRVerifyError(f"use list of output {v.index} names a wrong input slot",
                                    v.node)


def verify(graph: Graph) -> Graph:
    """Check every invariant; raise ``IRVerifyError`` at the first broken one."""
    Verifier(graph).run()
    return graph


# ---- per-kind checks -------------------------------------------------------------------------

def _fail(node: Node, message: str) -> IRVerifyError:
    return IRVerifyError(message, node)


def _arity(node: Node, n_in: int | None, n_out: int | None, n_blocks: int = 0) -> None:
    if n_in is not None and len(node.inputs) != n_in:
        raise _fail(node, f"{node.kind} takes {n_in} input(s), has {len(node.inputs)}")
    if n_out is not None and len(node.outputs) != n_out:
        raise _fail(node, f"{node.kind} has {n_out} output(s), found {len(node.outputs)}")
    if len(node.blocks) != n_blocks:
        raise _fail(node, f"{node.kind} has {n_blocks} block(s), found {len(node.blocks)}")


def _expect(node: Node, ok: bool, message: str) -> None:
    if not ok:
        raise _fail(node, message)


def _check_kind(v: Verifier, node: Node) -> None:
    if not node.is_op:
        raise _fail(node, f"unknown node kind {node.kind!r}")
    if node.op_name not in S.REGISTRY:
        raise _fail(node, f"unknown op {node.kind!r} (not in the op registry)")
    _check_op(node, S.REGISTRY[node.op_name])


def _check_op(node: Node, schema: S.OpSchema) -> None:
    fixed = [a for a in schema.inputs if not a.variadic]
    variadic = len(fixed) != len(schema.inputs)
    n = len(node.inputs)
    _expect(node, n == len(fixed) or (variadic and n >= len(fixed)),
            f"{schema.name}() takes {len(fixed)}{' or more' if variadic else ''} input(s), has {n}")
    _arity(node, None, schema.n_outputs)
    for arg, value in zip(fixed, node.inputs):
        _expect(node, _fits(arg.type_text, value.type),
                f"{schema.name}(): input {arg.name!r} must be {arg.type_text}, is {value.type!r}")
    names = {a.name for a in schema.attrs}
    _expect(node, set(node.attrs) == names,
            f"{schema.name}() attributes are {sorted(names)}, node has {sorted(node.attrs)}")
    try:
        inferred = infer_op_types(schema, node.inputs, node.attrs)
    except (TypeError, ValueError, IndexError) as e:
        raise _fail(node, f"{schema.name}(): type inference fails on these inputs: {e}") from None
    for i, (out, t) in enumerate(zip(node.outputs, inferred)):
        _expect(node, types_agree(out.type, t),
                f"output {i} is typed {out.type!r} but {schema.name}() gives {t!r}")


def _fits(declared: str, t: Type) -> bool:
    """An input's kind against the schema's: a ``Tensor`` argument takes a tensor, an ``int``
    one an int (a size computed at run time), a ``Scalar`` one a number, and no op takes a
    module."""
    if isinstance(t, ModuleType):
        return False
    if declared == "Tensor":
        return isinstance(t, TensorType)
    if declared == "int":
        return t == IntType
    if declared == "Scalar":
        return not isinstance(t, (TensorType, ListType, TupleType))
    return True


def _check_constant(v: Verifier, node: Node) -> None:
    _arity(node, 0, 1)
    _expect(node, "value" in node.attrs, "prim::Constant needs a 'value' attribute")
    value, t = node.attrs["value"], node.output.type
    if is_payload(value):
        _expect(node, isinstance(t, TensorType), f"a tensor constant must be Tensor-typed, is {t!r}")
    else:
        _expect(node, is_subtype(constant_type(value), t),
                f"constant {value!r} does not fit its type {t!r}")


def _check_get_attr(v: Verifier, node: Node) -> None:
    _arity(node, 1, 1)
    _check_get_attr_like(node)


def _check_set_attr(v: Verifier, node: Node) -> None:
    _arity(node, 2, 0)
    _check_get_attr_like(node)


def _check_get_attr_like(node: Node) -> None:
    _expect(node, isinstance(node.attrs.get("name"), str), f"{node.kind} needs a str 'name'")
    _expect(node, isinstance(node.inputs[0].type, ModuleType) or node.inputs[0].type == AnyType,
            f"{node.kind} input 0 must be a module, is {node.inputs[0].type!r}")


def _check_call_method(v: Verifier, node: Node) -> None:
    _arity(node, None, None)
    _expect(node, len(node.inputs) >= 1, "prim::CallMethod needs the module as input 0")
    _check_get_attr_like(node)


def _check_list_construct(v: Verifier, node: Node) -> None:
    _arity(node, None, 1)
    t = node.output.type
    if not isinstance(t, ListType):
        raise _fail(node, f"output must be a list type, is {t!r}")
    for i, x in enumerate(node.inputs):
        _expect(node, is_subtype(x.type, t.element), f"input {i} ({x.type!r}) is not a {t.element!r}")


def _check_tuple_construct(v: Verifier, node: Node) -> None:
    _arity(node, None, 1)
    _expect(node, is_subtype(TupleType(tuple(x.type for x in node.inputs)), node.output.type),
            f"output type {node.output.type!r} does not match the inputs")


def _check_unpack(v: Verifier, node: Node) -> None:
    _arity(node, 1, None)
    t = node.inputs[0].type
    if node.kind == Prim.LIST_UNPACK:
        _expect(node, isinstance(t, ListType), f"input must be a list, is {t!r}")
        return
    _expect(node, isinstance(t, TupleType) and len(t.elements) == len(node.outputs),
            f"input type {t!r} does not unpack into {len(node.outputs)} value(s)")


def _check_tuple_index(v: Verifier, node: Node) -> None:
    _arity(node, 1, 1)
    t, i = node.inputs[0].type, node.attrs.get("index")
    _expect(node, isinstance(t, TupleType) and isinstance(i, int) and -len(t.elements) <= i < len(t.elements),
            f"index {i!r} is not valid for {t!r}")


def _check_if(v: Verifier, node: Node) -> None:
    _arity(node, 1, None, 2)
    c = node.inputs[0].type
    _expect(node, c in (BoolType, AnyType) or isinstance(c, TensorType), f"condition must be bool, is {c!r}")
    for i, b in enumerate(node.blocks):
        _expect(node, not b.params, f"block{i} of prim::If takes no parameters")
        _block_outputs_fit(node, b, i, [o.type for o in node.outputs])


def _block_outputs_fit(node: Node, block: Block, i: int, types: list[Type]) -> None:
    _expect(node, len(block.outputs) == len(types),
            f"block{i} returns {len(block.outputs)} value(s), {node.kind} expects {len(types)}")
    for j, (x, t) in enumerate(zip(block.outputs, types)):
        _expect(node, is_subtype(x.type, t), f"block{i} output {j} is {x.type!r}, expected {t!r}")


def _check_loop(v: Verifier, node: Node) -> None:
    _expect(node, len(node.inputs) >= 2, "prim::Loop takes (max_trip_count, condition, *carried)")
    _arity(node, None, len(node.inputs) - 2, 1)
    body, carried = node.blocks[0], node.inputs[2:]
    _expect(node, node.inputs[0].type in (IntType, AnyType), "max_trip_count must be an int")
    _expect(node, len(body.params) == len(carried) + 1 and body.params[0].type == IntType,
            f"loop body must take (i : int, *carried) for {len(carried)} carried value(s)")
    types = [p.type for p in body.params[1:]]
    for j, (x, t, o) in enumerate(zip(carried, types, node.outputs)):
        _expect(node, is_subtype(x.type, t) and is_subtype(t, o.type),
                f"carried value {j}: initial {x.type!r}, body parameter {t!r}, output {o.type!r} disagree")
    _block_outputs_fit(node, body, 0, [BoolType] + types)


def _check_fusion_group(v: Verifier, node: Node) -> None:
    sub = node.attrs.get("subgraph")
    _expect(node, isinstance(sub, Graph), "prim::FusionGroup needs a 'subgraph' graph attribute")
    assert isinstance(sub, Graph)
    _arity(node, len(sub.inputs), len(sub.outputs))
    for j, (x, p) in enumerate(zip(node.inputs, sub.inputs)):
        _expect(node, is_subtype(x.type, p.type), f"input {j} is {x.type!r}, subgraph takes {p.type!r}")
    try:
        verify(sub)
    except IRVerifyError as e:
        raise _fail(node, f"fusion subgraph is invalid: {e}") from None


def _check_no_outputs(v: Verifier, node: Node) -> None:
    _arity(node, None, 0)


def _check_call_function(v: "Verifier", node: Node) -> None:
    _expect(node, isinstance(node.attrs.get("name"), str) and bool(node.attrs["name"]),
            "prim::CallFunction needs a 'name' attribute (the library function)")
    _expect(node, len(node.outputs) == 1, "prim::CallFunction has one output")
    _arity(node, None, 1)


CHECKS: dict[str, Callable[[Verifier, Node], None]] = {
    Prim.CONSTANT: _check_constant, Prim.GET_ATTR: _check_get_attr, Prim.SET_ATTR: _check_set_attr,
    Prim.CALL_METHOD: _check_call_method, Prim.LIST_CONSTRUCT: _check_list_construct,
    Prim.LIST_UNPACK: _check_unpack, Prim.TUPLE_CONSTRUCT: _check_tuple_construct,
    Prim.TUPLE_UNPACK: _check_unpack, Prim.TUPLE_INDEX: _check_tuple_index, Prim.IF: _check_if,
    Prim.LOOP: _check_loop, Prim.FUSION_GROUP: _check_fusion_group,
    Prim.RAISE: _check_no_outputs, Prim.PRINT: _check_no_outputs,
    Prim.CALL_FUNCTION: _check_call_function,
    Prim.UNINITIALIZED: lambda v, node: _arity(node, 0, 1),
}
