"""``jit.trace`` and ``jit.trace_module``: run once, record, build a ScriptModule tree."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import propagate_shapes
from scriptmod.ir.types import TensorType, TupleType
from scriptmod.ir.schema import IMPURE, REGISTRY
from scriptmod import _dispatch
from scriptmod.autograd import grad_mode
from scriptmod.jit._executor import inlined, submodule_of
from scriptmod.jit._script_module import ScriptFunction, ScriptModule
from scriptmod.jit._tracer import Tracer, _flatten_args, class_name
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
        for m in root.modules():
            if m is root or id(m) in {id(p) for p, _ in patched}:
                continue
            original = m.forward
            m.__dict__["forward"] = _make_hook(tracer, m, original)
            patched.append((m, original))
    _dispatch.TRACERS.append(tracer)
    try:
        with grad_mode.no_grad():
            yield
    finally:
        _dispatch.TRACERS.remove(tracer)
        for m, _ in patched:
            m.__dict__.pop("forward", None)


def _make_hook(tracer: Tracer, module: Any, forward: Callable) -> Callable:
    def traced_forward(*args: Any, **kwargs: Any) -> Any:
        return tracer.call_module(module, forward, args, kwargs)
    return traced_forward


def _record(tracer: Tracer, target: Any, fn: Callable, args: tuple, kwargs: dict) -> tuple[Graph, list[str]]:
    names, flat = _flatten_args(fn, args, kwargs)
    with _tracing(tracer):
        frame = tracer.new_frame(target, flat, names)
        try:
            out = fn(*flat)
        except BaseException:
            tracer.frames.clear()
            raise
        graph = tracer.finish_frame(frame, out)
    return graph, names


def trace_module(mod: Module, inputs: dict[str, Any], *, check_trace: bool = True,
                 check_inputs: Sequence[dict[str, Any]] | None = None,
                 check_tolerance: float = 1e-5, strict: bool = True,
                 example_kwarg_inputs: dict[str, Any] | None = None) -> ScriptModule:
    """Trace several methods: ``trace_module(m, {"forward": x, "encode": (x, y)})``."""
    if not isinstance(mod, Module):
        raise TypeError(f"trace_module: expected a scriptmod.nn.Module, got {type(mod).__name__}")
    tracer = Tracer(mod, strict)
    arg_names: dict[int, dict[str, list[str]]] = {}
    for method, args in inputs.items():
        fn = getattr(mod, method)
        kwargs = example_kwarg_inputs if method == "forward" and example_kwarg_inputs else {}
        graph, names = _record(tracer, mod, fn, _as_tuple(args) if not kwargs else (), kwargs)
        tracer.graphs.setdefault(id(mod), {})[method] = graph
        tracer.modules[id(mod)] = mod
        arg_names.setdefault(id(mod), {})[method] = names
    for mid, names in tracer.arg_names_of_calls.items():
        arg_names.setdefault(mid, {}).update(names)
    _symbolic_batch(tracer, inputs)
    sm = _build(mod, tracer, arg_names, {})
    if check_trace:
        for check in check_inputs or [inputs]:
            _check(mod, sm, check, check_tolerance, strict)
    return sm


def trace(func: Any, example_inputs: Any = None, *, check_trace: bool = True,
          check_inputs: Sequence[Any] | None = None, check_tolerance: float = 1e-5,
          strict: bool = True, example_kwarg_inputs: dict[str, Any] | None = None) -> Any:
    """Trace a Module's forward (-> ScriptModule) or a function (-> ScriptFunction).

        >>> traced = scriptmod.jit.trace(model, scriptmod.randn(8, 64))
        >>> traced(scriptmod.randn(3, 64))     # other batch sizes need no new trace
    """
    if example_inputs is None and example_kwarg_inputs is None:
        raise TypeError("trace: example_inputs is required (a Tensor or a tuple of Tensors)")
    if isinstance(func, Module):
        checks = [{"forward": c} for c in check_inputs] if check_inputs is not None else None
        return trace_module(func, {"forward": example_inputs if example_inputs is not None else ()},
                            check_trace=check_trace, check_inputs=checks,
                            check_tolerance=check_tolerance, strict=strict,
                            example_kwarg_inputs=example_kwarg_inputs)
    if not callable(func):
        raise TypeError(f"trace: expected a Module or a function, got {type(func).__name__}")
    args = _as_tuple(example_inputs) if example_inputs is not None else ()
    graph, names = _record(Tracer(None, strict), None, func, args, example_kwarg_inputs or {})
    sf = ScriptFunction(getattr(func, "__name__", "function"), graph, names)
    if check_trace:
        for c in check_inputs or [args]:
            _compare(lambda *a: func(*a), sf, _as_tuple(c), check_tolerance, graph,
                     lambda a: _retrace_fn(func, a, strict))
    return sf


def _symbolic_batch(tracer: Tracer, inputs: dict[str, Any]) -> None:
    """Name the batch dim ``B`` in every graph's tensor inputs and re-derive the types
    (callees before callers), so a graph reads ``Float(B, 4096)``; each call still
    specializes on concrete shapes."""
    first = [a for a in _as_tuple(next(iter(inputs.values()), ())) if isinstance(a, Tensor)]
    if not first or first[0].dim() < 2:
        return
    batch = first[0].shape[0]
    done: set[int] = set()
    for mid, methods in tracer.graphs.items():
        for g in methods.values():
            _propagate(tracer, tracer.modules[mid], g, batch, done)


def _propagate(tracer: Tracer, module: Any, g: Graph, batch: int, done: set[int]) -> None:
    if id(g) in done:
        return
    done.add(id(g))
    for node in g.walk():
        if node.kind == Prim.CALL_METHOD:
            sub = submodule_of(module, node)
            callee = tracer.graphs[id(sub)][node.attrs["name"]]
            _propagate(tracer, sub, callee, batch, done)
            for out, t in zip(node.outputs, (v.type for v in callee.outputs)):
                out.type = t
    propagate_shapes(g, [_batch_type(v.type, batch) for v in g.inputs], keep_symbolic=True)


def _batch_type(t: Any, batch: int) -> Any:
    if isinstance(t, TensorType) and t.shape and len(t.shape) >= 2 and t.shape[0] == batch:
        return t.with_(shape=("B",) + tuple(t.shape[1:]))
    if isinstance(t, TupleType):
        return TupleType(tuple(_batch_type(e, batch) for e in t.elements))
    return t


def _retrace_fn(func: Callable, args: tuple, strict: bool) -> Graph:
    return _record(Tracer(None, strict), None, func, args, {})[0]


def _build(mod: Module, tracer: Tracer, arg_names: dict[int, dict[str, list[str]]],
           memo: dict[int, ScriptModule]) -> ScriptModule:
    if id(mod) in memo:
        return memo[id(mod)]
    sm = ScriptModule(type(mod).__name__, class_name(mod), tracer.graphs.get(id(mod), {}),
                      arg_names.get(id(mod), {}))
    memo[id(mod)] = sm
    for name, p in mod._parameters.items():
        sm.register_parameter(name, p)
    for name, b in mod._buffers.items():
        sm.register_buffer(name, b, persistent=name not in mod._non_persistent_buffers_set)
    for name, child in mod._modules.items():
        sm.add_module(name, None if child is None else _build(child, tracer, arg_names, memo))
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


def _check(mod: Module, sm: ScriptModule, inputs: dict[str, Any], tol: float, strict: bool) -> None:
    args = _as_tuple(inputs["forward"]) if "forward" in inputs else ()
    graph = inlined(sm, "forward")
    retrace = lambda a: inlined(trace_module(mod, {"forward": a}, check_trace=False,  # noqa: E731
                                             strict=strict), "forward")
    _compare(mod, sm, args, tol, graph, retrace)


def _compare(eager: Callable, traced: Callable, args: tuple, tol: float, graph: Graph,
             retrace: Callable[[tuple], Graph]) -> None:
    again = retrace(args)
    if _structure(again) != _structure(graph):
        raise TracingCheckError(
            "Tracing failed sanity checks: the graph differs across invocations (the traced "
            "code depends on values that change between runs).\nFirst trace:\n"
            f"{graph}\nSecond trace:\n{again}")
    with grad_mode.no_grad():
        expected = eager(*args)
        got = traced(*args)
    impure = sorted({n.kind for n in graph.walk() if n.is_op and IMPURE in REGISTRY[n.op_name].flags})
    for i, (e, t) in enumerate(zip(_leaves(expected), _leaves(got))):
        ea, ta = np.asarray(e.numpy(force=True), dtype=np.float64), np.asarray(t.numpy(force=True), dtype=np.float64)
        if ea.shape != ta.shape or not np.allclose(ea, ta, rtol=tol, atol=tol, equal_nan=True):
            err = np.abs(ea - ta).max() if ea.shape == ta.shape else f"shapes {ea.shape} vs {ta.shape}"
            hint = (f" The trace has nondeterministic nodes ({', '.join(impure)}): did you forget "
                    f"to call .eval() on the model, or should you pass check_trace=False?" if impure else "")
            raise TracingCheckError(f"Tracing failed sanity checks: output {i} of the traced code "
                                    f"does not match the Python code (max abs difference {err}, "
                                    f"tolerance {tol}).{hint}")


def _leaves(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for i in x for t in _leaves(i)]
    return []
