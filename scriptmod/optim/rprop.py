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
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _real_only, \
    _scalar
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
        _real_only("Rprop", p)
        grad = -p.grad if group["maximize"] else p.grad
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["prev"] = zeros_like(p)
            state["step_size"] = full_like(grad, _scalar(group["lr"]))
        state["step"].add_(1)
        (etaminus, etaplus), (step_min, step_max) = group["etas"], group["step_sizes"]
        prev, step_size = state["prev"], state["step_size"]
        if is_grad_enabled():       # differentiable: the graph keeps what it read
            prev, step_size = prev.clone(), step_size.clone()
        sign = (grad * prev).sign()
        flipped = sign.lt(0)
        factor = sign.masked_fill(sign.gt(0), etaplus).masked_fill(flipped, etaminus) \
            .masked_fill(sign.eq(0), 1.0)
        step_size = (step_size * factor).clamp(step_min, step_max)
        grad = grad.masked_fill(flipped, 0.0)
        update = p - grad.sign() * step_size
        state["step_size"].copy_(step_size)
        p.copy_(update)
        state["prev"].copy_(grad)
