"""``Module.state_dict`` / ``load_state_dict`` and their hooks, with PyTorch's keys, order
and error messages.

    >>> model = nn.Sequential(nn.Linear(4, 2))
    >>> sd = model.state_dict()              # OrderedDict: name -> Tensor
    >>> list(sd)
    ['0.weight', '0.bias']
    >>> model.load_state_dict(sd)
    <All keys matched successfully>

``load_state_dict`` also takes NumPy arrays (or anything with ``__array__``, e.g. a CPU
``torch.Tensor``) as values, so a converted PyTorch checkpoint loads directly.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import RemovableHandle
from scriptmod.nn._module_hooks import WrappedHook, _add_hook
from scriptmod.nn.parameter import Parameter, is_lazy
from scriptmod.tensor import Size, Tensor

if TYPE_CHECKING:
    from scriptmod.nn.module import Module

_EXTRA_STATE_KEY_SUFFIX = "_extra_state"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``(missing_keys, unexpected_keys)`` returned by ``load_state_dict``."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def as_tensor_value(value: Any) -> Any:
    """A checkpoint value as a scriptmod Tensor (NumPy arrays and array-likes convert);
    anything else is returned unchanged so the caller can report it."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        return Tensor._make(np.asarray(value))
    if hasattr(value, "__array__") and hasattr(value, "shape"):
        if hasattr(value, "detach"):
            value = value.detach()
        if hasattr(value, "cpu"):
            value = value.cpu()
        if str(getattr(value, "dtype", "")).endswith("bfloat16") and hasattr(value, "view"):
            import sys         # a torch bfloat16 tensor: NumPy has none, so reinterpret bits
            import ml_dtypes
            int16 = sys.modules["torch"].int16
            return Tensor._make(value.view(int16).numpy().view(ml_dtypes.bfloat16))
        return Tensor._make(np.asarray(value))
    return value


def _public_state_dict_hook(hook: Callable) -> Callable:
    def wrapped(module: "Module", destination: Any, prefix: str, local_metadata: Any) -> None:
        if hook(module, destination, prefix, local_metadata) is not None:
            raise RuntimeError("state_dict post-hook must return None")
    return wrapped


def _shape(t: Any) -> Any:
    return Size(tuple(t.shape))


