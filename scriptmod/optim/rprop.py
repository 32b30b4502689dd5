"""Rprop: per-coordinate step sizes that grow while the gradient keeps its sign and shrink
when it flips; only the gradient's sign moves the parameter.

    >>> model = nn.Linear(4, 2)
    >>> opt = Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50))
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['prev', 'step', 'step_size']
"""
from __future__ import annotations

from typing import Any, Iterable

from scriptmod._creation import full_like, zeros_like
from scriptmod.autograd.grad_mode import is_grad_enabled
from scriptmod.optim.optimizer import (Optimizer, _check_non_negative, _new_step, _real_view,
                                       _scalar)
from scriptmod.tensor import Tensor


class Rprop(Optimizer):
    """s = g * prev; step_size *= etaplus (s > 0), etaminus (s < 0) or 1, clamped to
    step_sizes; g = 0 where s < 0; p -= sign(g) * step_size; prev = g."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-2,
                 etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr))
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        grad = -p.grad if group["maximize"] else p.grad
        state = self.state[p]
        if not state:
            lr = _scalar(group["lr"])
            state["step"] = _new_step()
            state["prev"] = zeros_like(p)
            state["step_size"] = full_like(grad, complex(lr, lr) if p.is_complex() else lr)
        state["step"].add_(1)
        targets = [p, state["prev"], state["step_size"]]
        if p.is_complex():          # as pairs of reals, as PyTorch's view_as_real
            targets, grad = [_real_view(t) for t in targets], _real_view(grad)
        param, prev, step_size = targets
        if is_grad_enabled():       # differentiable: the graph keeps what it read
            prev, step_size = prev.clone(), step_size.clone()
        (etaminus, etaplus), (step_min, step_max) = group["etas"], group["step_sizes"]
        sign = (grad * prev).sign()
        flipped = sign.lt(0)
        factor = sign.masked_fill(sign.gt(0), etaplus).masked_fill(flipped, etaminus) \
            .masked_fill(sign.eq(0), 1.0)
        step_size = (step_size * factor).clamp(step_min, step_max)
        grad = grad.masked_fill(flipped, 0.0)
        update = param - grad.sign() * step_size
        for target, value in zip(targets, (update, grad, step_size)):
            target.copy_(value)
        if p.is_complex():
            for t in (p, state["prev"], state["step_size"]):
                t._vc[0] += 1
