"""Shape (type) propagation: specialize a graph's types for given input types."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Mapping, Sequence

from .. import schema as S
from ..builder import infer_op_types, join_types
from ..errors import DTypeError, ShapeError, guard_failure
from ..graph import Block, Graph, Node, Prim, Value, known_value
from ..printer import describe
from ..types import (AnyType, DictType, ListType, NoneType, OptionalType, TensorType, TupleType,
                     Type)

MAX_LOOP_ROUNDS = 32


class ShapePropagationError(ShapeError):
    """An op's type rule rejects the propagated input types; cites the node (``.node``)."""

    node: Node | None = None


def propagate_shapes(graph: Graph, input_types: Sequence[Type | None],
                     keep_symbolic: bool = False) -> Graph:
    """Re-type every value from ``input_types`` (None: keep that input's type) through ops,
    blocks and fusion subgraphs, using the op schemas' type rules.

    With ``keep_symbolic`` a symbolic dim of a declared input type (``B``) stays symbolic
    even where ``input_types`` gives a size for it, so the graph stays general in it.

        >>> from scriptmod.ir import parse
        >>> from scriptmod.ir.dtypes import float32
        >>> g = parse('''graph(%x : Float(B, 4)):
        ...   %y : Float(B) = sm::sum[dim=[1], keepdim=0](%x)
        ...   return (%y)
        ... ''')
        >>> print(propagate_shapes(g, [TensorType(float32, (8, 4))]))
        graph(%x : Float(8, 4)):
          %y : Float(8) = sm::sum[dim=[1], keepdim=0](%x)
          return (%y)
    """
    if len(input_types) != len(graph.inputs):
        raise ValueError(f"propagate_shapes: the graph takes {len(graph.inputs)} input(s), "
                         f"got {len(input_types)} input type(s)")
    for v, t in zip(graph.inputs, input_types):
        if t is not None:
            v.type = _merge_input(v.type, t, keep_symbolic)
    propagate_block(graph.block)
    return graph


def _merge_input(declared: Type, given: Type, keep_symbolic: bool) -> Type:
    if not (keep_symbolic and isinstance(declared, TensorType) and isinstance(given, TensorType)
            and declared.shape is not None and given.shape is not None
            and len(declared.shape) == len(given.shape)):
        return given
    dims = tuple(d if isinstance(d, str) else g for d, g in zip(declared.shape, given.shape))
    return given.with_(shape=dims)


def propagate_block(block: Block) -> None:
    extra = _EXTRA[-1] if _EXTRA else None
    for node in block:
        handler = extra.get(node.kind) if extra else None
        (handler or HANDLERS.get(node.kind, _keep))(node)
        if _raises(node):
            return          # what follows never runs for these types: left as it is


def _raises(node: Node) -> bool:
    """Whether ``node`` always raises for the types given: a ``prim::RaiseException``, or an
    If whose condition the types decide and whose taken branch raises (``if x.ndim < 3:
    raise ...`` ahead of ``x.shape[-3]``)."""
    if node.kind == Prim.RAISE:
        return True
    if node.kind != Prim.IF:
        return False
    taken = known_value(node.inputs[0])
    return type(taken) is bool and any(_raises(n) for n in node.blocks[0 if taken else 1])


_EXTRA: list[dict[str, Callable[[Node], None]]] = []


@contextlib.contextmanager
def extra_handlers(handlers: dict[str, Callable[[Node], None]]) -> Iterator[None]:
    """Inside the ``with``, ``propagate_shapes`` types the node kinds in ``handlers`` with
    them (a frontend's own kinds: the script frontend expands ``prim::CallFunction`` here,
    where its input types are known). A handler may replace its node by nodes it inserts
    before it, typing them itself (``type_node``)."""
    _EXTRA.append(dict(handlers))
    try:
        yield
    finally:
        _EXTRA.pop()


