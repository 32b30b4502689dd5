"""``scriptmod.fx``: the parts of ``torch.fx`` that model files call at import time.

Model code marks functions that a symbolic tracer should keep as one opaque call::

    scriptmod.fx.wrap("roi_align")          # by name, at a module's top level

    @scriptmod.fx.wrap
    def box_area(boxes): ...

scriptmod's tracer runs Python with real values, so every function traces through and needs
no marking: ``wrap`` only checks its argument as torch does, records the name (see
``wrapped_functions``) and returns its argument unchanged.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar, Union

__all__ = ["wrap", "wrapped_functions"]

_Wrapped = TypeVar("_Wrapped", bound=Union[str, Callable[..., Any]])
_WRAPPED: set[tuple[str, str]] = set()


def wrap(fn_or_name: _Wrapped) -> _Wrapped:
    """Register ``fn_or_name`` (a function, or the name of one in the calling module) as a
    leaf function, as ``torch.fx.wrap`` does; call it at a module's top level."""
    if isinstance(fn_or_name, str):
        name = fn_or_name
    elif callable(fn_or_name):
        name = fn_or_name.__name__
    else:
        raise RuntimeError("Unsupported type for global function! Must be either a callable "
                           "or string name")
    caller = inspect.currentframe()
    caller = caller.f_back if caller is not None else None
    if caller is None or caller.f_code.co_name != "<module>":
        raise NotImplementedError("wrap must be called at the top level of a module")
    _WRAPPED.add((str(caller.f_globals.get("__name__", "")), name))
    return fn_or_name


def wrapped_functions() -> frozenset[tuple[str, str]]:
    """The (module name, function name) pairs registered with ``wrap`` so far."""
    return frozenset(_WRAPPED)
