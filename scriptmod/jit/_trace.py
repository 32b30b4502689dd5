"""``jit.trace`` and ``jit.trace_module``: run once, record, build a ScriptModule tree."""
from __future__ import annotations

import difflib
import functools
import warnings
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

import numpy as np

from scriptmod.ir.graph import Graph
from scriptmod.ir.schema import IMPURE, REGISTRY
from scriptmod.runtime.trees import rebuilt
from scriptmod import _dispatch
from scriptmod.autograd import grad_mode
from scriptmod.jit._batch_dims import name_batch_dims
from scriptmod.jit._dynamic import check_dynamic, explicit_dims, pinned_warning
from scriptmod.jit._specialize import inlined
from scriptmod.jit._script_module import ScriptFunction, ScriptModule, building
from scriptmod.jit._structure import (caller_stacklevel, flatten, flatten_inputs, flatten_output,
                                      holds_tensor, unflatten)
from scriptmod.jit._tracer import (Tracer, TracerWarning, TracingError, _flatten_args,
                                   _is_traced_arg, call_flat, class_name)
from scriptmod._traced_int import watch_range
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor


class TracingCheckError(RuntimeError):
    """``check_trace`` found that the trace does not reproduce the Python code."""


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


@contextmanager
def _tracing(tracer: Tracer) -> Iterator[None]:
    """Route submodule calls through the tracer and make dispatch report to it."""
    patched = []
    root = tracer.root
    if root is not None:
        skip: set[int] = set()
        for m in root.modules():
            if m is root or id(m) in {id(p) for p, _ in patched} or id(m) in skip:
                continue
            if isinstance(m, ScriptModule) and "forward" in m._methods:
                # scripted (or traced) already: its graph goes into the trace as a call
                original = m.forward
                m.__dict__["forward"] = _scripted_hook(tracer, m)
                patched.append((m, original))
                ex = m._executors.get("forward")
                if ex is not None:
                    ex.module_fast = None            # calls go through forward while tracing
                skip.update(id(c) for c in m.modules())
                continue
            original = m.forward
            m.__dict__["forward"] = _make_hook(tracer, m, original)
            patched.append((m, original))
    _dispatch.TRACERS.append(tracer)
    try:
        with grad_mode.no_grad(), watch_range():   # range(x.size(0)) is seen and guarded
            yield
    finally:
        _dispatch.TRACERS.remove(tracer)
        for m, _ in patched:
            m.__dict__.pop("forward", None)


_SUB_SPECS: "weakref.WeakKeyDictionary[Tracer, dict[int, dict[str, Any]]]" = \
    weakref.WeakKeyDictionary()   # tracer -> id(submodule) -> method -> output structure


def _make_hook(tracer: Tracer, module: Any, forward: Callable) -> Callable:
    def traced_forward(*args: Any, **kwargs: Any) -> Any:
        specs: list[Any] = []

        @functools.wraps(forward)            # the same signature, for argument names
        def flat_forward(*a: Any, **kw: Any) -> Any:   # a dict/namedtuple result: a tuple
            plain, spec = flatten(forward(*a, **kw))
            specs.append(spec)
            return plain

        before = set(tracer.graphs.get(id(module), ()))
        plain = tracer.call_module(module, flat_forward, args, kwargs)
        spec = specs[-1] if specs else None
        if spec is not None:
            for name in set(tracer.graphs.get(id(module), ())) - before:
                _SUB_SPECS.setdefault(tracer, {}).setdefault(id(module), {})[name] = spec
        return unflatten(plain, spec)
    return traced_forward


