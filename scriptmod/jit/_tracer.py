"""The tracer: runs a module eagerly once and records every op into IR graphs.

It sits on ``scriptmod._dispatch.TRACERS`` while the model runs. Each module's ``forward``
gets a graph of its own (a *frame*); a submodule call becomes ``prim::GetAttr`` +
``prim::CallMethod`` in the caller's graph. Parameters and buffers are read with
``prim::GetAttr`` (never baked), sizes read from ``x.shape`` become ``sm::size`` nodes
(``TracedInt``), and ops that take a ``train``/``training`` flag read the calling module's
``training`` attribute, so ``.eval()`` after tracing takes effect.
"""
from __future__ import annotations

import itertools
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim, Value
from scriptmod.ir.types import BoolType, IntType, ModuleType, TensorType, TupleType, Type
from scriptmod.tensor import Size, Tensor
from scriptmod._dispatch import TracingError  # noqa: F401  (re-exported: jit.TracingError)
from scriptmod._traced_int import (TracedInt, TracerWarning, comparison_text, deciding_frame,
                                   is_user_code, warn_at, where)
from scriptmod._traced_int import int_value as traced_int_value




_INTERNAL = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (
    sys.modules["scriptmod"], sys.modules["scriptmod.ir"], sys.modules["scriptmod.runtime"]))
_NN = os.sep + os.path.join("scriptmod", "nn") + os.sep
_MODELS = os.sep + os.path.join("scriptmod", "bench") + os.sep   # built-in models are user code


def user_source() -> str | None:
    """``file:line`` of the innermost frame outside scriptmod's own machinery (nn layers
    count as user code only when nothing else is on the stack)."""
    f = sys._getframe(2)
    fallback = None
    while f is not None:
        path = _normalized(f.f_code.co_filename)
        if _MODELS in path or not (path.startswith(_INTERNAL) or path.startswith("<frozen")):
            return f"{os.path.basename(path)}:{f.f_lineno}"
        if fallback is None and _NN in path:
            fallback = f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return fallback


_NORMALIZED: dict[str, str] = {}


def _normalized(path: str) -> str:
    """Absolute, normalized form of a code object's file name (``a/../b`` on sys.path)."""
    out = _NORMALIZED.get(path)
    if out is None:
        out = path if path.startswith("<") else os.path.normpath(os.path.abspath(path))
        _NORMALIZED[path] = out
    return out


def class_name(module: Any) -> str:
    """``nn.Linear`` for our layers, ``model.Block`` for a user's class."""
    qualified = getattr(module, "_qualified_name", None)
    if qualified:
        return qualified
    cls = type(module)
    qual = cls.__qualname__.replace("<locals>", "_locals_")   # printable and parseable
    if cls.__module__.startswith("scriptmod.nn"):
        return f"nn.{qual}"
    return f"{cls.__module__}.{qual}"


def tensor_type(t: Tensor) -> TensorType:
    """Traced graphs are grad-agnostic: whether a gradient flows is decided per call."""
    return TensorType(t.dtype, tuple(t._data.shape), t._device_str(), False)


@dataclass
class Frame:
    """One graph being recorded: a module's forward (or the traced function)."""

    module: Any
    graph: Graph
    b: Builder
    self_value: Value | None
    values: dict[int, Value] = field(default_factory=dict)      # id(tensor) -> Value
    keep: list[Any] = field(default_factory=list)                 # keeps ids valid
    attr_paths: dict[int, list[str]] = field(default_factory=dict)
    ints: dict[int, Value] = field(default_factory=dict)          # id(TracedInt) -> Value
    inputs: list[tuple[Any, Value]] = field(default_factory=list)  # (tensor argument, Value)
    bound_at: dict[int, int] = field(default_factory=dict)         # id(tensor) -> TICK of bind
    # An inlined submodule call (see ``Tracer.call_module``) records into the graph of ``base``
    # and shares its tables; ``path`` leads from base's module to ``module`` (None: unreachable)
    base: "Frame | None" = None
    path: list[str] | None = None

    @property
    def owner(self) -> "Frame":
        """The frame whose graph this one records into (itself unless inlined)."""
        return self.base or self

    def bind(self, t: Any, v: Value) -> None:
        self.values[id(t)] = v
        self.bound_at[id(t)] = next(TICK)
        self.keep.append(t)


