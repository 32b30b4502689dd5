"""NAdam: Adam with Nesterov momentum and a momentum schedule (``momentum_decay``).

    >>> model = nn.Linear(4, 2)
    >>> opt = NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['exp_avg', 'exp_avg_sq', 'mu_product', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import tensor, zeros_like
from scriptmod.ir import dtypes as D
from scriptmod.optim._fused import Plan
from scriptmod.optim.adam import _check_betas
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class NAdamFlags(NamedTuple):
    maximize: bool
    weight_decay: bool
    decoupled: bool          # p *= 1 - lr * weight_decay instead of g += wd * p


class NAdam(Optimizer):
    """mu_t = b1 (1 - 0.96^(t psi) / 2); m, v as Adam; p -= lr (1 - mu_t) / (1 - prod mu) g / d
    + lr mu_{t+1} / (1 - prod mu * mu_{t+1}) m / d, with d = sqrt(v / (1 - b2^t)) + eps."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), eps=eps, weight_decay=weight_decay,
                            momentum_decay=momentum_decay)
        _check_betas(betas)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["mu_product"] = tensor(1.0, dtype=D.float32)
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
        state["step"].add_(1)
        step = float(state["step"].item())
        lr, (beta1, beta2), wd = _scalar(group["lr"]), group["betas"], group["weight_decay"]
        psi = group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * psi))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * psi))
        state["mu_product"].mul_(mu)
        mu_product = float(state["mu_product"].item())
        flags = NAdamFlags(bool(group["maximize"]), wd != 0,
                           wd != 0 and bool(group["decoupled_weight_decay"]))
        scalars = {"weight_decay": wd, "decay": 1 - lr * wd, "one_minus_beta1": 1 - beta1,
                   "beta2": beta2, "one_minus_beta2": 1 - beta2,
                   "bias_correction2": 1 - beta2 ** step, "eps": group["eps"],
                   "grad_step": -lr * (1.0 - mu) / (1.0 - mu_product),
                   "avg_step": -lr * mu_next / (1.0 - mu_product * mu_next)}
        return Plan(flags, {n: state[n] for n in ("exp_avg", "exp_avg_sq")}, scalars)

    @staticmethod
    def _writes(f: NAdamFlags) -> dict[str, int]:
        return {"param": 3 if f.decoupled else 2, "exp_avg_sq": 2}

    @staticmethod
    def _math(f: NAdamFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        p, g = t["param"], -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay and f.decoupled:
            p = p * s["decay"]
        elif f.weight_decay:
            g = g + p * s["weight_decay"]
        m = t["exp_avg"] + (g - t["exp_avg"]) * s["one_minus_beta1"]
        v = t["exp_avg_sq"] * s["beta2"] + g * g * s["one_minus_beta2"]
        denom = (v / s["bias_correction2"]).sqrt() + s["eps"]
        p = p + g / denom * s["grad_step"]
        return {"exp_avg": m, "exp_avg_sq": v, "param": p + m / denom * s["avg_step"]}
