"""Building graphs: an insertion point, typed op creation from the schema registry, and
helpers for constants, module attributes, calls and structured control flow.

    >>> from scriptmod.ir.dtypes import float32
    >>> g = Graph(); b = Builder(g, source="model.py:3")
    >>> x = b.input(TensorType(float32, ("B", 4)), "x")
    >>> y = b.op("sum", b.op("mul", x, 2.0), dim=[1])
    >>> b.ret(y)
    >>> print(g)
    graph(%x : Float(B, 4)):
      %0 : float = prim::Constant[value=2.0]()  # model.py:3
      %1 : Float(B, 4) = sm::mul(%x, %0)  # model.py:3
      %2 : Float(B) = sm::sum[dim=[1], keepdim=0](%1)  # model.py:3
      return (%2)
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence, Union

from . import ops  # noqa: F401  (fills the registry)
from . import dtypes as D
from . import schema as S
from .dtypes import DType
from .graph import Block, Graph, IRError, Node, Prim, Value, known_value
from .types import (SCALAR_TYPES, AnyType, BoolType, DictType, DTypeType, IntType, ListType,
                    ModuleType, NamedTupleType, NoneType, OptionalType, TensorType, TupleType, Type)

ValueLike = Union[Value, int, float, bool, str, None, DType, list, tuple]
BodyResult = Union[Value, Sequence[Any], None]


def constant_type(value: Any) -> Type:
    """The IR type of a Python constant; tensor payloads need ``.dtype`` and ``.shape``."""
    if isinstance(value, DType):
        return DTypeType
    if type(value) in SCALAR_TYPES:
        return SCALAR_TYPES[type(value)]
    if isinstance(value, list):
        elems = [constant_type(v) for v in value]
        return ListType(_join_all(elems) if elems else AnyType)
    if isinstance(value, tuple):
        return TupleType(tuple(constant_type(v) for v in value))
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is not None and shape is not None and str(dtype) in D.BY_NAME:
        cuda = type(value).__module__.split(".")[0] == "cupy"
        return TensorType(D.BY_NAME[str(dtype)], tuple(int(d) for d in shape),
                          "cuda" if cuda else "cpu")
    raise IRError(f"constant: cannot type a {type(value).__name__}; pass type= explicitly")


def join_types(a: Type, b: Type) -> Type:
    """The most precise type that both ``a`` and ``b`` are instances of."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
        return TensorType(a.dtype if a.dtype is b.dtype else None, shape,
                          a.device if a.device == b.device else "cpu",
                          a.requires_grad or b.requires_grad)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.elements) == len(b.elements):
        joined = tuple(join_types(x, y) for x, y in zip(a.elements, b.elements))
        if isinstance(a, NamedTupleType) and isinstance(b, NamedTupleType) and \
                (a.name, a.fields) == (b.name, b.fields):
            return a.plain(joined)
        return TupleType(joined)
    if isinstance(a, ListType) and isinstance(b, ListType):
        return ListType(join_types(a.element, b.element))
    if isinstance(a, DictType) and isinstance(b, DictType) and a.key == b.key:
        return DictType(a.key, join_types(a.value, b.value))
    if NoneType in (a, b):
        other = b if a == NoneType else a
        return other if isinstance(other, OptionalType) else OptionalType(other)
    if isinstance(a, OptionalType) or isinstance(b, OptionalType):
        inner = [t.element if isinstance(t, OptionalType) else t for t in (a, b)]
        return OptionalType(join_types(inner[0], inner[1]))
    return AnyType


def _join_all(types: Sequence[Type]) -> Type:
    out = types[0]
    for t in types[1:]:
        out = join_types(out, t)
    return out


