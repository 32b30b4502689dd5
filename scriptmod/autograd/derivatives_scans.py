"""Derivatives of scans, statistics and random draws: cumprod/cummax/logcumsumexp,
quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal (rows of
``autograd.derivatives``' table).

Every rule is written with differentiable ops (scans, flips, ``where``), so double backward
works; the statistics are decompositions and need no rows. The draws (``multinomial``,
``poisson``) have no derivative."""
from __future__ import annotations

from typing import Any

import ml_dtypes

from scriptmod.runtime.arrays import NP_DTYPE

from scriptmod._creation import arange
from scriptmod._tensor_ops import where
from scriptmod.autograd import grad_mode
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


def _conj(t: Tensor) -> Tensor:
    return t.conj() if t.is_complex() else t


def _reversed_cumsum(t: Tensor, d: int) -> Tensor:
    """``out[k] = sum(t[k:])`` along ``d``."""
    return t.flip(d).cumsum(d).flip(d)


@derivative("cumprod", saves=(0,), output=True)
def _cumprod(ctx: Any, g: Tensor) -> tuple:
    """PyTorch's ``cumprod_backward``, zeros included: before the first zero of a row the
    gradient is ``sum_{j>=k} g[j] y[j] / x[k]``; at the first zero it is the reversed sum of
    ``g`` times the running product with that zero read as 1; after it, 0."""
    x, y = ctx.inputs[0], ctx.output
    if x.ndim == 0:
        return (g,)
    d = ctx.attrs["dim"] % x.ndim
    x = x.to(g.dtype)
    if grad_mode.is_grad_enabled():        # a gradient to differentiate again
        return (_cumprod_back_all_orders(x, g, d),)
    zero = x == 0
    seen = zero.cumsum(d)
    before, first = seen == 0, zero & (seen == 1)
    grad_before = _reversed_cumsum(g * _conj(y.to(g.dtype)), d) / _conj(where(before, x, 1))
    with_one = where(first, 1, x).cumprod(d)
    grad_first = _reversed_cumsum(g * _conj(with_one), d)
    return (where(before, grad_before, where(first, grad_first, 0)),)


def _cumprod_back_all_orders(x: Tensor, g: Tensor, d: int) -> Tensor:
    """``sum_{j>=k} g[j] prod_{i<=j, i!=k} x[i]`` as one product per (k, j) pair: quadratic
    in the length, but a smooth function of every ``x[i]`` (zeros included), so its own
    derivative is right; PyTorch also switches to such a form for double backward."""
    xs, gs = x.movedim(d, -1), g.movedim(d, -1)
    n = xs.shape[-1]
    pos = arange(n, device=x.device)
    rows = xs.unsqueeze(-2).expand(list(xs.shape[:-1]) + [n, n])     # [..., k, i] = x[i]
    without_k = where(pos.unsqueeze(1) == pos, 1, rows).cumprod(-1)  # x[k] read as 1
    later = pos.unsqueeze(0) >= pos.unsqueeze(1)                      # j >= k
    terms = where(later, _conj(without_k) * gs.unsqueeze(-2), 0)
    return terms.sum(-1).movedim(-1, d)


def _scan_select_back(ctx: Any, gs: list) -> tuple:
    """cummax/cummin: each output's gradient goes to the element it was taken from."""
    from scriptmod.autograd.derivatives import _scatter_add   # the core table imports us
    shape = ctx.input_meta[0][0]
    if len(shape) == 0:
        return (gs[0],)
    return (_scatter_add(shape, gs[0], ctx.outputs[1], ctx.attrs["dim"]),)


derivative("cummax", output=True)(_scan_select_back)
derivative("cummin", output=True)(_scan_select_back)


@derivative("mode", output=True)
def _mode(ctx: Any, gs: list) -> tuple:
    """The gradient goes to the index ``mode`` returned, as max's does."""
    from scriptmod.autograd.derivatives import _select_back   # the core table imports us
    return _select_back(ctx, gs)


@derivative("logcumsumexp", saves=(0,), output=True)
def _logcumsumexp(ctx: Any, g: Tensor) -> tuple:
    """PyTorch's ``logcumsumexp_backward``: ``sum_{j>=k} g[j] exp(x[k] - y[j])``, the sum
    taken as a reversed logcumsumexp of log|g| - y, separately over positive and negative
    ``g`` for real inputs (log of a negative number has no real value)."""
    x, y = ctx.inputs[0], ctx.output
    if x.ndim == 0:
        return (g,)
    d = ctx.attrs["dim"] % x.ndim

    def reversed_lcse(t: Tensor) -> Tensor:
        return _op("logcumsumexp", t.flip(d), dim=d).flip(d)

    if g.is_complex():
        return (_conj((reversed_lcse(_conj(g).log() - y) + x).exp()),)
    lowest = _finfo_min(g)
    log_abs = g.abs().log()
    positive = where(g > 0, log_abs, lowest)
    negative = where(g < 0, log_abs, lowest)
    return ((reversed_lcse(positive - y) + x).exp() - (reversed_lcse(negative - y) + x).exp(),)


def _finfo_min(t: Tensor) -> float:
    """The lowest finite value of ``t``'s dtype (log of 0 clamped there, as in PyTorch)."""
    return float(ml_dtypes.finfo(NP_DTYPE[t.dtype]).min)
