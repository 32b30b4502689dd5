"""Library calls in scripted code: ``Tensor`` methods, ``scriptmod.*`` and
``scriptmod.nn.functional.*`` functions, and the forwards of built-in layers.

Operators and the registry's elementwise ops become op nodes where the code is scripted
(their scalar operands may be computed at run time). Every other library call becomes a
``prim::CallFunction[name=...]`` node naming the function by its public path, and is
*expanded per specialization*: when the executor types the graph for a call's inputs
(``expand_call``), the function is traced on stand-in tensors of those types, the recorded
ops (with the guards the tracer inserts where the function branched on a size) replace
the node, and typing goes on through them. So each library function keeps one
implementation, its eager one, and a scripted model runs the same ops as eager. At symbolic
types (``Float(B, T, 16)``, an int argument ``b * t`` that is ``B*T``) the call expands once
for every size of its symbols, or stays a run-time call where the function fixes a size
(``symbolic_calls``).

The names resolve only through ``resolve``: a path under ``Tensor.`` or a public path under
the ``scriptmod`` package, walked attribute by attribute (never imported by name, never an
underscore name), so loading an archive that names a function runs nothing from the file.
"""
from __future__ import annotations

import contextlib
import inspect
import types
import warnings
from typing import Any, Callable, Iterator, Union

import numpy as np

from scriptmod.ir.graph import Block, Graph, Node, Prim, Value, clone_node, join_scope, \
    known_value
from scriptmod.ir.passes.inline import callee_scope
from scriptmod.ir.symdims import symbols
from scriptmod.ir.types import BoolType, IntType, ListType, ModuleType, TensorType, TupleType, \
    Type
from scriptmod.runtime.errors import place
from scriptmod.runtime.trees import rebuilt
from scriptmod.tensor import Tensor
from .errors import FrontendError

_NAMESPACES = ("scriptmod", "scriptmod.nn.functional", "scriptmod.linalg", "scriptmod.special",
               "scriptmod.fft")
_NAMES: dict[int, str] = {}         # id(function) -> public path (built on first use)


def public_name(fn: Any) -> str | None:
    """``"scriptmod.nn.functional.relu"`` for ``F.relu``; None for a non-library object."""
    if not _NAMES:
        import importlib
        for ns in _NAMESPACES:
            try:
                mod = importlib.import_module(ns)
            except ImportError:
                continue
            for k, v in vars(mod).items():
                if not k.startswith("_") and callable(v) and not isinstance(v, type):
                    _NAMES.setdefault(id(v), f"{ns}.{k}")
    return _NAMES.get(id(fn))


def resolve(name: str) -> Callable[..., Any]:
    """The library callable a ``prim::CallFunction`` names (see the module docstring)."""
    parts = name.split(".")
    if any(not p or (p.startswith("_") and not (p.startswith("__") and p.endswith("__")))
           for p in parts):
        raise FrontendError(f"library function {name!r}: not a public name")
    if parts[0] == "Tensor" and len(parts) == 2:
        attr = getattr(Tensor, parts[1], None)
        if attr is None:
            raise FrontendError(f"Tensor has no method {parts[1]!r}")
        if isinstance(attr, property):
            return attr.fget                         # type: ignore[return-value]
        return attr
    if parts[0] != "scriptmod":
        raise FrontendError(f"library function {name!r}: not under scriptmod")
    import scriptmod
    obj: Any = scriptmod
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            raise FrontendError(f"library function {name!r}: no such name")
    if not callable(obj) or isinstance(obj, type):
        raise FrontendError(f"library function {name!r}: not a function")
    return obj


# ---- expansion per specialization ---------------------------------------------------------

