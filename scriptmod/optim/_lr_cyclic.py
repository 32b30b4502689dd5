"""The cyclic schedulers of ``optim.lr_scheduler``: ``CyclicLR``, ``OneCycleLR`` (both also
cycle the momentum, or Adam's beta1) and ``CosineAnnealingWarmRestarts``, with PyTorch's
formulas and state-dict contents.

    >>> opt = scriptmod.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1, momentum=0.9)
    >>> sched = OneCycleLR(opt, max_lr=1.0, total_steps=10)
    >>> sched.get_last_lr(), opt.param_groups[0]["momentum"]
    ([0.04...], 0.95)
"""
from __future__ import annotations

import math
import types
from functools import partial
from typing import Any, Callable

from scriptmod.optim._lr_base import LRScheduler, format_param, group_values, set_group_value
from scriptmod.optim.optimizer import Optimizer


def _momentum_groups(optimizer: Optimizer, base_momentum: Any, max_momentum: Any,
                     last_epoch: int) -> tuple[bool, list[Any], list[Any]]:
    """For ``cycle_momentum``: whether the optimizer's momentum is Adam's beta1, and the
    per-group base and max momentums (written into fresh groups, momentum set to max)."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                         "option enabled")
    use_beta1 = "betas" in optimizer.defaults
    bases = format_param("base_momentum", optimizer, base_momentum)
    maxes = format_param("max_momentum", optimizer, max_momentum)
    if last_epoch == -1:
        for top, bottom, group in zip(maxes, bases, optimizer.param_groups):
            _set_momentum(group, use_beta1, top)
            group["max_momentum"], group["base_momentum"] = top, bottom
    return use_beta1, bases, maxes


def _set_momentum(group: dict[str, Any], use_beta1: bool, value: float) -> None:
    if use_beta1:
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


class CyclicLR(LRScheduler):
    """lr cycles between ``base_lr`` and ``max_lr`` (up ``step_size_up`` steps, down
    ``step_size_down``), the height scaled by ``mode``'s (or ``scale_fn``'s) factor; the
    momentum cycles the opposite way."""

    def __init__(self, optimizer: Optimizer, base_lr: float | list[float],
                 max_lr: float | list[float], step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: float = 0.8, max_momentum: float = 0.9,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        base_lrs = format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                set_group_value(group, "lr", lr)
        self.max_lrs = format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom, self.scale_mode = scale_fn, scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1, self.base_momentums, self.max_momentums = _momentum_groups(
                optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref: Callable[[float], float] = self._triangular_scale_fn
            self.scale_mode = "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref = self._triangular2_scale_fn
            self.scale_mode = "cycle"
        elif self.mode == "exp_range":
            self._scale_fn_ref = partial(self._exp_range_scale_fn, self.gamma)
            self.scale_mode = "iterations"

    def scale_fn(self, x: float) -> float:
        """The height's factor at cycle (or iteration) ``x``."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        return self._scale_fn_ref(x)

    @staticmethod
    def _triangular_scale_fn(x: float) -> float:
        return 1.0

    @staticmethod
    def _triangular2_scale_fn(x: float) -> float:
        return 1 / (2.0 ** (x - 1))

    @staticmethod
    def _exp_range_scale_fn(gamma: float, x: float) -> float:
        return gamma ** x

    def get_lr(self) -> list[Any]:
        self._warn_outside_step()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * scale
               for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, base, top in zip(self.optimizer.param_groups, self.base_momentums,
                                        self.max_momentums):
                _set_momentum(group, self.use_beta1, top - (top - base) * scale_factor * scale)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.pop("_scale_fn_ref", None)
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None
        if fn is not None and not isinstance(fn, types.FunctionType):
            state["_scale_fn_custom"] = fn.__dict__.copy()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        fn = state_dict.pop("_scale_fn_custom")
        super().load_state_dict(state_dict)
        if fn is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to ``eta_min`` over ``T_i`` steps, restarting at base_lr
    with ``T_i *= T_mult``; ``step(epoch)`` accepts fractional epochs."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min)}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur: float = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_outside_step()
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur /
                                                                  self.T_i)) / 2
                for b in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:  # type: ignore[override]
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            self._place(epoch)
        self.last_epoch = math.floor(epoch)
        with self._in_step():
            for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
                set_group_value(group, "lr", lr)
        self._last_lr = group_values(self.optimizer, "lr")

    def _place(self, epoch: float) -> None:
        """``T_cur`` and ``T_i`` at an explicit (possibly fractional) ``epoch``."""
        if epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        if epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult ** n


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr rises from ``max_lr / div_factor`` to ``max_lr`` over
    ``pct_start`` of ``total_steps``, then anneals (cosine or linear) to
    ``initial_lr / final_div_factor``; momentum moves the opposite way."""

    def __init__(self, optimizer: Optimizer, max_lr: float | list[float],
                 total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85,
                 max_momentum: float | list[float] = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        self._schedule_phases = _phases(self.total_steps, pct_start, three_phase)
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._anneal_func_type = anneal_strategy
        max_lrs = format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for top, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_groups(optimizer, base_momentum, max_momentum,
                                              last_epoch)[0]
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[Any]:
        self._warn_outside_step()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal_func(group[phase["start_lr"]],
                                                 group[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        _set_momentum(group, self.use_beta1, self._anneal_func(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct))
                    break
                start = phase["end_step"]
        return lrs


def _total_steps(total_steps: int | None, epochs: int | None,
                 steps_per_epoch: int | None) -> int:
    if total_steps is not None:
        if total_steps <= 0 or not isinstance(total_steps, int):
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        return total_steps
    if epochs is None or steps_per_epoch is None:
        raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
    if not isinstance(epochs, int) or epochs <= 0:
        raise ValueError(f"Expected positive integer epochs, but got {epochs}")
    if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
        raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
    return epochs * steps_per_epoch


def _phases(total: int, pct_start: float, three_phase: bool) -> list[dict[str, Any]]:
    """OneCycleLR's phases: where each ends and which group keys it anneals between."""
    def phase(end: float, lr: tuple[str, str], momentum: tuple[str, str]) -> dict[str, Any]:
        return {"end_step": end, "start_lr": lr[0], "end_lr": lr[1],
                "start_momentum": momentum[0], "end_momentum": momentum[1]}
    up = phase(float(pct_start * total) - 1, ("initial_lr", "max_lr"),
               ("max_momentum", "base_momentum"))
    if not three_phase:
        return [up, phase(total - 1, ("max_lr", "min_lr"), ("base_momentum", "max_momentum"))]
    return [up, phase(float(2 * pct_start * total) - 2, ("max_lr", "initial_lr"),
                      ("base_momentum", "max_momentum")),
            phase(total - 1, ("initial_lr", "min_lr"), ("max_momentum", "max_momentum"))]
