"""Adamax: Adam with the infinity norm of past gradients in the denominator.

    >>> model = nn.Linear(4, 2)
    >>> opt = Adamax(model.parameters(), lr=2e-3)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['exp_avg', 'exp_inf', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import zeros_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.adam import _check_betas
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class AdamaxFlags(NamedTuple):
    maximize: bool
    weight_decay: bool


class Adamax(Optimizer):
    """m = lerp(m, g, 1 - b1); u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), eps=eps, weight_decay=weight_decay)
        _check_betas(betas)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["exp_avg"] = zeros_like(p)
            state["exp_inf"] = zeros_like(p)
        state["step"].add_(1)
        step = float(state["step"].item())
        (beta1, beta2), wd = group["betas"], group["weight_decay"]
        scalars = {"weight_decay": wd, "one_minus_beta1": 1 - beta1, "beta2": beta2,
                   "eps": group["eps"], "neg_clr": -_scalar(group["lr"]) / (1 - beta1 ** step)}
        return Plan(AdamaxFlags(bool(group["maximize"]), wd != 0),
                    {n: state[n] for n in ("exp_avg", "exp_inf")}, scalars)

    @staticmethod
    def _math(f: AdamaxFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        exp_avg = t["exp_avg"] + (g - t["exp_avg"]) * s["one_minus_beta1"]
        exp_inf = (t["exp_inf"] * s["beta2"]).maximum(g.maximum(-g) + s["eps"])
        return {"exp_avg": exp_avg, "exp_inf": exp_inf,
                "param": t["param"] + exp_avg / exp_inf * s["neg_clr"]}
