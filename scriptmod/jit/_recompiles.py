"""Why a method got a new specialization: the ``recompiles`` log topic (``SCRIPTMOD_LOG=
recompiles``, as ``TORCH_LOGS=recompiles``) and the profiler's compile event.

The executor calls here only when it builds a specialization (never on a cache hit or the
warm fast path), and only when the topic is on or a profiler runs. The cause is found by
comparing the new key with the method's existing specializations: the nearest one (the
fewest differences) is the one it "was", and each difference is named in the terms of the
executor's guards (``argument 'idx': size 9 at dim 1, was 8``).

    >>> import scriptmod as sm
    >>> why(((sm.float32, (2, 9), "cpu", False),), [((sm.float32, (2, 8), "cpu", False),)],
    ...     ["idx"])
    "argument 'idx': size 9 at dim 1, was 8"
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from scriptmod.jit._batch_class import is_tensor_entry
from scriptmod.jit._specialization import _describe_entry

TOPIC = "recompiles"

_STATE = "module state layout changed (a parameter or buffer replaced, cast or moved)"


def why(new: tuple, existing: Iterable[tuple], arg_names: Sequence[str]) -> str:
    """The cause of a specialization keyed ``new`` (a full key, or a signature alone) given
    the keys of the method's ``existing`` ones: "first call", or the differences from the
    nearest existing key (on a tie, the most recently used)."""
    best: list[str] | None = None
    for old in reversed(list(existing)):
        found = differences(new, old, arg_names)
        if best is None or len(found) < len(best):
            best = found
    if best is None:
        return "first call"
    return "; ".join(best) or "no difference in the key (rebuilt after an eviction)"


def differences(new: tuple, old: tuple, arg_names: Sequence[str]) -> list[str]:
    """Each difference between two keys (signature, fusion variant, module state token,
    hooked submodule paths) as one phrase; a signature alone when both are one."""
    if not _is_full_key(new) or not _is_full_key(old):
        return _signature_diffs(new, old, arg_names)
    out = _signature_diffs(new[0], old[0], arg_names)
    if new[1] != old[1]:
        out.append(f"fusion setting {new[1]}, was {old[1]}")
    if new[2] != old[2]:
        out.append(_STATE)
    if new[3] != old[3]:
        out += _hook_diffs(new[3], old[3])
    return out


def _is_full_key(key: tuple) -> bool:
    return len(key) == 4 and isinstance(key[0], tuple) and isinstance(key[1], str)


def _signature_diffs(new: tuple, old: tuple, names: Sequence[str]) -> list[str]:
    if len(new) != len(old):
        return [f"{len(new)} arguments, was {len(old)}"]
    out: list[str] = []
    for i, (a, b) in enumerate(zip(new, old)):
        name = names[i] if i < len(names) else f"arg{i}"
        out += _entry_diffs(f"'{name}'", a, b)
    return out


def _entry_diffs(label: str, new: Any, old: Any) -> list[str]:
    """The differences of one argument's signature entry (a tuple's items one by one)."""
    if new == old:
        return []
    head = f"argument {label}: "
    if is_tensor_entry(new) and is_tensor_entry(old):
        return [head + d for d in _tensor_diffs(new, old)]
    if is_tensor_entry(new) or is_tensor_entry(old) or len(new) == 2 or len(old) == 2:
        return [head + f"{_describe_entry(new)}, was {_describe_entry(old)}"]
    if len(new) != len(old):
        return [head + f"a tuple of {len(new)}, was {len(old)}"]
    return [d for k, (a, b) in enumerate(zip(new, old))
            for d in _entry_diffs(f"{label[:-1]}[{k}]'", a, b)]


def _tensor_diffs(new: tuple, old: tuple) -> list[str]:
    """dtype, rank or sizes, device, requires_grad: what differs between two tensor entries."""
    (dtype, shape, device, grad), (was_dtype, was_shape, was_device, was_grad) = new, old
    out = []
    if dtype != was_dtype:
        out.append(f"{getattr(dtype, 'name', dtype)}, was {getattr(was_dtype, 'name', was_dtype)}")
    if len(shape) != len(was_shape):
        out.append(f"rank {len(shape)} {_shape(shape)}, was rank {len(was_shape)} "
                   f"{_shape(was_shape)}")
    else:
        out += [_size_diff(d, n, w) for d, (n, w) in enumerate(zip(shape, was_shape))
                if n != w and not (isinstance(w, str) and isinstance(n, int) and n >= 2)]
    if device != was_device:
        out.append(f"on {device}, was on {was_device}")
    if grad != was_grad:
        out.append("requires grad, was not" if grad else "does not require grad, was required")
    return out


def _size_diff(dim: int, n: Any, was: Any) -> str:
    """A size against a concrete one, or against a batch class's symbolic dim (which serves
    every size >= 2 but 0 and 1)."""
    if isinstance(was, str) and isinstance(n, int):
        return f"size {n} at dim {dim}, was any size >= 2 ({was}; sizes 0 and 1 specialize " \
               f"concretely)"
    return f"size {n} at dim {dim}, was {was}"


def _shape(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _hook_diffs(new: tuple, old: tuple) -> list[str]:
    added = [p for p in new if p not in old]
    removed = [p for p in old if p not in new]
    out = []
    if added:
        out.append(f"hooks registered on {', '.join(added)}")
    if removed:
        out.append(f"hooks removed from {', '.join(removed)}")
    return out


def new_spec_line(where: str, held: int, reason: str, symbolic: bool,
                  first: tuple = (), note: str = "") -> str:
    """The log line of a new specialization."""
    if symbolic:
        sizes = ", ".join(f"{n} = {s}" for n, s in first)
        kind = (f"the shared symbolic specialization (every size of its batch class but the "
                f"first, {sizes})")
    else:
        kind = "a concrete specialization"
    return f"{where}: compiling {kind}, {held} held; because: {reason}{note}"


def evicted_line(where: str, key: tuple, arg_names: Sequence[str], limit: int) -> str:
    """The log line of a specialization the LRU dropped."""
    sig = key[0] if _is_full_key(key) else key
    args = ", ".join(f"'{arg_names[i] if i < len(arg_names) else f'arg{i}'}': "
                     f"{_describe_entry(e)}" for i, e in enumerate(sig))
    return (f"{where}: evicted the least recently used specialization ({args}): the limit of "
            f"{limit} specializations per method (MAX_SPECIALIZATIONS) was reached")


UNTYPED = (" (its batch class's shared symbolic specialization cannot serve it: the graph has "
           "dims of unknown size there, so each size compiles)")


def pinned_note(dims: list[str]) -> str:
    """The note of a call whose new symbolic dims could not be: their symbolic
    specialization did not type (the dims meet a fixed size, a weight's, or a size check)."""
    return (f" (automatic dynamic shapes tried {', '.join(dims)} as symbolic, but the graph "
            f"fixes {'it' if len(dims) == 1 else 'them'} (a weight's size or a size check): "
            f"each size specializes)")