def _scripted_hook(tracer: Tracer, module: Any) -> Callable:
    def scripted_forward(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = module._positional("forward", args, kwargs)
        return tracer.call_scripted(module._methods["forward"],
                                    lambda: module._run("forward", args, {}), args,
                                    module=module)
    return scripted_forward


def _record(tracer: Tracer, target: Any, fn: Callable, args: tuple,
            kwargs: dict) -> tuple[Graph, list[str], Any, Any]:
    """One root call traced: its graph, the names of its graph inputs, its output structure
    and its input structure (dict and nested arguments reach the graph as their tensors)."""
    names, flat = _flatten_args(fn, args, kwargs)
    flat = _distinct(flat)
    try:
        leaf_names, leaves, in_spec = flatten_inputs(names, flat)
    except TracingError as e:
        raise TracingError(f"tracing {getattr(fn, '__qualname__', fn)}: {e}") from None
    with _tracing(tracer):
        frame = tracer.new_frame(target, leaves, leaf_names)
        try:
            plain, spec = flatten_output(call_flat(fn, names, flat), tracer.strict)
        except BaseException:
            tracer.frames.clear()
            raise
        graph = tracer.finish_frame(frame, plain)
    return graph, [n for n, a in zip(leaf_names, leaves) if _is_traced_arg(a)], spec, in_spec


def _refuse_untraceable(fn: Callable, args: tuple, kwargs: dict) -> None:
    """PyTorch's rule for example inputs: tensors and (nested) lists, tuples and dicts of them.
    A graph takes tensors only, so an int or a string would be baked in and the traced module
    could not be called with it again (parameters left to their defaults are not inputs).
    Only the public entry points ask: a scripted layer call traces its layer with the call's
    non-tensor arguments as constants of that specialization (``frontend.library``)."""
    import inspect
    try:
        given = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        given = {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    for i, (name, a) in enumerate(given.items()):
        if not holds_tensor(a):     # a container mixing both: flatten_inputs names the leaf
            raise TracingError(
                f"tracing {getattr(fn, '__qualname__', fn)}: argument {name!r} (position {i}) "
                f"is {_kind(a)}, which cannot be traced: only Tensors and (possibly nested) Lists, "
                f"Dicts, and Tuples of Tensors can be traced (PyTorch's rule). Leave it out of the example inputs "
                f"(fix it with functools.partial, a default value or a module attribute), or "
                f"use scriptmod.jit.script, which takes non-tensor arguments")


def _kind(a: Any) -> str:
    if a is None:
        return "None"
    name = type(a).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({str(a)[:40]})"


def _distinct(flat: list[Any]) -> list[Any]:
    """One tensor passed as two arguments (``trace(f, (x, x))``) becomes two tensor objects
    sharing its data, so that each graph input keeps its own value (``a - b`` stays ``a - b``)."""
    seen: set[int] = set()

    def own(a: Any) -> Any:
        if isinstance(a, Tensor):
            if id(a) in seen:
                return a.detach()
            seen.add(id(a))
        elif isinstance(a, (tuple, list)):
            return rebuilt(a, (own(x) for x in a))
        elif isinstance(a, dict):
            return {k: own(v) for k, v in a.items()}
        return a
    return [own(a) for a in flat]


Calls = Dict[str, Tuple[tuple, Dict[str, Any]]]     # method -> (positional, keyword) inputs


def trace_module(mod: Module, inputs: dict[str, Any], *, check_trace: bool = True,
                 check_inputs: Sequence[dict[str, Any]] | None = None,
                 check_tolerance: float = 1e-5, strict: bool = True,
                 example_kwarg_inputs: dict[str, Any] | None = None,
                 example_inputs_is_kwarg: bool = False,
                 dynamic_dims: dict[str, Any] | None = None,
                 dynamic: bool | None = None) -> ScriptModule:
    """Trace several methods: ``trace_module(m, {"forward": x, "encode": (x, y)})``; each is
    then a compiled method of the result (``traced.encode(x)``, ``traced.encode.code``).

    With ``example_inputs_is_kwarg=True`` (PyTorch's flag) every value is a dict of keyword
    arguments; ``example_kwarg_inputs`` adds keyword arguments to ``forward``'s inputs.
    ``dynamic_dims`` (method -> ``trace``'s ``dynamic_dims``) and ``dynamic`` choose the
    symbolic dims (``_dynamic``).
    """
    if not isinstance(mod, Module):
        raise TypeError(f"trace_module: expected a scriptmod.nn.Module, got {type(mod).__name__}")
    if not isinstance(inputs, dict) or not inputs:
        raise TypeError(f"trace_module: inputs must be a non-empty dict of method name -> example "
                        f"inputs, got {type(inputs).__name__}")
    check_dynamic(dynamic, None)
    if dynamic_dims is not None:
        check_dynamic(dynamic, {})
        if not isinstance(dynamic_dims, dict) or not all(m in inputs for m in dynamic_dims):
            raise ValueError(f"trace_module: dynamic_dims must map traced method names to "
                             f"their dynamic_dims, got {dynamic_dims!r}")
        for dims in dynamic_dims.values():
            check_dynamic(None, dims)
    calls = _calls(mod, inputs, example_kwarg_inputs, example_inputs_is_kwarg)
    for method, (args, kwargs) in calls.items():
        _refuse_untraceable(getattr(mod, method), args, kwargs)
    sm = _trace_calls(mod, calls, strict, (dynamic_dims or {}, dynamic))
    if check_trace:
        for check in check_inputs or [inputs]:
            _check(mod, sm, _calls(mod, check, example_kwarg_inputs, example_inputs_is_kwarg),
                   check_tolerance, strict)
    return sm


def _calls(mod: Module, inputs: dict[str, Any], kwarg_inputs: dict[str, Any] | None,
           is_kwarg: bool) -> Calls:
    """Each method's example inputs as (positional, keyword) arguments."""
    out: Calls = {}
    for method, value in inputs.items():
        _check_method_name(mod, method)
        if is_kwarg or (kwarg_inputs is not None and isinstance(value, dict)):
            if not isinstance(value, dict):
                raise TypeError(f"trace_module: inputs[{method!r}] must be a dict of keyword "
                                f"arguments (example_inputs_is_kwarg=True), got "
                                f"{type(value).__name__}")
            out[method] = ((), dict(value))
        elif method == "forward" and kwarg_inputs is not None:
            out[method] = (() if value is None else _as_tuple(value), dict(kwarg_inputs))
        else:
            out[method] = (_as_tuple(value), {})
    return out


def _check_method_name(mod: Module, method: Any) -> None:
    """A method to trace exists, is callable, and can become an attribute of the result."""
    if not isinstance(method, str) or not method.isidentifier():
        raise TypeError(f"trace_module: method names must be identifiers, got {method!r}")
    members = [n for reg in ("_parameters", "_buffers", "_modules") for n in getattr(mod, reg)]
    if method in members:
        raise ValueError(f"trace_module: {type(mod).__name__}.{method} is a parameter, buffer or "
                         f"submodule, not a method")
    if not callable(getattr(mod, method, None)):
        raise AttributeError(f"trace_module: {type(mod).__name__} has no method {method!r}")


def _trace_calls(mod: Module, calls: Calls, strict: bool,
                 dyn: tuple[dict, bool | None] = ({}, None)) -> ScriptModule:
    """Record every method of ``calls`` with one tracer (shared submodule graphs); ``dyn``:
    (method -> dynamic_dims, dynamic), which dims are symbolic (``_dynamic``)."""
    tracer = Tracer(mod, strict)
    arg_names: dict[int, dict[str, list[str]]] = {}
    specs: dict[int, dict[str, Any]] = {}
    in_specs = tracer.input_specs_of_calls
    for method, (args, kwargs) in calls.items():
        graph, names, spec, in_spec = _record(tracer, mod, getattr(mod, method), args, kwargs)
        tracer.graphs.setdefault(id(mod), {})[method] = graph
        tracer.modules[id(mod)] = mod
        arg_names.setdefault(id(mod), {})[method] = names
        specs.setdefault(id(mod), {})[method] = spec
        in_specs.setdefault(id(mod), {})[method] = in_spec
    for mid, names in tracer.arg_names_of_calls.items():
        arg_names.setdefault(mid, {}).update(names)
    for mid, sub in _SUB_SPECS.pop(tracer, {}).items():
        specs.setdefault(mid, {}).update(sub)
    _symbolic_batch(tracer, {m: a + tuple(kw.values()) for m, (a, kw) in calls.items()},
                    arg_names.get(id(mod), {}), dyn)
    with building():
        sm = _build(mod, tracer, arg_names, specs, {})
    if dyn[1] is False:                 # no automatic dynamic shapes either
        sm.__dict__["_dynamic"] = {m: False for m in calls}
    return sm


def trace(func: Any, example_inputs: Any = None, *, check_trace: bool = True,
          check_inputs: Sequence[Any] | None = None, check_tolerance: float = 1e-5,
          strict: bool = True, example_kwarg_inputs: dict[str, Any] | None = None,
          dynamic_dims: dict[Any, Any] | None = None, dynamic: bool | None = None) -> Any:
    """Trace a Module's forward (-> ScriptModule) or a function (-> ScriptFunction).

        >>> model = nn.Sequential(nn.Linear(64, 32), nn.ReLU()).eval()
        >>> traced = scriptmod.jit.trace(model, scriptmod.randn(8, 64))
        >>> traced(scriptmod.randn(3, 64)).shape     # other batch sizes need no new trace
        scriptmod.Size([3, 32])

    Symbolic dims (one specialization for every size of them): dim 0 is ``B`` when it is
    the batch, and any dim becomes symbolic at its second distinct size (automatic dynamic
    shapes). ``dynamic_dims={"x": {0: "B", 1: "T"}}`` names dims from the start (a list of
    dims names them ``s0``, ``s1``, ...), ``dynamic=True`` names every dim, ``dynamic=False``
    none, with automatic dynamic shapes off (see ``_dynamic``).

        >>> seq = scriptmod.jit.trace(model, scriptmod.randn(2, 5, 64),
        ...                           dynamic_dims={"input": {0: "B", 1: "T"}})
        >>> seq.graph.inputs[1].type
        Float(B, T, 64)
    """
    check_dynamic(dynamic, dynamic_dims)
    if example_inputs is None and example_kwarg_inputs is None:
        raise TypeError("trace: example_inputs is required (a Tensor or a tuple of Tensors)")
    if example_kwarg_inputs is not None and not isinstance(example_kwarg_inputs, dict):
        raise TypeError(f"trace: example_kwarg_inputs must be a dict of keyword arguments, got "
                        f"{type(example_kwarg_inputs).__name__}")
    owner = getattr(func, "__self__", None)
    if isinstance(owner, Module) and callable(func) and not isinstance(func, Module):
        if getattr(func, "__name__", None) != "forward":   # its weights would become constants
            raise AttributeError(f"trace doesn't support compiling individual module's "
                                 f"functions.\nPlease use trace_module: "
                                 f"scriptmod.jit.trace_module(model, {{{func.__name__!r}: "
                                 f"example_inputs}})")
        func = owner                                       # PyTorch: model.forward traces model
    dims = None if dynamic_dims is None else {"forward": dynamic_dims}
    if isinstance(func, Module):
        checks = [{"forward": c} for c in check_inputs] if check_inputs is not None else None
        if example_inputs is None:      # PyTorch: the kwargs are the example inputs
            return trace_module(func, {"forward": example_kwarg_inputs}, check_trace=check_trace,
                                check_inputs=checks, check_tolerance=check_tolerance,
                                strict=strict, example_inputs_is_kwarg=True,
                                dynamic_dims=dims, dynamic=dynamic)
        return trace_module(func, {"forward": example_inputs}, check_trace=check_trace,
                            check_inputs=checks, check_tolerance=check_tolerance, strict=strict,
                            example_kwarg_inputs=example_kwarg_inputs, dynamic_dims=dims,
                            dynamic=dynamic)
    if not callable(func):
        raise TypeError(f"trace: expected a Module or a function, got {type(func).__name__}")
    call = _function_call(example_inputs, example_kwarg_inputs)
    _refuse_untraceable(func, *call)
    tracer = Tracer(None, strict)
    graph, names, spec, in_spec = _record(tracer, None, func, *call)
    if dynamic_dims is not None or dynamic is not None:
        tracer.graphs[id(None)] = {"forward": graph}
        _symbolic_batch(tracer, {}, {"forward": names}, ({"forward": dynamic_dims}, dynamic),
                        methods=("forward",))
    sf = ScriptFunction(getattr(func, "__name__", "function"), graph, names, spec, in_spec)
    if dynamic is False:
        sf._module.__dict__["_dynamic"] = {"forward": False}
    if check_trace:
        for c in check_inputs or [example_inputs if example_inputs is not None
                                  else example_kwarg_inputs]:
            args, kwargs = _function_call(c, example_kwarg_inputs)
            again = _quietly(lambda: _record(Tracer(None, strict), None, func, _clone(args),
                                             _clone(kwargs))[0])
            _compare(func, sf, args, kwargs, check_tolerance, graph, again, "function")
    return sf


def _function_call(example: Any, kwarg_inputs: dict[str, Any] | None) -> tuple[tuple, dict]:
    """A function's example (or check) inputs as (positional, keyword) arguments: with
    ``example_kwarg_inputs`` a dict is keyword arguments, anything else positional ones."""
    if kwarg_inputs is None:
        return _as_tuple(example), {}
    if isinstance(example, dict):
        return (), dict(example)
    return (() if example is None else _as_tuple(example)), dict(kwarg_inputs)


def _symbolic_batch(tracer: Tracer, inputs: dict[str, Any],
                    names: dict[str, list[str]] | None = None,
                    dyn: tuple[dict, bool | None] = ({}, None),
                    methods: Sequence[str] = ()) -> None:
    """Name the batch dim ``B`` in the graphs' types (``_batch_dims``), or the dims
    ``dynamic_dims``/``dynamic`` ask for (``dyn``: method -> dynamic_dims, dynamic); each
    call still specializes on concrete shapes. Each traced method has its own example
    batch; ``methods`` (a traced function's) get only the dims asked for. A dim asked for
    that a guard pins warns and stays concrete."""
    batches: dict[str, int | None] = {}
    explicit = {}
    for method in [*inputs, *methods]:
        if method in inputs:                      # a traced function keeps its sizes
            first = _leaves(_as_tuple(inputs[method]))   # a dict argument: its tensors
            batches[method] = first[0].shape[0] if first and first[0].dim() >= 2 else None
        graph = tracer.graphs[id(tracer.root)][method]
        inputs_ = graph.inputs[1:] if tracer.root is not None else graph.inputs
        shapes = [getattr(v.type, "shape", None) for v in inputs_]
        labels = (names or {}).get(method) or [v.debug_name or f"arg{i}"
                                               for i, v in enumerate(inputs_)]
        wanted = explicit_dims(labels, shapes, dyn[0].get(method), dyn[1])
        if wanted is not None:
            explicit[method] = ([None] if tracer.root is not None else []) + wanted
    pinned = name_batch_dims(tracer.graphs, tracer.root, batches, explicit)
    for method, dims in pinned.items():
        if dims:
            labels = (["self"] if tracer.root is not None else []) + list(
                (names or {}).get(method) or ())
            where = f"{type(tracer.root).__name__}.{method}" if tracer.root is not None \
                else method
            warnings.warn(TracerWarning(pinned_warning(where, labels, dims)),
                          stacklevel=caller_stacklevel())


def _build(mod: Module, tracer: Tracer, arg_names: dict[int, dict[str, list[str]]],
           specs: dict[int, dict[str, Any]], memo: dict[int, ScriptModule]) -> ScriptModule:
    if id(mod) in memo:
        return memo[id(mod)]
    if isinstance(mod, ScriptModule) and "forward" in mod._methods and \
            id(mod) not in tracer.graphs:
        memo[id(mod)] = mod                  # a scripted submodule keeps its own graphs
        return mod
    sm = ScriptModule(type(mod).__name__, class_name(mod), tracer.graphs.get(id(mod), {}),
                      arg_names.get(id(mod), {}), specs.get(id(mod), {}),
                      tracer.input_specs_of_calls.get(id(mod), {}))
    memo[id(mod)] = sm
    for name, p in mod._parameters.items():
        sm.register_parameter(name, p)
    for name, b in mod._buffers.items():
        sm.register_buffer(name, b, persistent=name not in mod._non_persistent_buffers_set)
    for name, child in mod._modules.items():
        sm.add_module(name, None if child is None else
                      _build(child, tracer, arg_names, specs, memo))
    sm.training = mod.training
    return sm


# ---- check_trace ---------------------------------------------------------------------
def _structure(g: Graph) -> list[tuple]:
    """Node kinds, attributes and constant values, ignoring types (shapes may differ)."""
    out = []
    for node in g.walk():
        attrs = []
        for k, v in sorted(node.attrs.items()):
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                v = (str(v.dtype), tuple(v.shape), np.asarray(v).tobytes())
            attrs.append((k, repr(v) if not isinstance(v, tuple) or len(v) != 3 else v))
        out.append((node.kind, tuple(attrs), node.source))
    return out


def _check(mod: Module, sm: ScriptModule, calls: Calls, tol: float, strict: bool) -> None:
    """PyTorch's check: trace again with the check inputs; outputs that differ from the
    Python code warn (random ops, train-mode dropout), a graph that differs raises."""
    fresh = {m: (_clone(a), _clone(kw)) for m, (a, kw) in calls.items()}
    again = _quietly(lambda: _trace_calls(mod, fresh, strict))
    for method, (args, kwargs) in calls.items():
        eager = mod if method == "forward" else getattr(mod, method)
        _compare(eager, lambda *a, **k: sm._run(method, a, k), args, kwargs, tol,
                 inlined(sm, method), inlined(again, method), method)


def _quietly(fn: Callable[[], Any]) -> Any:
    """Run a check's re-trace without repeating the first trace's TracerWarnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)
        return fn()


def _compare(eager: Callable, traced: Callable, args: tuple, kwargs: dict[str, Any], tol: float,
             graph: Graph, again: Graph, what: str) -> None:
    with grad_mode.no_grad():
        got = _run_checked(traced, args, kwargs, "trace", what)
        expected = _run_checked(eager, args, kwargs, "Python function", what)
    got_leaves, expected_leaves = _leaves(got), _leaves(expected)
    if len(got_leaves) != len(expected_leaves):
        raise TracingCheckError(f"Tracing failed sanity checks!\nThe trace of {what} returns "
                                f"{len(got_leaves)} tensor(s), the Python function "
                                f"{len(expected_leaves)}")
    warned = False
    for i, (t, e) in enumerate(zip(got_leaves, expected_leaves)):
        problem = _mismatch(t, e, tol)
        if problem is not None:
            if not warned:
                _warn_nondeterministic(graph)
                warned = True
            warnings.warn(TracerWarning(
                f"Output nr {i + 1}. of the traced function does not match the corresponding "
                f"output of the Python function. Detailed error:\n{problem}"),
                stacklevel=caller_stacklevel())
    if _structure(again) != _structure(graph):
        raise TracingCheckError(_graph_diff(graph, again))


def _run_checked(fn: Callable, args: tuple, kwargs: dict[str, Any], running: str,
                 what: str) -> Any:
    """Run on fresh copies of the inputs (in-place ops must not leak between the runs)."""
    try:
        return fn(*_clone(args), **_clone(kwargs))
    except Exception as e:
        raise TracingCheckError(f"Tracing failed sanity checks!\nencountered an exception while "
                                f"running the {running} ({what}) with test inputs.\nException:"
                                f"\n    {type(e).__name__}: {e}") from e


def _clone(x: Any) -> Any:
    if isinstance(x, Tensor):
        copy = Tensor._make(x._data.copy())
        return copy.requires_grad_(True) if x.requires_grad else copy
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return rebuilt(x, (_clone(v) for v in x))
    return x


def _mismatch(got: Tensor, expected: Tensor, tol: float) -> str | None:
    """``None`` when close (rtol = atol = ``tol``, NaN equal to NaN), else what differs."""
    a = np.asarray(got.numpy(force=True), dtype=np.float64)
    b = np.asarray(expected.numpy(force=True), dtype=np.float64)
    if a.shape != b.shape:
        return f"The values for attribute 'shape' do not match: {a.shape} != {b.shape}."
    close = np.isclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    if close.all():
        return None
    bad = int((~close).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.where(close, 0.0, np.abs(a - b))
        rel = np.where(close, 0.0, diff / np.abs(b))
    where = np.unravel_index(int(np.nanargmax(diff)), diff.shape) if diff.size else ()
    return (f"Tensor-likes are not close!\n\nMismatched elements: {bad} / {a.size} "
            f"({100.0 * bad / max(a.size, 1):.1f}%)\nGreatest absolute difference: "
            f"{np.nanmax(diff)} at index {tuple(int(i) for i in where)} (up to {tol} allowed)\n"
            f"Greatest relative difference: {np.nanmax(rel)} (up to {tol} allowed)")


def _warn_nondeterministic(graph: Graph) -> None:
    nodes = [n for n in graph.walk() if n.is_op and IMPURE in REGISTRY[n.op_name].flags]
    if nodes:
        listed = "\n".join("\t" + str(n) for n in nodes[:20])
        warnings.warn(TracerWarning(
            "Trace had nondeterministic nodes. Did you forget call .eval() on your model? "
            f"Nodes:\n{listed}\nThis may cause errors in trace checking. To disable trace "
            "checking, pass check_trace=False to scriptmod.jit.trace()"),
            stacklevel=caller_stacklevel())


def _graph_diff(first: Graph, second: Graph) -> str:
    """PyTorch's message for graphs that differ across invocations, with the first node
    that differs (tensor constants compare by value, which the printed text hides)."""
    a, b = _structure(first), _structure(second)
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    nodes1, nodes2 = list(first.walk()), list(second.walk())
    node = lambda ns: str(ns[k]) if k < len(ns) else "(no node)"  # noqa: E731
    diff = "\n".join(difflib.unified_diff(str(first).splitlines(), str(second).splitlines(),
                                          "first trace", "second trace", lineterm=""))
    return ("Tracing failed sanity checks!\nERROR: Graphs differed across invocations! The graph "
            "differs across invocations: the traced code depends on values that change between "
            f"runs (a Python value, a global, a random number drawn outside the graph).\n"
            f"\tFirst diverging operator:\n\t\t- {node(nodes1)}\n\t\t+ {node(nodes2)}\n"
            f"\tGraph diff:\n{diff or '(the printed graphs are equal; a tensor constant differs)'}")


def _leaves(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    if isinstance(x, (tuple, list)):
        return [t for i in x for t in _leaves(i)]
    return []
