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
                                          ScriptFunction, ScriptMethod, ScriptModule)
from scriptmod.jit._trace import TracingCheckError, trace, trace_module  # noqa: F401
from scriptmod.jit._tracer import TracerWarning, TracingError  # noqa: F401
from scriptmod.ir.errors import ArgumentError, TraceGuardError  # noqa: F401
from scriptmod.jit.archive import ArchiveError, load, save  # noqa: F401
from scriptmod.jit._fuser import fuser, kernels_for  # noqa: F401

__all__ = ["trace", "trace_module", "ScriptModule", "RecursiveScriptModule", "ScriptMethod",
           "ScriptFunction", "TracerWarning",
           "TracingError", "TraceGuardError", "ArgumentError", "PicklingError", "TracingCheckError", "save", "load", "ArchiveError", "fuser",
           "kernels_for"]
