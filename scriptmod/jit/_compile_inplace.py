"""``nn.Module.compile()``: compile a module's forward in place.

The first call traces the module with that call's inputs; later calls run the compiled
graphs with the *original* module as ``self``, so ``.eval()``, ``load_state_dict`` and
optimizer steps on it take effect. A call whose inputs the trace cannot serve (another
rank, another argument structure) re-traces.

    >>> model = nn.Linear(4, 2)
    >>> model.compile(); model(scriptmod.ones(3, 4)).shape     # compiled from here on
    scriptmod.Size([3, 2])
    >>> type(model).__name__                                   # still the same module
    'Linear'
"""
from __future__ import annotations

from typing import Any

from scriptmod.jit._executor import Executor


class _CompiledForward:
    """Stands in for ``module.forward`` (an instance attribute) once ``compile()`` ran."""

    def __init__(self, module: Any, options: dict[str, Any]) -> None:
        self.module = module
        self.options = options
        self.executor: Executor | None = None
        self.traces = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return self._eager(*args, **kwargs)
        if self.executor is None:
            self._trace(args)
        try:
            return self.executor(args)  # type: ignore[misc]
        except (TypeError, ValueError) as e:
            if "argument" not in str(e):
                raise
            self._trace(args)
            return self.executor(args)  # type: ignore[misc]

    def _eager(self, *args: Any, **kwargs: Any) -> Any:
        return type(self.module).forward(self.module, *args, **kwargs)

    def _trace(self, args: tuple) -> None:
        from scriptmod.jit._trace import trace
        m = self.module
        del m.__dict__["forward"]           # trace the real forward, not this wrapper
        try:
            sm = trace(m, args, **self.options)
        finally:
            m.__dict__["forward"] = self
        self.executor = Executor(sm, "forward", sm._arg_names.get("forward", []), runtime_self=m)
        self.traces += 1


def compile_in_place(module: Any, **options: Any) -> None:
    """Make ``module.forward`` compiled (``options`` go to ``jit.trace``)."""
    options.setdefault("check_trace", False)
    module.__dict__["forward"] = _CompiledForward(module, options)
