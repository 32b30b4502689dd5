"""``scriptmod.jit.script`` and its decorators: ``export``, ``ignore``, ``unused``,
``annotate``, ``Final``, ``is_scripting``, ``is_tracing``.

    >>> @scriptmod.jit.script
    ... def clip_steps(x: scriptmod.Tensor, n: int) -> scriptmod.Tensor:
    ...     for i in range(n):
    ...         if bool((x > 1).any()):
    ...             x = x * 0.5
    ...     return x
    >>> clip_steps(scriptmod.tensor([4.0, 0.5]), 3)
    tensor([1.0000, 0.1250])

A scripted module is a ``ScriptModule`` (the full Module API, like a traced one) whose
methods keep their Python control flow as ``prim::If``/``prim::Loop``.
"""
from __future__ import annotations

import inspect
import os
import typing
from typing import Any, Callable, TypeVar

from scriptmod.ir.graph import Graph
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor
from .compiler import Context, FunctionCompiler
from .errors import FrontendError
from . import library

T = TypeVar("T")
Final = typing.Final          # ``x: Final[int] = 3`` in a module: a constant (TorchScript's)


def export(fn: Callable) -> Callable:
    """Compile this method too (it is reachable from the ScriptModule by name)."""
    fn._script_export = True              # type: ignore[attr-defined]
    return fn


def ignore(fn: Callable | None = None, *, drop: bool = False) -> Any:
    """Leave this function as Python: scripted code calls it at run time with its tensors
    (refused for a tensor that requires grad, which autograd could not follow), converting
    the result back by its return annotation (default Tensor). A graph that calls Python
    cannot be saved to an archive."""
    def mark(f: Callable) -> Callable:
        f._script_ignore = True           # type: ignore[attr-defined]
        return f
    return mark(fn) if fn is not None else mark


def unused(fn: Callable) -> Callable:
    """Compile calls to this function as a raise (the body is not compiled)."""
    fn._script_unused = True              # type: ignore[attr-defined]
    return fn


def annotate(the_type: Any, the_value: T) -> T:
    """``annotate(List[int], [])``: the value, with its type stated for the compiler."""
    return the_value


def jit_isinstance(obj: Any, target_type: Any) -> bool:
    """``jit.isinstance``: whether ``obj`` is a ``target_type``, container annotations
    checked item by item (``List[int]``, ``Dict[str, Tensor]``, ``Optional[T]``,
    ``Union[...]``); scripted code decides it from the value's type, or at run time for an
    ``Optional`` or a ``Union`` of scalars.

        >>> jit_isinstance([1, 2], typing.List[int])
        True
    """
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if target_type is Any:
        return True
    if origin is None:
        return isinstance(obj, target_type)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return any(jit_isinstance(obj, a) for a in args)
    if not isinstance(obj, origin):
        return False
    if origin is list:
        return all(jit_isinstance(x, args[0]) for x in obj)
    if origin is dict:
        return all(jit_isinstance(k, args[0]) and jit_isinstance(v, args[1])
                   for k, v in obj.items())
    if origin is tuple:
        return len(obj) == len(args) and all(jit_isinstance(x, a) for x, a in zip(obj, args))
    return True


def is_scripting() -> bool:
    """True inside scripted code (compiled to a constant), False when run as Python."""
    return False


def is_tracing() -> bool:
    """True while ``jit.trace`` runs the code, False otherwise (and in scripted code)."""
    from scriptmod._dispatch import TRACERS
    return bool(TRACERS)


def script(obj: Any, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None,
           example_inputs: Any = None) -> Any:
    """Compile a function or an ``nn.Module`` instance from its Python source.

    A function becomes a ``ScriptFunction``; a module a ``ScriptModule`` whose ``forward``
    and every method it reaches (and each ``@export`` method) are compiled, its submodules
    scripted in turn; layers of ``scriptmod.nn`` itself stay as they are and are compiled
    per input signature from their eager code (a layer scripted alone, ``script(nn.Linear(4,
    2))``, too: its ``forward`` is a call of the layer on ``self``). Raises ``FrontendError``
    (a RuntimeError) with the file, line and a caret under what cannot be compiled."""
    from scriptmod.jit._script_module import ScriptFunction, ScriptModule
    if isinstance(obj, (ScriptModule, ScriptFunction)):
        return obj
    if isinstance(obj, Module):
        return _ModuleScripter().script(obj)
    if isinstance(obj, type):
        raise FrontendError(f"script: scripting a class ({obj.__name__}) is not supported; "
                            f"script an instance of it")
    if not callable(obj):
        raise TypeError(f"script: expected a function or an nn.Module, got "
                        f"{type(obj).__name__}")
    if getattr(obj, "__self__", None) is not None and isinstance(obj.__self__, Module):
        raise FrontendError("script: pass the module, not one of its bound methods "
                            "(use @jit.export to compile other methods)")
    ctx = Context()
    ctx.stack.append(getattr(obj, "__qualname__", "function"))
    fc = FunctionCompiler(obj, ctx)
    graph = fc.compile()
    sf = ScriptFunction(obj.__name__, graph, fc.arg_names, _out_spec(fc, graph))
    sf._module._defaults["forward"] = fc.defaults
    return sf


def _out_spec(fc: FunctionCompiler, graph: Graph) -> Any:
    """How the compiled function's result goes back to Python: a ``NamedTuple`` it is
    declared to return (or builds) as an instance of its class (``_structure`` specs)."""
    from scriptmod.jit._structure import spec_of_type
    return spec_of_type(fc.return_type if fc.return_type is not None
                        else graph.outputs[0].type)


