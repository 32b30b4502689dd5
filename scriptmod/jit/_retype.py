"""A compiled module's graphs typed for the tensors it holds now (for ``save`` and ``freeze``).

A method's graph keeps the types it was traced or scripted with; ``.double()``, ``.half()``,
``.to(dtype)``, ``load_state_dict(..., assign=True)``, an assigned parameter or a replaced
buffer change the module's tensors, and the executor re-types the graph for the tensors it
finds at each call (``_specialize.refresh_attribute_types``). What is built from the graph
outside a call must be typed the same way: an archive holds each graph as it would run now,
and freezing folds constants with their current types. Attribute reads take the tensors'
types and every other value is re-derived from them, for input types the method runs with:
the declared ones, unless the module was cast as a whole (every tensor of one dtype now has
another: its floating inputs are cast alike) or they no longer type (then an input dtype that
a changed tensor now has). For an archive the choice is checked as ``jit.load`` checks it
(``_archive_checks.check_types``); a method that types for none is refused at save time.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Graph, Node, Prim
from scriptmod.ir.passes.shapes import callee_handlers, extra_handlers, propagate_shapes
from scriptmod.ir.types import ListType, ModuleType, OptionalType, TensorType, TupleType, Type
from scriptmod.ir.verify import types_agree
from scriptmod.jit._archive_format import ArchiveError
from scriptmod.tensor import Tensor

Method = tuple[int, str]          # (module number in the archive, method name)


@dataclass(frozen=True)
class Change:
    """A tensor attribute whose type differs from the one a graph recorded for it."""
    path: str
    was: TensorType
    now: TensorType

    def __str__(self) -> str:
        return f"{self.path}: {self.was!r} -> {self.now!r}"


def current_graphs(modules: list[Any], paths: list[str]) -> dict[Method, Graph]:
    """Every method of ``modules`` (an archive's module tree, numbered) as it would run on
    the modules' tensors now; a method that reads no changed tensor, and whose inputs a whole
    cast leaves alone, is its own graph (the archive of an unchanged module is as before)."""
    from scriptmod.jit._specialize import inlined
    graphs = {(i, name): g for i, m in enumerate(modules) for name, g in m._methods.items()}
    if not any(_changes(modules[i], g, paths[i]) for (i, _), g in graphs.items()):
        return graphs
    cast = _whole_cast(modules, graphs)
    out = dict(graphs)
    for (i, name), g in graphs.items():
        reads = _changes(modules[i], inlined(modules[i], name), paths[i])
        declared = [v.type for v in g.inputs]
        if reads or _cast_types(declared, cast) != declared:
            out[(i, name)] = _retyped(modules[i], name, paths[i], reads, cast, _for_archive)
    return out


def current_inlined(mod: Any, name: str) -> Graph:
    """``mod.<name>`` with its calls inlined, typed for the module's tensors now (what
    ``freeze`` folds into constants); its scripted library calls stay unexpanded. Where no
    input types type it, its attribute reads alone are re-typed (the call fails as the
    module's own call does)."""
    from scriptmod.jit._specialize import inlined, refresh_attribute_types
    flat = inlined(mod, name)
    reads = _changes(mod, flat, "")
    if not reads:
        return flat
    mods = list(mod.modules())
    cast = _whole_cast(mods, {(i, k): g for i, m in enumerate(mods)
                              for k, g in m._methods.items()})
    try:
        return _retyped(mod, name, "", reads, cast, _flat)
    except ArchiveError:
        refresh_attribute_types(flat, mod)
        return flat


def _changes(mod: Any, g: Graph, path: str) -> list[Change]:
    """The tensor attributes ``g`` reads whose recorded type no longer fits the tensor."""
    out = []
    for node in _tensor_reads(g):
        value = _attribute(mod, node)
        was = node.output.type
        if isinstance(value, Tensor) and isinstance(was, TensorType):
            now = _type_of(value, was)
            if _stale(was, now):
                out.append(Change(_dotted(path, node), was, now))
    return out


def _tensor_reads(g: Graph) -> list[Node]:
    return [n for n in g.walk()
            if n.kind == Prim.GET_ATTR and isinstance(n.output.type, TensorType)]


def _attribute(mod: Any, node: Node) -> Any:
    from scriptmod.jit._specialize import submodule_of_value
    try:
        return getattr(submodule_of_value(mod, node.inputs[0]), node.attrs["name"])
    except AttributeError:
        return None


def _dotted(path: str, node: Node) -> str:
    from scriptmod.jit._boundary import module_path
    names = [p for p in (path, module_path(node.inputs[0])[1], node.attrs["name"]) if p]
    return ".".join(names)


def _type_of(value: Tensor, was: TensorType) -> TensorType:
    """The tensor's type now (its requires_grad flag as the graph recorded it)."""
    return was.with_(dtype=value.dtype, shape=tuple(value._data.shape),
                     device=value._device_str())


def _stale(was: TensorType, now: TensorType) -> bool:
    return ((was.dtype is not None and was.dtype is not now.dtype) or was.device != now.device
            or (was.shape is not None and was.shape != now.shape))


def _refreshed(mod: Any, g: Graph) -> Graph:
    """A copy of ``g`` whose tensor attribute reads have the tensors' types now."""
    g = g.copy()
    for node in _tensor_reads(g):
        value = _attribute(mod, node)
        if isinstance(value, Tensor):
            node.output.type = _type_of(value, node.output.type)
    return g


def _whole_cast(modules: list[Any], graphs: dict[Method, Graph]) -> dict[DType, DType]:
    """dtype -> dtype where every tensor the graphs read that was recorded with the first
    now has the second (``.double()``, ``.to(dtype)``): the module was cast as a whole."""
    seen: dict[DType, set[DType]] = {}
    for (i, _), g in graphs.items():
        for node in _tensor_reads(g):
            value, was = _attribute(modules[i], node), node.output.type
            if isinstance(value, Tensor) and was.dtype is not None:
                seen.setdefault(was.dtype, set()).add(value.dtype)
    return {old: next(iter(new)) for old, new in seen.items()
            if len(new) == 1 and old not in new}


Typer = Callable[[Any, str, list[Type]], Graph]


def _retyped(mod: Any, name: str, path: str, reads: list[Change], cast: dict[DType, DType],
             typed: Typer) -> Graph:
    """``typed(mod, name, types)`` for the first candidate input types it succeeds for."""
    declared = [v.type for v in mod._methods[name].inputs]
    errors: list[str] = []
    for types in _candidates(declared, reads, cast):
        try:
            return typed(mod, name, types)
        except Exception as e:         # noqa: BLE001 - each failure is reported below
            errors.append(f"{_shown(types)}: {type(e).__name__}: {e}")
    shown = "; ".join(str(c) for c in reads[:4]) + ("; ..." if len(reads) > 4 else "")
    raise ArchiveError(
        f"jit.save: {path or '<root>'}.{name} was compiled for other tensors than the module "
        f"holds now ({shown or 'a cast'}), and its graph does not type for them from any "
        f"inputs it could take: {' | '.join(errors)}. Give the tensors types the graph can run "
        f"with (cast the whole module with .to(dtype)), or trace/script the module again "
        f"after changing them")


def _for_archive(mod: Any, name: str, types: list[Type]) -> Graph:
    """The method's own graph typed from ``types``, checked as ``jit.load`` will check it."""
    g = _typed_calls(mod, name, types)
    _check_as_load(mod, name, types, g)
    return g


def _flat(mod: Any, name: str, types: list[Type]) -> Graph:
    from scriptmod.jit._specialize import inlined, refresh_attribute_types
    flat = inlined(mod, name)
    refresh_attribute_types(flat, mod)
    return propagate_shapes(flat, types)


def _candidates(declared: list[Type], reads: list[Change],
                cast: dict[DType, DType]) -> list[list[Type]]:
    """Input types to try, in order: cast as the whole module was; as declared; with the
    floating inputs of a changed dtype given each dtype that changed tensors now have."""
    out = [_cast_types(declared, cast)] if cast else []
    out.append(declared)
    moved = [c for c in reads if c.was.dtype is not None and c.was.dtype is not c.now.dtype]
    counts = Counter(c.now.dtype for c in moved if c.now.dtype.is_floating_point)
    olds = {c.was.dtype for c in moved}
    for new, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].name)):
        out.append([_with_dtypes(t, {old: new for old in olds}) for t in declared])
    unique: list[list[Type]] = []
    for types in out:
        if types not in unique:
            unique.append(types)
    return unique


