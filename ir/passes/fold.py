"""Constant folding: structural folds always; op folds through a pluggable evaluator (the IR
cannot run kernels, so the runtime passes one, e.g. ``runtime.interpreter.evaluate_node``)."""
from __future__ import annotations

from typing import Any, Callable

from .. import schema as S
from ..builder import Builder
from .effects import is_pure
from ..graph import Graph, Node, Prim, Value, known_value
from ..printer import is_payload

Evaluator = Callable[[Node, list], list]


def fold_constants(graph: Graph, evaluate: Evaluator | None = None) -> Graph:
    """Replace computations on constants by constants, in place.

    Always: list/tuple construction from constants, tuple indexing and unpacking of known
    tuples, ``sm::size`` of a known size, ``prim::If`` on a constant condition, loops that
    never run. With ``evaluate(node, input_values) -> output_values``: every pure, non-factory
    op whose inputs are all constants.

        >>> from scriptmod.ir import parse
        >>> from scriptmod.ir.passes import eliminate_dead_code
        >>> g = parse('''graph(%x : Float(2, 3)):
        ...   %n : int = sm::size[dim=0](%x)
        ...   %m : int = prim::Constant[value=3]()
        ...   %shape : int[] = prim::ListConstruct(%n, %m)
        ...   %y : Float(2, 3) = sm::reshape(%x, %shape)
        ...   return (%y)
        ... ''')
        >>> print(eliminate_dead_code(fold_constants(g)))
        graph(%x : Float(2, 3)):
          %shape : int[] = prim::Constant[value=[2, 3]]()
          %y : Float(2, 3) = sm::reshape(%x, %shape)
          return (%y)

    Tensor ops need the evaluator, which lives in the runtime:

        >>> from scriptmod.runtime.interpreter import evaluate_node
        >>> g = parse('''graph(%x : Float(2)):
        ...   %a : float = prim::Constant[value=2.0]()
        ...   %b : float = prim::Constant[value=3.0]()
        ...   %k : Float() = sm::add(%a, %b)
        ...   %y : Float(2) = sm::mul(%x, %k)
        ...   return (%y)
        ... ''')
        >>> print(eliminate_dead_code(fold_constants(g, evaluate=evaluate_node)))
        graph(%x : Float(2)):
          %k : Float() = prim::Constant[value=<Tensor>]()
          %y : Float(2) = sm::mul(%x, %k)
          return (%y)
    """
    changed = True
    while changed:
        changed = False
        for node in list(graph.walk()):
            if node.owning_block is not None:
                changed |= _fold(node, evaluate)
    return graph


def _fold(node: Node, evaluate: Evaluator | None) -> bool:
    folder = FOLDERS.get(node.kind)
    if folder is not None:
        replacement = folder(node)
    elif node.is_op and evaluate is not None and _foldable_op(node):
        replacement = _evaluate(node, evaluate)
    else:
        return False
    if replacement is None:
        return False
    inputs = [v.node for v in node.inputs]
    for v, r in zip(node.outputs, replacement):
        v.replace_all_uses_with(r)
    node.destroy()
    for producer in inputs:   # constants only this node used
        if producer.kind == Prim.CONSTANT and producer.owning_block and not producer.output.uses:
            producer.destroy()
    return True


def _is_constant(v: Value) -> bool:
    return v.node.kind == Prim.CONSTANT


def _constants(node: Node, *values: Any) -> list[Value]:
    with Builder(node.graph, node.source, node.scope).insert_before(node) as b:
        return [b.constant(x, type=v.type, name=v.debug_name) for x, v in zip(values, node.outputs)]


def _foldable_op(node: Node) -> bool:
    schema = S.REGISTRY.get(node.op_name)
    return (schema is not None and not schema.has(S.IMPURE) and not schema.has(S.FACTORY)
            and all(_is_constant(v) for v in node.inputs))


def _evaluate(node: Node, evaluate: Evaluator) -> list[Value] | None:
    """The op's result on its constant inputs, or None (left in place) when the op raises:
    the error belongs to the run that reaches it (``1 // 0`` in a branch never taken)."""
    try:
        outs = evaluate(node, [v.node.attrs.get("value") for v in node.inputs])
    except Exception:
        return None
    return _constants(node, *outs)


def _construct(node: Node) -> list[Value] | None:
    if not all(_is_constant(v) and not is_payload(v.node.attrs.get("value")) for v in node.inputs):
        return None
    if not is_pure(node):          # a list that is mutated: one constant would be shared
        return None
    return _constants(node, known_value(node.output))


def _tuple_index(node: Node) -> list[Value] | None:
    src = node.inputs[0].node
    i = node.attrs["index"]
    if src.kind == Prim.TUPLE_CONSTRUCT:
        return [src.inputs[i]]
    if src.kind == Prim.CONSTANT and isinstance(src.attrs.get("value"), tuple):
        return _constants(node, src.attrs["value"][i])
    return None


def _unpack(node: Node) -> list[Value] | None:
    src = node.inputs[0].node
    if src.kind in (Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT) and len(src.inputs) == len(node.outputs):
        return list(src.inputs)
    value = src.attrs.get("value") if src.kind == Prim.CONSTANT else None
    if isinstance(value, (list, tuple)) and len(value) == len(node.outputs):
        return _constants(node, *value)
    return None


def _size(node: Node) -> list[Value] | None:
    """``sm::size``/``sm::dim`` the input types fix: a constant."""
    dim = known_value(node.output)
    return _constants(node, dim) if isinstance(dim, int) else None


def _guard(node: Node) -> list[Value] | None:
    """A guard whose condition is known true has nothing left to check."""
    return [node.inputs[0]] if known_value(node.inputs[0]) is True else None


def _if(node: Node) -> list[Value] | None:
    cond = node.inputs[0].node.attrs.get("value") if _is_constant(node.inputs[0]) else None
    if not isinstance(cond, bool):
        return None
    taken = node.blocks[0 if cond else 1]
    for n in taken.nodes:
        n.move_before(node)
    return list(taken.outputs)


def _loop(node: Node) -> list[Value] | None:
    trip, cond = (v.node.attrs.get("value") if _is_constant(v) else None for v in node.inputs[:2])
    never = cond is False or (isinstance(trip, int) and not isinstance(trip, bool) and trip <= 0)
    return list(node.inputs[2:]) if never else None


FOLDERS: dict[str, Callable[[Node], "list[Value] | None"]] = {
    Prim.LIST_CONSTRUCT: _construct, Prim.TUPLE_CONSTRUCT: _construct,
    Prim.TUPLE_INDEX: _tuple_index, Prim.TUPLE_UNPACK: _unpack, Prim.LIST_UNPACK: _unpack,
    "sm::size": _size, "sm::dim": _size, "sm::guard": _guard, Prim.IF: _if, Prim.LOOP: _loop,
}