def expand_call(node: Node, owner: Any) -> list[Node]:
    """Replace the ``prim::CallFunction`` ``node`` by the ops its function records on
    stand-ins of its input types; returns the nodes inserted (before ``node``), which the
    caller types. ``owner``: the module the graph's ``self`` stands for (for layer calls).

    When the function refuses these inputs (a ``Linear`` fed the wrong width), the call
    becomes a raise of that error where it runs: the program may never reach it (a check
    before it raises first, as in Python), and if it does, the error is eager's. At
    symbolic input types it expands for every size of the symbols (``symbolic_calls``),
    or stays a run-time call (then that specialization does not type symbolically)."""
    where = node.source or "scripted code"
    try:
        args, kwargs, tensors, sizes = _call_arguments(node, where)
        if sizes or any(isinstance(t, SymbolicTensor) for t in tensors.values()):
            from .symbolic_calls import expand_symbolic     # noqa: PLC0415 (it imports this)
            return expand_symbolic(node, owner, args, kwargs, tensors, sizes, where)
        if node.attrs.get("method"):
            module = _module_of(owner, node.inputs[0], where)
            return _splice_module(node, module, node.attrs["method"], args, kwargs, tensors,
                                  where)
        fn = resolve(node.attrs["name"])
        return _splice_function(node, fn, args, kwargs, tensors, where)
    except _Refused as e:
        from scriptmod._ops_indexing import DataDependentShapeError   # noqa: PLC0415
        if not isinstance(e.original, DataDependentShapeError):
            return _raise_instead(node, e.original)
        # ``bincount``, ``unique(dim=...)``: its result's shape follows the values, so the
        # call stays and runs the eager function when reached, as an unknown argument does
        node.attrs["runtime"] = str(e.original)
        return []
    except _UnknownBool as e:
        if node.attrs.get("split", 0) < _MAX_SPLITS:
            return _split_on(node, e.value)
        node.attrs["runtime"] = str(e)
        return []
    except FrontendError as e:
        # an argument known only at run time (a list filled by a loop, an int computed
        # from data, a tensor whose shape depends on a branch): the call stays and runs the
        # eager function on the values when it is reached (``call_library``)
        node.attrs["runtime"] = str(e)
        from scriptmod.ir.log import log                  # noqa: PLC0415
        log("script", f"{node.attrs['name']} runs as a Python call when reached: {e}")
        return []


class _UnknownBool(FrontendError):
    """A bool argument known only at run time (``training=self.training``): the call is
    expanded once for each value, under a ``prim::If`` on it (``_split_on``)."""

    def __init__(self, message: str, value: Value) -> None:
        super().__init__(message)
        self.value = value


_MAX_SPLITS = 2        # bools per call split this way (each doubles the code)


def _split_on(node: Node, cond: Value) -> list[Node]:
    """``f(..., flag)`` -> ``f(..., True) if flag else f(..., False)``: each branch holds a
    copy of the call with the flag a constant, expanded when typing reaches it."""
    from scriptmod.ir.builder import Builder           # noqa: PLC0415
    b = Builder(node.graph, node.source, node.scope)

    def branch(flag: bool) -> Any:
        def build() -> list[Value]:
            c = b.constant(flag)
            env = {cond: c}
            copy = clone_node(node, node.graph, env)
            copy.attrs["split"] = node.attrs.get("split", 0) + 1
            b.insert(copy)
            return [copy.output]
        return build
    with b.insert_before(node):
        (out,) = b.if_(cond, branch(True), branch(False))
    node.output.replace_all_uses_with(out)
    made = [out.node]
    node.destroy()
    return made


class _Refused(Exception):
    """The library function raised on the stand-ins: ``original`` is its error."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def _raise_instead(node: Node, err: BaseException) -> list[Node]:
    from scriptmod.ir.builder import Builder           # noqa: PLC0415
    b = Builder(node.graph, node.source, node.scope)
    from scriptmod.runtime.interpreter import RAISABLE  # noqa: PLC0415
    kind = next((c.__name__ for c in type(err).__mro__ if c.__name__ in RAISABLE),
                "RuntimeError")
    # the call, its module path and the user's line, as a compiled call's other errors
    at = f"{node.attrs.get('name', 'a call')}{place(node)}: "
    with b.insert_before(node):
        r = b.node(Prim.RAISE, [], [], {"kind": kind, "message": at + str(err)})
        filler = b.node(Prim.UNINITIALIZED, [], [node.output.type])
    node.output.replace_all_uses_with(filler.output)
    node.destroy()
    return [r, filler]


class SymbolicTensor:
    """A tensor argument whose type has symbolic dims (``Float(B, T, 16)``): a stand-in of
    it is made for each binding of the symbols that ``symbolic_calls`` traces the call at."""

    def __init__(self, t: TensorType) -> None:
        self.type = t


class SymbolicSize:
    """An int argument whose known value is a symbolic size (``b * t`` is ``B*T``): a graph
    input of the traced call, wired to the int's own value, so it is computed at run time."""

    def __init__(self, dim: str) -> None:
        self.dim = dim


