"""Ivy's view of a Module's state: the constructor keywords (``v=``, ``buffers=``,
``build_mode=``, ``training=``, ``with_partial_v=``, ``store_vars=``, ``device=``,
``dtype=``), the ``v``/``module_dict``/``device``/``dtype`` attributes and the nested
variable dicts they use.

    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    >>> {k: list(v) for k, v in net.v.items()}          # keyed by submodule path, like Ivy
    {'0': ['weight', 'bias']}
    >>> w = {"0": {"weight": scriptmod.ones(3, 2), "bias": scriptmod.zeros(3)}}
    >>> nn.Sequential(nn.Linear(2, 3), v=w).v["0"]["weight"].sum().item()
    6.0

The attributes are looked up only after parameters, buffers and submodules (from
``Module.__getattr__``), so a submodule named ``v`` or an attribute ``self.device = ...`` set
by a subclass wins, and ``repr``, ``state_dict`` keys and the attribute rules stay PyTorch's.
"""
from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from scriptmod import _device as dev
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ShapeError
from scriptmod.nn._module_state import as_tensor_value
from scriptmod.nn.parameter import Parameter, is_lazy
from scriptmod.tensor import Tensor, _dtype_arg

if TYPE_CHECKING:
    from scriptmod.nn.module import Module

#: Constructor keywords of Ivy's ``Module.__init__`` that every scriptmod Module takes.
IVY_KEYWORDS = ("v", "buffers", "build_mode", "store_vars", "with_partial_v", "training",
                "dynamic_backend", "device", "dtype")


