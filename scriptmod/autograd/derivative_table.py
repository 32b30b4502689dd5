"""The derivative table: ``DERIVATIVES[op] = Derivative(rule, saves, saves_output)``, filled by
``autograd.derivatives`` and its family modules (``derivatives_conv``, ``derivatives_pooling``,
...), each of which imports ``derivative`` and ``_op`` from here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from scriptmod._dispatch import dispatch
from scriptmod.tensor import Tensor


@dataclass(frozen=True)
class Derivative:
    rule: Callable[..., Any]
    saves: tuple[int, ...] | str      # input positions to keep, or "all"
    saves_output: bool


DERIVATIVES: dict[str, Derivative] = {}


def derivative(name: str, saves: tuple[int, ...] | str = (), output: bool = False) -> Callable:
    def deco(fn: Callable) -> Callable:
        if name in DERIVATIVES:
            raise ValueError(f"derivative of {name!r} declared twice")
        DERIVATIVES[name] = Derivative(fn, saves, output)
        return fn
    return deco


def _op(name: str, *inputs: Any, **attrs: Any) -> Tensor:
    """Op ``name`` through the dispatcher (a derivative rule's call of a registry op)."""
    return dispatch(name, inputs, attrs)
