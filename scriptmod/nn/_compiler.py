"""The tracing compiler that ``Module.compile``, ``trace_graph`` and ``show_graph`` call.

``scriptmod.jit`` builds on ``nn`` (it traces modules), so ``nn`` never imports it: jit
registers itself here when it is imported, and ``import scriptmod`` imports jit, so the slot
is filled in normal use. An empty slot raises a ``RuntimeError`` naming what is missing.

    >>> type(compiler("Module.compile").trace(nn.Linear(4, 2), scriptmod.ones(1, 4))).__name__
    'ScriptModule'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Compiler:
    """What ``nn`` needs from the tracing compiler (``scriptmod.jit`` provides all three).

    ``trace(module, example_inputs, **options)`` returns a ``script_module`` instance;
    ``compile_in_place(module, **options)`` makes ``module.forward`` compiled.
    """

    trace: Callable[..., Any]
    compile_in_place: Callable[..., None]
    script_module: type


_registered: Compiler | None = None


def register_compiler(compiler: Compiler) -> None:
    """Fill the slot (``scriptmod.jit`` does it at import time; a later call replaces it)."""
    global _registered
    if not isinstance(compiler, Compiler):
        raise TypeError(f"register_compiler(compiler): expected a Compiler, "
                        f"got {type(compiler).__name__}")
    _registered = compiler


def compiler(what: str) -> Compiler:
    """The registered compiler; ``what`` (the caller, e.g. ``'show_graph'``) names the
    feature in the ``RuntimeError`` raised when nothing registered one."""
    if _registered is None:
        raise RuntimeError(f"{what} needs scriptmod.jit, which has not registered its "
                           "compiler: import scriptmod.jit first (import scriptmod does)")
    return _registered