Placeholder = Union[Tensor, SymbolicTensor]


def _call_arguments(node: Node, where: str) -> tuple[list, dict, dict[Value, Placeholder],
                                                     dict[Value, SymbolicSize]]:
    """The call's arguments with stand-in tensors and the known constants; each Value a
    stand-in stands for, with its stand-in, in order; each int Value of a symbolic size,
    with its ``SymbolicSize``."""
    standins: dict[Value, Placeholder] = {}
    sizes: dict[Value, SymbolicSize] = {}

    def conv(v: Value) -> Any:
        if isinstance(v.type, ModuleType):
            return None                         # the module itself (a layer's ``self``)
        if isinstance(v.type, TensorType):
            if v not in standins:
                standins[v] = SymbolicTensor(v.type) if _is_symbolic(v.type) else \
                    _standin(v, where)
            return standins[v]
        if v.node.kind == Prim.TUPLE_CONSTRUCT:
            return tuple(conv(i) for i in v.node.inputs)
        items = items_at(v, node)
        if items is not None:
            return [conv(i) for i in items]     # ``sm.cat([x, y])``: tensors stand in
        value = _known(v, where)
        if type(value) is str and v.type == IntType:
            return sizes.setdefault(v, SymbolicSize(value))
        return value

    def arg(entry: Any) -> Any:
        kind, payload = entry
        return payload if kind == "c" else conv(node.inputs[payload])

    args = [arg(e) for e in node.attrs.get("args", [])]
    kwargs = {k: arg(e) for k, e in node.attrs.get("kwargs", [])}
    return args, kwargs, standins, sizes


# uses of a list that read it and keep no reference to it
_LIST_READERS = frozenset({"sm::list_get", "sm::list_len", "sm::list_contains", "sm::list_slice",
                           "sm::list_concat", "sm::list_min", "sm::list_max", "sm::list_eq"})


def items_at(v: Value, reader: Node) -> list[Value] | None:
    """The items the list ``v`` holds when ``reader`` runs, where the graph fixes them: a
    literal (or the fresh copy of one, ``fresh_list``) and the appends to it that run
    before ``reader`` in the literal's own block. None where anything else may change the
    list first: an append in a loop or a branch, ``extend``/``insert``/``+=``, a store, a
    call or a container it is handed to. (A list built while the program runs was read as
    the empty literal it started as, issue 35.)"""
    src = v.node
    if src.kind == "sm::list_slice" and src.inputs[0].node.kind == Prim.LIST_CONSTRUCT and \
            all(known_value(b) is None and b.node.kind == Prim.CONSTANT for b in src.inputs[1:]):
        src = src.inputs[0].node
    if src.kind != Prim.LIST_CONSTRUCT:
        return None
    block = v.node.owning_block
    at = _ancestor_in(reader, block)
    if at is None:
        return None
    appends: list[Node] = []
    for u in v.uses:
        user = u.user
        if user is reader or user.kind in _LIST_READERS or (
                user.kind == Prim.CALL_FUNCTION and not user.attrs.get("python")) or (
                user.kind == Prim.RETURN and user.owning_block is block):
            continue                       # reads it, or hands it on after ``reader`` ran
        if user.kind == "sm::list_append" and u.index == 0 and user.owning_block is block:
            appends.append(user)
            continue
        return None
    return list(src.inputs) + [a.inputs[1] for a in _in_order(appends) if a.is_before(at)]


def _ancestor_in(node: Node, block: Block | None) -> Node | None:
    """``node`` or the node of ``block`` whose blocks hold it; None if it is not in it."""
    n: Node | None = node
    while n is not None and n.owning_block is not block:
        owner = n.owning_block.owning_node if n.owning_block is not None else None
        n = owner
    return n


