"""``ScriptModule``: a compiled module with the whole ``nn.Module`` API.

Its submodules are ScriptModules mirroring the original tree and it shares the original's
Parameter and buffer objects, so ``state_dict`` keys, ``load_state_dict``, ``.to()`` and
optimizer steps all act on the tensors the graphs read through ``prim::GetAttr``. Hooks
registered on it run in Python around the compiled call (PyTorch refuses them). Every traced
method is reachable as an attribute (``traced.encode(x)``, ``traced.encode.code``).
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Sequence

from scriptmod.ir.code import code_with_constants, python_code
from scriptmod.ir.graph import Graph
from scriptmod.ir.types import ModuleType
from scriptmod.jit._executor import Executor
from scriptmod.jit._specialize import inlined
from scriptmod.jit._fastpath import MISS
from scriptmod.jit._structure import bind_keywords, bind_structured, unflatten
from scriptmod.nn.module import Module
from scriptmod.nn.parameter import Buffer, Parameter
from scriptmod.tensor import wrap


_FORWARD_VIEWS = frozenset({"graph", "inlined_graph", "code", "code_with_constants"})
_CONTAINERS = {"nn.Sequential": "list", "nn.ModuleList": "list", "nn.ModuleDict": "dict"}
_BUILDING: ContextVar[int] = ContextVar("scriptmod_building_script_modules", default=0)


@contextmanager
def building() -> Iterator[None]:
    """Inside it, ScriptModules take new parameters, buffers and submodules: what tracing,
    scripting, freezing and loading do to build them. Outside, their members are fixed."""
    token = _BUILDING.set(_BUILDING.get() + 1)
    try:
        yield
    finally:
        _BUILDING.reset(token)


class ScriptModule(Module):
    """A module whose methods are IR graphs. Made by ``jit.trace`` (or loaded from an archive).

        >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU()).eval()
        >>> traced = scriptmod.jit.trace(model, scriptmod.ones(2, 4))
        >>> print(traced.graph)
        graph(%self : __module__.nn.Sequential, %input : Float(B, 4)):
          %0 : __module__.nn.Linear = prim::GetAttr[name="0"](%self)...
          ...
          return (%3)
        >>> traced(scriptmod.ones(5, 4)).shape
        scriptmod.Size([5, 8])
    """

    def __init__(self, original_name: str, qualified_name: str,
                 methods: dict[str, Graph] | None = None,
                 arg_names: dict[str, list[str]] | None = None,
                 out_specs: dict[str, Any] | None = None,
                 in_specs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.original_name = original_name
        self._qualified_name = qualified_name
        self._methods: dict[str, Graph] = dict(methods or {})
        self._arg_names: dict[str, list[str]] = dict(arg_names or {})
        self._out_specs: dict[str, Any] = {k: v for k, v in (out_specs or {}).items() if v is not None}
        self._in_specs: dict[str, Any] = {k: v for k, v in (in_specs or {}).items() if v is not None}
        self._executors: dict[str, Executor] = {}
        self._defaults: dict[str, dict[str, Any]] = {}     # scripted: parameter defaults
        for name in self._methods:        # ``traced.encode(x)``; an instance attribute, so that
            if _installable(self, name):  # attribute reads on the hot path stay plain lookups
                self.__dict__[name] = ScriptMethod(self, name)

    def _get_name(self) -> str:
        return self.original_name

    def __getattr__(self, name: str) -> Any:
        """``.graph``/``.code`` of a module whose forward never ran say so (a property's
        AttributeError would otherwise read "no attribute 'code'")."""
        if name in _FORWARD_VIEWS and "forward" not in self.__dict__.get("_methods", {"forward": 0}):
            raise AttributeError(f"'{self.__dict__.get('original_name')}' ScriptModule has no "
                                 f"{name}: its forward was not called while tracing (a "
                                 f"container, or a submodule the traced code never called)")
        methods = self.__dict__.get("_methods", {})
        if name.startswith("_") and not name.startswith("__") and name in methods:
            return ScriptMethod(self, name)    # a private compiled method (``_forward_impl``,
            # which ``.code`` calls): found only where no attribute of that name exists
        return super().__getattr__(name)

    def __deepcopy__(self, memo: dict[int, Any]) -> "ScriptModule":
        """A copy compiles its own specializations (native code cannot be copied)."""
        executors = self.__dict__["_executors"]
        self.__dict__["_executors"] = {}
        try:
            return super().__deepcopy__(memo)
        finally:
            self.__dict__["_executors"] = executors

    def __copy__(self) -> "ScriptModule":
        """A shallow copy shares tensors, submodules and compiled code; its methods are its own."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        for name, v in self.__dict__.items():
            if isinstance(v, ScriptMethod):
                out.__dict__[name] = ScriptMethod(out, name)
        return out

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise unpicklable(f"ScriptModule '{self.original_name}'")

    # ---- container protocol of a traced Sequential / ModuleList / ModuleDict --------------
    def _container(self, op: str) -> str:
        kind = self._container_kind()
        if kind is None:
            raise TypeError(f"'{self.original_name}' ScriptModule does not support {op} (only "
                            f"traced Sequential, ModuleList and ModuleDict do)")
        return kind

    def __getitem__(self, idx: Any) -> Any:
        if self._container("indexing") == "dict":
            return self._modules[idx]
        return list(self._modules.values())[idx]

    def __len__(self) -> int:
        self._container("len()")
        return len(self._modules)

    def __bool__(self) -> bool:
        """A module is truthy (defining ``__len__`` must not make ``if traced:`` raise);
        a traced container is truthy when it holds something, like its eager original."""
        return self._container_kind() is None or len(self._modules) > 0

    def _container_kind(self) -> str | None:
        """The kind of a traced container (list or dict); None for a frozen module, whose
        members are constants of its graph now."""
        return None if self.__dict__.get("_frozen") else _CONTAINERS.get(self._qualified_name)

    def __iter__(self) -> Any:
        if self._container("iteration") == "dict":
            return iter(self._modules)
        return iter(self._modules.values())

    def __contains__(self, key: Any) -> bool:
        self._container("'in'")
        return key in self._modules

    def extra_repr(self) -> str:
        return f"original_name={self.original_name}"

    # ---- members are fixed once built: the graphs read them by name (PyTorch refuses too) --
    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        if not _BUILDING.get():
            raise AttributeError(self._fixed(f"register buffer '{name}'"))
        super().register_buffer(name, tensor, persistent)

    def register_parameter(self, name: str, param: Any) -> None:
        if not _BUILDING.get():
            raise AttributeError(self._fixed(f"register parameter '{name}'"))
        super().register_parameter(name, param)

    def add_module(self, name: str, module: Any) -> None:
        if not _BUILDING.get():
            raise RuntimeError(self._fixed(f"add or re-assign module '{name}'"))
        super().add_module(name, module)

    def __setattr__(self, name: str, value: Any) -> None:
        """A parameter's or buffer's tensor may be replaced (as in PyTorch); a new
        parameter, buffer or submodule, or another submodule, is refused."""
        d = self.__dict__
        if _BUILDING.get() or "_modules" not in d:
            return super().__setattr__(name, value)
        if isinstance(value, Module) or name in d["_modules"]:
            raise RuntimeError(self._fixed(f"add or re-assign module '{name}'"))
        if isinstance(value, Parameter) and name not in d["_parameters"]:
            raise RuntimeError(f"Can't add a new parameter after ScriptModule construction. "
                               f"Tried to add '{name}' to {self.original_name}: "
                               f"{self._fixed('')}")
        if name in d["_parameters"] or name in d["_buffers"]:
            with building():
                return super().__setattr__(name, value)
        if isinstance(value, Buffer):
            raise AttributeError(self._fixed(f"register buffer '{name}'"))
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        if not _BUILDING.get() and any(name in d[r] for r in ("_parameters", "_buffers",
                                                              "_modules")):
            raise RuntimeError(self._fixed(f"delete '{name}'"))
        super().__delattr__(name)

    def _fixed(self, what: str) -> str:
        head = f"cannot {what} on {self.original_name}, a compiled ScriptModule: " if what else ""
        return (f"{head}its parameters, buffers and submodules are fixed when it is traced, "
                f"scripted or loaded (its graphs read them by name). Change the original "
                f"module and compile it again.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``Module.__call__``, but a warm call without hooks or keywords goes straight to
        the forward's fast path (``_fastpath``: its own checks, then the program)."""
        ex = self._executors.get("forward")
        if ex is not None and not kwargs:
            fast = ex.module_fast
            if fast is not None:
                out = fast(args)
                if out is not MISS:
                    return out
        return Module.__call__(self, *args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._run("forward", args, kwargs)

    def _run(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        if method not in self._methods:
            layer = self.__dict__.get("_layer")
            if layer is not None:    # a scripted built-in layer: its graphs call the eager one
                return getattr(layer.instance(self), method)(*args, **kwargs)
            raise RuntimeError(f"{self.original_name}.{method}() has no compiled graph: the "
                               f"module was not called during tracing, or its calls were "
                               f"inlined into its caller's graph (an argument that is not a "
                               f"tensor or a constant, such as a callable or a module)")
        if self._in_specs and method in self._in_specs:   # dict/nested arguments: their tensors
            args = bind_structured(f"{self.original_name}.{method}()", self._in_specs[method],
                                   args, dict(kwargs))
        elif kwargs or (self._defaults and method in self._defaults
                        and len(args) < len(self._arg_names.get(method, ()))):
            args = self._positional(method, args, kwargs)
        out = self.executor(method)(args)
        if self._out_specs:                   # a dict or namedtuple output: rebuild it
            spec = self._out_specs.get(method)
            if spec is not None:
                return unflatten(out, spec)
        return out

    def _positional(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple:
        return tuple(bind_keywords(f"{self.original_name}.{method}()",
                                   self._arg_names.get(method, []), args, dict(kwargs),
                                   self._defaults.get(method)))

    def save(self, f: Any, _extra_files: dict[str, Any] | None = None) -> None:
        """Write this module to an archive (see ``scriptmod.jit.save``).

            >>> x = scriptmod.ones(2, 4)
            >>> traced = scriptmod.jit.trace(nn.Linear(4, 2), x)
            >>> traced.save("block.smod"); again = scriptmod.jit.load("block.smod")
            >>> bool((again(x) == traced(x)).all())
            True
        """
        from scriptmod.jit.archive import save
        save(self, f, _extra_files=_extra_files)

    def executor(self, method: str = "forward") -> Executor:
        ex = self._executors.get(method)
        if ex is None:
            ex = self._executors[method] = Executor(self, method, self._arg_names.get(method, []))
            ex.post_passes.extend(self.__dict__.get("_specialized_passes", ()))   # (freeze)
        return ex

    # ---- inspection -------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        """The forward graph, with ``prim::CallMethod`` per submodule call."""
        return self._method_graph("forward")

    @property
    def inlined_graph(self) -> Graph:
        """The forward graph with every submodule call inlined."""
        self._method_graph("forward")
        return inlined(self, "forward")

    @property
    def code(self) -> str:
        """Python-syntax view of ``graph`` (a saved traced function keeps its name); it runs
        with ``exec(code, scriptmod.jit.code_namespace(module))``."""
        return python_code(self.graph, self._code_name(), self._code_defaults("forward"))

    def _code_defaults(self, method: str) -> dict[int, Any]:
        """A scripted method's parameter defaults by graph input index, for ``.code``."""
        defaults = self._defaults.get(method)
        if not defaults:
            return {}
        names = self._arg_names.get(method, [])
        first = len(self._method_graph(method).inputs) - len(names)   # after ``self``
        return {first + i: defaults[n] for i, n in enumerate(names) if n in defaults}

    def _code_name(self) -> str:
        g = self.graph
        is_function = not g.inputs or not isinstance(g.inputs[0].type, ModuleType)
        return self.original_name if is_function else "forward"

    @property
    def code_with_constants(self) -> tuple[str, "ConstMap"]:
        """``(code, consts)``: ``consts.c0`` is the Tensor ``CONSTANTS.c0`` in ``code``."""
        return _with_constants(self.graph, self._code_name(), self._code_defaults("forward"))

    def graph_for(self, *inputs: Any, backward: bool = False) -> Graph:
        """The optimized graph actually run for ``inputs`` (specializing it if needed);
        with ``backward=True``, the compiled backward run for them with grad enabled."""
        if backward:
            return self.backward_graph_for(*inputs)
        return self.executor("forward").specialize(self._graph_args("forward", inputs)).graph

    def backward_graph_for(self, *inputs: Any) -> Graph:
        """The compiled backward of ``forward`` for ``inputs`` and the module's parameters
        as they require grad now, with its fusion groups: inputs are the values the forward
        saved, then the outputs' gradients; outputs are the gradients of the arguments and
        module tensors that require grad. Raises ``RuntimeError`` with the reason when
        that call's gradient runs op by op.

            >>> lin = nn.Linear(4, 2)
            >>> traced = scriptmod.jit.trace(lin, scriptmod.ones(3, 4))
            >>> g = traced.backward_graph_for(scriptmod.ones(3, 4))
            >>> [v.debug_name for v in g.inputs][-1]
            'grad_0'
        """
        return self.executor("forward").grad_plan_for(
            self._graph_args("forward", inputs)).split.backward

    def training_graph_for(self, *inputs: Any) -> Graph:
        """The forward a grad-enabled call of ``forward`` with ``inputs`` runs while the
        module trains, with its fusion groups. When the only output that needs a gradient is
        a float scalar (a loss), it is the forward and the backward at seed 1 as one graph:
        its outputs are the forward's, the saved values, then one gradient per argument or
        module tensor that requires grad (what ``loss.backward()`` receives); otherwise the
        forward that also returns the values its backward saves. Raises ``RuntimeError``
        with the reason when that call's gradient runs op by op."""
        split = self.executor("forward").grad_plan_for(self._graph_args("forward", inputs)).split
        return split.seeded if split.seeded is not None else split.forward

    def executable_for(self, *inputs: Any) -> Any:
        """The ``runtime.executable.Executable`` that runs ``forward`` for ``inputs``."""
        return self.executor("forward").specialize(
            self._graph_args("forward", inputs)).executable

    def _graph_args(self, method: str, inputs: Sequence[Any]) -> Sequence[Any]:
        """The graph's arguments for a call's: a dict argument's tensors (``graph_for``)."""
        spec = self._in_specs.get(method)
        return inputs if spec is None else bind_structured(
            f"{self.original_name}.{method}()", spec, inputs, {})

    def _method_graph(self, method: str) -> Graph:
        try:
            return self._methods[method]
        except KeyError:
            raise AttributeError(f"{self.original_name} has no compiled method {method!r} (it was "
                                 f"not called while tracing)") from None


class PicklingError(RuntimeError, TypeError):
    """Compiled code is not pickled (PyTorch's ``RuntimeError``; ``pickle`` raises ``TypeError``
    for objects it cannot pickle)."""


def unpicklable(what: str) -> PicklingError:
    return PicklingError(f"cannot pickle {what}: it holds compiled code. Save it with "
                         f"scriptmod.jit.save(module, f) and read it back with "
                         f"scriptmod.jit.load(f)")


def _installable(module: ScriptModule, name: str) -> bool:
    """A traced method becomes an attribute unless the name is private or already means
    something on a ScriptModule (its API, ``nn.Module``'s, or its state): those always win,
    so a method named ``double`` stays compiled (and saved) without hiding ``Module.double``.
    A private one (``_forward_impl``) is found by ``__getattr__``, after every real
    attribute."""
    return (name != "forward" and not name.startswith("_") and not hasattr(ScriptModule, name)
            and name not in module.__dict__)


class RecursiveScriptModule(ScriptModule):
    """A ScriptModule loaded from an archive; it prints as PyTorch's loaded modules do,
    ``RecursiveScriptModule(original_name=Block)``."""

    def _get_name(self) -> str:
        return "RecursiveScriptModule"


class ConstMap(dict):
    """The constants of ``code_with_constants``: ``consts.c0`` (PyTorch) or ``consts["c0"]``,
    each a Tensor."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no constant {name!r} (the code names {sorted(self)})") from None

    @property
    def const_mapping(self) -> dict[str, Any]:
        return dict(self)


def _with_constants(graph: Graph, name: str,
                    defaults: dict[int, Any] | None = None) -> tuple[str, ConstMap]:
    code, payloads = code_with_constants(graph, name, defaults)
    return code, ConstMap({k: wrap(v) for k, v in payloads.items()})


class ScriptMethod:
    """A traced method other than ``forward``: ``traced.encode(x)`` runs it compiled (its own
    guards and specializations), ``.graph``/``.inlined_graph``/``.code`` show it.

        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__(); self.fc = nn.Linear(4, 3)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
        ...     def encode(self, x):
        ...         return self.fc(x) * 2
        >>> x = scriptmod.ones(2, 4)
        >>> traced = scriptmod.jit.trace_module(Net(), {"forward": x, "encode": x})
        >>> traced.encode(x).shape
        scriptmod.Size([2, 3])
        >>> print(traced.encode.code)
        def encode(self, x: Tensor) -> Tensor:
            ...
            return ops.sm.mul(_1, 2)
    """

    def __init__(self, owner: ScriptModule, name: str) -> None:
        self.owner, self.name = owner, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.owner._run(self.name, args, kwargs)

    @property
    def graph(self) -> Graph:
        return self.owner._method_graph(self.name)

    @property
    def inlined_graph(self) -> Graph:
        self.owner._method_graph(self.name)
        return inlined(self.owner, self.name)

    @property
    def code(self) -> str:
        return python_code(self.graph, self.name, self.owner._code_defaults(self.name))

    @property
    def code_with_constants(self) -> tuple[str, ConstMap]:
        return _with_constants(self.graph, self.name, self.owner._code_defaults(self.name))

    def graph_for(self, *inputs: Any) -> Graph:
        """The optimized graph run for ``inputs``."""
        return self.owner.executor(self.name).specialize(
            self.owner._graph_args(self.name, inputs)).graph

    def __repr__(self) -> str:
        return f"<ScriptMethod {self.owner.original_name}.{self.name}>"


class ScriptFunction:
    """A traced plain function: ``graph``, ``code`` (``def f(x: Tensor) -> Tensor:``) and a
    compiled ``__call__``."""

    def __init__(self, name: str, graph: Graph, arg_names: list[str],
                 out_spec: Any = None, in_spec: Any = None) -> None:
        self.__name__ = self.original_name = self.name = name
        self._module = ScriptModule(name, name, {"forward": graph}, {"forward": arg_names},
                                    {"forward": out_spec}, {"forward": in_spec})

    @property
    def graph(self) -> Graph:
        return self._module.graph

    inlined_graph = graph

    @property
    def code(self) -> str:
        return python_code(self.graph, self.name, self._module._code_defaults("forward"))

    @property
    def code_with_constants(self) -> tuple[str, ConstMap]:
        return _with_constants(self.graph, self.name, self._module._code_defaults("forward"))

    def graph_for(self, *inputs: Any, backward: bool = False) -> Graph:
        return self._module.graph_for(*inputs, backward=backward)

    def backward_graph_for(self, *inputs: Any) -> Graph:
        return self._module.backward_graph_for(*inputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from scriptmod._dispatch import TRACERS
        if TRACERS:             # called while tracing: its graph goes into the trace
            if kwargs or len(args) < len(self._module._arg_names.get("forward", ())):
                args = self._module._positional("forward", args, kwargs)
            return TRACERS[-1].call_scripted(self.graph, lambda: self._module._run(
                "forward", args, {}), args)
        return self._module._run("forward", args, kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise unpicklable(f"traced function '{self.name}'")

    def __deepcopy__(self, memo: dict[int, Any]) -> "ScriptFunction":
        out = type(self).__new__(type(self))
        memo[id(self)] = out
        out.__dict__.update(self.__dict__)
        out._module = copy.deepcopy(self._module, memo)
        return out


def explain(module: Any, *example_inputs: Any) -> str:
    """How a compiled module runs for ``example_inputs``: the specialization they select
    (compiled now if no call built it yet), as ``Specialization.explain`` prints it: its key
    and guards, one line per node of the optimized graph (its step, target and reason), the
    generated sources, and its grad plans. ``module``: a ``trace``/``script`` result, one of
    its methods (``traced.encode``) or a traced function.

        >>> traced = scriptmod.jit.trace(nn.Linear(4, 2), scriptmod.ones(3, 4))
        >>> print(scriptmod.jit.explain(traced, scriptmod.ones(3, 4)).split("guards:")[0])
        specialization of Linear.forward (concrete, fused)
        key:
          input: Tensor float32 (3, 4) on cpu
          fusion: fused
        <BLANKLINE>
    """
    if isinstance(module, ScriptFunction):
        owner, method = module._module, "forward"
    elif isinstance(module, ScriptMethod):
        owner, method = module.owner, module.name
    elif isinstance(module, ScriptModule):
        owner, method = module, "forward"
    else:
        raise TypeError(f"jit.explain: expected a compiled module (the result of "
                        f"jit.trace or jit.script), got {type(module).__name__}")
    owner._method_graph(method)
    return owner.executor(method).explain(owner._graph_args(method, example_inputs))
