"""``scriptmod.func``: run a module with other parameters and buffers (``torch.func``).

    >>> from scriptmod.func import functional_call
    >>> model, x = nn.Linear(2, 1), scriptmod.ones(1, 2)
    >>> params = {k: v * 0 for k, v in model.named_parameters()}
    >>> functional_call(model, params, (x,))
    tensor([[0.]], grad_fn=<...>)
    >>> bool((model.weight == 0).all())             # model itself is unchanged
    False

The tensors are swapped into the module's registries for the duration of the call and
restored afterwards, even when ``forward`` raises. Gradients flow to the given tensors.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from scriptmod.nn.module import Module

__all__ = ["functional_call"]

_MISSING = object()


def _merge(params_and_buffers: Any) -> dict[str, Any]:
    if isinstance(params_and_buffers, Mapping):
        return dict(params_and_buffers)
    if isinstance(params_and_buffers, Sequence) and not isinstance(params_and_buffers, str):
        merged: dict[str, Any] = {}
        for d in params_and_buffers:
            for k, v in d.items():
                if k in merged:
                    raise ValueError(f"{k} appeared in multiple dictionaries; behavior of "
                                     "functional call is ambiguous")
                merged[k] = v
        return merged
    raise TypeError("functional_call: expected parameter_and_buffer_dicts to be a dict, or a "
                    f"list/tuple of dicts, but got {type(params_and_buffers)}")


def _tied_names(module: "Module") -> dict[str, list[str]]:
    """Every name of each parameter/buffer that has more than one."""
    names: dict[int, list[str]] = {}
    for get in (module.named_parameters, module.named_buffers):
        for name, t in get(remove_duplicate=False):
            names.setdefault(id(t), []).append(name)
    return {n: group for group in names.values() if len(group) > 1 for n in group}


def _untie(module: "Module", values: dict[str, Any]) -> dict[str, Any]:
    """With tied weights, a value given under one name applies to every alias."""
    out = dict(values)
    tied = _tied_names(module)
    seen: set[str] = set()
    for name in values:
        group = tied.get(name)
        if group is None or name in seen:
            continue
        given = [n for n in group if n in values]
        seen.update(group)
        if any(values[n] is not values[given[0]] for n in given[1:]):
            raise ValueError(f"functional_call got multiple values for keys {given}, which are "
                             "tied. Consider using tie_weights=False")
        for n in group:
            out.setdefault(n, values[given[0]])
    return out


def _check_strict(module: "Module", values: dict[str, Any]) -> None:
    expected = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    expected |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
    missing = sorted(expected - set(values))
    unexpected = sorted(set(values) - expected)
    errors = []
    if unexpected:
        errors.append("Unexpected key(s): {}.".format(", ".join(map(repr, unexpected))))
    if missing:
        errors.append("Missing key(s): {}.".format(", ".join(map(repr, missing))))
    if errors:
        raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(
            module._get_name(), "\n\t".join(errors)))


def _swap(module: "Module", name: str, value: Any) -> Any:
    """Put ``value`` under dotted ``name``; returns what was there (or ``_MISSING``)."""
    path, _, leaf = name.rpartition(".")
    mod = module.get_submodule(path)
    for registry in (mod._parameters, mod._buffers):
        if leaf in registry:
            old = registry[leaf]
            registry[leaf] = value
            return old
    old = mod.__dict__.get(leaf, _MISSING)
    object.__setattr__(mod, leaf, value)
    return old


def _restore(module: "Module", name: str, old: Any) -> None:
    path, _, leaf = name.rpartition(".")
    mod = module.get_submodule(path)
    for registry in (mod._parameters, mod._buffers):
        if leaf in registry:
            registry[leaf] = old
            return
    if old is _MISSING:
        mod.__dict__.pop(leaf, None)
    else:
        object.__setattr__(mod, leaf, old)


@contextlib.contextmanager
def reparametrize(module: "Module", values: dict[str, Any]) -> Iterator[None]:
    """Swap ``values`` into ``module`` for the duration of the block."""
    from scriptmod.nn._module_state import as_tensor_value
    saved: list[tuple[str, Any]] = []
    try:
        for name, value in values.items():
            saved.append((name, _swap(module, name, as_tensor_value(value))))
        yield
    finally:
        for name, old in reversed(saved):
            _restore(module, name, old)


def functional_call(module: "Module", parameter_and_buffer_dicts: Any, args: Any = None,
                    kwargs: dict[str, Any] | None = None, *, tie_weights: bool = True,
                    strict: bool = False) -> Any:
    """Call ``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts``
    (a dict or a sequence of dicts; keys as in ``state_dict``; NumPy arrays accepted) in
    place of the module's. ``strict`` requires exactly the module's parameters and buffers;
    ``tie_weights`` applies a value given for one name of a tied tensor to all its names."""
    values = _merge(parameter_and_buffer_dicts)
    if tie_weights:
        values = _untie(module, values)
    if strict:
        _check_strict(module, values)
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with reparametrize(module, values):
        return module(*args, **kwargs)
