"""``ScriptModule``: a compiled module with the whole ``nn.Module`` API.

Its submodules are ScriptModules mirroring the original tree and it shares the original's
Parameter and buffer objects, so ``state_dict`` keys, ``load_state_dict``, ``.to()`` and
optimizer steps all act on the tensors the graphs read through ``prim::GetAttr``. Hooks
registered on it run in Python around the compiled call (PyTorch refuses them).
"""
from __future__ import annotations

from typing import Any, Sequence

from scriptmod.ir.code import code_with_constants, python_code
from scriptmod.ir.graph import Graph
from scriptmod.jit._executor import Executor, inlined
from scriptmod.nn.module import Module


_CONTAINERS = {"nn.Sequential": "list", "nn.ModuleList": "list", "nn.ModuleDict": "dict"}


class ScriptModule(Module):
    """A module whose methods are IR graphs. Made by ``jit.trace`` (or loaded from an archive).

        >>> traced = scriptmod.jit.trace(model, x)
        >>> print(traced.graph); y = traced(x)
    """

    def __init__(self, original_name: str, qualified_name: str,
                 methods: dict[str, Graph] | None = None,
                 arg_names: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.original_name = original_name
        self._qualified_name = qualified_name
        self._methods: dict[str, Graph] = dict(methods or {})
        self._arg_names: dict[str, list[str]] = dict(arg_names or {})
        self._executors: dict[str, Executor] = {}

    def _get_name(self) -> str:
        return self.original_name

    # ---- container protocol of a traced Sequential / ModuleList / ModuleDict --------------
    def _container(self, op: str) -> str:
        kind = _CONTAINERS.get(self._qualified_name)
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
        return _CONTAINERS.get(self._qualified_name) is None or len(self._modules) > 0

    def __iter__(self) -> Any:
        if self._container("iteration") == "dict":
            return iter(self._modules)
        return iter(self._modules.values())

    def __contains__(self, key: Any) -> bool:
        self._container("'in'")
        return key in self._modules

    def extra_repr(self) -> str:
        return f"original_name={self.original_name}"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._run("forward", args, kwargs)

    def _run(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        if method not in self._methods:
            raise RuntimeError(f"{self.original_name}.{method}() has no compiled graph: the "
                               f"module was not called during tracing")
        if kwargs:
            args = self._positional(method, args, kwargs)
        return self.executor(method)(args)

    def _positional(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple:
        names = self._arg_names.get(method, [])
        out = list(args)
        for name in names[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self.original_name}.{method}() missing argument {name!r}")
            out.append(kwargs.pop(name))
        if kwargs:
            raise TypeError(f"{self.original_name}.{method}() got unexpected keyword argument(s) "
                            f"{sorted(kwargs)}")
        return tuple(out)

    def save(self, f: Any, _extra_files: dict[str, Any] | None = None) -> None:
        """Write this module to an archive (see ``scriptmod.jit.save``).

            >>> traced.save("block.smod"); again = scriptmod.jit.load("block.smod")
        """
        from scriptmod.jit.archive import save
        save(self, f, _extra_files=_extra_files)

    def executor(self, method: str = "forward") -> Executor:
        ex = self._executors.get(method)
        if ex is None:
            ex = self._executors[method] = Executor(self, method, self._arg_names.get(method, []))
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
        """Python-syntax view of ``graph``."""
        return python_code(self.graph, "forward")

    @property
    def code_with_constants(self) -> tuple[str, dict[str, Any]]:
        return code_with_constants(self.graph, "forward")

    def graph_for(self, *inputs: Any) -> Graph:
        """The optimized graph actually run for ``inputs`` (specializing it if needed)."""
        return self.executor("forward").specialize(inputs).graph

    def _method_graph(self, method: str) -> Graph:
        try:
            return self._methods[method]
        except KeyError:
            raise AttributeError(f"{self.original_name} has no compiled method {method!r} (it was "
                                 f"not called while tracing)") from None


class ScriptFunction:
    """A traced plain function: ``graph``, ``code`` and a compiled ``__call__``."""

    def __init__(self, name: str, graph: Graph, arg_names: list[str]) -> None:
        self.__name__ = self.original_name = name
        self._module = ScriptModule(name, name, {"forward": graph}, {"forward": arg_names})

    @property
    def graph(self) -> Graph:
        return self._module.graph

    inlined_graph = graph

    @property
    def code(self) -> str:
        return self._module.code

    @property
    def code_with_constants(self) -> tuple[str, dict[str, Any]]:
        return self._module.code_with_constants

    def graph_for(self, *inputs: Any) -> Graph:
        return self._module.graph_for(*inputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._module._run("forward", args, kwargs)
