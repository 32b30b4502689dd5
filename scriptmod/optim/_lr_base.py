"""``LRScheduler``, the base of ``optim.lr_scheduler``: PyTorch's chainable form (each
``step()`` sets every group's ``lr`` from ``get_lr()``, which reads the current lr), the
closed form used when ``step(epoch)`` is given, and ``state_dict`` (everything but the
optimizer). A Tensor ``lr`` in a group is updated in place, as PyTorch's.

    >>> opt = scriptmod.optim.SGD(nn.Linear(4, 2).parameters(), lr=1.0)
    >>> sched = scriptmod.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.5]
"""
from __future__ import annotations

import warnings
import weakref
from contextlib import contextmanager
from functools import wraps
from typing import Any, Iterator

from scriptmod.optim.optimizer import Optimizer
from scriptmod.tensor import Tensor

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the new "
    "chainable form, where available. Please open an issue if you are unable to replicate "
    "your use case: https://github.com/pytorch/pytorch/issues/new/choose.")
_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
    "value of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate")


def format_param(name: str, optimizer: Optimizer, param: Any) -> list[Any]:
    """One value per parameter group: ``param`` repeated, or a list checked for length."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(param)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
    else:
        param = [param] * len(optimizer.param_groups)
    return [p.clone() if isinstance(p, Tensor) else p for p in param]


def group_values(optimizer: Optimizer, key: str) -> list[Any]:
    """Each group's ``key`` (Tensors cloned, so later in-place updates don't show)."""
    return [g[key].clone() if isinstance(g[key], Tensor) else g[key]
            for g in optimizer.param_groups]


def set_group_value(group: dict[str, Any], key: str, value: Any) -> None:
    """``group[key] = value``, filling a Tensor in place (a Tensor lr stays the same object)."""
    if isinstance(group[key], Tensor):
        group[key].fill_(float(value.item()) if isinstance(value, Tensor) else value)
    else:
        group[key] = value


def _count_optimizer_steps(opt: Optimizer) -> None:
    """Wraps ``opt.step`` once so that a scheduler can tell whether it has run yet."""
    if hasattr(opt.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = weakref.ref(opt)
    func = type(opt).step

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        owner = opt_ref()
        owner._opt_called = True                # type: ignore[union-attr]
        return func(owner, *args, **kwargs)

    wrapper._wrapped_by_lr_sched = True         # type: ignore[attr-defined]
    opt.step = wrapper                          # type: ignore[method-assign]


class LRScheduler:
    """Sets every group's ``lr`` from ``get_lr()`` on each ``step()``; the constructor takes
    the first step (``last_epoch`` -1 -> 0). Resuming (``last_epoch >= 0``) needs each
    group's ``initial_lr``."""

    _get_lr_called_within_step = False
    _is_initial = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                lr = group["lr"]
                group.setdefault("initial_lr", lr.clone() if isinstance(lr, Tensor) else lr)
            elif "initial_lr" not in group:
                raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when "
                               "resuming scheduler with last_epoch >= 0.\nThis typically "
                               "happens when:\n1. You're trying to resume training from a "
                               "checkpoint but haven't properly loaded the optimizer state\n2. "
                               "You're using last_epoch >= 0 for a fresh training run (not "
                               "recommended)")
        self.base_lrs: list[Any] = group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _count_optimizer_steps(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        with self._initial_mode():
            self.step()

    @contextmanager
    def _initial_mode(self) -> Iterator[None]:
        self._is_initial = True
        try:
            yield
        finally:
            self._is_initial = False

    @contextmanager
    def _in_step(self) -> Iterator[None]:
        self._get_lr_called_within_step = True
        try:
            yield
        finally:
            self._get_lr_called_within_step = False

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (PyTorch's format)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list[Any]:
        """The learning rates set by the last ``step()``."""
        return self._last_lr

    def get_lr(self) -> list[Any]:
        """The next learning rates (call ``get_last_lr()`` for the current ones)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr()")

    def _warn_outside_step(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=3)

    def step(self, epoch: int | None = None) -> None:
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False) and \
                hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
            warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        with self._in_step():
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed = getattr(self, "_get_closed_form_lr", None)
                values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            set_group_value(group, "lr", lr)
        self._last_lr = group_values(self.optimizer, "lr")