# Orders binds and in-place writes across frames: a tensor whose value was bound after the last
# write into its storage (a view taken after x.relu_()) reads the new value, not a stale one.
TICK = itertools.count()


def _attr_paths(module: Any) -> dict[int, list[str]]:
    paths: dict[int, list[str]] = {}
    if module is None:
        return paths
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        paths.setdefault(id(t), name.split("."))
    return paths


class Tracer:
    """Records ops into per-module graphs; ``scriptmod.jit.trace`` drives it."""

    def __init__(self, root: Any, strict: bool = True) -> None:
        self.root, self.strict = root, strict
        self.frames: list[Frame] = []
        self.graphs: dict[int, dict[str, Graph]] = {}      # id(module) -> method -> graph
        self.modules: dict[int, Any] = {}
        self._sub_paths: dict[int, dict[int, list[str]]] = {}   # id(module) -> its submodules
        self.dependent: set[int] = set()                   # tensors that depend on inputs
        self.written: dict[int, tuple[Tensor, str | None, bool, int, int]] = {}  # id(storage
        # root) -> the last tensor written, where, whether its own value is recorded, the TICK,
        # and the TICK of the write before it (-1: none)
        self.arg_names_of_calls: dict[int, dict[str, list[str]]] = {}
        self.input_specs_of_calls: dict[int, dict[str, Any]] = {}   # dict/nested arguments

    # ---- frames -----------------------------------------------------------------------
    def new_frame(self, module: Any, args: Sequence[Any], names: Sequence[str]) -> Frame:
        g = Graph()
        b = Builder(g)
        self_value = None
        if module is not None:
            self_value = b.input(ModuleType(class_name(module)), "self")
        fr = Frame(module, g, b, self_value, attr_paths=_attr_paths(module))
        for a, name in zip(args, names):
            self._bind_input(fr, a, name)
        self.frames.append(fr)
        return fr

    def _bind_input(self, fr: Frame, a: Any, name: str) -> None:
        if isinstance(a, Tensor):
            self._bind_tensor_input(fr, a, fr.b.input(tensor_type(a), name))
        elif isinstance(a, TracedInt):
            fr.ints[id(a)] = fr.b.input(IntType, name)
            fr.keep.append(a)
        elif isinstance(a, (tuple, list)) and a and all(isinstance(x, Tensor) for x in a):
            v = fr.b.input(TupleType(tuple(tensor_type(x) for x in a)), name)
            for x, xv in zip(a, fr.b.tuple_unpack(v)):
                self._bind_tensor_input(fr, x, xv)

    def _bind_tensor_input(self, fr: Frame, a: Tensor, v: Value) -> None:
        """One tensor passed as two arguments (``self.attn(q, q, q)``) is read and written
        through its first graph input; the others stay unused, so the graph means what the
        call meant (a write through one argument is seen by the other)."""
        if id(a) in fr.values:
            return
        fr.bind(a, v)
        fr.inputs.append((a, v))
        self.dependent.add(id(a))

    def finish_frame(self, fr: Frame, out: Any) -> Graph:
        self.frames.pop()
        if self.written:
            for t, _ in fr.inputs:           # the caller's tensor must see every write into it
                self._check_not_stale(fr, t, "the caller's argument")
        _write_back_inputs(fr)
        fr.b.ret(self.output_value(fr, out))
        return fr.graph

    def output_value(self, fr: Frame, out: Any) -> Value:
        if isinstance(out, (tuple, list)):
            items = [self.output_value(fr, o) for o in out]
            return fr.b.tuple_(items) if isinstance(out, tuple) else fr.b.list_(items)
        return self.input_value(fr, out)

    # ---- values -----------------------------------------------------------------------
    def tensor_value(self, fr: Frame, t: Tensor) -> Value:
        if self.written:
            self._check_not_stale(fr, t)
        v = fr.values.get(id(t))
        if v is not None:
            return v
        path = fr.attr_paths.get(id(t))
        if path is not None:
            v = self._get_attr_chain(fr, path, tensor_type(t))
        else:
            if any(id(t) in f.values for f in self.frames[:-1]):
                warnings.warn(TracerWarning(
                    f"a tensor of an outer module is used inside {class_name(fr.module)}.forward "
                    f"without being passed as an argument; the trace bakes its current value in "
                    f"({user_source()})"), stacklevel=3)
            elif t.requires_grad:      # torch refuses it: "Cannot insert a Tensor that requires
                warnings.warn(TracerWarning(     # grad as a constant"
                    f"a tensor that requires grad (shape {list(t.shape)}) is read at "
                    f"{user_source()} but is not a parameter or buffer of the traced module (a "
                    f"module held in a plain list or passed in from outside, or a captured "
                    f"tensor); the trace bakes its current value in as a constant, so gradients "
                    f"do not reach it and later changes to it are not seen. Register the module "
                    f"as an attribute or in an nn.ModuleList to keep it live."), stacklevel=3)
            v = fr.b.constant(t._data.copy(), tensor_type(t).with_(requires_grad=False))
        fr.bind(t, v)
        return v

    def _get_attr_chain(self, fr: Frame, path: list[str], leaf_type: Type) -> Value:
        owner = self._module_chain(fr.owner, path[:-1])
        return fr.b.get_attr(owner, path[-1], leaf_type)

    def _module_chain(self, fr: Frame, path: list[str]) -> Value:
        """GetAttr from ``fr``'s self along ``path`` (submodule names)."""
        cur, obj = fr.self_value, fr.module
        assert cur is not None
        for name in path:
            obj = getattr(obj, name)
            cur = fr.b.get_attr(cur, name, ModuleType(class_name(obj)))
        return cur

    def module_path(self, fr: Frame, module: Any) -> list[str] | None:
        """Submodule names from the module of the graph ``fr`` records into to ``module``; None
        where no attribute path leads there (a module in a plain list, or from outside)."""
        base = fr.owner
        if base.self_value is None:
            return None
        if module is base.module:
            return []
        paths = self._sub_paths.get(id(base.module))
        if paths is None:
            paths = self._sub_paths[id(base.module)] = {
                id(m): n.split(".") for n, m in base.module.named_modules() if n}
        return paths.get(id(module))

    def module_value(self, fr: Frame, module: Any) -> Value:
        """The value of a submodule of the frame's module (a GetAttr chain from self)."""
        path = self.module_path(fr, module)
        if path is None:
            raise TracingError(f"{class_name(module)} is called inside "
                               f"{class_name(fr.owner.module)}.forward but is not one of its "
                               f"submodules ({user_source()})")
        return self._module_chain(fr.owner, path)

    def _self_value(self, fr: Frame) -> Value | None:
        """The frame's module as a value (an inlined call's: a GetAttr chain from its base)."""
        if fr.base is None:
            return fr.self_value
        return None if fr.path is None else self._module_chain(fr.base, fr.path)

    def int_value(self, fr: Frame, x: int) -> Value:
        return traced_int_value(x, fr, fr.ints, fr.keep)

    def input_value(self, fr: Frame, x: Any, arg: S.Arg | None = None) -> Value:
        if isinstance(x, Tensor):
            return self.tensor_value(fr, x)
        if isinstance(x, TracedInt):
            return self.int_value(fr, x)
        if isinstance(x, bool) and arg is not None and arg.name in ("train", "training") \
                and fr.module is not None and x == fr.module.training:
            module = self._self_value(fr)
            if module is not None:
                return fr.b.get_attr(module, "training", BoolType)
        if isinstance(x, (list, tuple)) and any(isinstance(i, (TracedInt, Tensor)) for i in x):
            items = [self.input_value(fr, i) for i in x]
            return fr.b.list_(items) if isinstance(x, list) else fr.b.tuple_(items)
        return fr.b.constant(list(x) if isinstance(x, tuple) and arg is not None else x)

    # ---- hooks called by dispatch and Tensor ----------------------------------------------
    def record(self, name: str, inputs: Sequence[Any], attrs: dict[str, Any], outs: tuple) -> None:
        fr = self.frames[-1]
        schema = S.REGISTRY[name]
        args = _schema_args(schema, len(inputs))
        with fr.b.at_source(user_source()):
            vals = [self.input_value(fr, x, a) for x, a in zip(inputs, args)]
            types = [tensor_type(o) if isinstance(o, Tensor) else IntType for o in outs]
            node = fr.b.node(schema.kind, vals, types, dict(attrs))
        dep = any(id(x) in self.dependent for x in inputs if isinstance(x, Tensor)) or \
            any(isinstance(x, (TracedInt, list)) for x in inputs)
        for o, v in zip(outs, node.outputs):
            if isinstance(o, Tensor):
                fr.bind(o, v)
                if dep:
                    self.dependent.add(id(o))

    def on_value_read(self, t: Tensor, what: str) -> None:
        src = user_source()
        if self.strict and what in ("bool", "item") and id(t) in self.dependent:
            raise TracingError(
                f"converting a traced tensor to a Python {'bool' if what == 'bool' else 'number'} "
                f"at {src} makes the trace depend on this input's values (data-dependent control "
                f"flow); the graph would bake in one branch. Use scriptmod.where(...) or pass "
                f"strict=False to accept a constant.")
        warnings.warn(TracerWarning(
            f"converting a tensor to a Python value ({what}()) at {src}: the trace treats it as "
            f"a constant and will not generalize to other inputs"), stacklevel=4)

    def on_inplace(self, t: Tensor, out: Tensor) -> None:
        fr = self.frames[-1]
        self._note_write(t, user_source(), True)
        v = self.tensor_value(fr, out)
        path = fr.attr_paths.get(id(t))
        fr.bind(t, v)
        if id(out) in self.dependent:
            self.dependent.add(id(t))
        if path is not None:   # a module's own state changed: keep the write in the graph
            fr.b.set_attr(self._module_chain(fr.owner, path[:-1]), path[-1], v)

    def _note_write(self, t: Tensor, src: str | None, recorded: bool) -> None:
        last = self.written.get(id(_root(t)))
        prev = -1 if last is None else last[3]
        self.written[id(_root(t))] = (t, src, recorded, next(TICK), prev)

    def on_store_back(self, t: Tensor, value: Tensor, index: tuple) -> None:
        """``x[i] op= v``: Python changed the view ``x[i]`` in place and now stores it back
        into ``x[i]``. ``x``'s old value is stale exactly there, which this store overwrites,
        so reading it for the store is right, unless an earlier write into ``x``'s storage
        (another view) would be lost."""
        last = self.written.get(id(_root(t)))
        if last is None or last[0] is not value or not last[2] or _root(value) is not _root(t) \
                or self.frames[-1].bound_at.get(id(t), -1) < last[4]:
            return
        region = t._data[index]
        if region.shape == value._data.shape and region.strides == value._data.strides and \
                region.__array_interface__["data"][0] == value._data.__array_interface__["data"][0]:
            self.written[id(_root(t))] = (t,) + last[1:]

    def _check_not_stale(self, fr: Frame, t: Tensor, what: str = "it") -> None:
        """The graph is functional: a write records a new value for the written tensor only,
        so another tensor sharing its memory (its base, a view taken before the write) would
        be read stale. Refuse that instead of baking in the old value."""
        last = self.written.get(id(_root(t)))
        if last is None or (last[0] is t and last[2]) or fr.bound_at.get(id(t), -1) > last[3] \
                or not _overlaps(last[0], t):
            return
        raise TracingError(
            f"an in-place write at {last[1]} changed a tensor that shares memory with one read "
            f"at {user_source()} ({what}: a view and its base, two views, or an argument that "
            f"a submodule modified and did not return); the trace records the write into the "
            f"written tensor only and would read the old value. Write out of place (y = x.clone(); y[:, 0] *= 2), or index the "
            f"tensor you modify (x[:, 0] *= 2) instead of modifying a view.")

    def shape_of(self, t: Tensor) -> Size:
        shape = t._data.shape
        if not self.frames or id(t) not in self.dependent:
            return Size(shape)
        v = self.frames[-1].values.get(id(t))
        name = v.debug_name if v is not None and v.node.kind == Prim.PARAM and v.debug_name \
            else f"<tensor of shape {list(shape)}>"
        return _TracedSize((TracedInt(d, self, _size_maker(self, t, i), f"{name}.shape[{i}]")
                            for i, d in enumerate(shape)), self, t, name)

    def numel_of(self, t: Tensor) -> int:
        """``x.numel()``: the product of the (symbolic) sizes."""
        n: int = 1
        for d in self.shape_of(t):
            n = n * d
        return n

    def on_len(self, t: Tensor, how: str = "len() (x.shape[0] stays symbolic)") -> int:
        """``len(x)``, ``iter(x)``: a plain int, so a baked size, guarded (torch warns too).
        Called by the Tensor method, so the caller's frame is two levels up."""
        shape = self.shape_of(t)
        if not shape or not isinstance(shape[0], TracedInt):
            return t._data.shape[0]
        return shape[0]._bake(how, True, sys._getframe(2))

    def guard(self, op: str, a: Any, b: Any, how: str, force: bool = False,
              frame: Any = None) -> None:
        """Record the decision ``a <op> b`` (true at trace time) as int ops and an
        ``sm::guard`` node, with a ``TracerWarning`` when the user's code made it. Without
        ``force`` a decision inside scriptmod's own layers (a size check) is not recorded."""
        frame = frame or deciding_frame()
        user = frame is not None and is_user_code(frame)
        if not self.frames or not (user or force):
            return
        fr, what = self.frames[-1], comparison_text(op, a, b)
        src = where(frame) if user else user_source()
        if user:
            self._warn_decision(frame, what, how)
        with fr.b.at_source(src):
            cond = fr.b.op(op, self.int_value(fr, a), self.int_value(fr, b))
            fr.b.op("guard", cond, what=what, where=src or "")

    def _warn_decision(self, frame: Any, what: str, how: str) -> None:
        warn_at(frame, f"Converting a traced size to {how} might cause the trace to be "
                       f"incorrect: the trace cannot record the data flow of Python values, so "
                       f"`{what}` (true now) is treated as a constant and the trace might not "
                       f"generalize to other inputs. The trace is guarded: a call for which it "
                       f"is false raises TraceGuardError.")

    # ---- submodule calls ------------------------------------------------------------------
    def call_module(self, module: Any, forward: Callable, args: tuple, kwargs: dict) -> Any:
        """A submodule call: a ``prim::CallMethod`` of a graph of its own where that graph can
        stand for the call (every argument a tensor, an int, a plain constant or a container
        of them, and the module reachable by attributes), else inlined into the caller's."""
        parent = self.frames[-1]
        from scriptmod.jit._structure import flatten_inputs   # it imports this module
        names, flat = _flatten_args(forward, args, kwargs)
        path = self.module_path(parent, module)
        if path is None or not all(_boundary_arg(a) for a in flat) or any(
                _holds_size(a) for a in flat):
            return self._inline_call(parent, module, path, forward, names, flat)
        leaf_names, leaves, in_spec = flatten_inputs(names, flat)   # a dict: its tensors
        child = self.new_frame(module, leaves, leaf_names)
        try:
            out = call_flat(forward, names, flat)
        except BaseException:
            self.frames.pop()
            raise
        graph = self.finish_frame(child, out)
        method = self._store(module, graph)
        self.arg_names_of_calls.setdefault(id(module), {})[method] = \
            [n for n, a in zip(leaf_names, leaves) if _is_traced_arg(a)]
        if in_spec is not None:
            self.input_specs_of_calls.setdefault(id(module), {})[method] = in_spec
        with parent.b.at_source(user_source()):
            mod_v = self.module_value(parent, module)
            ins = [self.input_value(parent, a) for a in leaves if _is_traced_arg(a)]
            call = parent.b.call_method(mod_v, method, ins, [graph.outputs[0].type])
            unchanged = self._mark_written_args(child, out)   # before the output's bind
            self._bind_output(parent, out, call[0], unchanged)
        return out

    def _inline_call(self, parent: Frame, module: Any, path: list[str] | None,
                     forward: Callable, names: list[str], flat: list[Any]) -> Any:
        """Record the call's ops into the caller's graph: a callable argument runs the caller's
        code (``lambda h: self.fc(h)``), and a module outside the traced tree has no
        attribute path; the inlined module's own submodule calls stay ``CallMethod``s where
        they can be."""
        base = parent.owner
        fr = Frame(module, base.graph, base.b, None, values=base.values, keep=base.keep,
                   attr_paths=base.attr_paths, ints=base.ints, bound_at=base.bound_at,
                   base=base, path=path)
        self.frames.append(fr)
        try:
            return call_flat(forward, names, flat)
        finally:
            self.frames.pop()

    def call_scripted(self, graph: Graph, run: Callable[[], Any], args: Sequence[Any],
                      module: Any = None, method: str = "forward") -> Any:
        """A scripted function or submodule called while tracing: it runs as compiled (its
        results feed the rest of the trace) and its graph, control flow included, goes into
        the trace: a ``prim::CallMethod`` of the scripted submodule (``module``), or the
        function's graph inlined."""
        parent = self.frames[-1]
        out = run()
        with parent.b.at_source(user_source()):
            ins = [self.input_value(parent, a) for a in args]
            if module is not None:
                mod_v = self.module_value(parent, module)
                self.modules[id(module)] = module
                (result,) = parent.b.call_method(mod_v, method, ins, [graph.outputs[0].type])
            else:
                from scriptmod.ir.graph import clone_node
                env = dict(zip(graph.inputs, ins))
                for n in graph.block:
                    clone_node(n, parent.graph, env).insert_before(parent.b._anchor)
                result = env[graph.outputs[0]]
        self._bind_output(parent, out, result)
        return out

    def _mark_written_args(self, child: Frame, out: Any) -> frozenset:
        """An argument the submodule wrote in place has no new value in the caller's graph
        unless it is the call's result (``ReLU(inplace=True)``): reading it again would be
        stale, so it is marked written (``_check_not_stale``). Returns the ids of the
        arguments it did not write (``_bind_output``'s ``unchanged``)."""
        returned = {id(o) for o in (out if isinstance(out, (tuple, list)) else (out,))}
        unchanged = set()
        for t, v in child.inputs:
            if child.values.get(id(t)) is v:
                unchanged.add(id(t))
            else:
                self._note_write(t, user_source(), id(t) in returned)
        return frozenset(unchanged)

    def _bind_output(self, fr: Frame, out: Any, v: Value,
                     unchanged: frozenset = frozenset()) -> None:
        """Bind the call's result ``v`` to ``out`` in the caller. An argument the callee
        returned as it came (``nn.Identity``, a ``return x`` branch; ids in ``unchanged``)
        keeps the caller's own value: rebinding it would look like a write into the caller's
        tensor (a ``copy_`` back into the argument, and a stale-read error further out)."""
        if isinstance(out, Tensor):
            if id(out) in unchanged and id(out) in fr.values:
                return
            fr.bind(out, v)
            self.dependent.add(id(out))
        elif isinstance(out, (tuple, list)) and out:
            parts = fr.b.tuple_unpack(v) if isinstance(out, tuple) else fr.b.list_unpack(v, len(out))
            for o, pv in zip(out, parts):
                self._bind_output(fr, o, pv, unchanged)

    def _store(self, module: Any, graph: Graph) -> str:
        methods = self.graphs.setdefault(id(module), {})
        self.modules[id(module)] = module
        text = str(graph)
        for name, g in methods.items():
            if str(g) == text:
                return name
        name = "forward" if not methods else f"forward__{len(methods)}"
        methods[name] = graph
        return name


