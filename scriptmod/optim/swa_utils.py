"""Stochastic weight averaging and EMA, as ``torch.optim.swa_utils``: ``AveragedModel``
(a running average of a model's parameters), ``SWALR`` (anneal to a constant SWA lr),
``update_bn`` (recompute BatchNorm statistics for the averaged weights) and the average
functions.

    >>> model = nn.Linear(2, 1)
    >>> ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    >>> with scriptmod.no_grad():
    ...     _ = model.weight.add_(1.0)
    >>> ema.update_parameters(model); int(ema.n_averaged)
    1
"""
from __future__ import annotations

import copy
import itertools
import math
import warnings
from typing import Any, Callable, Iterable, Sequence

from scriptmod._creation import tensor
from scriptmod.autograd.grad_mode import no_grad
from scriptmod.ir import dtypes as D
from scriptmod.nn.module import Module
from scriptmod.optim._lr_base import LRScheduler, format_param
from scriptmod.optim.optimizer import Optimizer, _lerp
from scriptmod.tensor import Tensor

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]

MultiAvgFn = Callable[[Sequence[Tensor], Sequence[Tensor], Any], None]
AvgFn = Callable[[Tensor, Tensor, Any], Tensor]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         f"[0,1] range.")


def _is_float(t: Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """In place over lists: ``ema = lerp(ema, current, 1 - decay)``."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema: Sequence[Tensor], current: Sequence[Tensor], _: Any) -> None:
        for e, c in zip(ema, current):
            e.copy_(_lerp(e, c, 1 - decay) if _is_float(e) else e * decay + c * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """In place over lists: the running mean ``avg += (current - avg) / (n + 1)``."""
    @no_grad()
    def swa_update(averaged: Sequence[Tensor], current: Sequence[Tensor], n: Any) -> None:
        weight = 1 / (float(n) + 1)
        for a, c in zip(averaged, current):
            a.copy_(_lerp(a, c, weight) if _is_float(a) else a + (c - a) * weight)
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """Per tensor: ``decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema: Tensor, current: Tensor, n: Any) -> Tensor:
        return ema * decay + current * (1 - decay)
    return ema_update


def get_swa_avg_fn() -> AvgFn:
    """Per tensor: ``avg + (current - avg) / (n + 1)``."""
    @no_grad()
    def swa_update(averaged: Tensor, current: Tensor, n: Any) -> Tensor:
        return averaged + (current - averaged) / (n + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters (and buffers, with ``use_buffers``) are averaged
    by ``update_parameters(model)``: the SWA running mean by default, or ``avg_fn`` /
    ``multi_avg_fn``; ``n_averaged`` counts the updates."""

    def __init__(self, model: Module, device: Any = None, avg_fn: AvgFn | None = None,
                 multi_avg_fn: MultiAvgFn | None = None, use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=D.int64, device=device))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def _averaged(self, model: Module) -> tuple[Iterable[Tensor], Iterable[Tensor]]:
        if self.use_buffers:
            return (itertools.chain(self.module.parameters(), self.module.buffers()),
                    itertools.chain(model.parameters(), model.buffers()))
        return self.parameters(), model.parameters()

    @no_grad()
    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current weights into the average (the first call copies them)."""
        mine, theirs = self._averaged(model)
        pairs = [(a.detach(), p.detach().to(a.device)) for a, p in zip(mine, theirs)]
        first = int(self.n_averaged.item()) == 0
        if first:
            for a, p in pairs:
                a.copy_(p)
        elif self.multi_avg_fn is not None or (self.avg_fn is None and pairs and
                                                pairs[0][0].device.type != "cpu"):
            update = self.multi_avg_fn or get_swa_multi_avg_fn()
            update([a for a, _ in pairs], [p for _, p in pairs], self.n_averaged)
        else:       # PyTorch's CPU default is the per-tensor running mean, not the lerp
            avg_fn = self.avg_fn or get_swa_avg_fn()
            for a, p in pairs:
                a.copy_(avg_fn(a, p, self.n_averaged.to(a.device)))
        if not self.use_buffers:
            for mine_b, theirs_b in zip(self.module.buffers(), model.buffers()):
                mine_b.detach().copy_(theirs_b.detach().to(mine_b.device))
        self.n_averaged.add_(1)


@no_grad()
def update_bn(loader: Iterable[Any], model: Module, device: Any = None) -> None:
    """One pass of ``loader`` through ``model`` in training mode with every BatchNorm's
    statistics reset and cumulative (``momentum=None``); the first element of a list or
    tuple batch is the input."""
    from scriptmod.nn.modules.normalization import _BatchNorm
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for batch in loader:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        if device is not None:
            batch = batch.to(device)
        model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr to ``swa_lr`` over ``anneal_epochs`` (cosine or linear), then
    holds it."""

    def __init__(self, optimizer: Optimizer, swa_lr: float | list[float],
                 anneal_epochs: int = 10, anneal_strategy: str = "cos",
                 last_epoch: int = -1) -> None:
        for lr, group in zip(format_param("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got "
                             f"{anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, strategy: str) -> None:
        self._anneal_strategy = strategy
        self.anneal_func = self._cosine_anneal if strategy == "cos" else self._linear_anneal

    def get_lr(self) -> list[Any]:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        groups = self.optimizer.param_groups
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
