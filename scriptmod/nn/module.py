"""``nn.Module``: the base class of every layer and model, with PyTorch's semantics.

A module owns three ordered registries filled by attribute assignment: ``_parameters``
(``Parameter`` or None), ``_buffers`` (``Tensor`` or None; some non-persistent) and
``_modules`` (child ``Module`` or None). Everything else (traversal, ``state_dict``, casts,
hooks) walks those registries in insertion order, so names and orders match PyTorch's.

    >>> class MLP(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(4, 2)
    ...         self.register_buffer("steps", scriptmod.zeros(()))
    ...     def forward(self, x):
    ...         return self.fc(x)
    >>> list(MLP().state_dict())
    ['steps', 'fc.weight', 'fc.bias']

The responsibilities are split over mixins: ``_module_state`` (state dicts),
``_module_hooks`` (hooks and ``__call__``), ``_module_ivy`` (explicit variables, lazy build,
``show_graph``, ``save_weights``). This file holds registration, lookup, traversal, modes,
casts and ``repr``.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Iterator, TypeVar

from scriptmod import _device, _memory_format
from scriptmod._creation import empty_like
from scriptmod.autograd import grad_mode
from scriptmod.nn._compiler import compiler
from scriptmod.nn._module_hooks import (HooksMixin, register_module_forward_hook,  # noqa: F401
                                        register_module_forward_pre_hook,
                                        register_module_full_backward_hook,
                                        register_module_full_backward_pre_hook)
from scriptmod.nn._module_ivy import IvyMixin
from scriptmod.nn._module_state import StateMixin
from scriptmod.nn._module_variables import ATTRIBUTES, check_options
from scriptmod.nn.parameter import Buffer, Parameter, is_lazy
from scriptmod.runtime.arrays import require_cuda
from scriptmod.tensor import Tensor, _parse_to

T = TypeVar("T", bound="Module")

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook"]


def _typename(obj: Any) -> str:
    """``torch.typename``: 'scriptmod.FloatTensor' for tensors, 'pkg.mod.Class' otherwise."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module, qualname = obj.__class__.__module__ or "", obj.__class__.__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(num_spaces * " " + line for line in lines)


def _forward_unimplemented(self: "Module", *input: Any) -> None:
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')