def _cast_types(types: list[Type], cast: dict[DType, DType]) -> list[Type]:
    return [_with_dtypes(t, cast) for t in types]


def _with_dtypes(t: Type, cast: dict[DType, DType]) -> Type:
    """``t`` with its floating tensor dtypes mapped by ``cast`` (inside containers too)."""
    if isinstance(t, TensorType):
        if t.dtype is not None and t.dtype.is_floating_point and t.dtype in cast:
            return t.with_(dtype=cast[t.dtype])
        return t
    if isinstance(t, TupleType):
        return TupleType(tuple(_with_dtypes(e, cast) for e in t.elements))
    if isinstance(t, ListType):
        return ListType(_with_dtypes(t.element, cast))
    if isinstance(t, OptionalType):
        return OptionalType(_with_dtypes(t.element, cast))
    return t


def _shown(types: list[Type]) -> str:
    return "(" + ", ".join(repr(t) for t in types if not _is_module(t)) + ")"


def _is_module(t: Type) -> bool:
    return isinstance(t, ModuleType)


def _typed_calls(mod: Any, name: str, types: list[Type]) -> Graph:
    """``mod.<name>``'s own graph (its calls kept) typed from ``types``: each
    ``prim::CallMethod`` is typed through a copy of its callee's graph, as the call runs."""
    from scriptmod.jit._specialize import submodule_of
    owners: dict[Node, Any] = {}

    def graph_of(owner: Any, method: str) -> Graph:
        g = _refreshed(owner, owner._methods[method])
        owners.update((n, submodule_of(owner, n)) for n in g.walk()
                      if n.kind == Prim.CALL_METHOD)
        return g

    g = graph_of(mod, name)
    with extra_handlers(callee_handlers(lambda n: graph_of(owners[n], n.attrs["name"]))):
        return propagate_shapes(g, types)


def _check_as_load(mod: Any, name: str, types: list[Type], g: Graph) -> None:
    """``jit.load`` types the method inlined, its library calls expanded, from its declared
    inputs (``_archive_checks._typed``): that must succeed and agree with ``g``'s outputs."""
    from scriptmod.jit._specialize import typed_inlined
    flat = typed_inlined(mod, name, types)
    for k, (d, v) in enumerate(zip(g.outputs, flat.outputs)):
        if not types_agree(d.type, v.type):
            raise ArchiveError(f"output {k} types {d.type!r} through its calls but "
                               f"{v.type!r} inlined")