class Variables(dict):
    """A nested dict of tensors keyed by submodule path, with attribute access like Ivy's
    Container: ``m.v.fc1.weight`` is ``m.v["fc1"]["weight"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no variable or submodule {name!r} here (keys: "
                                 f"{sorted(self)})") from None


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{'fc': {'weight': t}}`` (or already dotted ``{'fc.weight': t}``) -> ``{'fc.weight': t}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def nest(pairs: Any) -> Variables:
    """``[('fc.weight', t), ...]`` -> ``Variables({'fc': Variables({'weight': t})})``."""
    root = Variables()
    for name, value in pairs:
        *path, leaf = name.split(".")
        node = root
        for part in path:
            node = node.setdefault(part, Variables())
        node[leaf] = value
    return root


# ---- the attributes (resolved by Module.__getattr__ after the registries) -----------------
def _variables(m: "Module") -> Variables:
    return nest(m.named_parameters())


def _module_dict(m: "Module") -> "OrderedDict[str, Module]":
    return OrderedDict((k, c) for k, c in m._modules.items() if c is not None)


def _first_tensor(m: "Module", floating: bool) -> Any:
    for t in (*m.parameters(), *m.buffers()):
        if not is_lazy(t) and (not floating or t.is_floating_point()):
            return t
    return None


def _device(m: "Module") -> Any:
    t = _first_tensor(m, floating=False)
    if t is not None:
        return t.device
    return dev.from_str(m.__dict__.get("_ivy_device") or "cpu")


def _dtype(m: "Module") -> Any:
    t = _first_tensor(m, floating=True)
    if t is not None:
        return t.dtype
    return m.__dict__.get("_ivy_dtype") or D.get_default_dtype()


ATTRIBUTES: dict[str, Callable[["Module"], Any]] = {
    "v": _variables, "module_dict": _module_dict, "device": _device, "dtype": _dtype}


# ---- the constructor keywords ----------------------------------------------------------------
def check_options(opts: dict[str, Any]) -> None:
    """Wrong kinds of value fail at construction, naming the keyword."""
    for key in ("store_vars", "with_partial_v"):
        if key in opts and not isinstance(opts[key], bool):
            raise TypeError(f"Module(): {key} must be a bool, got {opts[key]!r}")
    for key in ("v", "buffers"):
        if opts.get(key) is not None and not isinstance(opts[key], Mapping):
            raise TypeError(f"Module(): {key} must be a (nested) dict of tensors keyed like "
                            f"module.{key}, got {type(opts[key]).__name__}")
    if opts.get("training") is not None and not isinstance(opts["training"], bool):
        raise TypeError(f"Module(): training must be a bool, got {opts['training']!r}")


def apply_options(m: "Module", opts: dict[str, Any]) -> None:
    """Run once, after the outermost ``__init__``: the given variables, then placement
    (``device``/``dtype`` apply to them too), then the build (``'on_init'``), then the mode,
    then ``store_vars=False``."""
    if opts.get("build_mode") is not None:
        m._check_build_mode(opts["build_mode"])
        object.__setattr__(m, "build_mode", opts["build_mode"])
    partial = opts.get("with_partial_v", False)
    if opts.get("v") is not None:
        set_initial(m, opts["v"], partial, "v")
    if opts.get("buffers") is not None:
        set_initial(m, opts["buffers"], partial, "buffers")
    if opts.get("device") is not None or opts.get("dtype") is not None:
        _place(m, opts.get("device"), opts.get("dtype"))
    if m.build_mode == "on_init":
        m._build_without_inputs()
    if opts.get("training") is not None:
        m.train(opts["training"])
    if opts.get("store_vars") is False:
        unstore(m)


def _place(m: "Module", device: Any, dtype: Any) -> None:
    if device is not None:
        object.__setattr__(m, "_ivy_device", dev.canonical(device))
    if dtype is not None:
        object.__setattr__(m, "_ivy_dtype", _dtype_arg(dtype))
    m.to(device=device, dtype=dtype)


def _canonical_names(m: "Module", kind: str) -> dict[str, str]:
    """Every name (tied aliases too) of each parameter or buffer -> its first name."""
    named = m.named_parameters if kind == "v" else m.named_buffers
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, t in named(remove_duplicate=False):
        out[name] = first.setdefault(id(t), name)
    return out


def set_initial(m: "Module", given: Mapping, partial: bool, kind: str) -> None:
    """Replace the created parameters (``kind='v'``) or buffers with ``given``: its keys must
    name them (all of them unless ``partial``) and its tensors must have their shapes."""
    canon = _canonical_names(m, kind)
    flat = flatten(given)
    chosen = {canon[k]: v for k, v in flat.items() if k in canon}
    problems = [f"Unexpected key(s): {', '.join(repr(k) for k in flat if k not in canon)}."] \
        if any(k not in canon for k in flat) else []
    missing = sorted(set(canon.values()) - set(chosen))
    if missing and not partial:
        problems.append(f"Missing key(s): {', '.join(map(repr, missing))} (pass "
                        "with_partial_v=True to keep the created ones).")
    values = {name: _as_tensor(name, v, problems) for name, v in chosen.items()}
    current = {name: _slot(m, name) for name in values}
    for name, t in values.items():
        old = current[name]
        if t is not None and old is not None and not is_lazy(old) and tuple(t.shape) != tuple(old.shape):
            problems.append(f"size mismatch for {name}: given {tuple(t.shape)}, the module "
                            f"created {tuple(old.shape)}.")
    if problems:
        what = "variables (v=)" if kind == "v" else "buffers (buffers=)"
        raise ShapeError(f"Error(s) in setting the initial {what} of {m._get_name()}:\n\t"
                         + "\n\t".join(problems))
    lazy = [sub for sub in m.modules() if sub._own_lazy()]
    values = {name: _registrable(t, _slot(m, name), kind) for name, t in values.items()}
    for alias, name in canon.items():
        if name in values:
            _put(m, alias, values[name], kind)
    _finish_lazy(lazy)


def _slot(m: "Module", name: str) -> Any:
    """The parameter or buffer registered under dotted ``name`` (None when unset)."""
    path, _, leaf = name.rpartition(".")
    owner = m.get_submodule(path)
    return owner._parameters[leaf] if leaf in owner._parameters else owner._buffers.get(leaf)


def _as_tensor(name: str, value: Any, problems: list[str]) -> Any:
    t = as_tensor_value(value)
    if not isinstance(t, Tensor):
        problems.append(f"{name}: expected a tensor, got {type(value).__name__}.")
        return None
    return t


def _registrable(t: Any, old: Any, kind: str) -> Any:
    """A given tensor as a parameter (one object for every tied alias)."""
    if kind == "v" and not isinstance(t, Parameter):
        return Parameter(t, requires_grad=True if old is None else old.requires_grad)
    return t


def _put(m: "Module", name: str, t: Any, kind: str) -> None:
    path, _, leaf = name.rpartition(".")
    owner = m.get_submodule(path)
    (owner._parameters if kind == "v" else owner._buffers)[leaf] = t


def _accepts_no_inputs(fn: Any) -> bool:
    try:
        inspect.signature(fn).bind()
        return True
    except TypeError:
        return False


def _finish_lazy(modules: list) -> None:
    """A lazy layer whose members all came from ``v=`` finishes its build now (``_build()``
    without inputs: a ``LazyLinear`` reads ``in_features`` off its weight)."""
    for sub in modules:
        if not sub._own_lazy() and _accepts_no_inputs(sub._build):
            sub._try_build((), {})


def unstore(m: "Module") -> None:
    """``store_vars=False``: drop the created parameters, so that each call must bring them
    (``module(x, v=...)``); every module of the tree knows which names it then needs."""
    names = [n for n, _ in m.named_parameters(remove_duplicate=False)]
    for name in names:
        path, _, leaf = name.rpartition(".")
        m.get_submodule(path)._parameters[leaf] = None
    for prefix, sub in m.named_modules():
        own = [n[len(prefix) + 1:] if prefix else n for n in names
               if not prefix or n.startswith(prefix + ".")]
        if own:
            object.__setattr__(sub, "_unstored", own)
            object.__setattr__(sub, "_lazy_pending", True)    # route calls through the checks


def check_stored(m: "Module") -> None:
    """A ``store_vars=False`` module called without the variables it needs."""
    missing = [n for n in m.__dict__["_unstored"] if _slot(m, n) is None]
    if missing:
        raise RuntimeError(f"{m._get_name()} was built with store_vars=False, so it does not "
                           f"store its variables: call it with v=... holding "
                           f"{', '.join(missing)} (missing)")
