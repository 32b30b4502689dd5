"""Adagrad: steps scaled by the root of each coordinate's summed squared gradients.

    >>> model = nn.Linear(4, 2)
    >>> opt = Adagrad(model.parameters(), lr=0.1, initial_accumulator_value=0.1)
    >>> opt.state[model.weight]["sum"][0, 0].item()       # made at construction, as PyTorch
    0.1...
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import full_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class AdagradFlags(NamedTuple):
    maximize: bool
    weight_decay: bool


class Adagrad(Optimizer):
    """clr = lr / (1 + (t - 1) lr_decay); s += g^2; p -= clr * g / (sqrt(s) + eps)."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        _check_non_negative(lr=_scalar(lr), lr_decay=lr_decay, weight_decay=weight_decay,
                            initial_accumulator_value=initial_accumulator_value, eps=eps)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:             # PyTorch makes the state up front
            for p in group["params"]:
                self.state[p]["step"] = _new_step()
                self.state[p]["sum"] = full_like(p, group["initial_accumulator_value"])

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        state = self.state[p]
        if not state:                               # a group added after construction
            state["step"] = _new_step()
            state["sum"] = full_like(p, group["initial_accumulator_value"])
        state["step"].add_(1)
        step = float(state["step"].item())
        wd = group["weight_decay"]
        clr = _scalar(group["lr"]) / (1 + (step - 1) * group["lr_decay"])
        scalars = {"weight_decay": wd, "eps": group["eps"], "neg_clr": -clr}
        return Plan(AdagradFlags(bool(group["maximize"]), wd != 0), {"sum": state["sum"]},
                    scalars)

    @staticmethod
    def _math(f: AdagradFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        total = t["sum"] + g * g
        std = total.sqrt() + s["eps"]
        return {"sum": total, "param": t["param"] + g / std * s["neg_clr"]}
