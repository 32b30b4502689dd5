"""The symbolic batch dim of a trace: which input dims a traced method names ``B``, and the
types of every graph of the trace with them.

The tracer records concrete sizes. ``name_batch_dims`` names dim 0 ``B`` in each tensor
input whose dim 0 is the method's example batch (dim 0 of its first tensor argument, when
that has rank >= 2) and re-types the method's graph and its callees' graphs from there, so
a graph reads ``Float(B, 4096)`` (the executor's batch classes start from these names).
Every graph's types stay what its ops give from its declared inputs, which is what
``jit.load`` checks (``_archive_checks.check_types``):

- a dim that a guard pins stays concrete: when a guard the trace recorded (``range(x.size(0))``,
  ``int(x.shape[0])``) is decided by the traced sizes, not by the symbolic ones, and fails
  at another batch size, the size became a Python value the trace baked in, and the method
  keeps its traced types everywhere (so does a method whose ops cannot be typed
  symbolically). A guard that holds at other sizes too (``x.size(0) > 1``) is checked per
  call and leaves ``B`` symbolic;
- a call's results are typed from the callee's body at the call's argument types, as
  inlining types them, and a callee graph names a dim only where every call passes it that
  same name; elsewhere it keeps its traced size.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from scriptmod.ir.errors import DTypeError, ShapeError, TraceGuardError
from scriptmod.ir.graph import Graph, Node, Prim, Value, known_value
from scriptmod.ir.passes.shapes import extra_handlers, propagate_shapes
from scriptmod.ir.types import TensorType, TupleType, Type

BATCH = "B"
_UNTYPABLE = (ShapeError, DTypeError, TraceGuardError)
Sites = dict[int, tuple[Graph, Any, list[list[Type]]]]   # id(callee) -> (graph, module, types)


Named = list[dict[int, str] | None]   # per graph input: dim -> name (None: no name)


def name_batch_dims(graphs: dict[int, dict[str, Graph]], root: Any,
                    batches: dict[str, int | None],
                    explicit: dict[str, Named] | None = None) -> dict[str, list[tuple[int, int]]]:
    """Re-type ``graphs`` (the tracer's: id(module) -> method -> graph) in place for the
    root methods in ``batches`` (method -> its example batch, None for none) and in
    ``explicit`` (method -> the dims ``trace(dynamic_dims=...)`` names, which replace the
    batch rule for that method). Returns, per method, the (input, dim) pairs of
    ``explicit`` that a guard pins (they keep their traced sizes)."""
    explicit = explicit or {}
    declared: list[tuple[Graph, Any, list[Type]]] = []
    sites: Sites = {}
    done: dict[tuple, dict[Value, Value]] = {}      # the typed copies of the passes kept
    pinned: dict[str, list[tuple[int, int]]] = {}
    for method in {**batches, **explicit}:
        g = graphs[id(root)][method]
        traced = [v.type for v in g.inputs]
        if method in explicit:
            named, typing, pinned[method] = _name_explicit(graphs, root, g, traced,
                                                           explicit[method])
        else:
            batch = batches[method]
            named = [_batch_type(t, batch, BATCH) for t in traced] if batch is not None \
                else traced
            typing = _Typing(graphs)
            if named != traced and not typing.symbolic(root, g, named, [
                    _batch_type(t, batch, batch + 1) for t in traced]):   # type: ignore
                named, typing = traced, _Typing(graphs)
                typing.graph(root, g, traced)
        declared.append((g, root, named))
        done.update(typing.envs)
        for key, (callee, mod, seen) in typing.sites.items():
            sites.setdefault(key, (callee, mod, []))[2].extend(seen)
    declared += [(callee, mod, _meet([v.type for v in callee.inputs], seen))
                 for callee, mod, seen in sites.values()]
    final = _Typing(graphs)          # one memo: a call at a callee's declared types is a lookup
    for g, mod, types in reversed(declared):              # callees first
        env = done.get((id(g), tuple(types)))
        try:
            env = env if env is not None else final.graph(mod, g, types)[1]
        except _UNTYPABLE:          # a callee its calls' names do not type: as traced
            continue
        for v, cv in env.items():
            v.type = cv.type
    return pinned


def _name_explicit(graphs: dict[int, dict[str, Graph]], root: Any, g: Graph,
                   traced: list[Type], wanted: Named) -> tuple[list[Type], _Typing, list]:
    """The input types with the ``wanted`` dims named, the typing that checked them, and
    the (input, dim) pairs left concrete because a guard pins them (each named dim is kept
    if the method still types symbolically with it and the ones kept before it)."""
    dims = [(i, j, name) for i, w in enumerate(wanted) if w for j, name in sorted(w.items())]

    def attempt(keep: list) -> tuple[bool, list[Type], _Typing]:
        typing = _Typing(graphs)
        named, other = _with_names(traced, keep, 0), _with_names(traced, keep, 1)
        return typing.symbolic(root, g, named, other), named, typing

    ok, named, typing = attempt(dims)
    pinned: list[tuple[int, int]] = []
    if not ok:
        keep: list = []
        for d in dims:
            if attempt(keep + [d])[0]:
                keep.append(d)
            else:
                pinned.append(d[:2])
        ok, named, typing = attempt(keep)
        if not ok:                  # nothing names: as traced
            named, typing = traced, _Typing(graphs)
            typing.graph(root, g, traced)
    return named, typing, pinned


def _with_names(traced: list[Type], dims: list[tuple[int, int, str]], grow: int) -> list[Type]:
    """``traced`` with each (input, dim, name) of ``dims`` named (``grow`` 0), or resized to
    its size + 1 (``grow`` 1: the probe a guard that pins the size fails)."""
    out = list(traced)
    for i, j, name in dims:
        t = out[i]
        assert isinstance(t, TensorType) and t.shape is not None
        shape = list(t.shape)
        size = traced[i].shape[j]           # type: ignore[union-attr]
        shape[j] = name if not grow else size + grow
        out[i] = t.with_(shape=tuple(shape))
    return out


def _batch_type(t: Type, batch: int, dim: int | str) -> Type:
    """``t`` with dim 0 ``dim`` (``B``, or another size) where it is the example batch
    (tuples: each item)."""
    if isinstance(t, TensorType) and t.shape and len(t.shape) >= 2 and t.shape[0] == batch:
        return t.with_(shape=(dim,) + tuple(t.shape[1:]))
    if isinstance(t, TupleType):
        return TupleType(tuple(_batch_type(e, batch, dim) for e in t.elements))
    return t


class _Typing:
    """Types copies of a method's graph and of its callees' (one copy per call, each from
    the call's argument types), recording what each callee graph is called with."""

    def __init__(self, graphs: dict[int, dict[str, Graph]]) -> None:
        self.graphs = graphs
        self.owner: dict[int, Any] = {}          # id(copy) -> the module whose graph it is
        self.sites: Sites = {}
        self.open_guard = False                  # a guard the named sizes do not decide
        # (id(graph), its input types) -> its output types, typed in this pass (its calls'
        # sites recorded, its guards looked at)
        self.outputs: dict[tuple, list[Type]] = {}
        self.envs: dict[tuple, dict[Value, Value]] = {}  # the same key -> the typed copy's map

    def symbolic(self, module: Any, g: Graph, types: list[Type], other: list[Type]) -> bool:
        """Whether ``g`` types from the named ``types`` with no guard pinning a named dim: a
        guard the named sizes leave open (``x.size(0) > 1``) must also hold at ``other``
        (the batch + 1), else it pins the batch to the traced size (``range(x.size(0))``)."""
        try:
            self.graph(module, g, types)
            if self.open_guard:
                _Typing(self.graphs).graph(module, g, other)
        except _UNTYPABLE:
            return False
        return True

    def graph(self, module: Any, g: Graph, types: Sequence[Type]) -> tuple[Graph, dict]:
        """A copy of ``g`` typed from ``types``, and the map from ``g``'s values to it."""
        c, env = g.copy_with_map()
        self.owner[id(c)] = module
        with extra_handlers({Prim.CALL_METHOD: self._call}):
            propagate_shapes(c, list(types))
        self.open_guard = self.open_guard or _pins(g, env)
        key = (id(g), tuple(types))
        self.outputs[key], self.envs[key] = [v.type for v in c.outputs], env
        return c, env

    def _call(self, node: Node) -> None:
        from scriptmod.jit._specialize import submodule_of
        sub = submodule_of(self.owner[id(node.graph)], node)
        types = [v.type for v in node.inputs]
        callee = self.graphs.get(id(sub), {}).get(node.attrs["name"])
        if callee is None:           # a scripted submodule keeps its own graphs
            out = _scripted_outputs(sub, node.attrs["name"], types)
        else:
            out = self.outputs.get((id(callee), tuple(types)))
            if out is None:
                self.sites.setdefault(id(callee), (callee, sub, []))[2].append(types)
                out = [o.type for o in self.graph(sub, callee, types)[0].outputs]
        for v, t in zip(node.outputs, out):
            v.type = t


def _pins(traced: Graph, env: dict[Value, Value]) -> bool:
    """A guard that the traced sizes decide and the typed copy's (named) sizes do not."""
    return any(n.kind == "sm::guard" and known_value(n.inputs[0]) is not None
               and known_value(env[n.inputs[0]]) is None for n in traced.walk())


def _scripted_outputs(module: Any, method: str, types: list[Type]) -> list[Type]:
    """The result types of a scripted submodule's method at ``types``, as inlining gives."""
    from scriptmod.jit._specialize import typed_inlined
    return [v.type for v in typed_inlined(module, method, types).outputs]


def _meet(traced: list[Type], seen: list[list[Type]]) -> list[Type]:
    """A callee's declared input types: its traced ones, with a dim named where every call
    passes the same name there."""
    return [_meet_type(t, [s[i] for s in seen]) for i, t in enumerate(traced)]


def _meet_type(t: Type, seen: list[Type]) -> Type:
    if isinstance(t, TupleType):
        if all(isinstance(s, TupleType) and len(s.elements) == len(t.elements) for s in seen):
            return TupleType(tuple(_meet_type(e, [s.elements[k] for s in seen])   # type: ignore
                                   for k, e in enumerate(t.elements)))
        return t
    if not isinstance(t, TensorType) or t.shape is None or not all(
            isinstance(s, TensorType) and s.shape is not None and len(s.shape) == len(t.shape)
            for s in seen):
        return t
    shapes = [s.shape for s in seen]         # type: ignore[union-attr]
    dims = tuple(shapes[0][j] if isinstance(shapes[0][j], str) and all(
        s[j] == shapes[0][j] for s in shapes) else d for j, d in enumerate(t.shape))
    return t.with_(shape=dims)


def pinning_error(e: TraceGuardError, retype: Callable[[list[Type]], None],
                  traced: list[Type], given: list[Type], labels: Sequence[str],
                  where: str) -> TraceGuardError:
    """``e`` (a guard that a call's types fail) naming the argument dim that fails it: each
    dim the call gives another size than traced is tried alone on the traced types
    (``retype(types)`` types a fresh copy of the method's graph); the first that fails
    the guard by itself is named. ``e`` as it is when none does alone."""
    for i, (t, n) in enumerate(zip(traced, given)):
        for label, path, j, size in _differing_dims(labels[i], (), t, n):
            probe = list(traced)
            probe[i] = _resized(t, path, j, size)
            try:
                retype(probe)
            except TraceGuardError:
                was = _at(t, path).shape[j]        # type: ignore[union-attr]
                why = f"but the trace fixed it at {was}" if isinstance(was, int) else \
                    "for which a size check the trace recorded fails"
                return TraceGuardError(f"{where}: argument '{label}' has size {size} at dim "
                                       f"{j}, {why}: {e}")
            except _UNTYPABLE:
                continue
    return e


def _differing_dims(label: str, path: tuple[int, ...], t: Type,
                    n: Type | None) -> Iterator[tuple[str, tuple[int, ...], int, int]]:
    """(label, tuple path, dim, given size) per dim the call gives another size than the
    traced one (a symbolic dim: any size)."""
    if isinstance(t, TupleType) and isinstance(n, TupleType):
        for k, (te, ne) in enumerate(zip(t.elements, n.elements)):
            yield from _differing_dims(f"{label}[{k}]", path + (k,), te, ne)
    elif isinstance(t, TensorType) and isinstance(n, TensorType) and t.shape is not None \
            and n.shape is not None and len(t.shape) == len(n.shape):
        for j, (d, m) in enumerate(zip(t.shape, n.shape)):
            if isinstance(m, int) and d != m:
                yield label, path, j, m


def _at(t: Type, path: tuple[int, ...]) -> Type:
    for k in path:
        t = t.elements[k]                          # type: ignore[union-attr]
    return t


def _resized(t: Type, path: tuple[int, ...], dim: int, size: int) -> Type:
    """``t`` with dim ``dim`` of the tensor at ``path`` (tuple items) of size ``size``."""
    if path:
        assert isinstance(t, TupleType)
        items = list(t.elements)
        items[path[0]] = _resized(items[path[0]], path[1:], dim, size)
        return TupleType(tuple(items))
    assert isinstance(t, TensorType) and t.shape is not None
    shape = list(t.shape)
    shape[dim] = size
    return t.with_(shape=tuple(shape))