def _in_order(nodes: list[Node]) -> list[Node]:
    return sorted(nodes, key=lambda n: sum(1 for o in nodes if o.is_before(n)))


def _known(v: Value, where: str) -> Any:
    value = known_value(v)
    if value is None and v.type == BoolType and v.node.kind != Prim.CONSTANT:
        raise _UnknownBool(f"{where}: the bool argument is known only at run time", v)
    if value is None and not (v.node.kind == Prim.CONSTANT and v.node.attrs.get("value") is None):
        raise FrontendError(f"{where}: a library call's non-tensor argument must be known when "
                            f"the specialization is built (a constant, or a size of an input); "
                            f"this one ({v.type!r}) is computed at run time")
    if isinstance(value, (list, tuple)) and any(type(i) is str for i in value) and \
            _holds_int(v.type):
        raise FrontendError(f"{where}: a library call's list of sizes {list(value)} holds "
                            f"symbolic sizes; only its items one by one can be passed on")
    return value


def _holds_int(t: Type) -> bool:
    """A list or tuple type with int items (whose str known values are symbolic sizes)."""
    if isinstance(t, ListType):
        return t.element == IntType
    return isinstance(t, TupleType) and IntType in t.elements


def _is_symbolic(t: TensorType) -> bool:
    """Known dtype and rank, each dim a size or a symbolic size, one of them symbolic."""
    return t.dtype is not None and t.shape is not None and not t.is_concrete and all(
        type(d) is int or (isinstance(d, str) and bool(symbols(d))) for d in t.shape)


def _standin(v: Value, where: str) -> Tensor:
    t = v.type
    assert isinstance(t, TensorType)
    if not t.is_concrete:
        raise FrontendError(f"{where}: the tensor argument's type {t!r} is not known here "
                            f"(a library call needs its inputs' dtype and shape)")
    return zeros_of(t, t.shape)           # type: ignore[arg-type]


def zeros_of(t: TensorType, shape: tuple[int, ...]) -> Tensor:
    """A stand-in of ``t``'s dtype and device, of ``shape``."""
    from scriptmod.runtime.arrays import NP_DTYPE         # noqa: PLC0415
    if t.device != "cpu":
        import cupy                                       # noqa: PLC0415
        return Tensor._make(cupy.zeros(shape, NP_DTYPE[t.dtype]))
    return Tensor._make(np.zeros(shape, NP_DTYPE[t.dtype]))


def _splice_function(node: Node, fn: Callable, args: list, kwargs: dict,
                     tensors: dict[Value, Placeholder], where: str) -> list[Node]:
    graph = trace_function(fn, args, kwargs, _standins_in(args, kwargs))
    return _splice(node, graph, list(tensors), where)


def trace_function(fn: Callable, args: list, kwargs: dict, given: list[Any],
                   tracer: Any = None) -> Graph:
    """``fn(*args, **kwargs)`` traced with the objects ``given`` (the arguments' stand-in
    tensors, then any ``TracedInt`` sizes made with ``tracer``) as its graph inputs, in
    that order; ``_Refused`` with the function's own error when it raises on them."""
    from scriptmod.jit._trace import _record              # noqa: PLC0415
    from scriptmod.jit._tracer import Tracer              # noqa: PLC0415

    def call(*xs: Any) -> Any:
        swap = dict(zip(map(id, given), xs))
        return fn(*[_swap(x, swap) for x in args],
                  **{k: _swap(x, swap) for k, x in kwargs.items()})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _record(tracer or Tracer(None), None, call, tuple(given), {})[0]
    except FrontendError:
        raise
    except Exception as e:
        raise _Refused(e) from e


def _standins_in(args: list, kwargs: dict) -> list[Tensor]:
    out: list[Tensor] = []
    for x in list(args) + list(kwargs.values()):
        for t in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(t, Tensor) and all(t is not o for o in out):
                out.append(t)
    return out


