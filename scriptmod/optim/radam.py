"""RAdam: Adam whose adaptive step is switched on, and rectified, once the variance of the
adaptive learning rate is tractable (rho_t > 5).

    >>> model = nn.Linear(4, 2)
    >>> opt = RAdam(model.parameters(), lr=1e-3, weight_decay=0.1, decoupled_weight_decay=True)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['exp_avg', 'exp_avg_sq', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import zeros_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.adam import _check_betas
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class RAdamFlags(NamedTuple):
    maximize: bool
    weight_decay: bool
    decoupled: bool
    rectified: bool          # rho_t > 5: the adaptive, rectified step; else momentum SGD


class RAdam(Optimizer):
    """m, v as Adam; rho_t = rho_inf - 2 t b2^t / (1 - b2^t); p -= lr m / (1 - b1^t) *
    (r_t sqrt(1 - b2^t) / (sqrt(v) + eps) if rho_t > 5 else 1)."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), eps=eps, weight_decay=weight_decay)
        _check_betas(betas)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
        state["step"].add_(1)
        step = float(state["step"].item())
        lr, (beta1, beta2), wd = _scalar(group["lr"]), group["betas"], group["weight_decay"]
        bias_correction2 = 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rect = 0.0
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf /
                    ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        flags = RAdamFlags(bool(group["maximize"]), wd != 0,
                           wd != 0 and bool(group["decoupled_weight_decay"]), rho_t > 5.0)
        scalars = {"weight_decay": wd, "decay": 1 - lr * wd, "one_minus_beta1": 1 - beta1,
                   "beta2": beta2, "one_minus_beta2": 1 - beta2,
                   "bias_correction1": 1 - beta1 ** step,
                   "bias_correction2_sqrt": bias_correction2 ** 0.5, "eps": group["eps"],
                   "lr": lr, "rect": rect}
        return Plan(flags, {n: state[n] for n in ("exp_avg", "exp_avg_sq")}, scalars)

    @staticmethod
    def _writes(f: RAdamFlags) -> dict[str, int]:
        return {"param": 2 if f.decoupled else 1, "exp_avg_sq": 2}

    @staticmethod
    def _math(f: RAdamFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        p, g = t["param"], -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay and f.decoupled:
            p = p * s["decay"]
        elif f.weight_decay:
            g = g + p * s["weight_decay"]
        m = t["exp_avg"] + (g - t["exp_avg"]) * s["one_minus_beta1"]
        v = t["exp_avg_sq"] * s["beta2"] + g * g * s["one_minus_beta2"]
        update = m / s["bias_correction1"] * s["lr"]
        if f.rectified:
            update = update * (s["bias_correction2_sqrt"] / (v.sqrt() + s["eps"])) * s["rect"]
        return {"exp_avg": m, "exp_avg_sq": v, "param": p - update}
