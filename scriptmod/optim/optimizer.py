"""``Optimizer``: parameter groups, ``zero_grad`` and PyTorch-format state dicts.

A state dict is ``{"state": {int_id: {...}}, "param_groups": [{..., "params": [int_id]}]}``
with parameters numbered in group order, so it round-trips with PyTorch's.

An optimizer states its update once: ``_prepare(p, group)`` makes a parameter's state and
returns a ``Plan`` (flags, state tensors, the step's numbers), and ``_math(flags, tensors,
scalars)`` computes the new param and state from them. ``step`` runs ``_math`` on Tensors
(the Python path) or as one native kernel per parameter (``optim._fused``): with
``fused=True`` or ``foreach=True``, and by default when every parameter of the group is a
CPU float32/float64 tensor. Both paths keep the same state tensors, so a state dict made on
one loads into the other.
"""
from __future__ import annotations

import copy
import warnings
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping

from scriptmod._creation import tensor
from scriptmod.autograd.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from scriptmod.ir import dtypes as D
from scriptmod.optim import _fused
from scriptmod.optim._fused import Plan
from scriptmod.optim._hooks import (OptimizerHooks, hooked_step,  # noqa: F401
                                    register_optimizer_step_post_hook,
                                    register_optimizer_step_pre_hook)
from scriptmod.runtime.trees import rebuilt
from scriptmod.tensor import Tensor


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()
_SET_ERROR = ("optimizer parameters need to be organized in ordered collections, but the "
              "ordering of tensors in sets will change between runs. Please use a list instead.")


def _check_non_negative(**values: float) -> None:
    for name, v in values.items():
        if not 0.0 <= v:
            label = {"lr": "learning rate", "eps": "epsilon value"}.get(name, f"{name} value")
            raise ValueError(f"Invalid {label}: {v}")


def _scalar(value: Any) -> Any:
    """A hyperparameter as a Python number: a one-element Tensor ``lr`` reads as its value
    (PyTorch's ``_to_scalar``), so the update kernels take it as a scalar input."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        return float(value.item())
    return value


def _new_step() -> Tensor:
    """A fresh ``state["step"]``: PyTorch's 0-d float32 step counter."""
    return tensor(0.0, dtype=D.float32)


def _real_view(t: Tensor) -> Tensor:
    """A complex tensor as real pairs (shape + (2,)) sharing its memory (PyTorch's
    ``view_as_real``): optimizers update complex parameters as pairs of real numbers."""
    a = t._data
    return Tensor._make(a.view(a.real.dtype).reshape(*a.shape, 2))


def _lerp(start: Any, end: Any, weight: float) -> Any:
    """``start.lerp(end, weight)`` by PyTorch's formula (from the nearer end), on Tensors."""
    if abs(weight) < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1 - weight)


def _complex_view(pairs: Tensor, like: Tensor) -> Tensor:
    """The inverse of ``_real_view`` for a contiguous ``pairs``: ``like``'s complex dtype."""
    return Tensor._make(pairs._data.view(like._data.dtype).reshape(like._data.shape))


def _as_groups(params: Any) -> list[dict[str, Any]]:
    if isinstance(params, Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of "
                        f"Tensors or dicts, but got {params.type()}")
    if isinstance(params, set):
        raise TypeError(_SET_ERROR)
    groups = list(params)
    if not groups:
        raise ValueError("optimizer got an empty parameter list")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    return groups