def _swap(x: Any, swap: dict[int, Any]) -> Any:
    """``x`` with each object ``swap`` names (by id: stand-ins, placeholders) replaced."""
    got = swap.get(id(x))
    if got is not None:
        return got
    if isinstance(x, list):
        return [_swap(i, swap) for i in x]
    if isinstance(x, tuple):
        return rebuilt(x, (_swap(i, swap) for i in x))
    return x


def _splice_module(node: Node, module: Any, method: str, args: list, kwargs: dict,
                   tensors: dict[Value, Placeholder], where: str) -> list[Node]:
    """A built-in layer's method: trace the layer itself, inline its calls, then splice
    with its ``self`` standing for the layer's value in this graph."""
    graph, inputs = trace_layer(module, method, args, kwargs, tensors, where)   # type: ignore
    return _splice(node, graph, [node.inputs[0]] + inputs, where)


def trace_layer(module: Any, method: str, args: list, kwargs: dict,
                tensors: dict[Value, Tensor], where: str) -> tuple[Graph, list[Value]]:
    """The layer's method traced on the stand-ins and inlined, and the Values its tensor
    inputs (after ``self``) stand for. The call's arguments are bound to the method's
    parameters by name, as Python binds them; the traced graph takes the tensor ones in
    that order, the others are constants of the specialization."""
    from scriptmod.jit._specialize import inlined         # noqa: PLC0415
    from scriptmod.jit._trace import _calls, _trace_calls  # noqa: PLC0415
    fn = getattr(type(module), method)
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(module, *args[1:], **kwargs)
    except TypeError as e:
        raise _Refused(TypeError(f"{type(module).__name__}.{method}(): {e}")) from e
    by_name = dict(list(bound.arguments.items())[1:])
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        if kwargs:
            raise FrontendError(f"{where}: {type(module).__name__}.{method}() takes *args or "
                                f"**kwargs: call it with positional tensors only")
        example: Any = tuple(args[1:])
        flat = list(example)
    else:
        example = by_name
        flat = list(by_name.values())
    if any(isinstance(i, Tensor) for a in flat if isinstance(a, (list, tuple)) for i in a):
        raise FrontendError(f"{where}: a built-in layer's {method}() takes tensors as direct "
                            f"arguments only, in scripted code")
    value_of = {id(t): v for v, t in tensors.items()}
    inputs = [value_of[id(a)] for a in flat if isinstance(a, Tensor)]
    try:
        with warnings.catch_warnings(), _buffers_kept(module):
            warnings.simplefilter("ignore")
            # _trace_calls, not trace_module: the call's non-tensor arguments are constants
            traced = _trace_calls(module, _calls(module, {method: example}, None,
                                                 isinstance(example, dict)), strict=True)
    except FrontendError:
        raise
    except Exception as e:
        raise _Refused(e) from e
    return inlined(traced, method), inputs


@contextlib.contextmanager
def _buffers_kept(module: Any) -> Iterator[None]:
    """Trace ``module`` without its buffers keeping what the trace's stand-ins wrote: a
    BatchNorm in training mode updates ``running_mean``/``running_var`` and counts
    ``num_batches_tracked`` on every run, and tracing is not a call of the user's (their
    values, storage and version counters are put back as they were)."""
    kept = [(owner, name, t, t._data, t._data.copy(), t._vc[0])
            for owner in module.modules() for name, t in owner._buffers.items()
            if t is not None]
    try:
        yield
    finally:
        for owner, name, t, data, values, version in kept:
            data[...] = values
            t._data = data
            t._vc[0] = version
            owner._buffers[name] = t


def _splice(node: Node, g: Graph, inputs: list[Value], where: str) -> list[Node]:
    made, result = insert_clones(node, g, inputs, where)
    replace_call(node, result, made)
    return made


