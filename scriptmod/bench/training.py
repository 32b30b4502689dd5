"""The training rows T2, T3, T5: one training step of W2, W3, W5 in train mode.

A step, as users write it: ``opt.zero_grad(set_to_none=True)``, the loss, ``loss.backward()``
and ``opt.step()`` of ``AdamW(lr=1e-3)`` with default options (``TrainStep``). The loss is
the MSE against a fixed random target of the output's shape (``target_for``), computed by
``WithLoss(model)(x, target)``: the model and its loss as one module, which is what the
compiled columns trace (``jit.trace(WithLoss(model), (x, target))``), so that the loss
compiles with the model, as a user who traces a model together with its loss gets. The eager
variant steps ``WithLoss(model)`` itself; unfused and fused step its trace called with grad
enabled (fusion off and on), their AdamW built with ``fused=True`` where the constructor
accepts it (``adamw``). The traced module shares the model's parameters, so every variant
trains the same weights, each with its own optimizer state.

The check (``gradients``, ``check.compare_all``) runs one forward and backward from the
same weights, without an optimizer step, and compares the loss and every parameter's
gradient with eager's; the bench snapshots the weights first (``snapshot``) and restores
them before the check and before the PyTorch side copies them (``restore``), since the
compile timings and the timed steps train the model.

    >>> model, x = WORKLOADS["T3"].build(quick=True)
    >>> model.training, tuple(target_for(model, x).shape)
    (True, (32, 128))
    >>> step = TrainStep(WithLoss(model), adamw(model.parameters())[0], x, target_for(model, x))
    >>> float(step().item()) > 0 and model.fc1.weight.grad is not None
    True
    >>> sorted(gradients(WithLoss(model), model, x, target_for(model, x)))
    ['grad fc1.bias', 'grad fc1.weight', 'grad fc2.bias', 'grad fc2.weight', 'loss']
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

import numpy as np

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn, optim
from scriptmod.bench.check import host64
from scriptmod.bench.workloads import WORKLOADS  # noqa: F401  (the doctest's)

LR = 1e-3
TARGET_SEED = 2
Loss = Callable[[sm.Tensor, sm.Tensor], sm.Tensor]       # (x, target) -> the loss


class WithLoss(nn.Module):
    """``model`` and its MSE loss as one module: ``forward(x, target)`` returns
    ``mse_loss(model(x), target)``. Its trace compiles the loss with the model: the output
    is never written, and the gradients come with the loss (a scalar output)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: sm.Tensor, target: sm.Tensor) -> sm.Tensor:
        return F.mse_loss(self.model(x), target)


def target_for(model: nn.Module, x: sm.Tensor) -> sm.Tensor:
    """A fixed random-normal target of the model's output shape (seed ``TARGET_SEED``)."""
    with sm.no_grad():
        shape = tuple(model(x).shape)
    sm.manual_seed(TARGET_SEED)
    return sm.randn(*shape, dtype=x.dtype).to(x.device)


def adamw(params: Iterable[Any], fused: bool = False) -> tuple[optim.Optimizer, str]:
    """``AdamW(lr=LR)``, with ``fused=True`` when asked and the constructor takes it (the
    compiled rows'), and a note for the report when it does not."""
    params = list(params)
    if fused:
        if "fused" not in inspect.signature(optim.AdamW).parameters:
            return optim.AdamW(params, lr=LR), "AdamW has no fused option: plain AdamW"
        try:
            return optim.AdamW(params, lr=LR, fused=True), ""
        except (TypeError, ValueError, NotImplementedError, RuntimeError) as exc:
            return optim.AdamW(params, lr=LR), (f"AdamW(fused=True) refused "
                                                f"({type(exc).__name__}: {exc}): plain AdamW")
    return optim.AdamW(params, lr=LR), ""


class TrainStep:
    """One training step of ``loss_of`` (``WithLoss(model)``, or its ScriptModule) with
    ``opt``; calling it returns the loss (computed before the optimizer moved the weights).
    ``note`` says, for the report, how the optimizer differs from the one asked for."""

    def __init__(self, loss_of: Loss, opt: optim.Optimizer, x: sm.Tensor,
                 target: sm.Tensor, note: str = "") -> None:
        self.loss_of, self.opt, self.x, self.target = loss_of, opt, x, target
        self.note = note

    def __call__(self) -> sm.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_of(self.x, self.target)
        loss.backward()
        self.opt.step()
        return loss


def compiled_step(compiled: Any, x: sm.Tensor, target: sm.Tensor) -> TrainStep:
    """A step of a ScriptModule of ``WithLoss(model)`` with the compiled rows' optimizer,
    ``AdamW(fused=True)``."""
    opt, note = adamw(compiled.parameters(), fused=True)
    return TrainStep(compiled, opt, x, target, note)


def gradients(loss_of: Loss, model: nn.Module, x: sm.Tensor,
              target: sm.Tensor) -> dict[str, np.ndarray | None]:
    """The loss and every parameter's gradient (``"grad NAME"``; ``None`` for none) of one
    forward and backward of ``loss_of`` from ``model``'s current weights; no step."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(x, target)
    loss.backward()
    out = collect(model, loss)
    model.zero_grad(set_to_none=True)
    return out


def collect(model: nn.Module, loss: sm.Tensor) -> dict[str, np.ndarray | None]:
    """``loss`` and the gradients the model's parameters hold now, as float64 arrays."""
    out: dict[str, np.ndarray | None] = {"loss": host64(loss)}
    for name, p in model.named_parameters():
        out[f"grad {name}"] = None if p.grad is None else host64(p.grad)
    return out


def snapshot(model: nn.Module) -> dict[str, np.ndarray]:
    """Copies of the model's parameters (``restore`` puts them back)."""
    return {name: p.numpy(force=True).copy() for name, p in model.named_parameters()}


def restore(model: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Parameters back to ``weights`` in place (a ScriptModule sharing them follows)."""
    with sm.no_grad():
        for name, p in model.named_parameters():
            p.copy_(sm.from_numpy(weights[name]).to(p.device))
        model.zero_grad(set_to_none=True)
