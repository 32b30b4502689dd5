"""Module hooks and ``Module.__call__``, in PyTorch's order.

``__call__`` runs: lazy build (first call of a lazy layer), forward pre-hooks, backward-hook
setup on the inputs, ``forward``, forward hooks, backward-hook setup on the outputs. Full
backward hooks follow PyTorch's ``BackwardHook``: the module's tensor inputs and outputs go
through an identity ``autograd.Function``; a pre-hook on the output node captures
``grad_output`` (and runs backward pre-hooks), a post-hook on the input node sees
``grad_input`` and calls ``hook(module, grad_input, grad_output)``. Global hooks
(``register_module_forward_hook`` & co.) run before a module's own.

    >>> model, x = nn.Linear(4, 2), scriptmod.ones(1, 4)
    >>> h = model.register_forward_hook(lambda m, args, out: scriptmod.zeros_like(out))
    >>> model(x)                  # what the hook returns replaces the output
    tensor([[0., 0.]])
    >>> h.remove(); bool((model(x) != 0).any())
    True
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import RemovableHandle
from scriptmod.autograd.function import Function
from scriptmod.tensor import Tensor

if TYPE_CHECKING:
    from scriptmod.nn.module import Module

_HOOK_DICTS = ("_backward_pre_hooks", "_backward_hooks", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
               "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


# Bumped by every hook registration and removal (module and global): a compiled module
# compares it once per call and looks for hooked submodules only when it has moved.
HOOK_VERSION = [0]


class ModuleHookHandle(RemovableHandle):
    """A ``RemovableHandle`` keyed by its own id, also clearing the hook's flag dicts."""

    def __init__(self, hooks: dict, extra: tuple[dict, ...] = ()) -> None:
        super().__init__(hooks, None)
        self._key = self.id
        self._extra = extra

    def remove(self) -> None:
        super().remove()
        for d in self._extra:
            d.pop(self.id, None)
        HOOK_VERSION[0] += 1


def has_call_hooks(module: Any) -> bool:
    """Whether calling ``module`` runs hooks of its own (forward, pre, backward)."""
    d = module.__dict__
    return bool(d.get("_forward_hooks") or d.get("_forward_pre_hooks")
                or d.get("_backward_hooks") or d.get("_backward_pre_hooks"))


def _add_hook(hooks: "OrderedDict[int, Callable]", hook: Callable, prepend: bool,
              extra: tuple[dict, ...] = ()) -> ModuleHookHandle:
    HOOK_VERSION[0] += 1
    handle = ModuleHookHandle(hooks, extra)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


class WrappedHook:
    """Calls ``hook(module, *args)``: lets a hook on an autograd node see its module."""

    def __init__(self, hook: Callable, module: "Module") -> None:
        self.hook, self.module = hook, module

    def __call__(self, *args: Any) -> Any:
        return self.hook(self.module, *args)


class _GlobalHooks:
    """Hooks that run on every module call (``register_module_forward_hook`` & co.)."""

    def __init__(self) -> None:
        self.forward_pre_hooks: OrderedDict[int, Callable] = OrderedDict()
        self.forward_hooks: OrderedDict[int, Callable] = OrderedDict()
        self.forward_with_kwargs: dict[int, bool] = {}
        self.always_called: dict[int, bool] = {}
        self.backward_pre_hooks: OrderedDict[int, Callable] = OrderedDict()
        self.backward_hooks: OrderedDict[int, Callable] = OrderedDict()
        self.is_full_backward_hook: bool | None = None

    def any(self) -> bool:
        return bool(self.forward_pre_hooks or self.forward_hooks or self.backward_pre_hooks
                    or self.backward_hooks)


_GLOBAL = _GlobalHooks()


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, args)`` before every module's ``forward`` (before its own pre-hooks)."""
    return _add_hook(_GLOBAL.forward_pre_hooks, hook, False)


