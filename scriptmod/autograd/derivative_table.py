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


def derivative(name: str, saves: tuple[int, ...] | str = (), output: bool = False,
               holomorphic: bool = False) -> Callable:
    """Declare op ``name``'s derivative ``rule(ctx, grad) -> input grads``.

    ``holomorphic``: the rule is written as for real inputs, ``grad * f'(z)``; for a complex
    gradient the table applies PyTorch's convention (the conjugate Wirtinger derivative,
    ``grad * conj(f'(z))``) as ``conj(rule(conj(grad)))``, so a rule is written once for
    both. Non-holomorphic ops (abs, angle, real/imag, ...) write their complex case out."""
    def deco(fn: Callable) -> Callable:
        if name in DERIVATIVES:
            raise ValueError(f"derivative of {name!r} declared twice")
        DERIVATIVES[name] = Derivative(_conjugated(fn) if holomorphic else fn, saves, output)
        return fn
    return deco


def _conjugated(rule: Callable) -> Callable:
    def conjugated(ctx: Any, g: Any) -> Any:
        if not (isinstance(g, Tensor) and g.dtype.is_complex):
            return rule(ctx, g)
        return tuple(r.conj() if isinstance(r, Tensor) and r.dtype.is_complex else r
                     for r in rule(ctx, g.conj()))
    conjugated.__name__ = getattr(rule, "__name__", "rule")
    conjugated.__doc__ = rule.__doc__
    return conjugated


def needs_grad(ctx: Any, k: int) -> bool:
    """Whether input ``k`` of the node takes a gradient, so that a rule can skip an expensive
    one nobody reads (a network's first convolution has no input gradient): eager
    autograd's node has an edge for it; the compiled backward's rule context
    (``jit._autodiff``) knows the forward node's inputs that need one. (A
    ``needs_input_grad`` on both contexts, as PyTorch's ``ctx`` has, would replace this.)"""
    node = getattr(ctx, "node", None)
    if node is not None:
        return node.next_functions[k][0] is not None
    return ctx._node.inputs[k] in ctx._bw.needs


def _op(name: str, *inputs: Any, **attrs: Any) -> Tensor:
    """Op ``name`` through the dispatcher (a derivative rule's call of a registry op)."""
    return dispatch(name, inputs, attrs)