def infer_op_types(schema: S.OpSchema, inputs: Sequence[Value], attrs: dict[str, Any]) -> list[Type]:
    """Output types of an op node from its inputs' types and known constant values."""
    types = [v.type for v in inputs]
    try:
        return schema.infer(types, attrs, [known_value(v) for v in inputs])
    except (TypeError, KeyError, AttributeError, IndexError):
        if any(isinstance(t, TensorType) and t.dtype is None for t in types):
            return [TensorType() if o == "Tensor" else S.parse_type(o) for o in schema.outputs]
        raise


def _check_arity(schema: S.OpSchema, n: int) -> None:
    fixed = [a for a in schema.inputs if not a.variadic]
    variadic = len(fixed) != len(schema.inputs)
    if n < len(fixed) or (not variadic and n != len(fixed)):
        want = f"at least {len(fixed)}" if variadic else str(len(fixed))
        raise TypeError(f"{schema.name}(): expected {want} input(s), got {n}")


class Builder:
    """Creates nodes at an insertion point (the end of the graph's block by default)."""

    def __init__(self, graph: Graph, source: str | None = None, scope: str | None = None) -> None:
        self.graph = graph
        self.source = source
        self.scope = scope              # module path stamped on new nodes (a rewrite's node's)
        self._anchor: Node = graph.block.return_node   # new nodes go before this one

    # ---- insertion point ----------------------------------------------------------------
    @contextlib.contextmanager
    def _at(self, anchor: Node) -> Iterator[Builder]:
        saved, self._anchor = self._anchor, anchor
        try:
            yield self
        finally:
            self._anchor = saved

    def insert_into(self, block: Block) -> contextlib.AbstractContextManager[Builder]:
        """``with b.insert_into(block):`` appends to ``block``."""
        return self._at(block.return_node)

    def insert_before(self, node: Node) -> contextlib.AbstractContextManager[Builder]:
        return self._at(node)

    def insert_after(self, node: Node) -> contextlib.AbstractContextManager[Builder]:
        assert node.next is not None
        return self._at(node.next)

    @contextlib.contextmanager
    def at_source(self, source: str | None) -> Iterator[Builder]:
        """``with b.at_source("model.py:12"):`` stamps new nodes with that location."""
        saved, self.source = self.source, source
        try:
            yield self
        finally:
            self.source = saved

    @contextlib.contextmanager
    def like(self, node: Node) -> Iterator[Builder]:
        """``with b.like(node):`` stamps new nodes with ``node``'s source and module path
        (the nodes a rewrite or a derivative makes from it)."""
        saved = self.source, self.scope
        self.source, self.scope = node.source, node.scope
        try:
            yield self
        finally:
            self.source, self.scope = saved

    @property
    def block(self) -> Block:
        assert self._anchor.owning_block is not None
        return self._anchor.owning_block

    def insert(self, node: Node) -> Node:
        if node.source is None:
            node.source = self.source
        if node.scope is None:
            node.scope = self.scope
        return node.insert_before(self._anchor)

    def node(self, kind: str, inputs: Sequence[Value] = (), output_types: Sequence[Type] = (),
             attrs: dict[str, Any] | None = None, n_blocks: int = 0) -> Node:
        """Create and insert a node of any kind."""
        return self.insert(self.graph.create(kind, inputs, output_types, attrs, self.source,
                                             n_blocks))

    # ---- graph signature ----------------------------------------------------------------
    def input(self, type: Type, name: str | None = None) -> Value:
        return self.graph.add_input(type, name)

    def ret(self, *values: ValueLike) -> None:
        """Register graph outputs (or, inside ``insert_into(block)``, block outputs)."""
        for v in values:
            self.block.register_output(self.value(v))

    # ---- values and constants -----------------------------------------------------------
    def value(self, x: ValueLike) -> Value:
        """``x`` itself if it is a Value; a list holding Values becomes a ListConstruct."""
        if isinstance(x, Value):
            return x
        if isinstance(x, (list, tuple)) and any(isinstance(i, Value) for i in x):
            items = [self.value(i) for i in x]
            return self.list_(items) if isinstance(x, list) else self.tuple_(items)
        return self.constant(x)

    def constant(self, value: Any, type: Type | None = None, name: str | None = None) -> Value:
        """``prim::Constant``; a tensor payload (opaque here) may carry its type."""
        t = type if type is not None else constant_type(value)
        v = self.node(Prim.CONSTANT, [], [t], {"value": value}).output
        v.debug_name = name
        return v

    # ---- ops ----------------------------------------------------------------------------
    def op(self, name: str, *args: ValueLike, **attrs: Any) -> Any:
        """Insert ``sm::<name>``; returns its Value (a tuple for multi-output ops).

            >>> from scriptmod.ir.dtypes import float32
            >>> b = Builder(Graph()); x = b.input(TensorType(float32, (2, 3)), "x")
            >>> b.op("transpose", x, dim0=0, dim1=1)       # typed by the op's schema
            %? : Float(3, 2)
        """
        schema = S.get(name)
        _check_arity(schema, len(args))
        bound = schema.bind_attrs(attrs)
        inputs = [self.value(a) for a in args]
        try:
            types = infer_op_types(schema, inputs, bound)
        except (TypeError, ValueError, IndexError) as e:
            where = f" (at {self.source})" if self.source else ""
            raise type(e)(f"{e}{where}") from e
        node = self.node(schema.kind, inputs, types, bound)
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    # ---- modules ------------------------------------------------------------------------
    def get_attr(self, module: Value, name: str, type: Type | None = None) -> Value:
        if type is None and isinstance(module.type, ModuleType):
            type = dict(module.type.attributes).get(name)
        if type is None:
            raise IRError(f"get_attr: the type of attribute {name!r} is unknown; pass type=")
        return self.node(Prim.GET_ATTR, [module], [type], {"name": name}).output

    def set_attr(self, module: Value, name: str, value: ValueLike) -> Node:
        return self.node(Prim.SET_ATTR, [module, self.value(value)], [], {"name": name})

    def call_method(self, module: Value, name: str, args: Sequence[ValueLike],
                    output_types: Sequence[Type]) -> tuple[Value, ...]:
        inputs = [module] + [self.value(a) for a in args]
        return tuple(self.node(Prim.CALL_METHOD, inputs, output_types, {"name": name}).outputs)

    # ---- lists and tuples ---------------------------------------------------------------
    def list_(self, items: Sequence[ValueLike], element: Type | None = None) -> Value:
        vals = [self.value(i) for i in items]
        elem = element or (_join_all([v.type for v in vals]) if vals else AnyType)
        return self.node(Prim.LIST_CONSTRUCT, vals, [ListType(elem)]).output

    def tuple_(self, items: Sequence[ValueLike]) -> Value:
        vals = [self.value(i) for i in items]
        return self.node(Prim.TUPLE_CONSTRUCT, vals, [TupleType(tuple(v.type for v in vals))]).output

    def tuple_unpack(self, t: Value) -> tuple[Value, ...]:
        if not isinstance(t.type, TupleType):
            raise IRError(f"tuple_unpack: expected a tuple value, got {t.type!r}")
        return tuple(self.node(Prim.TUPLE_UNPACK, [t], t.type.elements).outputs)

    def tuple_index(self, t: Value, index: int) -> Value:
        if not isinstance(t.type, TupleType):
            raise IRError(f"tuple_index: expected a tuple value, got {t.type!r}")
        return self.node(Prim.TUPLE_INDEX, [t], [t.type.elements[index]], {"index": index}).output

    def list_unpack(self, lst: Value, n: int) -> tuple[Value, ...]:
        elem = lst.type.element if isinstance(lst.type, ListType) else AnyType
        return tuple(self.node(Prim.LIST_UNPACK, [lst], [elem] * n).outputs)

    # ---- side effects -------------------------------------------------------------------
    def raise_(self, message: str, kind: str = "RuntimeError") -> Node:
        return self.node(Prim.RAISE, [], [], {"kind": kind, "message": message})

    def print_(self, *values: ValueLike) -> Node:
        return self.node(Prim.PRINT, [self.value(v) for v in values])

    def fusion_group(self, subgraph: Graph, inputs: Sequence[Value]) -> tuple[Value, ...]:
        types = [v.type for v in subgraph.outputs]
        return tuple(self.node(Prim.FUSION_GROUP, inputs, types, {"subgraph": subgraph}).outputs)

    # ---- control flow -------------------------------------------------------------------
    def if_(self, cond: ValueLike, then_fn: Callable[[], BodyResult],
            else_fn: Callable[[], BodyResult]) -> tuple[Value, ...]:
        """``prim::If``: each function builds its branch and returns the branch outputs.

            >>> from scriptmod.ir.dtypes import float32
            >>> g = Graph(); b = Builder(g)
            >>> x, c = b.input(TensorType(float32, (2,)), "x"), b.input(BoolType, "c")
            >>> y, = b.if_(c, lambda: [b.op("neg", x)], lambda: [x]); b.ret(y)
            >>> print(g)
            graph(%x : Float(2), %c : bool):
              %0 : Float(2) = prim::If(%c)
                block0():
                  %1 : Float(2) = sm::neg(%x)
                  -> (%1)
                block1():
                  -> (%x)
              return (%0)
        """
        node = self.node(Prim.IF, [self.value(cond)], [], n_blocks=2)
        outs = [self._build_block(blk, fn) for blk, fn in zip(node.blocks, (then_fn, else_fn))]
        if len(outs[0]) != len(outs[1]):
            raise IRError(f"if_: the branches return {len(outs[0])} and {len(outs[1])} values")
        for a, c in zip(*outs):
            node.add_output(join_types(a.type, c.type))
        return tuple(node.outputs)

    def _build_block(self, block: Block, fn: Callable[..., BodyResult], *args: Value) -> list[Value]:
        with self.insert_into(block):
            vals = [self.value(v) for v in _as_list(fn(*args))]
            for v in vals:
                block.register_output(v)
        return vals

    def loop(self, trip_count: ValueLike, carried: Sequence[ValueLike],
             body: Callable[..., BodyResult]) -> tuple[Value, ...]:
        """``for i in range(trip_count)``: ``body(i, *carried)`` returns the new carried values."""
        return self.while_loop(True, carried, lambda i, *vs: (True, *_as_list(body(i, *vs))),
                               trip_count)

    def while_loop(self, cond: ValueLike, carried: Sequence[ValueLike],
                   body: Callable[..., BodyResult],
                   max_trip_count: ValueLike = 2**63 - 1) -> tuple[Value, ...]:
        """``prim::Loop``: ``body(i, *carried)`` returns ``(continue_cond, *new_carried)``."""
        init = [self.value(v) for v in carried]
        node = self.node(Prim.LOOP, [self.value(max_trip_count), self.value(cond), *init])
        blk = node.add_block()
        params = [blk.add_param(IntType, "i")] + [blk.add_param(v.type, v.debug_name) for v in init]
        outs = self._build_block(blk, body, *params)
        if len(outs) != len(init) + 1:
            raise IRError(f"loop body returned {len(outs)} values, expected the condition and "
                          f"{len(init)} carried value(s)")
        if outs[0].type not in (BoolType, AnyType) and not isinstance(outs[0].type, TensorType):
            raise IRError(f"loop body condition: expected bool, got {outs[0].type!r}")
        for p, v0, v1 in zip(params[1:], init, outs[1:]):
            p.type = join_types(v0.type, v1.type)
            node.add_output(p.type)
        return tuple(node.outputs)


def _as_list(res: BodyResult) -> list[Any]:
    return [] if res is None else [res] if isinstance(res, Value) else list(res)
