"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    >>> model = nn.Linear(4, 2)
    >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['momentum_buffer']
"""
from __future__ import annotations

from typing import Any, Iterable

from scriptmod.optim.optimizer import Optimizer, _check_non_negative
from scriptmod.tensor import Tensor


class SGD(Optimizer):
    """PyTorch's update: g += wd * p; buf = mu * buf + (1 - dampening) * g (buf = g at the
    first step); g = g + mu * buf (Nesterov) or buf; p -= lr * g."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        _check_non_negative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        grad = -p.grad if group["maximize"] else p.grad
        if group["weight_decay"] != 0:
            grad = grad + p * group["weight_decay"]
        mu = group["momentum"]
        if mu != 0:
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.detach().clone()
            else:
                buf.mul_(mu).add_(grad, alpha=1 - group["dampening"])
            grad = grad + buf * mu if group["nesterov"] else buf
        p.add_(grad, alpha=-group["lr"])
