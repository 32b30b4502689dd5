"""Derivatives of special functions (rows of ``autograd.derivatives``' table): PyTorch's
formulas (``derivatives.yaml``), written with differentiable ops so that double backward
works where PyTorch's does. The Bessel/Airy functions without a row and the polynomials are
``NONDIFF`` (their results carry no ``grad_fn``, as in PyTorch); ``zeta`` and the incomplete
gamma functions are differentiable in their second argument only, and backward through the
first raises PyTorch's ``NotImplementedError``."""
from __future__ import annotations

import math
from typing import Any

from scriptmod._tensor_ops import where
from scriptmod.autograd.derivative_table import _op, derivative, needs_grad
from scriptmod.tensor import Tensor

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2 * math.pi)


def _refuse(ctx: Any, k: int, what: str) -> None:
    if needs_grad(ctx, k):
        raise NotImplementedError(f"the derivative for '{what}' is not implemented.")


def _not_tiny(x: Tensor) -> tuple[Tensor, Tensor]:
    """``|x| > eps`` and ``x`` with the tiny values replaced by eps (PyTorch's ``i1_backward``:
    the limit 0.5 at zero, without NaN in the branch ``where`` does not pick)."""
    eps = 2.0 ** -52 if x.dtype.itemsize == 8 else 2.0 ** -23
    big = x.abs() > eps
    return big, where(big, x, eps)


derivative("i0", saves=(0,))(lambda ctx, g: (g * _op("i1", ctx.inputs[0]),))
derivative("i0e", saves=(0,), output=True)(
    lambda ctx, g: (g * (_op("i1e", ctx.inputs[0]) - ctx.inputs[0].sign() * ctx.output),))


@derivative("i1", saves=(0,), output=True)
def _i1(ctx: Any, g: Tensor) -> tuple:
    big, safe = _not_tiny(ctx.inputs[0])
    return (g * where(big, _op("i0", safe) - ctx.output / safe, 0.5),)


@derivative("i1e", saves=(0,), output=True)
def _i1e(ctx: Any, g: Tensor) -> tuple:
    big, safe = _not_tiny(ctx.inputs[0])
    return (g * where(big, _op("i0e", safe) - ctx.output * (safe.sign() + 1 / safe), 0.5),)


derivative("erfcx", saves=(0,), output=True)(
    lambda ctx, g: ((2.0 * ctx.inputs[0] * ctx.output - 2.0 / _SQRT_PI) * g,))
derivative("erfinv", output=True)(
    lambda ctx, g: (0.5 * _SQRT_PI * (ctx.output * ctx.output).exp() * g,))
derivative("ndtri", output=True)(
    lambda ctx, g: (g * _SQRT_2PI * (ctx.output * ctx.output / 2).exp(),))
derivative("log_ndtr", saves=(0,), output=True)(
    lambda ctx, g: (g / _SQRT_2PI * (-(ctx.output + ctx.inputs[0] * ctx.inputs[0] / 2)).exp(),))
derivative("entr", saves=(0,))(lambda ctx, g: (g * -(1 + ctx.inputs[0].log()),))
derivative("lgamma", saves=(0,))(lambda ctx, g: (g * _op("digamma", ctx.inputs[0]),))
derivative("digamma", saves=(0,))(lambda ctx, g: (g * _op("polygamma", ctx.inputs[0], n=1),))
derivative("polygamma", saves=(0,))(
    lambda ctx, g: (g * _op("polygamma", ctx.inputs[0], n=ctx.attrs["n"] + 1),))


@derivative("zeta", saves=(0, 1))
def _zeta(ctx: Any, g: Tensor) -> tuple:
    """d/dq zeta(x, q) = -x zeta(x + 1, q)."""
    _refuse(ctx, 0, "zeta")
    x, q = ctx.inputs
    return None, (g * -x * _op("zeta", x + 1.0, q) if isinstance(q, Tensor) else None)


def _incomplete_gamma(name: str, sign: float) -> None:
    @derivative(name, saves=(0, 1))
    def rule(ctx: Any, g: Tensor) -> tuple:
        """d/dx P(a, x) = x^(a-1) e^-x / Gamma(a) (Q's is its negative)."""
        _refuse(ctx, 0, f"{name}: input")
        a, x = ctx.inputs
        if not isinstance(x, Tensor):
            return None, None
        lg = _op("lgamma", a) if isinstance(a, Tensor) else math.lgamma(a)
        return None, g * sign * ((a - 1) * x.log() - x - lg).exp()


_incomplete_gamma("igamma", 1.0)
_incomplete_gamma("igammac", -1.0)