class StateMixin:
    """State-dict saving and loading for ``Module``."""

    _version: int

    # ---- hooks ----------------------------------------------------------------------------
    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, prefix, keep_vars)`` before ``state_dict`` saves this module."""
        return _add_hook(self._state_dict_pre_hooks, hook, False)

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata) -> None``; may edit the dict."""
        return _add_hook(self._state_dict_hooks, _public_state_dict_hook(hook), False)

    def _register_state_dict_hook(self, hook: Callable) -> RemovableHandle:
        """The older private form: the hook may return a new dict."""
        return _add_hook(self._state_dict_hooks, hook, False)

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before this module loads; may edit ``state_dict``."""
        return _add_hook(self._load_state_dict_pre_hooks, WrappedHook(hook, self), False)

    def _register_load_state_dict_pre_hook(self, hook: Callable, with_module: bool = False) -> RemovableHandle:
        fn = WrappedHook(hook, self) if with_module else hook
        return _add_hook(self._load_state_dict_pre_hooks, fn, False)

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, incompatible_keys) -> None``; may clear entries of the key lists."""
        return _add_hook(self._load_state_dict_post_hooks, hook, False)

    # ---- extra state ------------------------------------------------------------------------
    def get_extra_state(self) -> Any:
        """Override (with :meth:`set_extra_state`) to store non-tensor state under the
        ``'<prefix>_extra_state'`` key."""
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be "
                           "called. Please override get_extra_state() in your module.")

    def set_extra_state(self, state: Any) -> None:
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be "
                           "called. Please override set_extra_state() in your module.")

    def _has_extra_state(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(StateMixin, method)

    # ---- saving -------------------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:   # a lazy parameter is kept as is, as in PyTorch
                destination[prefix + name] = param if keep_vars or is_lazy(param) else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if self._has_extra_state("get_extra_state"):
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Every parameter and persistent buffer by dotted name, in registration order
        (detached unless ``keep_vars``)."""
        if args:   # the deprecated positional form state_dict(destination, prefix, keep_vars)
            destination = args[0] if len(args) > 0 else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()  # type: ignore[attr-defined]
        local_metadata = dict(version=self._version)
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if result is not None:
                destination = result
        return destination

    # ---- loading ------------------------------------------------------------------------------
    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                 error_msgs)
        local_state = {k: v for k, v in self._parameters.items() if v is not None}
        local_state.update((k, v) for k, v in self._buffers.items()
                           if v is not None and k not in self._non_persistent_buffers_set)
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key in state_dict:
                self._load_one(name, key, param, state_dict[key], assign, error_msgs)
            elif strict:
                missing_keys.append(key)
        self._load_extra_state(state_dict, prefix, strict, missing_keys, unexpected_keys)
        if strict:
            extra_key = prefix + _EXTRA_STATE_KEY_SUFFIX
            for key in state_dict.keys():
                if key.startswith(prefix) and key != extra_key:
                    parts = key[len(prefix):].split(".", 1)
                    if len(parts) > 1:
                        if parts[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif parts[0] not in local_state:
                        unexpected_keys.append(key)

    def _load_one(self, name: str, key: str, param: Any, value: Any, assign: bool,
                  error_msgs: list[str]) -> None:
        value = as_tensor_value(value)
        if not isinstance(value, Tensor):
            error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor '
                              f"or Tensor-like object from checkpoint but received {type(value)}")
            return
        if is_lazy(value):
            return    # an unbuilt checkpoint entry leaves the parameter as it is
        lazy = is_lazy(param)
        if not lazy and len(param.shape) == 0 and len(value.shape) == 1:
            value = value[0]    # PyTorch's backward-compatibility rule for 0-d params
        if not lazy and tuple(value.shape) != tuple(param.shape):
            error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                              f"{_shape(value)} from checkpoint, the shape in current model is "
                              f"{_shape(param)}.")
            return
        try:
            with grad_mode.no_grad():
                if assign:
                    self._assign_one(name, param, value)
                elif lazy:
                    param.materialize(tuple(value.shape), dtype=value.dtype)
                    param.copy_(value)
                else:
                    param.copy_(value)
        except Exception as ex:
            error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the '
                              f"model are {_shape(param)} and whose dimensions in the checkpoint "
                              f"are {_shape(value)}, an exception occurred : {ex.args}.")

    def _assign_one(self, name: str, param: Any, value: "Tensor") -> None:
        if isinstance(param, Parameter):
            if not isinstance(value, Parameter):
                value = Parameter(value, requires_grad=param.requires_grad)
            else:
                value.requires_grad_(param.requires_grad)
        setattr(self, name, value)

    def _load_extra_state(self, state_dict: dict, prefix: str, strict: bool,
                          missing_keys: list[str], unexpected_keys: list[str]) -> None:
        key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if self._has_extra_state("set_extra_state"):
            if key in state_dict:
                self.set_extra_state(state_dict[key])
            elif strict:
                missing_keys.append(key)
        elif strict and key in state_dict:
            unexpected_keys.append(key)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy ``state_dict`` into this module's parameters and buffers. With ``strict``,
        one ``RuntimeError`` lists every missing, unexpected and mis-shaped key; ``assign``
        puts the given tensors in place instead of copying into the existing ones."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list[str] = []
        unexpected: list[str] = []
        errors: list[str] = []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata  # type: ignore[attr-defined]
        self._load_recursive(state_dict, "", metadata, assign, missing, unexpected, errors)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                self.__class__.__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_recursive(self, local_sd: dict, prefix: str, metadata: Any, assign: bool,
                        missing: list[str], unexpected: list[str], errors: list[str]) -> None:
        local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        self._load_from_state_dict(local_sd, prefix, local_metadata, True, missing, unexpected,
                                   errors)
        for name, child in self._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                child_sd = {k: v for k, v in local_sd.items() if k.startswith(child_prefix)}
                child._load_recursive(child_sd, child_prefix, metadata, assign, missing,
                                      unexpected, errors)
        keys = _IncompatibleKeys(missing, unexpected)
        for hook in self._load_state_dict_post_hooks.values():
            out = hook(self, keys)
            if out is not None:
                raise RuntimeError("Hooks registered with ``register_load_state_dict_post_hook`` "
                                   "are not expected to return new values, if incompatible_keys "
                                   "need to be modified, it should be done inplace.")