class Module(StateMixin, HooksMixin, IvyMixin):
    """Base class for all neural network modules; subclass it and define ``forward``.

        >>> class Net(Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = Parameter(scriptmod.ones(3))
        ...     def forward(self, x):
        ...         return x * self.w
        >>> Net()(scriptmod.ones(3))
        tensor([1., 1., 1.], grad_fn=<MulBackward0>)

    Beyond PyTorch (see ``_module_ivy``): ``module(x, v={'w': t})`` runs with other tensors;
    lazy layers override ``_build(self, *inputs) -> bool | None`` to materialize their
    ``UninitializedParameter`` members, run according to ``build_mode`` ('on_call' default,
    'on_init', 'explicit') with ``build(*example_inputs)`` and ``built``; ``show_graph``;
    ``save_weights``/``load_weights`` (safetensors).
    """

    dump_patches: bool = False
    _version: int = 1
    training: bool
    call_super_init: bool = False
    forward: Callable[..., Any] = _forward_unimplemented

    def __init__(self, *args: Any, device: Any = None, v: Any = None, buffers: Any = None,
                 build_mode: str | None = None, store_vars: bool = True,
                 with_partial_v: bool = False, dynamic_backend: Any = None,
                 training: bool | None = None, dtype: Any = None, **kwargs: Any) -> None:
        """PyTorch's ``Module()``; the keywords are Ivy's (see ``_module_variables``), applied
        once the outermost ``__init__`` has created the parameters. ``dynamic_backend`` is
        accepted for Ivy's signature and has no effect (scriptmod has one backend)."""
        if self.call_super_init is False and kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                            f"'{next(iter(kwargs))}'")
        if self.call_super_init is False and args:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument but "
                            f"{len(args) + 1} were given")
        s = super().__setattr__
        s("training", True)
        s("_parameters", {})
        s("_buffers", {})
        s("_non_persistent_buffers_set", set())
        s("_modules", {})
        self._init_hook_dicts()
        ivy = {k: val for k, val, default in (
            ("device", device, None), ("v", v, None), ("buffers", buffers, None),
            ("build_mode", build_mode, None), ("store_vars", store_vars, True),
            ("with_partial_v", with_partial_v, False), ("training", training, None),
            ("dtype", dtype, None)) if val is not default}
        if ivy:
            check_options(ivy)
            s("_ivy_init", ivy)
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    # ---- registration -----------------------------------------------------------------
    def _check_member_name(self, kind: str, name: Any, registry: dict) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f"{kind} name can't contain \".\"")
        if name == "":
            raise KeyError(f"{kind} name can't be empty string \"\"")
        if _has_attr(self, name) and name not in registry:
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register a tensor that is state but not a parameter (``BatchNorm.running_mean``);
        ``persistent=False`` keeps it out of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_member_name("buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)
        self._note_lazy(tensor)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a ``Parameter`` or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_member_name("parameter", name, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as a "
                             "function of another Tensor, compute the value in the forward() method.")
        self._parameters[name] = param
        self._note_lazy(param)

    def _note_lazy(self, t: Any) -> None:
        if t is not None and is_lazy(t):
            object.__setattr__(self, "_lazy_pending", True)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` as a child named ``name`` (same as ``self.name = module``)."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if _has_attr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f"module name can't contain \".\", got: {name}")
        if name == "":
            raise KeyError("module name can't be empty string \"\"")
        self._modules[name] = module

    def register_module(self, name: str, module: "Module | None") -> None:
        """Alias for :meth:`add_module`."""
        self.add_module(name, module)

    # ---- attribute protocol -----------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            members = d.get(registry)
            if members is not None and name in members:
                return members[name]
        ivy_attribute = ATTRIBUTES.get(name)    # v, module_dict, device, dtype: Ivy's view
        if ivy_attribute is not None and "_parameters" in d:
            return ivy_attribute(self)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_from(name, d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            self._setattr_module_or_buffer(name, value)

    def _setattr_module_or_buffer(self, name: str, value: Any) -> None:
        d = self.__dict__
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_from(name, d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = value
        else:
            buffers = d.get("_buffers")
            if isinstance(value, Buffer) or (buffers is not None and name in buffers):
                if value is not None and not isinstance(value, Tensor):
                    raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                    "(torch.nn.Buffer, torch.Tensor or None expected)")
                persistent = (value.persistent if isinstance(value, Buffer)
                              else name not in self._non_persistent_buffers_set)
                self.register_buffer(name, value, persistent)
            else:
                if name == "build_mode":
                    self._check_build_mode(value)
                object.__setattr__(self, name, value)
                if name == "build_mode" and value == "on_init":
                    self._build_without_inputs()

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            super().__delattr__(name)

    def __dir__(self) -> list[str]:
        keys = (dir(self.__class__) + list(self.__dict__) + list(self._parameters)
                + list(self._modules) + list(self._buffers))
        return sorted(k for k in keys if not k[0].isdigit())

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __deepcopy__(self, memo: dict) -> "Module":
        # Plain tensors refuse __reduce__ (no pickling), so seed the memo with buffer copies.
        for m in self.modules():
            for b in m._buffers.values():
                if b is not None and id(b) not in memo and not isinstance(b, Parameter):
                    memo[id(b)] = b.detach().clone().requires_grad_(b.requires_grad)
        cls = type(self)
        out = cls.__new__(cls)
        memo[id(self)] = out
        for k, v in self.__dict__.items():
            object.__setattr__(out, k, copy.deepcopy(v, memo))
        return out

    # ---- lookups ------------------------------------------------------------------------
    def _get_name(self) -> str:
        return self.__class__.__name__

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ('' is ``self``), e.g. ``'net.0.conv'``."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not _has_attr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module: "Module", strict: bool = False) -> None:
        """Replace (or with ``strict=False`` add) the submodule at dotted path ``target``."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        atoms = target.split(".")
        if not isinstance(module, Module):
            raise ValueError("`module` is not an nn.Module, found " + str(type(module)))
        parent = self if len(atoms) == 1 else self.get_submodule(".".join(atoms[:-1]))
        if strict and not _has_attr(parent, atoms[-1]):
            raise AttributeError(parent._get_name() + " has no attribute `" + atoms[-1] + "`")
        if _has_attr(parent, atoms[-1]):
            mod = getattr(parent, atoms[-1])
            if not isinstance(mod, Module):
                raise AttributeError("`" + atoms[-1] + "` is not an nn.Module")
        setattr(parent, atoms[-1], module)

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target``, e.g. ``'fc.weight'``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not _has_attr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``, e.g. ``'bn.running_mean'``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not _has_attr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        buffer = getattr(mod, name)
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return buffer

    # ---- traversal ----------------------------------------------------------------------
    def _named_members(self, get_members: Callable[["Module"], Any], prefix: str = "",
                       recurse: bool = True, remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        memo: set[int] = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or id(v) in memo:
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield module_prefix + ("." if module_prefix else "") + k, v

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter (each shared one once), in registration order."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` pairs, e.g. ``('fc.weight', Parameter)``."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                       remove_duplicate)

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        memo: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """Pre-order ``(dotted name, module)`` pairs starting with ``('', self)``."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                            remove_duplicate)

    def apply(self: T, fn: Callable[["Module"], None]) -> T:
        """Call ``fn`` on every submodule (children first) and then on ``self``."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ----------------------------------------------------------
    def train(self: T, mode: bool = True) -> T:
        """Set training mode on this module and every descendant."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self: T) -> T:
        return self.train(False)

    def requires_grad_(self: T, requires_grad: bool = True) -> T:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None, or to zeros with ``set_to_none=False``)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    # ---- devices and dtypes -----------------------------------------------------------
    def _apply(self: T, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> T:
        """Apply ``fn`` to every parameter, gradient and buffer. Parameters and gradients keep
        their identity (their data is swapped), as with ``torch.nn.Module._apply``."""
        if recurse:
            for module in self.children():
                module._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with grad_mode.no_grad():
                applied = fn(param)
            param.data = applied
            if param.grad is not None:
                with grad_mode.no_grad():
                    param.grad.data = fn(param.grad)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def to(self: T, *args: Any, **kwargs: Any) -> T:
        """``to(device=None, dtype=None, non_blocking=False)``, ``to(dtype)``, ``to(tensor)``,
        ``to(memory_format=scriptmod.channels_last)``. Only floating and complex parameters
        and buffers change dtype, only 4-d and 5-d ones memory format (as in torch); the
        module is changed in place and returned."""
        kwargs = dict(kwargs)
        fmt = kwargs.pop("memory_format", None)
        if fmt is not None:
            _memory_format.check(fmt, "Module.to()")
        device, dtype, _ = _parse_to(args, kwargs)
        if dtype is not None:
            if not (dtype.is_floating_point or dtype.is_complex):
                raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but "
                                f"got desired dtype={dtype}")
            if dtype.is_complex:
                warnings.warn("Complex modules are a new feature under active development whose "
                              "design may change, and some modules might not work as expected "
                              "when using complex tensors as parameters or buffers.")
        if device is not None:
            device = _checked_device(device)

        def convert(t: Tensor) -> Tensor:
            keep = t.is_floating_point() or t.is_complex()
            if fmt is not None and t.dim() in (4, 5):
                return t.to(device, dtype if keep else None, memory_format=fmt)
            return t.to(device, dtype if keep else None)
        return self._apply(convert)

    def cpu(self: T) -> T:
        return self._apply(lambda t: t.cpu())

    def cuda(self: T, device: Any = None) -> T:
        """Move every parameter and buffer to a CUDA device (a clear error without one)."""
        d = "cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device)
        dev = _checked_device(d)
        return self._apply(lambda t: t.to(dev))

    def xpu(self: T, device: Any = None) -> T:
        raise RuntimeError("Module.xpu(): the 'xpu' device is not supported by scriptmod "
                           "(supported devices: 'cpu', 'cuda')")

    def ipu(self: T, device: Any = None) -> T:
        raise RuntimeError("Module.ipu(): the 'ipu' device is not supported by scriptmod "
                           "(supported devices: 'cpu', 'cuda')")

    def mtia(self: T, device: Any = None) -> T:
        raise RuntimeError("Module.mtia(): the 'mtia' device is not supported by scriptmod "
                           "(supported devices: 'cpu', 'cuda')")

    def type(self: T, dst_type: Any) -> T:
        """Cast every parameter and buffer (integer ones too) to ``dst_type``."""
        return self._apply(lambda t: t.type(dst_type))

    def _float_cast(self: T, method: str) -> T:
        return self._apply(lambda t: getattr(t, method)() if t.is_floating_point() else t)

    def float(self: T) -> T:
        return self._float_cast("float")

    def double(self: T) -> T:
        return self._float_cast("double")

    def half(self: T) -> T:
        return self._float_cast("half")

    def bfloat16(self: T) -> T:
        return self._float_cast("bfloat16")

    def to_empty(self: T, *, device: Any, recurse: bool = True) -> T:
        """Move to ``device`` with uninitialized storage (for modules built on 'meta')."""
        dev = _checked_device(device)
        return self._apply(lambda t: empty_like(t, device=dev), recurse=recurse)

    def share_memory(self: T) -> T:
        """Kept for API parity: CPU arrays already live in this process's memory and
        scriptmod has no multiprocessing tensor sharing, so this only calls
        ``Tensor.share_memory_`` where the tensor class provides it."""
        return self._apply(lambda t: t.share_memory_() if hasattr(t, "share_memory_") else t)

    # ---- compilation --------------------------------------------------------------------
    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compile this module's ``forward`` in place (traced on the first call); the
        module keeps its hooks, parameters and mode. Options go to ``scriptmod.jit.trace``."""
        if args:
            raise TypeError("Module.compile() takes keyword options only (passed to jit.trace)")
        compiler("Module.compile").compile_in_place(self, **kwargs)

    # ---- repr ---------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The one-line (or multi-line) summary printed inside ``Name(...)``; override it."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(" + key + "): " + _addindent(repr(module), 2)
                       for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def _has_attr(obj: Any, name: str) -> bool:
    """``hasattr`` as PyTorch sees it: Ivy's fallback attributes (``v``, ``device``, ...) do
    not count, so those names register and resolve exactly as in PyTorch."""
    if name not in ATTRIBUTES:
        return hasattr(obj, name)
    d = obj.__dict__
    return name in d or hasattr(type(obj), name) or any(
        name in (d.get(r) or ()) for r in ("_parameters", "_buffers", "_modules"))


def _remove_from(name: str, *dicts_or_sets: Any) -> None:
    for d in dicts_or_sets:
        if name in d:
            if isinstance(d, dict):
                del d[name]
            else:
                d.discard(name)


def _checked_device(device: Any) -> str:
    """'cpu' or 'cuda:N'; a clear error for a CUDA device that this machine lacks."""
    if isinstance(device, str) and device.split(":")[0] in ("xpu", "ipu", "mtia", "mps"):
        raise RuntimeError(f"device {device!r} is not supported by scriptmod "
                           "(supported devices: 'cpu', 'cuda')")
    canon = _device.canonical(device)
    if canon.startswith("cuda"):
        require_cuda(canon)
    return canon
