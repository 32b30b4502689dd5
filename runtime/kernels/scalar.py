"""Reference kernels of the integer size ops and ``guard`` (``ir.ops.scalar``)."""
from __future__ import annotations

from typing import Any, Callable

from scriptmod.ir.errors import guard_failure
from scriptmod.ir.ops.scalar import INT_COMPARE, INT_FUNCS
from . import kernel


def _int_kernel(fn: Callable[..., Any], to_bool: bool) -> Callable[..., Any]:
    if to_bool:
        return lambda xp, a, b: bool(fn(int(a), int(b)))
    return lambda xp, *args: fn(*(int(a) for a in args))


for _name, _fn in INT_FUNCS.items():
    kernel(_name)(_int_kernel(_fn, _name in INT_COMPARE))


@kernel("guard")
def _guard(xp: Any, cond: bool, what: str, where: str = "") -> bool:
    if not cond:
        raise guard_failure(what, where)
    return True
