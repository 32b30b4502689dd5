"""RMSprop, with ``centered`` (subtract the squared mean gradient) and ``momentum``.

    >>> model = nn.Linear(4, 2)
    >>> opt = RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['grad_avg', 'momentum_buffer', 'square_avg', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import zeros_like
from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class RMSpropFlags(NamedTuple):
    maximize: bool
    weight_decay: bool
    centered: bool
    momentum: bool


class RMSprop(Optimizer):
    """v = alpha v + (1 - alpha) g^2; d = sqrt(v - gbar^2 if centered else v) + eps;
    buf = mu buf + g / d, p -= lr buf (momentum), else p -= lr g / d."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0, momentum: float = 0,
                 centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), eps=eps, momentum=momentum,
                            weight_decay=weight_decay, alpha=alpha)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        momentum, centered = group["momentum"] > 0, bool(group["centered"])
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["square_avg"] = zeros_like(p)
            if momentum:
                state["momentum_buffer"] = zeros_like(p)
            if centered:
                state["grad_avg"] = zeros_like(p)
        state["step"].add_(1)
        alpha, wd = group["alpha"], group["weight_decay"]
        names = ("square_avg",) + (("grad_avg",) if centered else ()) + \
            (("momentum_buffer",) if momentum else ())
        scalars = {"weight_decay": wd, "alpha": alpha, "one_minus_alpha": 1 - alpha,
                   "eps": group["eps"], "momentum": group["momentum"],
                   "neg_lr": -_scalar(group["lr"])}
        flags = RMSpropFlags(bool(group["maximize"]), wd != 0, centered, momentum)
        return Plan(flags, {n: state[n] for n in names}, scalars)

    @staticmethod
    def _writes(f: RMSpropFlags) -> dict[str, int]:
        return {"square_avg": 2, "momentum_buffer": 2}

    @staticmethod
    def _math(f: RMSpropFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        out = {"square_avg": t["square_avg"] * s["alpha"] + g * g * s["one_minus_alpha"]}
        if f.centered:
            grad_avg = out["grad_avg"] = \
                t["grad_avg"] + (g - t["grad_avg"]) * s["one_minus_alpha"]
            avg = (out["square_avg"] - grad_avg * grad_avg).sqrt() + s["eps"]
        else:
            avg = out["square_avg"].sqrt() + s["eps"]
        if f.momentum:
            buf = out["momentum_buffer"] = t["momentum_buffer"] * s["momentum"] + g / avg
            out["param"] = t["param"] + buf * s["neg_lr"]
        else:
            out["param"] = t["param"] + g / avg * s["neg_lr"]
        return out
