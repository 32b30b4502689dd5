"""Optimizer hooks, as PyTorch's: per optimizer (``register_step_pre_hook`` and friends,
``OptimizerHooks``) and for every optimizer at once
(``register_optimizer_step_pre_hook``/``register_optimizer_step_post_hook``).

Every ``step`` runs the global pre hooks, the optimizer's pre hooks (each may return new
``(args, kwargs)``), the step, then the optimizer's post hooks and the global ones.

    >>> opt = scriptmod.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    >>> seen = []
    >>> handle = opt.register_step_post_hook(lambda o, args, kwargs: seen.append(type(o).__name__))
    >>> opt.step(); handle.remove(); opt.step(); seen
    ['SGD']
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from itertools import chain
from typing import Any, Callable

from scriptmod.autograd.engine import RemovableHandle

_GLOBAL_PRE: OrderedDict[int, Callable[..., Any]] = OrderedDict()
_GLOBAL_POST: OrderedDict[int, Callable[..., Any]] = OrderedDict()
HOOK_NAMES = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
              "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
              "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks")


def _add(hooks: OrderedDict[int, Callable[..., Any]], hook: Callable[..., Any],
         prepend: bool = False) -> RemovableHandle:
    handle = RemovableHandle(hooks, None)
    handle._key = handle.id
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def register_optimizer_step_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)`` before every
    optimizer's ``step``."""
    return _add(_GLOBAL_PRE, hook)


def register_optimizer_step_post_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` after every optimizer's ``step``."""
    return _add(_GLOBAL_POST, hook)


def hooked_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` with the pre and post hooks around it (once: a ``super().step()`` inside a
    hooked step runs none again)."""
    @functools.wraps(step)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_in_hooked_step"):
            return step(self, *args, **kwargs)
        for hook in chain(_GLOBAL_PRE.values(), self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{hook} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
                args, kwargs = result
        self._in_hooked_step = True
        try:
            out = step(self, *args, **kwargs)
        finally:
            self._in_hooked_step = False
        for hook in chain(self._optimizer_step_post_hooks.values(), _GLOBAL_POST.values()):
            hook(self, args, kwargs)
        return out

    run._hooked = True                          # type: ignore[attr-defined]
    return run


class OptimizerHooks:
    """The per-optimizer hook registries (PyTorch's attribute names)."""

    _optimizer_step_pre_hooks: OrderedDict[int, Callable[..., Any]]
    _optimizer_step_post_hooks: OrderedDict[int, Callable[..., Any]]
    _optimizer_state_dict_pre_hooks: OrderedDict[int, Callable[..., Any]]
    _optimizer_state_dict_post_hooks: OrderedDict[int, Callable[..., Any]]
    _optimizer_load_state_dict_pre_hooks: OrderedDict[int, Callable[..., Any]]
    _optimizer_load_state_dict_post_hooks: OrderedDict[int, Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_hooked", False):
            cls.step = hooked_step(step)        # type: ignore[attr-defined]

    def _init_hooks(self) -> None:
        for name in HOOK_NAMES:
            if name not in self.__dict__:
                setattr(self, name, OrderedDict())

    def register_step_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)`` before
        ``step``."""
        return _add(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` after ``step``."""
        return _add(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook: Callable[..., Any],
                                     prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer)`` before ``state_dict()`` builds the dict."""
        return _add(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook: Callable[..., Any],
                                      prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> None | new_state_dict`` after ``state_dict()``."""
        return _add(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable[..., Any],
                                          prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> None | new_state_dict`` before loading."""
        return _add(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Callable[..., Any],
                                           prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer)`` after ``load_state_dict``."""
        return _add(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    def _state_dict_hooks_around(self, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        state_dict = build()
        for hook in self._optimizer_state_dict_post_hooks.values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _load_pre_hooks(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _load_post_hooks(self) -> None:
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)