class _ModuleScripter:
    """Scripts one module tree: a ScriptModule per user module (shared parameters and
    buffers, like ``jit.trace``), compiling methods on demand."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.ctx = Context(method_graph=self.method_graph)

    def script(self, mod: Module) -> Any:
        sm = self.module(mod)
        names = ["forward"] + [n for n in dir(type(mod)) if n != "forward" and getattr(
            getattr(type(mod), n, None), "_script_export", False)]
        for name in names:
            if name == "forward" and type(mod).forward is Module.forward:
                raise FrontendError(f"script: {type(mod).__name__} has no forward()")
            self.method_graph(mod, name)
        return sm

    def module(self, mod: Module) -> Any:
        from scriptmod.jit._script_module import ScriptModule, building
        from scriptmod.jit._tracer import class_name
        if id(mod) in self.memo:
            return self.memo[id(mod)]
        sm = ScriptModule(type(mod).__name__, class_name(mod), {}, {})
        self.memo[id(mod)] = sm
        if library.is_builtin_layer(mod):           # a layer: traced per specialization
            sm.__dict__["_layer"] = library.LayerRef.of(mod)
        with building():
            for name, p in mod._parameters.items():
                sm.register_parameter(name, p)
            for name, b in mod._buffers.items():
                sm.register_buffer(name, b, persistent=name not in mod._non_persistent_buffers_set)
            for name, child in mod._modules.items():
                sm.add_module(name, None if child is None else self.module(child))
            for name, value in vars(mod).items():       # a plain tensor attribute (not a
                if isinstance(value, Tensor) and not name.startswith("__"):   # buffer): a
                    sm.register_buffer(name, value, persistent=False)  # TorchScript attribute
        sm.training = mod.training
        return sm

    def method_graph(self, mod: Module, name: str) -> Graph:
        """``mod.name``'s graph, compiled once, stored on its ScriptModule."""
        sm = self.module(mod)
        g = sm._methods.get(name)
        if g is not None:
            return g
        fn = getattr(type(mod), name, None)
        from scriptmod.nn import Sequential
        if name == "forward" and isinstance(mod, Sequential) and fn is Sequential.forward:
            fn = _sequential_forward            # its own forward takes ``Any`` (a subclass
            # that keeps it too: torchvision's Conv2dNormActivation)
        if fn is None or not callable(fn):
            raise FrontendError(f"{type(mod).__name__} has no method {name!r}")
        if getattr(fn, "_script_unused", False):
            raise FrontendError(f"{type(mod).__name__}.{name} is @unused")
        if library.is_builtin_layer(mod):
            # a built-in layer scripted as the root: its method is a layer call on self,
            # traced per specialization like a contained layer's (torch.jit.script(nn.X()))
            g, arg_names, defaults = _layer_method_graph(mod, name, fn)
        else:
            fc = FunctionCompiler(fn, self.ctx, module=mod, name=name)
            g, arg_names, defaults = fc.compile(), fc.arg_names, fc.defaults
            spec = _out_spec(fc, g)
            if spec is not None:
                sm._out_specs[name] = spec
        sm._methods[name] = g
        sm._arg_names[name] = arg_names
        sm._defaults[name] = defaults
        from scriptmod.jit._script_module import ScriptMethod, _installable
        if name != "forward" and _installable(sm, name):
            sm.__dict__[name] = ScriptMethod(sm, name)
        return g


def _layer_method_graph(mod: Module, name: str,
                        fn: Callable) -> tuple[Graph, list[str], dict[str, Any]]:
    """``mod.name`` of a built-in layer as one ``prim::CallFunction`` on ``self`` with the
    method's parameters (typed by their annotations, a tensor where there is none), which
    ``library.expand_call`` expands per call signature from the layer's eager code, as it
    expands a contained layer's call. Returns the graph, its argument names and defaults."""
    from scriptmod.ir.builder import Builder
    from scriptmod.ir.graph import Prim
    from scriptmod.ir.types import ModuleType, TensorType
    from scriptmod.jit._tracer import class_name
    from .annotations import to_ir_type
    from .compiler import _layer_result
    where = f"{type(mod).__name__}.{name}"
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:                                       # noqa: BLE001
        hints = {}
    try:
        src = f"{os.path.basename(inspect.getsourcefile(fn) or '?')}:" \
              f"{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        src = None
    g = Graph()
    b = Builder(g, src)
    inputs = [b.input(ModuleType(class_name(mod)), "self")]
    names: list[str] = []
    defaults: dict[str, Any] = {}
    for p in list(sig.parameters.values())[1:]:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise FrontendError(f"script: {where}() takes *args, **kwargs or keyword-only "
                                f"parameter '{p.name}', which a scripted method cannot")
        hint = hints.get(p.name)
        inputs.append(b.input(TensorType() if hint is None else to_ir_type(hint), p.name))
        names.append(p.name)
        if p.default is not p.empty:
            defaults[p.name] = p.default
    attrs = {"name": where, "args": [["v", i] for i in range(len(inputs))],
             "kwargs": [], "method": name}
    out = b.node(Prim.CALL_FUNCTION, inputs, [_layer_result(mod, name)], attrs).output
    b.ret(out)
    return g, names, defaults


def _sequential_forward(self, input: Tensor) -> Tensor:  # type: ignore[no-untyped-def]
    """What a scripted ``nn.Sequential`` runs (``torch.jit.script(nn.Sequential(...))``):
    each child on the previous one's result, unrolled."""
    for module in self:
        input = module(input)
    return input
