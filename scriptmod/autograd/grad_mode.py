"""Gradient modes: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Each works as a context manager and as a decorator, as in PyTorch.

    >>> x = scriptmod.ones(2, requires_grad=True)
    >>> with scriptmod.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    def __init__(self) -> None:
        self.enabled = True
        self.inference = False


_state = _State()


def is_grad_enabled() -> bool:
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    return _state.inference


class _Mode:
    """Base for the grad-mode context managers; subclasses say what they set."""

    def _set(self) -> None:
        raise TypeError("use one of no_grad, enable_grad, set_grad_enabled, inference_mode")

    def __enter__(self) -> "_Mode":
        self._prev = (_state.enabled, _state.inference)
        self._set()
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.enabled, _state.inference = self._prev

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.__class__(*self._args()):
                return fn(*args, **kwargs)
        return wrapper  # type: ignore[return-value]

    def _args(self) -> tuple:
        return ()


class no_grad(_Mode):
    """Operations inside record no autograd graph."""

    def _set(self) -> None:
        _state.enabled = False


class enable_grad(_Mode):
    def _set(self) -> None:
        _state.enabled = True


class set_grad_enabled(_Mode):
    """``set_grad_enabled(False)`` also takes effect immediately when not used with ``with``."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: expected a bool, got {type(mode).__name__}")
        self.mode = mode
        self._prev = (_state.enabled, _state.inference)
        _state.enabled = mode

    def _set(self) -> None:
        _state.enabled = self.mode

    def __enter__(self) -> "set_grad_enabled":
        return self   # the state was set by __init__; _prev holds what to restore

    def __call__(self, fn: F) -> F:
        _state.enabled = self._prev[0]   # used as a decorator: do not change the state now
        return super().__call__(fn)

    def _args(self) -> tuple:
        return (self.mode,)


class inference_mode(_Mode):
    """Like ``no_grad``; tensors made inside are marked as inference tensors."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode

    def _set(self) -> None:
        if self.mode:
            _state.enabled = False
            _state.inference = True

    def _args(self) -> tuple:
        return (self.mode,)