def insert_clones(node: Node, g: Graph, inputs: list[Value],
                  where: str) -> tuple[list[Node], Value]:
    """``g``'s nodes cloned before ``node`` with ``inputs`` for its inputs, and the value
    that stands for the call's result (the call itself stays until ``replace_call``)."""
    if len(g.inputs) != len(inputs):
        raise FrontendError(f"{where}: {node.attrs['name']}: the traced call takes "
                            f"{len(g.inputs)} input(s), the scripted call passes {len(inputs)}")
    env = dict(zip(g.inputs, inputs))
    made: list[Node] = []
    scope = callee_scope(node) if node.attrs.get("method") else node.scope   # a layer's path
    for n in g.block:
        c = clone_node(n, node.graph, env)
        c.insert_before(node)
        for inner in c.walk():        # the scripted line that called it, not the trace's
            inner.source = node.source or inner.source
            inner.scope = join_scope(scope, inner.scope)
        made.append(c)
    outs = [env[v] for v in g.outputs]
    return made, _packed(node, outs, made)


def replace_call(node: Node, result: Value, made: list[Node]) -> None:
    """The call's uses read ``result`` (its clones, ``insert_clones``); the call goes."""
    if result.debug_name is None and result.node in made:
        result.debug_name = node.output.debug_name      # the user's variable (``h = ...``)
    node.output.replace_all_uses_with(result)
    node.destroy()


def _packed(node: Node, outs: list[Value], made: list[Node]) -> Value:
    """The traced outputs as the call's one output: itself, or a list/tuple of them."""
    want: Type = node.output.type
    if len(outs) == 1 and not isinstance(want, (ListType, TupleType)):
        return outs[0]
    if len(outs) == 1 and isinstance(outs[0].type, (ListType, TupleType)):
        if isinstance(want, ListType) and isinstance(outs[0].type, TupleType):
            src = outs[0].node                  # ``chunk`` traced: a tuple, wanted a list
            if src.kind == Prim.TUPLE_CONSTRUCT:
                outs = list(src.inputs)
            else:
                from scriptmod.ir.builder import Builder   # noqa: PLC0415
                b = Builder(node.graph, node.source, node.scope)
                with b.insert_before(node):
                    unpack = b.node(Prim.TUPLE_UNPACK, [outs[0]], list(outs[0].type.elements))
                made.append(unpack)
                outs = list(unpack.outputs)
        else:
            return outs[0]
    kind = Prim.LIST_CONSTRUCT if isinstance(want, ListType) else Prim.TUPLE_CONSTRUCT
    from scriptmod.ir.builder import join_types       # noqa: PLC0415
    if kind == Prim.LIST_CONSTRUCT:
        elem = outs[0].type
        for o in outs[1:]:
            elem = join_types(elem, o.type)
        t: Type = ListType(elem)
    else:
        t = TupleType(tuple(o.type for o in outs))
    from scriptmod.ir.builder import Builder           # noqa: PLC0415
    b = Builder(node.graph, node.source, node.scope)
    with b.insert_before(node):
        pack = b.node(kind, outs, [t])
    made.append(pack)
    return pack.output


def _module_of(owner: Any, v: Value, where: str) -> Any:
    """The eager layer a layer call traces: the shell's ``LayerRef`` builds it (sharing
    the shell's parameters and buffers)."""
    from scriptmod.jit._specialize import submodule_of_value   # noqa: PLC0415
    if owner is None:
        raise FrontendError(f"{where}: a layer call needs the module")
    shell = submodule_of_value(owner, v)
    ref = shell.__dict__.get("_layer")
    if ref is None:
        raise FrontendError(f"{where}: {type(shell).__name__} is not a built-in layer")
    return ref.instance(shell)


_PLAIN = (int, float, bool, str, type(None))
_MODULE_STATE = frozenset({"training", "_parameters", "_buffers", "_modules",
                           "_non_persistent_buffers_set"})


