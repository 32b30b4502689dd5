"""``script_if_tracing``: a function that runs as plain Python, except while being traced,
when it is scripted first so that its control flow (loops over sizes, data-dependent
branches) stays in the traced graph instead of being baked into one path.

    >>> @scriptmod.jit.script_if_tracing
    ... def halve_until_small(x: scriptmod.Tensor) -> scriptmod.Tensor:
    ...     while bool(x.abs().max() > 1):
    ...         x = x / 2
    ...     return x
    >>> traced = scriptmod.jit.trace(lambda x: halve_until_small(x) * 1, scriptmod.tensor([8.0]))
    >>> traced(scriptmod.tensor([64.0]))      # the loop ran 6 times, not the traced 3
    tensor([1.])
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from scriptmod.jit.frontend import is_tracing, script

__all__ = ["script_if_tracing", "_script_if_tracing"]

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def script_if_tracing(fn: _Fn) -> _Fn:
    """Decorate ``fn`` (torch.jit.script_if_tracing): Python as is; scripted, once and on
    first use, when called inside ``jit.trace``."""
    compiled: list[Any] = []

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_tracing():
            return fn(*args, **kwargs)
        if not compiled:
            compiled.append(script(fn))
        return compiled[0](*args, **kwargs)

    wrapper.__original_fn = fn  # type: ignore[attr-defined]
    wrapper.__script_if_tracing_wrapper = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


_script_if_tracing = script_if_tracing   # the name torchvision and older models import
