"""The training rows T2, T3, T5 and TC1: one training step of W2, W3, W5 and ResNet-18
(C1's model at 64x64) in train mode.

A step, as users write it: ``opt.zero_grad(set_to_none=True)``, the loss, ``loss.backward()``
(then ``clip_grad_norm_`` for an optimizer of ``CLIP_NORM``) and ``opt.step()``
(``TrainStep``). Each row names its loss and its optimizer
(``Workload.loss``, ``Workload.optimizer``; both sides read ``LOSSES`` and ``OPTIMIZERS``):
T2, T3, T5 the MSE against a fixed random target of the output's shape and
``AdamW(lr=1e-3)``, TC1 the cross-entropy against fixed random class labels and
``SGD(lr=0.01, momentum=0.9)`` (``target_for`` makes the target). The loss is computed by
``WithLoss(model, loss)(x, target)``: the model and its loss as one module, which is what
the compiled columns trace (``jit.trace(WithLoss(model, loss), (x, target))``), so that the
loss compiles with the model, as a user who traces a model together with its loss gets. The
eager variant steps ``WithLoss`` itself; unfused and fused step its trace called with grad
enabled (fusion off and on), their optimizer built with ``fused=True`` where the
constructor accepts it (``make_optimizer``). The traced module shares the model's
parameters, so every variant trains the same weights, each with its own optimizer state.

The check (``gradients``, ``check.compare_all``) runs one forward and backward from the
same weights, without an optimizer step, and compares the loss and every parameter's
gradient with eager's; the bench snapshots the weights first (``snapshot``) and restores
them before the check and before the PyTorch side copies them (``restore``), since the
compile timings and the timed steps train the model.

    >>> model, x = WORKLOADS["T3"].build(quick=True)
    >>> model.training, tuple(target_for(model, x).shape)
    (True, (32, 128))
    >>> opt = make_optimizer("adamw", model.parameters())[0]
    >>> step = TrainStep(WithLoss(model), opt, x, target_for(model, x))
    >>> float(step().item()) > 0 and model.fc1.weight.grad is not None
    True
    >>> sorted(gradients(WithLoss(model), model, x, target_for(model, x)))
    ['grad fc1.bias', 'grad fc1.weight', 'grad fc2.bias', 'grad fc2.weight', 'loss']
    >>> target_for(model, x, "cross_entropy").dtype    # a class label per row
    scriptmod.int64
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

TARGET_SEED = 2
Loss = Callable[[sm.Tensor, sm.Tensor], sm.Tensor]       # (x, target) -> the loss

LOSSES = {"mse": "mse_loss", "cross_entropy": "cross_entropy"}
"""A row's loss: the name of its function in ``scriptmod.nn.functional`` and
``torch.nn.functional`` alike."""
OPTIMIZERS: dict[str, tuple[str, dict[str, float]]] = {
    "adamw": ("AdamW", {"lr": 1e-3}),
    "sgd_momentum": ("SGD", {"lr": 0.01, "momentum": 0.9}),
    "sgd_clip": ("SGD", {"lr": 20.0}),
}
"""A row's optimizer: its class name in ``scriptmod.optim`` and ``torch.optim`` alike, and
its options (the rest are the defaults)."""
CLIP_NORM: dict[str, float] = {"sgd_clip": 0.25}
"""The optimizers that step after ``nn.utils.clip_grad_norm_`` to this max norm (both sides):
pytorch/examples' word-language model clips at 0.25 and steps SGD at lr 20."""


def describe_optimizer(name: str) -> str:
    """``OPTIMIZERS[name]`` as code reads: ``describe_optimizer("adamw") == "AdamW(lr=0.001)"``."""
    cls, options = OPTIMIZERS[name]
    clip = f"clip_grad_norm_({CLIP_NORM[name]:g}), " if name in CLIP_NORM else ""
    return f"{clip}{cls}({', '.join(f'{k}={v:g}' for k, v in options.items())})"