class LayerRef:
    """What rebuilds a built-in layer around a scripted shell: its class (a public path
    under ``scriptmod.nn``) and its plain configuration attributes (``in_features``,
    ``eps``, ``approximate``...). Saved in archives; resolved without importing anything
    by name (attributes of ``scriptmod.nn``, a Module subclass defined there)."""

    def __init__(self, class_path: str, config: dict[str, Any], original: Any = None) -> None:
        self.class_path = class_path
        self.config = config
        self.original = original          # the user's layer, when its config is not plain
        self._built: dict[int, Any] = {}  # id(shell) -> eager instance (in process)

    @classmethod
    def of(cls, layer: Any) -> "LayerRef":
        import scriptmod.nn as nn                     # noqa: PLC0415
        name = type(layer).__name__
        path = f"scriptmod.nn.{name}" if getattr(nn, name, None) is type(layer) else None
        config: dict[str, Any] = {}
        plain = path is not None
        for k, v in layer.__dict__.items():
            if k in _MODULE_STATE or (k.startswith("_") and k.endswith("hooks")) or \
                    k.startswith("_forward") or k.startswith("_backward") or \
                    k.startswith("_state_dict") or k.startswith("_load_state_dict"):
                continue
            if isinstance(v, _PLAIN) or (isinstance(v, (tuple, list)) and all(
                    isinstance(i, _PLAIN) for i in v)):
                config[k] = list(v) if isinstance(v, tuple) else v
                if isinstance(v, tuple):
                    config[k] = {"tuple": list(v)}
            elif callable(v) or hasattr(v, "__dict__"):
                plain = False
        return cls(path or f"<unsavable {type(layer).__qualname__}>", config,
                   None if plain else layer)

    @property
    def savable(self) -> bool:
        return self.original is None

    def instance(self, shell: Any) -> Any:
        """The eager layer for ``shell`` (built once per shell)."""
        if self.original is not None:
            return self.original
        got = self._built.get(id(shell))
        if got is not None and got[0] is shell:
            return got[1]
        from scriptmod.nn.module import Module          # noqa: PLC0415
        cls = layer_class(self.class_path)
        layer = cls.__new__(cls)
        Module.__init__(layer)
        for k, v in self.config.items():
            object.__setattr__(layer, k, tuple(v["tuple"]) if isinstance(v, dict) else v)
        # the shell's own registries, not copies: a tensor the shell gets later (.double()
        # replaces buffers, an assignment a parameter) is the one the layer reads
        layer.__dict__["_parameters"] = shell._parameters
        layer.__dict__["_buffers"] = shell._buffers
        layer._non_persistent_buffers_set = set(shell._non_persistent_buffers_set)
        for name, child in shell._modules.items():
            ref = None if child is None else child.__dict__.get("_layer")
            layer._modules[name] = None if child is None else (
                ref.instance(child) if ref is not None else child)
        layer.training = shell.training
        self._built[id(shell)] = (shell, layer)
        return layer


def layer_class(path: str) -> type:
    """``scriptmod.nn.Linear`` -> the class; only a Module subclass of scriptmod.nn."""
    import scriptmod.nn as nn                         # noqa: PLC0415
    from scriptmod.nn.module import Module            # noqa: PLC0415
    parts = path.split(".")
    if len(parts) != 3 or parts[:2] != ["scriptmod", "nn"] or parts[2].startswith("_"):
        raise FrontendError(f"layer class {path!r}: not a public scriptmod.nn layer")
    cls = getattr(nn, parts[2], None)
    if not (isinstance(cls, type) and issubclass(cls, Module)
            and cls.__module__.startswith("scriptmod.nn")):
        raise FrontendError(f"layer class {path!r}: not a scriptmod.nn layer")
    return cls


_PYTHON: dict[str, Callable[..., Any]] = {}     # "python:<module>.<qualname>" -> function


def register_python(fn: Callable[..., Any]) -> str:
    """The name a ``jit.ignore``d function is called by (this process only: a graph that
    calls Python cannot be saved)."""
    name = f"python:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn.__name__)}"
    _PYTHON[name] = fn
    return name