def _root(t: Tensor) -> Tensor:
    return t._base if t._base is not None else t


def _overlaps(a: Tensor, b: Tensor) -> bool:
    import numpy as np
    return bool(np.shares_memory(a._data, b._data))


def _write_back_inputs(fr: Frame) -> None:
    """An argument changed in place (``F.relu(x, inplace=True)``) gets its final value
    written back into the caller's tensor: one ``sm::copy_`` per argument, after every read
    of the old value; a returned argument is that copy's output (the caller's own tensor)."""
    for t, v in fr.inputs:
        cur = fr.values.get(id(t))
        if cur is not None and cur is not v:
            fr.bind(t, fr.b.op("copy_", v, cur))


def _schema_args(schema: S.OpSchema, n: int) -> list[S.Arg | None]:
    args: list[S.Arg | None] = []
    for a in schema.inputs:
        if a.variadic:
            args += [a] * (n - len(args) - (len(schema.inputs) - len(args) - 1))
        else:
            args.append(a)
    return (args + [None] * n)[:n]


class _TracedSize(Size):
    """A traced tensor's shape whose negative indices stay negative: ``x.shape[-1]`` and
    ``x.size(-1)`` record ``sm::size[dim=-1]``, the last dim at any rank the graph is run at
    (a positive index would read another dim there)."""

    def __new__(cls, sizes: Any, tracer: Tracer, t: Tensor, name: str) -> "_TracedSize":
        out = super().__new__(cls, sizes)
        out._source = (tracer, t, name)
        return out

    def __getitem__(self, i: Any) -> Any:
        if type(i) is int and -len(self) <= i < 0:
            tracer, t, name = self._source
            return TracedInt(int.__int__(tuple.__getitem__(self, i)), tracer,
                             _size_maker(tracer, t, i), f"{name}.shape[{i}]")
        return tuple.__getitem__(self, i)


