"""Adam and AdamW (decoupled weight decay), with amsgrad and maximize.

    >>> model = nn.Linear(4, 2)
    >>> opt = AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    >>> opt.param_groups[0]["betas"], opt.param_groups[0]["eps"]
    ((0.9, 0.999), 1e-08)
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from scriptmod.ir import dtypes as D
from scriptmod._creation import tensor, zeros_like
from scriptmod.optim.optimizer import Optimizer, _check_non_negative
from scriptmod.tensor import Tensor


def _check_betas(betas: tuple[float, float]) -> None:
    for i, b in enumerate(betas):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b}")


class Adam(Optimizer):
    """m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False) -> None:
        _check_non_negative(lr=lr, eps=eps, weight_decay=weight_decay)
        _check_betas(betas)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _state_for(self, p: Tensor, amsgrad: bool) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = tensor(0.0, dtype=D.float32)
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        return state

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        if p.is_complex():
            raise NotImplementedError("Adam: complex parameters are not supported")
        grad = -p.grad if group["maximize"] else p.grad
        lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
        state = self._state_for(p, group["amsgrad"])
        state["step"].add_(1)
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p.mul_(1 - lr * wd)
            else:
                grad = grad + p * wd
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.add_((grad - m) * (1 - beta1))                 # lerp, as PyTorch
        v.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        step = float(state["step"].item())
        if group["amsgrad"]:
            state["max_exp_avg_sq"].copy_(state["max_exp_avg_sq"].maximum(v))
            v = state["max_exp_avg_sq"]
        denom = v.sqrt() / math.sqrt(1 - beta2 ** step) + group["eps"]
        p.sub_(m / denom * (lr / (1 - beta1 ** step)))


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