class WithLoss(nn.Module):
    """``model`` and its loss as one module: ``forward(x, target)`` returns
    ``loss(model(x), target)`` (``LOSSES``: ``mse_loss`` or ``cross_entropy``). Its trace
    compiles the loss with the model: the output is never written, and the gradients come
    with the loss (a scalar output)."""

    def __init__(self, model: nn.Module, loss: str = "mse") -> None:
        super().__init__()
        self.model = model
        self.loss = getattr(F, LOSSES[loss])

    def forward(self, x: sm.Tensor, target: sm.Tensor) -> sm.Tensor:
        return self.loss(self.model(x), target)


def target_for(model: nn.Module, x: sm.Tensor, loss: str = "mse") -> sm.Tensor:
    """A fixed random target (seed ``TARGET_SEED``): for the MSE random-normal values of the
    model's output shape, for the cross-entropy one class label (int64) per row of it."""
    with sm.no_grad():
        shape = tuple(model(x).shape)
    sm.manual_seed(TARGET_SEED)
    if loss == "cross_entropy":
        return sm.randint(0, shape[1], (shape[0],)).to(x.device)
    return sm.randn(*shape, dtype=x.dtype).to(x.device)


def make_optimizer(name: str, params: Iterable[Any],
                   fused: bool = False) -> tuple[optim.Optimizer, str]:
    """The optimizer ``OPTIMIZERS[name]`` over ``params``, with ``fused=True`` when asked and
    the constructor takes it (the compiled rows'), and a note for the report when it does
    not."""
    cls_name, options = OPTIMIZERS[name]
    cls, params = getattr(optim, cls_name), list(params)
    if fused:
        if "fused" not in inspect.signature(cls).parameters:
            return cls(params, **options), f"{cls_name} has no fused option: plain {cls_name}"
        try:
            return cls(params, **options, fused=True), ""
        except (TypeError, ValueError, NotImplementedError, RuntimeError) as exc:
            return cls(params, **options), (f"{cls_name}(fused=True) refused "
                                            f"({type(exc).__name__}: {exc}): plain {cls_name}")
    return cls(params, **options), ""


class TrainStep:
    """One training step of ``loss_of`` (``WithLoss(model)``, or its ScriptModule) with
    ``opt``; calling it returns the loss (computed before the optimizer moved the weights).
    ``note`` says, for the report, how the optimizer differs from the one asked for."""

    def __init__(self, loss_of: Loss, opt: optim.Optimizer, x: sm.Tensor,
                 target: sm.Tensor, note: str = "", clip: float | None = None) -> None:
        self.loss_of, self.opt, self.x, self.target = loss_of, opt, x, target
        self.note, self.clip = note, clip

    def __call__(self) -> sm.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_of(self.x, self.target)
        loss.backward()
        if self.clip is not None:
            nn.utils.clip_grad_norm_([p for g in self.opt.param_groups for p in g["params"]],
                                     self.clip)
        self.opt.step()
        return loss


def compiled_step(compiled: Any, x: sm.Tensor, target: sm.Tensor,
                  optimizer: str = "adamw") -> TrainStep:
    """A step of a ScriptModule of ``WithLoss(model, ...)`` with the compiled rows' optimizer,
    ``OPTIMIZERS[optimizer]`` with ``fused=True``."""
    opt, note = make_optimizer(optimizer, compiled.parameters(), fused=True)
    return TrainStep(compiled, opt, x, target, note, CLIP_NORM.get(optimizer))


def gradients(loss_of: Loss, model: nn.Module, x: sm.Tensor, target: sm.Tensor,
              clip: float | None = None) -> dict[str, np.ndarray | None]:
    """The loss and every parameter's gradient (``"grad NAME"``; ``None`` for none) of one
    forward and backward of ``loss_of`` from ``model``'s current weights, clipped to the
    total norm ``clip`` as the row's step clips them (``CLIP_NORM``: a step's gradients are
    compared after it); no step."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(x, target)
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(list(model.parameters()), clip)
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
