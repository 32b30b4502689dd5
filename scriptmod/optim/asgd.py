"""ASGD: SGD with a decaying step ``eta`` and a running average ``ax`` of the iterates.

    >>> model = nn.Linear(4, 2)
    >>> opt = ASGD(model.parameters(), lr=0.01, t0=10)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['ax', 'eta', 'mu', 'step']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from scriptmod._creation import tensor, zeros_like
from scriptmod.ir import dtypes as D
from scriptmod.optim._fused import Plan
from scriptmod.optim.optimizer import Optimizer, _check_non_negative, _new_step, _scalar
from scriptmod.tensor import Tensor


class ASGDFlags(NamedTuple):
    maximize: bool
    weight_decay: bool
    averaging: bool          # mu != 1: ax moves towards p; else ax = p


class ASGD(Optimizer):
    """p *= 1 - lambd eta; p -= eta g; ax += mu (p - ax); then
    eta = lr / (1 + lambd lr t)^alpha and mu = 1 / max(1, t - t0)."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-2, lambd: float = 1e-4,
                 alpha: float = 0.75, t0: float = 1e6, weight_decay: float = 0,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        _check_non_negative(lr=_scalar(lr), weight_decay=weight_decay)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        lr, lambd = _scalar(group["lr"]), group["lambd"]
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            state["eta"] = tensor(lr, dtype=D.float32)
            state["mu"] = tensor(1.0, dtype=D.float32)
            state["ax"] = zeros_like(p)
        state["step"].add_(1)
        step = float(state["step"].item())
        eta, mu = float(state["eta"].item()), float(state["mu"].item())
        # the next step's eta and mu (PyTorch sets them after this step's update)
        state["eta"].copy_(tensor(lr / ((1 + lambd * lr * step) ** group["alpha"])))
        state["mu"].copy_(tensor(1 / max(1, step - group["t0"])))
        wd = group["weight_decay"]
        flags = ASGDFlags(bool(group["maximize"]), wd != 0, mu != 1)
        scalars = {"weight_decay": wd, "decay": 1 - lambd * eta, "neg_eta": -eta, "mu": mu}
        return Plan(flags, {"ax": state["ax"]}, scalars)

    @staticmethod
    def _writes(f: ASGDFlags) -> dict[str, int]:
        return {"param": 2}                          # p.mul_().add_()

    @staticmethod
    def _math(f: ASGDFlags, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        g = -t["grad"] if f.maximize else t["grad"]
        if f.weight_decay:
            g = g + t["param"] * s["weight_decay"]
        p = t["param"] * s["decay"] + g * s["neg_eta"]
        ax = t["ax"] + (p - t["ax"]) * s["mu"] if f.averaging else p
        return {"param": p, "ax": ax}