def call_python(node: Node, args: list, raw: bool) -> Any:
    """Run a ``prim::CallFunction`` left for run time: a ``jit.ignore``d function
    (``python=1``) or a library function whose arguments were not known when the
    specialization was built (``runtime``, see ``expand_call``). Arrays become Tensors
    (``raw``), the result comes back as arrays. A tensor that requires grad is refused by an
    ignored function: the Python call would be invisible to autograd (a library function is
    eager code, which autograd records)."""
    from scriptmod.tensor import Tensor as T, unwrap_tree, wrap_tree   # noqa: PLC0415
    if not node.attrs.get("python"):
        return _call_library(node, args, raw)
    fn = _PYTHON.get(node.attrs.get("name", ""))
    if fn is None:
        raise FrontendError(f"{node.attrs.get('name')}: the @ignore'd Python function is not "
                            f"known in this process (graphs that call Python cannot be saved)")
    values = [wrap_tree(a) if raw else a for a in args]
    for v in values:
        if isinstance(v, T) and v.requires_grad:
            raise RuntimeError(f"{fn.__name__}: an @ignore'd function called from scripted code "
                               f"got a tensor that requires grad; autograd cannot see through "
                               f"a Python call (call it under no_grad, or script it)")

    def arg(entry: Any) -> Any:
        kind, payload = entry
        return payload if kind == "c" else values[payload]
    out = fn(*[arg(e) for e in node.attrs.get("args", [])],
             **{k: arg(e) for k, e in node.attrs.get("kwargs", [])})
    return unwrap_tree(out) if raw else out


def _call_library(node: Node, args: list, raw: bool) -> Any:
    from scriptmod.tensor import unwrap_tree, wrap_tree   # noqa: PLC0415
    values = [wrap_tree(a) for a in args] if raw else args

    def arg(entry: Any) -> Any:
        kind, payload = entry
        return payload if kind == "c" else values[payload]
    pos = [arg(e) for e in node.attrs.get("args", [])]
    if node.attrs.get("method"):
        # a layer's method: the value is the scripted shell of the layer (in this process
        # or rebuilt from an archive); its ``LayerRef`` gives the eager layer
        shell = pos.pop(0)
        ref = getattr(shell, "__dict__", {}).get("_layer")
        if ref is None or not is_builtin_layer(layer := ref.instance(shell)):
            raise FrontendError(f"{node.attrs['name']}: not a built-in layer")
        fn: Callable[..., Any] = getattr(layer, node.attrs["method"])
    else:
        fn = resolve(node.attrs["name"])
    out = fn(*pos, **{k: arg(e) for k, e in node.attrs.get("kwargs", [])})
    if isinstance(out, tuple) and isinstance(node.output.type, ListType):
        out = list(out)
    elif type(out) is not tuple and isinstance(out, tuple) and isinstance(node.output.type,
                                                                          TupleType):
        out = tuple(out)    # ``x.topk(k)`` as the op gives it: scripted pairs are plain tuples
    return unwrap_tree(out) if raw else out


def _install_python_call() -> None:
    from scriptmod.runtime import interpreter              # noqa: PLC0415
    interpreter.PYTHON_CALL[0] = call_python


_install_python_call()


def expansion_handlers(owner: Any) -> dict[str, Callable[[Node], None]]:
    """``ir.passes.shapes.extra_handlers`` for a graph read from ``owner``: each
    ``prim::CallFunction`` is expanded where shape propagation reaches it, and the nodes
    it became are typed in its place."""
    from scriptmod.ir.passes.shapes import type_node      # noqa: PLC0415

    def expand(node: Node) -> None:
        if node.attrs.get("python"):
            return                              # a call into Python: stays, as declared
        for made in expand_call(node, owner):
            type_node(made)
    return {Prim.CALL_FUNCTION: expand}


def is_builtin_layer(module: Any) -> bool:
    """A layer of ``scriptmod.nn`` itself (traced per specialization, not scripted); the
    containers (Sequential, ModuleList, ModuleDict) are not layers: scripted code iterates
    or calls through them."""
    from scriptmod.nn import ModuleDict, ModuleList, Sequential   # noqa: PLC0415
    return type(module).__module__.startswith("scriptmod.nn") and not isinstance(
        module, (Sequential, ModuleList, ModuleDict))


def is_container(module: Any) -> bool:
    from scriptmod.nn import ModuleDict, ModuleList, Sequential   # noqa: PLC0415
    return type(module) in (Sequential, ModuleList, ModuleDict)


def function_kind(fn: Any) -> str:
    """"library" (traced per specialization), "python" (a user function: scripted), or
    "other"."""
    if public_name(fn) is not None:
        return "library"
    if isinstance(fn, types.FunctionType):
        mod = getattr(fn, "__module__", "") or ""
        return "library" if mod.startswith("scriptmod.") else "python"
    return "other"

