"""Adadelta: a per-coordinate step from running averages of squared gradients and updates.

    >>> model = nn.Linear(4, 2)
    >>> opt = Adadelta(model.parameters())
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['acc_delta', 'square_avg', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import zeros_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class AdadeltaFlags(NamedTuple):
    maximize: bool
    weight_decay: bool


class Adadelta(Optimizer):
    """v = rho v + (1 - rho) g^2; delta = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho u + (1 - rho) delta^2; p -= lr * delta."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1.0, rho: float = 0.9,
                 eps: float = 1e-6, weight_decay: float = 0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, capturable=capturable, foreach=foreach,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["square_avg"] = zeros_like(p)
            state["acc_delta"] = zeros_like(p)
        state["step"].add_(1)
        rho, wd = group["rho"], group["weight_decay"]
        scalars = {"weight_decay": wd, "rho": rho, "one_minus_rho": 1 - rho,
                   "eps": group["eps"], "neg_lr": -_scalar(group["lr"])}
        flags = AdadeltaFlags(bool(group["maximize"]), wd != 0)
        return Plan(flags, {n: state[n] for n in ("square_avg", "acc_delta")}, scalars)

    @staticmethod
    def _writes(f: AdadeltaFlags) -> dict[str, int]:
        return {"square_avg": 2, "acc_delta": 2}     # mul_().addcmul_()

    @staticmethod
    def _math(f: AdadeltaFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        square_avg = t["square_avg"] * s["rho"] + g * g * s["one_minus_rho"]
        std = (square_avg + s["eps"]).sqrt()
        delta = (t["acc_delta"] + s["eps"]).sqrt() / std * g
        acc_delta = t["acc_delta"] * s["rho"] + delta * delta * s["one_minus_rho"]
        return {"square_avg": square_avg, "acc_delta": acc_delta,
                "param": t["param"] + delta * s["neg_lr"]}
