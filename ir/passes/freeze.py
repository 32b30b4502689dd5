"""Freezing: module attributes the graph only reads become constants.

The IR knows module attributes only as ``prim::GetAttr`` chains from the graph's ``self``;
the caller (``scriptmod.jit.freeze``) says what each dotted path holds now. A path the graph
writes (``prim::SetAttr``, ``sm::copy_`` into it, ``batch_norm`` updating its running
statistics in training) keeps its read: a constant would not see the write.
"""
from __future__ import annotations

from typing import Any, Callable, Collection

from ..builder import Builder
from ..graph import Graph, Node, Prim, Value, known_value
from ..printer import is_payload
from ..types import ModuleType
from .dce import eliminate_dead_code
from .effects import is_view

KEEP: Any = object()      # what ``read`` returns for an attribute that stays an attribute

# op -> positions of the inputs it may write (given the node: batch_norm writes its running
# statistics and counter only in training)
_WRITTEN_INPUTS: dict[str, Callable[[Node], tuple[int, ...]]] = {
    "sm::copy_": lambda node: (0,),
    "sm::batch_norm": lambda node: () if known_value(node.inputs[5]) is False else (1, 2, 6),
}


def attribute_path(v: Value) -> str | None:
    """``"conv.weight"`` for a value read by a GetAttr chain from the graph's ``self``."""
    names: list[str] = []
    while v.node.kind == Prim.GET_ATTR:
        names.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    g = v.node.graph
    if not names or not g.inputs or v is not g.inputs[0]:
        return None
    return ".".join(reversed(names))


def written_paths(graph: Graph) -> set[str]:
    """Dotted paths of the attributes the graph may write."""
    out: set[str] = set()
    for node in graph.walk():
        if node.kind == Prim.SET_ATTR:
            owner = attribute_path(node.inputs[0])
            out.add(f"{owner}.{node.attrs['name']}" if owner else node.attrs["name"])
        elif node.kind in _WRITTEN_INPUTS:
            for i in _WRITTEN_INPUTS[node.kind](node):
                path = attribute_path(_base(node.inputs[i])) if i < len(node.inputs) else None
                if path is not None:
                    out.add(path)
    return out


def _base(v: Value) -> Value:
    """The value whose storage ``v`` views (a write into ``buf[0]`` writes ``buf``)."""
    while is_view(v.node):
        v = v.node.inputs[0]
    return v


def freeze_attributes(graph: Graph, read: Callable[[str], Any],
                      keep: Collection[str] = ()) -> Graph:
    """Replace every read of a module attribute by a constant of ``read(path)``, in place,
    except the paths in ``keep`` (and attributes of the modules named there), those the
    graph writes, and those ``read`` answers ``KEEP`` for; then drop the module reads
    nothing uses any more.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%self : __module__.Net, %x : Float(2)):
        ...   %fc : __module__.Fc = prim::GetAttr[name="fc"](%self)
        ...   %s : float = prim::GetAttr[name="scale"](%fc)
        ...   %y : Float(2) = sm::mul(%x, %s)
        ...   return (%y)
        ... ''')
        >>> print(freeze_attributes(g, {"fc.scale": 2.0}.__getitem__))
        graph(%self : __module__.Net, %x : Float(2)):
          %s : float = prim::Constant[value=2.0]()
          %y : Float(2) = sm::mul(%x, %s)
          return (%y)
    """
    for tensors in (False, True):    # flags first: batch_norm's says if it writes its stats
        kept = set(keep) | written_paths(graph)
        for node in list(graph.walk()):
            if node.kind != Prim.GET_ATTR or isinstance(node.output.type, ModuleType):
                continue
            path = attribute_path(node.output)
            if path is None or _is_kept(path, kept):
                continue
            value = read(path)
            if value is not KEEP and is_payload(value) == tensors:
                _to_constant(node, value)
    return eliminate_dead_code(graph)


def _is_kept(path: str, kept: set[str]) -> bool:
    """``path`` or a module on its way is kept (``"conv"`` keeps ``"conv.weight"``)."""
    return path in kept or any(path.startswith(k + ".") for k in kept)


def _to_constant(node: Node, value: Any) -> None:
    with Builder(node.graph, node.source).insert_before(node) as b:
        const = b.constant(value, name=node.output.debug_name)
    node.output.replace_all_uses_with(const)
    node.destroy()
