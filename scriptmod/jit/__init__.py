"""``scriptmod.jit``: trace modules into IR graphs and run them compiled.

    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    >>> x = scriptmod.ones(3, 4)
    >>> traced = scriptmod.jit.trace(model, x)
    >>> print(traced.code)
    def forward(self, input: Tensor) -> Tensor:
        ...
    >>> traced(x).shape
    scriptmod.Size([3, 2])
"""
from scriptmod.jit._script_module import (PicklingError, RecursiveScriptModule,  # noqa: F401
                                          ScriptFunction, ScriptMethod, ScriptModule, explain)
from scriptmod.jit._trace import TracingCheckError, trace, trace_module  # noqa: F401
from scriptmod.jit._tracer import TracerWarning, TracingError  # noqa: F401
from scriptmod.ir.errors import ArgumentError, TraceGuardError  # noqa: F401
from scriptmod.jit.archive import ArchiveError, load, save  # noqa: F401
from scriptmod.jit._fuser import fuser, kernels_for  # noqa: F401
from scriptmod.jit._freeze import (freeze, optimize_for_inference,  # noqa: F401
                                   run_frozen_optimizations)
from scriptmod.jit._code_namespace import code_namespace  # noqa: F401
from scriptmod.jit.frontend import (Final, FrontendError, annotate, export, ignore,  # noqa: F401
                                    is_scripting, is_tracing, jit_isinstance as isinstance, script,
                                    unused)
from scriptmod.jit._compile_inplace import compile_in_place as _compile_in_place
from scriptmod.jit._script_if_tracing import _script_if_tracing, script_if_tracing  # noqa: F401
from scriptmod.nn._compiler import Compiler as _Compiler, register_compiler as _register

# nn never imports jit (jit builds on nn): nn's Module.compile, trace_graph and show_graph
# reach the compiler through this slot.
_register(_Compiler(trace=trace, compile_in_place=_compile_in_place, script_module=ScriptModule))

__all__ = ["trace", "trace_module", "ScriptModule", "RecursiveScriptModule", "ScriptMethod",
           "ScriptFunction", "TracerWarning",
           "TracingError", "TraceGuardError", "ArgumentError", "PicklingError", "TracingCheckError", "save", "load", "ArchiveError", "fuser",
           "kernels_for", "script", "export", "ignore", "unused", "annotate", "Final",
           "is_scripting", "is_tracing", "FrontendError", "freeze", "optimize_for_inference",
           "run_frozen_optimizations", "code_namespace", "explain"]
__all__ += ["script_if_tracing", "isinstance"]
