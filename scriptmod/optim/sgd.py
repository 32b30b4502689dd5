"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    >>> model = nn.Linear(4, 2)
    >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['momentum_buffer']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative
from scriptmod.tensor import Tensor


class SGDFlags(NamedTuple):
    """What shapes the update (and its kernel); numbers are ``Plan.scalars``."""

    maximize: bool
    weight_decay: bool
    momentum: bool
    first: bool              # no momentum buffer yet: it starts as the gradient
    damped: bool
    nesterov: bool


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

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        mu = group["momentum"]
        buf = self.state[p].get("momentum_buffer") if mu != 0 else None
        flags = SGDFlags(bool(group["maximize"]), group["weight_decay"] != 0, mu != 0,
                         mu != 0 and buf is None, mu != 0 and group["dampening"] != 0,
                         mu != 0 and bool(group["nesterov"]))
        scalars = {"weight_decay": group["weight_decay"], "momentum": mu,
                   "one_minus_dampening": 1 - group["dampening"], "neg_lr": -group["lr"]}
        return Plan(flags, {} if buf is None else {"momentum_buffer": buf}, scalars)

    @staticmethod
    def _writes(f: SGDFlags) -> dict[str, int]:
        return {"momentum_buffer": 2}               # buf.mul_(mu).add_(g)

    @staticmethod
    def _math(f: SGDFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        out = {}
        if f.momentum:
            if f.first:
                buf = g.detach()        # PyTorch's first buffer is a detached clone
            else:
                buf = t["momentum_buffer"] * s["momentum"] + \
                    (g * s["one_minus_dampening"] if f.damped else g)
            out["momentum_buffer"] = buf
            g = g + buf * s["momentum"] if f.nesterov else buf
        out["param"] = t["param"] + g * s["neg_lr"]
        return out
