"""Adam and AdamW (decoupled weight decay), with amsgrad and maximize.

    >>> model = nn.Linear(4, 2)
    >>> opt = AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    >>> opt.param_groups[0]["betas"], opt.param_groups[0]["eps"]
    ((0.9, 0.999), 1e-08)
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod.ir import dtypes as D
from scriptmod._creation import tensor, zeros_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative
from scriptmod.tensor import Tensor


class AdamFlags(NamedTuple):
    """What shapes the update (and its kernel); numbers are ``Plan.scalars``."""

    maximize: bool
    weight_decay: bool
    decoupled: bool          # AdamW: p *= 1 - lr * weight_decay instead of g += wd * p
    amsgrad: bool


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

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        amsgrad = bool(group["amsgrad"])
        state = self.state[p]
        if not state:
            state["step"] = tensor(0.0, dtype=D.float32)
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        state["step"].add_(1)
        step = float(state["step"].item())
        lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
        flags = AdamFlags(bool(group["maximize"]), wd != 0,
                          wd != 0 and bool(group["decoupled_weight_decay"]), amsgrad)
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
        scalars = {"weight_decay": wd, "decay": 1 - lr * wd, "one_minus_beta1": 1 - beta1,
                   "beta2": beta2, "one_minus_beta2": 1 - beta2,
                   "bias_correction2_sqrt": math.sqrt(1 - beta2 ** step), "eps": group["eps"],
                   "step_size": lr / (1 - beta1 ** step)}
        return Plan(flags, {n: state[n] for n in names}, scalars)

    @staticmethod
    def _writes(f: AdamFlags) -> dict[str, int]:
        return {"param": 2 if f.decoupled else 1, "exp_avg_sq": 2}   # p.mul_, v.mul_().add_

    @staticmethod
    def _math(f: AdamFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        p, g = t["param"], -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay and f.decoupled:
            p = p * s["decay"]
        elif f.weight_decay:
            g = g + p * s["weight_decay"]
        m = t["exp_avg"] + (g - t["exp_avg"]) * s["one_minus_beta1"]   # lerp, as PyTorch
        v = t["exp_avg_sq"] * s["beta2"] + g * g * s["one_minus_beta2"]
        out = {"exp_avg": m, "exp_avg_sq": v}
        if f.amsgrad:
            v = out["max_exp_avg_sq"] = t["max_exp_avg_sq"].maximum(v)
        denom = v.sqrt() / s["bias_correction2_sqrt"] + s["eps"]
        out["param"] = p - m / denom * s["step_size"]
        return out


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
