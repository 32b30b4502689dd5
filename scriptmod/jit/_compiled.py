"""How a specialization is compiled: the passes run after the generic optimizations and the
interpreter that executes the result without autograd. The fusion issue's runtime plugs in
here (``fuse_elementwise`` plus native kernels for fusion groups)."""
from __future__ import annotations

from typing import Any

from runtime.interpreter import Interpreter


def compile_passes() -> list[Any]:
    """Passes run on each specialization after fold/canonicalize/CSE/DCE."""
    return []


def array_interpreter(graph: Any) -> Interpreter:
    """The interpreter that runs a specialized graph on raw arrays."""
    from scriptmod.jit._executor import ArrayInterpreter
    return ArrayInterpreter(graph)