def type_node(node: Node) -> None:
    """Type one node as ``propagate_block`` would (its blocks included)."""
    extra = _EXTRA[-1] if _EXTRA else None
    handler = extra.get(node.kind) if extra else None
    (handler or HANDLERS.get(node.kind, _keep))(node)


def _keep(node: Node) -> None:
    if node.is_op:
        _op(node)


def _op(node: Node) -> None:
    try:
        types = infer_op_types(S.get(node.kind), node.inputs, node.attrs)
    except DTypeError as e:          # dtypes an op refuses (a float64 input to a float32 Linear)
        where = f"{node.source}: " if node.source else ""
        err_d = DTypeError(f"{where}{e}")
        err_d.node = node            # type: ignore[attr-defined]
        raise err_d from None
    except (TypeError, ValueError, IndexError) as e:
        where = f"{node.source}: " if node.source else ""
        err = ShapePropagationError(f"{where}{e}\n    {describe(node)}")
        err.node = node
        raise err from None
    for v, t in zip(node.outputs, types):
        v.type = t


def _guard(node: Node) -> None:
    """A guard known false for these input types fails now, before the ops of the branch the
    trace took meet shapes they were never meant for."""
    _op(node)
    if known_value(node.inputs[0]) is False:
        raise guard_failure(node.attrs["what"], node.attrs.get("where", ""))


def _if(node: Node) -> None:
    taken = known_value(node.inputs[0])
    if type(taken) is bool:
        # a condition the input types decide (``x.ndim == 2``): only the branch taken is
        # typed; the other may index dims this input does not have, and folding drops it
        b = node.blocks[0 if taken else 1]
        propagate_block(b)
        for v, out in zip(node.outputs, b.outputs):
            v.type = out.type
        return
    for b in node.blocks:
        propagate_block(b)
    for i, v in enumerate(node.outputs):
        v.type = _join_values(node.blocks[0].outputs[i], node.blocks[1].outputs[i])


def _join_values(a: Value, b: Value) -> Type:
    """``join_types``, where a ``prim::Uninitialized`` (a value no path reads) is the bottom
    type: it takes the other side's type. So is a loop-carried value that starts as one and
    has no type of its own yet (an early ``return`` from a loop: the result is carried as a
    placeholder until a branch sets it)."""
    if a.node.kind == Prim.UNINITIALIZED:
        a.type = b.type
    elif b.node.kind == Prim.UNINITIALIZED:
        b.type = a.type
    elif a in _BOTTOM:
        return b.type
    elif b in _BOTTOM:
        return a.type
    return join_types(a.type, b.type)


# loop-carried params whose initial value is a placeholder, while their loop's first round
# is typed (see ``_join_values``)
_BOTTOM: set[Value] = set()


def _loop(node: Node) -> None:
    body = node.blocks[0]
    params = body.params[1:]
    for p, init in zip(params, node.inputs[2:]):
        p.type = init.type
    placeholders = {p for p, init in zip(params, node.inputs[2:])
                    if init.node.kind == Prim.UNINITIALIZED}
    for _ in range(MAX_LOOP_ROUNDS):
        _BOTTOM.update(placeholders)
        start = [p.type for p in params]
        try:
            propagate_block(body)
        finally:
            _BOTTOM.difference_update(placeholders)
        # a store in the body widened a list it carries (``xs.append(..)`` writes into the
        # carried value itself, so the join below cannot see it): type the body again
        widened = any(p.type != t for p, t in zip(params, start))
        for p, init, o in zip(params, node.inputs[2:], body.outputs[1:]):
            if init.node.kind == Prim.UNINITIALIZED and init.type != o.type and o is not p:
                init.type = p.type = o.type        # a placeholder: the body's type is it
        placeholders = set()
        joined = [join_types(p.type, o.type) for p, o in zip(params, body.outputs[1:])]
        if not widened and all(j == p.type for j, p in zip(joined, params)):
            break
        for p, j in zip(params, joined):
            p.type = j
    else:
        raise ShapePropagationError(f"loop types do not settle\n    {describe(node)}")
    for v, p in zip(node.outputs, params):
        v.type = p.type