class Optimizer(OptimizerHooks):
    """Base class: subclasses pass ``defaults`` and implement ``step`` (or ``_prepare`` and
    ``_math``, or ``_update``); step and state-dict hooks as PyTorch's (``optim._hooks``)."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self._init_hooks()
        self.defaults = defaults
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        for group in _as_groups(params):
            self.add_param_group(group)

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_hooks()

    def __repr__(self) -> str:
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines) + "\n)"

    # ---- groups ----------------------------------------------------------------------------
    def _group_params(self, param_group: dict[str, Any]) -> list[Tensor]:
        params = param_group["params"]
        if isinstance(params, Tensor):
            return [params]
        if isinstance(params, set):
            raise TypeError(_SET_ERROR)
        out = list(params)
        if out and isinstance(out[0], tuple):      # named parameters: [(name, p), ...]
            param_group["param_names"] = [n for n, _ in out]
            out = [p for _, p in out]
        for p in out:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not (p.is_leaf or p.retains_grad or self.defaults.get("differentiable")):
                raise ValueError("can't optimize a non-leaf Tensor")
        return out

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (``{"params": [...], "lr": ...}``); missing options take the defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        param_group["params"] = params = self._group_params(param_group)
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        _fused.check_options(param_group)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error", stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if seen & {id(p) for p in params}:
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None by default, or to zeros)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = p.grad.detach()
                    p.grad.zero_()

    @hooked_step
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()``.
        With ``differentiable=True`` autograd records the update (PyTorch's
        ``_use_grad_for_differentiable``), so gradients flow through it to what made the
        parameters and gradients."""
        with set_grad_enabled(bool(self.defaults.get("differentiable"))):
            return self._step(closure)

    def _step(self, closure: Callable[[], Any] | None) -> Any:
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            _check_capturable(group, params)
            if self._fusable() and _fused.use_fast_path(group, params):
                for p in params:
                    plan = self._prepare(p, group)
                    fresh = _fused.step(type(self)._math, p, plan, self._writes(plan.flags))
                    if fresh is None:
                        self._apply(p, plan)
                    elif fresh:
                        self.state[p].update(fresh)
            else:
                for p in params:
                    self._update(p, group)
        return loss

    def _fusable(self) -> bool:
        """Whether the update is ``_prepare`` + ``_math`` (not a subclass's own ``_update``)."""
        cls = type(self)
        return cls._update is Optimizer._update and cls._math is not Optimizer._math

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        """The algorithm: update ``p`` in place from ``p.grad`` (subclasses define
        ``_prepare`` and ``_math``, or override this)."""
        self._apply(p, self._prepare(p, group))

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Plan:
        """Make ``p``'s state for this step; the ``Plan`` that ``_math`` computes from."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _update() (or "
                                  f"_prepare() and _math())")

    @staticmethod
    def _math(flags: Any, t: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
        """The new ``param`` and state from ``t`` (``param``, ``grad`` and the plan's state
        tensors) and ``s`` (its numbers): Tensors and floats here, traced values in
        ``optim._fused``, so only Tensor arithmetic, ``.sqrt()`` and ``.maximum()``."""
        raise NotImplementedError

    @staticmethod
    def _writes(flags: Any) -> dict[str, int]:
        """How many in-place ops PyTorch's single-tensor step applies to each tensor it
        updates (1 where not named): what version counters count, on either path."""
        return {}

    def _apply(self, p: Tensor, plan: Plan) -> None:
        """The Python path: ``_math`` on Tensors, written back into ``p`` and its state.
        Recording autograd (``differentiable=True``), it reads clones of what it then
        overwrites, so the recorded graph keeps the values it read."""
        complex_param = p.is_complex()
        targets = {"param": p, **plan.tensors}
        views = {n: _real_view(t) for n, t in targets.items()} if complex_param else targets
        inputs = {n: t.clone() for n, t in views.items()} if is_grad_enabled() else views
        grad = _real_view(p.grad) if complex_param else p.grad
        out = self._math(plan.flags, {**inputs, "grad": grad}, plan.scalars)
        writes = self._writes(plan.flags)
        for name, value in out.items():
            target = views.get(name)
            if target is None:
                fresh = value.detach().contiguous().clone()
                self.state[p][name] = _complex_view(fresh, p) if complex_param else fresh
                continue
            target._vc[0] += writes.get(name, 1) - 1    # before the copy its history records
            target.copy_(value)
            if complex_param:
                targets[name]._vc[0] += writes.get(name, 1)

    def _closure_loss(self, closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # ---- state dicts -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: per-param state}, "param_groups": [...]}`` (PyTorch's format)."""
        return self._state_dict_hooks_around(self._build_state_dict)

    def _build_state_dict(self) -> dict[str, Any]:
        ids: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                ids.setdefault(id(p), len(ids))
            packed["params"] = [ids[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {ids[id(p)] if isinstance(p, Tensor) else p: s for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def _check_loadable(self, groups: list[dict[str, Any]]) -> None:
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a dict made by ``state_dict`` (ours or PyTorch's, arrays as tensors)."""
        state_dict = self._load_pre_hooks(_copy_all(state_dict))
        groups = state_dict["param_groups"]
        self._check_loadable(groups)
        id_map = {old: p for theirs, mine in zip(groups, self.param_groups)
                  for old, p in zip(theirs["params"], mine["params"])}
        state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                p = id_map[k]
                state[p] = {name: _cast_state(name, x, p) for name, x in v.items()}
            else:
                state[k] = v
        new_groups = []
        for mine, theirs in zip(self.param_groups, groups):
            theirs = dict(theirs)
            theirs["params"] = mine["params"]
            if "param_names" in mine and "param_names" not in theirs:
                theirs["param_names"] = mine["param_names"]
            new_groups.append(theirs)
        self.state, self.param_groups = state, new_groups
        self._load_post_hooks()


def _check_capturable(group: dict[str, Any], params: list[Tensor]) -> None:
    """PyTorch's refusal of ``capturable=True`` (CUDA-graph capture) for CPU parameters."""
    if group.get("capturable") and any(p.device.type == "cpu" for p in params):
        raise AssertionError("If capturable=True, params and state_steps must be on supported "
                             "devices: ['cuda'].")


def _copy_all(obj: Any) -> Any:
    """A deep copy (scriptmod tensors refuse ``copy.deepcopy``'s pickling path)."""
    if isinstance(obj, Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _copy_all(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return rebuilt(obj, (_copy_all(v) for v in obj))
    return copy.deepcopy(obj)


def _cast_state(name: str, value: Any, param: Tensor) -> Any:
    """Per-parameter state follows the parameter's dtype and device; ``step`` stays as is."""
    if not isinstance(value, Tensor) or name == "step":
        return value
    if param.is_floating_point():
        return value.to(dtype=param.dtype, device=param.device)
    return value.to(device=param.device)