def _size_maker(tracer: Tracer, t: Tensor, dim: int) -> Callable[[Frame], Value]:
    def make(fr: Frame) -> Value:
        return fr.b.op("size", tracer.tensor_value(fr, t), dim=dim)
    return make


_CONSTANTS = (type(None), bool, int, float, complex, str, bytes)


def _boundary_arg(a: Any) -> bool:
    """An argument a callee graph can take as an input or bake in as a constant of its own."""
    if isinstance(a, (Tensor, TracedInt, _CONSTANTS)):
        return True
    if isinstance(a, dict):
        return all(isinstance(k, _CONSTANTS) and _boundary_arg(v) for k, v in a.items())
    return isinstance(a, (tuple, list)) and all(_boundary_arg(x) for x in a)


def _holds_size(a: Any) -> bool:
    """A container with a traced size in it (``output_size=x.shape[-2:]``): the callee's graph
    would take it as a constant, so the call is inlined, where the size stays the caller's
    ``sm::size`` (a bare traced size is an int input of the callee's graph)."""
    items = a.values() if isinstance(a, dict) else a if isinstance(a, (tuple, list)) else ()
    return any(isinstance(x, TracedInt) or _holds_size(x) for x in items)


def _is_traced_arg(a: Any) -> bool:
    return isinstance(a, (Tensor, TracedInt)) or (
        isinstance(a, (tuple, list)) and bool(a) and all(isinstance(x, Tensor) for x in a))


def call_flat(fn: Callable, names: list[str], flat: list[Any]) -> Any:
    """Call ``fn`` with ``_flatten_args``'s positional form; keyword-only parameters
    (``def forward(self, x, *, scale=2.0)``) go back as keywords."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*flat)
    kwonly = {n for n, p in params.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}
    if not kwonly:
        return fn(*flat)
    pos = [a for n, a in zip(names, flat) if n not in kwonly]
    return fn(*pos, **{n: a for n, a in zip(names, flat) if n in kwonly})


def _flatten_args(fn: Callable, args: tuple, kwargs: dict) -> tuple[list[str], list[Any]]:
    """Positional form of a call, with the parameter names (for graph input names)."""
    import inspect
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        if kwargs:
            raise
        return [f"arg{i}" for i in range(len(args))], list(args)
    names, flat = [], []
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}{i}" for i in range(len(value))]
            flat += list(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            if value:
                raise TypeError(f"tracing {getattr(fn, '__qualname__', fn)}: **{name} arguments "
                                f"are not supported ({sorted(value)})")
        else:
            names.append(name)
            flat.append(value)
    return names, flat