def _fusion_group(node: Node) -> None:
    sub = node.attrs["subgraph"]
    propagate_shapes(sub, [v.type for v in node.inputs])
    for v, o in zip(node.outputs, sub.outputs):
        v.type = o.type


def callee_handlers(callees: Mapping[Node, Graph] | Callable[[Node], Graph | None]
                    ) -> dict[str, Callable[[Node], None]]:
    """For ``extra_handlers``: each call left in place by inlining that has a callee graph
    in ``callees`` (a mapping the caller keeps, or a function that finds or builds the graph
    of a call) is typed through that graph; a call without one keeps its types, as it does
    without these handlers."""
    callee_of = callees.get if isinstance(callees, Mapping) else callees

    def call_method(node: Node) -> None:
        callee = callee_of(node)
        if callee is not None:
            propagate_shapes(callee, [v.type for v in node.inputs])
            for v, o in zip(node.outputs, callee.outputs):
                v.type = o.type
    return {Prim.CALL_METHOD: call_method}


def _tuple_construct(node: Node) -> None:
    node.output.type = TupleType(tuple(v.type for v in node.inputs))


def _tuple_unpack(node: Node) -> None:
    t = node.inputs[0].type
    if isinstance(t, TupleType) and len(t.elements) == len(node.outputs):
        for v, e in zip(node.outputs, t.elements):
            v.type = e


def _tuple_index(node: Node) -> None:
    t = node.inputs[0].type
    if isinstance(t, TupleType):
        item = t.elements[node.attrs["index"]]
        if isinstance(item, OptionalType) and not isinstance(node.output.type, OptionalType) \
                and node.output.type != NoneType:
            item = item.element      # an Optional the script frontend refined (``is not None``)
        node.output.type = item


def _list_construct(node: Node) -> None:
    types = [v.type for v in node.inputs]
    if types:
        elem = types[0]
        for t in types[1:]:
            elem = join_types(elem, t)
        node.output.type = ListType(elem)


def _store(node: Node) -> None:
    """A store into a list or dict (``append``, ``xs[i] = v``, ``insert``, ``extend``,
    ``d[k] = v``, ``update``): typed by its rule, then the container's type widens to hold what it
    stores. A list of tensors holds tensors of many shapes, and a read after the store
    (``xs[-1].shape[0]``) must not take the first item's type for every item's."""
    _op(node)
    stored = _stored(node)
    target = node.inputs[0] if node.inputs else None
    if stored is None or target is None:
        return
    t = target.type
    if isinstance(t, ListType):
        target.type = ListType(join_types(t.element, stored))
    elif isinstance(t, DictType):
        target.type = DictType(t.key, join_types(t.value, stored))


def _stored(node: Node) -> Type | None:
    fn = node.attrs.get("fn")
    if node.kind in ("sm::list_append", "sm::list_set", "sm::dict_set") or fn == "list.insert":
        return node.inputs[-1].type
    t = node.inputs[-1].type if node.inputs else None
    if fn == "list.extend" and isinstance(t, ListType):
        return t.element
    if fn == "dict.update" and isinstance(t, DictType):
        return t.value
    return None


def _list_unpack(node: Node) -> None:
    t = node.inputs[0].type
    for v in node.outputs:
        v.type = t.element if isinstance(t, ListType) else AnyType


HANDLERS: dict[str, Callable[[Node], None]] = {
    Prim.IF: _if, Prim.LOOP: _loop, Prim.FUSION_GROUP: _fusion_group,
    Prim.TUPLE_CONSTRUCT: _tuple_construct, Prim.TUPLE_UNPACK: _tuple_unpack,
    Prim.TUPLE_INDEX: _tuple_index, Prim.LIST_CONSTRUCT: _list_construct,
    Prim.LIST_UNPACK: _list_unpack, "sm::guard": _guard,
    "sm::list_append": _store, "sm::list_set": _store, "sm::dict_set": _store,
    "sm::py_call": _store,
}