def register_module_forward_hook(hook: Callable, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """``hook(module, args, output)`` after every module's ``forward``."""
    h = _add_hook(_GLOBAL.forward_hooks, hook, False,
                  (_GLOBAL.forward_with_kwargs, _GLOBAL.always_called))
    if with_kwargs:
        _GLOBAL.forward_with_kwargs[h.id] = True
    if always_call:
        _GLOBAL.always_called[h.id] = True
    return h


def register_module_full_backward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_output)`` for every module call's backward."""
    return _add_hook(_GLOBAL.backward_pre_hooks, hook, False)


def register_module_full_backward_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_input, grad_output)`` for every module call's backward."""
    if _GLOBAL.is_full_backward_hook is False:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a "
                           "global Module hook. Please use only one of them.")
    _GLOBAL.is_full_backward_hook = True
    return _add_hook(_GLOBAL.backward_hooks, hook, False)


class HooksMixin:
    """Hook registration and the call protocol of ``Module``."""

    _is_full_backward_hook: bool | None

    def _init_hook_dicts(self) -> None:
        s = object.__setattr__
        s(self, "_is_full_backward_hook", None)
        for name in _HOOK_DICTS:
            s(self, name, OrderedDict())

    # ---- registration -------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args) -> None | new_args`` before ``forward``; with ``with_kwargs``
        ``hook(module, args, kwargs) -> None | (new_args, new_kwargs)``."""
        h = _add_hook(self._forward_pre_hooks, hook, prepend,
                      (self._forward_pre_hooks_with_kwargs,))
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[h.id] = True
        return h

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False, always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output) -> None | new_output`` after ``forward`` (with
        ``with_kwargs``: ``hook(module, args, kwargs, output)``). ``always_call`` runs it even
        when ``forward`` raises."""
        h = _add_hook(self._forward_hooks, hook, prepend,
                      (self._forward_hooks_with_kwargs, self._forward_hooks_always_called))
        if with_kwargs:
            self._forward_hooks_with_kwargs[h.id] = True
        if always_call:
            self._forward_hooks_always_called[h.id] = True
        return h

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output) -> None | new_grad_output`` when the gradients of the
        module's outputs are known."""
        return _add_hook(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output) -> None | new_grad_input``, where
        ``grad_input`` are the gradients w.r.t. the module's positional tensor inputs."""
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on "
                               "a single Module. Please use only one of them.")
        self._is_full_backward_hook = True
        return _add_hook(self._backward_hooks, hook, prepend)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """Deprecated: the hook sees the gradients of the last op of ``forward`` only.
        Use :meth:`register_full_backward_hook`."""
        if self._is_full_backward_hook is True:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on "
                               "a single Module. Please use only one of them.")
        warnings.warn("register_backward_hook is deprecated: its hook sees the gradients of the "
                      "last operation of forward only; use register_full_backward_hook instead.",
                      FutureWarning, stacklevel=2)
        self._is_full_backward_hook = False
        return _add_hook(self._backward_hooks, hook, False)

    def _get_backward_hooks(self) -> tuple[list[Callable], list[Callable]]:
        full: list[Callable] = []
        old: list[Callable] = []
        for flag, hooks in ((_GLOBAL.is_full_backward_hook, _GLOBAL.backward_hooks),
                            (self._is_full_backward_hook, self._backward_hooks)):
            if flag is True:
                full += hooks.values()
            elif flag is False:
                old += hooks.values()
        return full, old

    # ---- calling --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if (self._lazy_pending or (kwargs and (kwargs.get("v") is not None
                                               or kwargs.get("buffers") is not None))
                or self.build_mode == "explicit"
                or self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _GLOBAL.any()):
            return self._call_impl(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        v = self._pop_variables(kwargs)
        if v is not None:
            from scriptmod.func import functional_call
            return functional_call(self, v, args, kwargs)
        self._maybe_build(args, kwargs)
        if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _GLOBAL.any()):
            return self.forward(*args, **kwargs)
        state = _CallState(args, kwargs)
        try:
            return self._hooked_call(state)
        except Exception:
            self._run_always_called_hooks(state)
            raise

    def _hooked_call(self, st: "_CallState") -> Any:
        full_hooks, old_hooks = self._get_backward_hooks()
        pre_bw = [*_GLOBAL.backward_pre_hooks.values(), *self._backward_pre_hooks.values()]
        self._run_forward_pre_hooks(st)
        bw_hook = None
        if full_hooks or pre_bw:
            bw_hook = BackwardHook(self, full_hooks, pre_bw)
            st.args = bw_hook.setup_input_hook(st.args)
        st.result = self.forward(*st.args, **st.kwargs)
        for hook_id, hook in [*_GLOBAL.forward_hooks.items(), *self._forward_hooks.items()]:
            if hook_id in self._forward_hooks_always_called or hook_id in _GLOBAL.always_called:
                st.called.add(hook_id)
            out = self._call_forward_hook(hook_id, hook, st)
            if out is not None:
                st.result = out
        if bw_hook is not None:
            if not isinstance(st.result, (Tensor, tuple)):
                warnings.warn("For backward hooks to be called, module output should be a Tensor "
                              f"or a tuple of Tensors but received {type(st.result)}")
            st.result = bw_hook.setup_output_hook(st.result)
        if old_hooks:
            self._attach_old_backward_hooks(st.result, old_hooks)
        return st.result

    def _call_forward_hook(self, hook_id: int, hook: Callable, st: "_CallState") -> Any:
        if hook_id in self._forward_hooks_with_kwargs or hook_id in _GLOBAL.forward_with_kwargs:
            return hook(self, st.args, st.kwargs, st.result)
        return hook(self, st.args, st.result)

    def _run_forward_pre_hooks(self, st: "_CallState") -> None:
        for hook_id, hook in [*_GLOBAL.forward_pre_hooks.items(), *self._forward_pre_hooks.items()]:
            if hook_id in self._forward_pre_hooks_with_kwargs:
                res = hook(self, st.args, st.kwargs)
                if res is None:
                    continue
                if not (isinstance(res, tuple) and len(res) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {res}.")
                st.args, st.kwargs = res
            else:
                res = hook(self, st.args)
                if res is not None:
                    st.args = res if isinstance(res, tuple) else (res,)

    def _run_always_called_hooks(self, st: "_CallState") -> None:
        for hook_id, hook in [*_GLOBAL.forward_hooks.items(), *self._forward_hooks.items()]:
            always = hook_id in self._forward_hooks_always_called or hook_id in _GLOBAL.always_called
            if not always or hook_id in st.called:
                continue
            try:
                out = self._call_forward_hook(hook_id, hook, st)
                if out is not None:
                    st.result = out
            except Exception as e:
                warnings.warn("forward hook with ``always_call=True`` raised an exception that "
                              f"was silenced as another error was raised in forward: {str(e)}")

    def _attach_old_backward_hooks(self, result: Any, hooks: list[Callable]) -> None:
        var = result
        while not isinstance(var, Tensor):
            if isinstance(var, dict):
                var = next(v for v in var.values() if isinstance(v, Tensor))
            else:
                var = var[0]
        if var.grad_fn is not None:
            for hook in hooks:
                var.grad_fn.register_hook(WrappedHook(hook, self))


class _CallState:
    """The mutable state of one hooked call (what PyTorch keeps in closure nonlocals)."""

    __slots__ = ("args", "kwargs", "result", "called")

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.args, self.kwargs, self.result = args, kwargs, None
        self.called: set[int] = set()


class BackwardHookFunction(Function):
    """Identity on tensors; its graph node is where module backward hooks attach."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return grads


class BackwardHook:
    """Wires a module's full backward (pre-)hooks into the autograd graph of one call."""

    def __init__(self, module: "Module", user_hooks: list[Callable],
                 user_pre_hooks: list[Callable]) -> None:
        self.module, self.user_hooks, self.user_pre_hooks = module, user_hooks, user_pre_hooks
        self.grad_outputs: tuple | None = None
        self.n_outputs = -1
        self.output_tensors_index: list[int] | None = None
        self.n_inputs = -1
        self.input_tensors_index: list[int] | None = None

    @staticmethod
    def _pack_with_none(indices: list[int], values: Any, size: int) -> tuple:
        res: list[Any] = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    @staticmethod
    def _unpack_none(indices: list[int], values: Any) -> tuple:
        return tuple(values[idx] for idx in indices)

    def _set_user_hook(self, grad_fn: Any) -> None:
        def hook(grad_input: tuple, _: Any) -> tuple | None:
            if self.grad_outputs is None:
                return None    # the gradient reached the inputs without passing the outputs
            assert self.input_tensors_index is not None
            res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
            for user_hook in self.user_hooks:
                out = user_hook(self.module, res, self.grad_outputs)
                if out is None:
                    continue
                if len(out) != len(res):
                    raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                       f"got {len(out)}, but expected {len(res)}")
                res = out
            self.grad_outputs = None
            return self._unpack_none(self.input_tensors_index, res)
        grad_fn.register_hook(hook)

    def _apply_on_tensors(self, fn: Callable[[Any], None], args: tuple) -> tuple[tuple, list[int] | None]:
        idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in idx]
        if not (any(t.requires_grad for t in tensors) and grad_mode.is_grad_enabled()):
            return args, None
        new = BackwardHookFunction.apply(*tensors)
        grad_fns = [t.grad_fn for t in new
                    if t.grad_fn is not None and t.grad_fn.op == "backwardhookfunction"]
        if not grad_fns:
            raise RuntimeError("Error while setting up backward hooks: no tensor argument is "
                               "differentiable.")
        fn(grad_fns[0])
        out = list(args)
        for i, t in zip(idx, new):
            out[i] = t
        return (tuple(out) if type(args) is tuple else type(args)(*out)), idx

    def setup_input_hook(self, args: tuple) -> tuple:
        res, idx = self._apply_on_tensors(self._set_user_hook, args)
        self.n_inputs, self.input_tensors_index = len(args), idx
        return res

    def setup_output_hook(self, args: Any) -> Any:
        is_tuple = isinstance(args, tuple)
        packed = args if is_tuple else (args,)
        res, idx = self._apply_on_tensors(lambda fn: fn.register_prehook(self._output_prehook),
                                          packed)
        self.n_outputs, self.output_tensors_index = len(packed), idx
        return res if is_tuple else res[0]

    def _output_prehook(self, grad_output: tuple) -> tuple | None:
        assert self.output_tensors_index is not None
        self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output,
                                                 self.n_outputs)
        for pre_hook in self.user_pre_hooks:
            out = pre_hook(self.module, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(self.grad_outputs):
                raise RuntimeError("Backward pre hook returned an invalid number of grad_output, "
                                   f"got {len(out)}, but expected {len(self.grad_outputs)}")
            self.grad_outputs = tuple(out)
        local = self.grad_outputs
        if self.input_tensors_index is None:
            self._call_hooks_without_input_grads()
        return tuple(local[i] for i in self.output_tensors_index)

    def _call_hooks_without_input_grads(self) -> None:
        warnings.warn("Full backward hook is firing when gradients are computed with respect to "
                      "module outputs since no inputs require gradients.", stacklevel=5)
        grad_inputs = self._pack_with_none([], [], self.n_inputs)
        for user_hook in self.user_hooks:
            res = user_hook(self.module, grad_inputs, self.grad_outputs)
            if res is not None and not (isinstance(res, tuple) and all(e is None for e in res)):
                raise RuntimeError("Backward hook for Modules where no input requires gradient "
                                   "should always return None or None for all gradients.")
        self.grad_outputs = None
