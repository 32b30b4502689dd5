"""Derivatives of elementwise math beyond the core: trigonometric/hyperbolic, log10,
copysign, fmod, hypot and frexp (rows of ``autograd.derivatives``' table). Each is written
with differentiable ops, so double backward works; the formulas are PyTorch's
(``derivatives.yaml``). The rest of the family is decompositions, differentiated through
their parts."""
from __future__ import annotations

import math
from typing import Any

from scriptmod._tensor_ops import where
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


def _x(ctx: Any) -> Tensor:
    return ctx.inputs[0]


derivative("tan", output=True, holomorphic=True)(lambda ctx, g: (g * (1 + ctx.output * ctx.output),))
derivative("asin", saves=(0,), holomorphic=True)(lambda ctx, g: (g * (1 - _x(ctx) * _x(ctx)).rsqrt(),))
derivative("acos", saves=(0,), holomorphic=True)(lambda ctx, g: (-g * (1 - _x(ctx) * _x(ctx)).rsqrt(),))
derivative("atan", saves=(0,), holomorphic=True)(lambda ctx, g: (g / (1 + _x(ctx) * _x(ctx)),))
derivative("sinh", saves=(0,), holomorphic=True)(lambda ctx, g: (g * _x(ctx).cosh(),))
derivative("cosh", saves=(0,), holomorphic=True)(lambda ctx, g: (g * _x(ctx).sinh(),))
derivative("asinh", saves=(0,), holomorphic=True)(lambda ctx, g: (g * (_x(ctx) * _x(ctx) + 1).rsqrt(),))
derivative("acosh", saves=(0,), holomorphic=True)(lambda ctx, g: (g * (_x(ctx) * _x(ctx) - 1).rsqrt(),))
derivative("atanh", saves=(0,), holomorphic=True)(lambda ctx, g: (g / (1 - _x(ctx) * _x(ctx)),))
derivative("log10", saves=(0,), holomorphic=True)(lambda ctx, g: (g / (_x(ctx) * math.log(10.0)),))


@derivative("copysign", saves=(0,), output=True)
def _copysign(ctx: Any, g: Tensor) -> tuple:
    """+-g where the sign was kept or flipped, 0 at self == 0 (PyTorch's); 0 for ``other``
    (the result is piecewise constant in it)."""
    x = _x(ctx)
    gx = where(x == 0, 0.0, g * (ctx.output / x)) if isinstance(x, Tensor) else None
    return gx, g * 0


@derivative("fmod", saves=(0, 1))
def _fmod(ctx: Any, g: Tensor) -> tuple:
    """d/da = 1, d/db = -trunc(a / b)."""
    a, b = ctx.inputs
    ga = g if isinstance(a, Tensor) else None
    return ga, (-g * _op("div", a, b).trunc() if isinstance(b, Tensor) else None)


@derivative("hypot", saves=(0, 1), output=True)
def _hypot(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    scale = g / ctx.output
    return scale * a, scale * b


# a step of one ulp: PyTorch's gradient is 1 for self and 0 for other
derivative("nextafter")(lambda ctx, g: (g, g * 0))


@derivative("frexp", output=True)
def _frexp(ctx: Any, gs: list) -> tuple:
    """mantissa = x * 2**-exponent with the exponent piecewise constant."""
    g = gs[0]
    return (None if g is None else g / ctx.outputs[1].exp2(),)
