"""Which dims of a trace are symbolic: ``trace(..., dynamic_dims=..., dynamic=...)``.

Three ways a dim becomes symbolic (named, so one specialization serves every size of it):

- by default, dim 0 of the inputs whose dim 0 is the example's batch is ``B``
  (``_batch_dims``), and any other dim becomes symbolic when a second distinct size of it
  is seen (*automatic dynamic shapes*, torch.compile's rule: ``Executor._widen``);
- ``dynamic_dims={"x": {0: "B", 1: "T"}}`` names exactly those dims of those arguments
  (a list of dims, ``{"x": [1]}``, names them ``s0``, ``s1``, ...); the batch rule does not
  apply to that method, automatic dynamic shapes still do;
- ``dynamic=True`` names every dim of every tensor argument but those of example size 0 or 1
  (dims of equal example size share a name, PyTorch's "duck sizing"); ``dynamic=False`` names none and turns automatic
  dynamic shapes off: every size specializes concretely.

A dim that a size check of the trace pins (``range(x.size(1))`` unrolled, ``if
x.size(1) == 8``) stays concrete, with a ``TracerWarning`` naming it.

    >>> explicit_dims(["x", "mask"], [(8, 16, 4), (16,)], {"x": {1: "T"}, "mask": [0]}, None)
    [{1: 'T'}, {0: 's0'}]
    >>> explicit_dims(["x"], [(8, 16, 16)], None, True)
    [{0: 's0', 1: 's1', 2: 's1'}]
"""
from __future__ import annotations

import keyword
from typing import Any, Mapping, Sequence

from scriptmod.jit._batch_dims import Named

RESERVED = frozenset({"max", "min"})    # function names inside symbolic dim expressions


def check_dynamic(dynamic: Any, dynamic_dims: Any) -> None:
    """The two arguments' own types, before anything is traced."""
    if dynamic is not None and type(dynamic) is not bool:
        raise TypeError(f"trace: dynamic must be True, False or None, got "
                        f"{type(dynamic).__name__} ({dynamic!r})")
    if dynamic_dims is not None and not isinstance(dynamic_dims, Mapping):
        raise TypeError(f"trace: dynamic_dims must be a dict of argument name -> dims (a dict "
                        f"dim -> name, or a list of dims), got {type(dynamic_dims).__name__}")
    if dynamic is not None and dynamic_dims is not None:
        raise ValueError("trace: pass dynamic_dims or dynamic, not both (dynamic=True names "
                         "every dim, dynamic=False none)")


def explicit_dims(names: Sequence[str], shapes: Sequence[tuple | None],
                  dynamic_dims: Mapping[Any, Any] | None, dynamic: bool | None) -> Named | None:
    """Per graph input (``names``, the example ``shapes``; None for a non-tensor), the dims
    to name; None when the default rule (the batch dim) applies."""
    if dynamic is False:
        return [None] * len(names)
    if dynamic:
        return _duck(shapes)
    if dynamic_dims is None:
        return None
    out: Named = [None] * len(names)
    counter = [0]
    for key, dims in dynamic_dims.items():
        i = _input_index(key, names)
        shape = shapes[i]
        if shape is None:
            raise TypeError(f"trace: dynamic_dims[{key!r}]: argument {names[i]!r} is not a "
                            f"Tensor, only a Tensor's dims can be symbolic")
        out[i] = _dims_of(key, dims, len(shape), counter)
    _check_alike(out, shapes, names)
    return out


def _input_index(key: Any, names: Sequence[str]) -> int:
    if type(key) is int:
        if not -len(names) <= key < len(names):
            raise IndexError(f"trace: dynamic_dims: argument position {key} is out of range "
                             f"for {len(names)} traced input(s)")
        return key % len(names)
    if isinstance(key, str) and key in names:
        return list(names).index(key)
    raise ValueError(f"trace: dynamic_dims: {key!r} is not an argument of the traced method "
                     f"(its tensor inputs: {', '.join(map(repr, names)) or 'none'})")


def _dims_of(key: Any, dims: Any, rank: int, counter: list[int]) -> dict[int, str]:
    """One argument's entry: ``{dim: name}`` or a list of dims (named ``s0``, ``s1``, ...)."""
    if isinstance(dims, Mapping):
        pairs = list(dims.items())
    elif isinstance(dims, (list, tuple, set, frozenset)) or type(dims) is int:
        listed = [dims] if type(dims) is int else sorted(dims) if isinstance(
            dims, (set, frozenset)) else list(dims)
        pairs = []
        for d in listed:
            pairs.append((d, f"s{counter[0]}"))
            counter[0] += 1
    else:
        raise TypeError(f"trace: dynamic_dims[{key!r}] must be a dict dim -> name or a list of "
                        f"dims, got {type(dims).__name__}")
    out: dict[int, str] = {}
    for d, name in pairs:
        if type(d) is not int:
            raise TypeError(f"trace: dynamic_dims[{key!r}]: a dim must be an int, got "
                            f"{type(d).__name__} ({d!r})")
        if not -rank <= d < rank:
            raise IndexError(f"trace: dynamic_dims[{key!r}]: dim {d} is out of range for a "
                             f"Tensor of rank {rank}")
        if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
                and name not in RESERVED and len(name) <= 64):
            raise ValueError(f"trace: dynamic_dims[{key!r}][{d}]: a dim's name must be a Python "
                             f"identifier (not a keyword, 'max' or 'min'), got {name!r}")
        out[d % rank] = name
    return out


def _check_alike(named: Named, shapes: Sequence[tuple | None], names: Sequence[str]) -> None:
    """Dims named alike are one size: their example sizes must agree."""
    seen: dict[str, tuple[str, int, int]] = {}
    for i, dims in enumerate(named):
        for j, name in (dims or {}).items():
            size = shapes[i][j]                       # type: ignore[index]
            was = seen.setdefault(name, (names[i], j, size))
            if was[2] != size:
                raise ValueError(f"trace: dynamic_dims names dim {j} of {names[i]!r} (size "
                                 f"{size}) and dim {was[1]} of {was[0]!r} (size {was[2]}) "
                                 f"alike ({name!r}), but the example sizes differ")


def _duck(shapes: Sequence[tuple | None]) -> Named:
    """Every dim named; dims of one example size share a name (``s0``, ``s1``, ...)."""
    by_size: dict[int, str] = {}
    out: Named = []
    for shape in shapes:
        if shape is None:
            out.append(None)
            continue
        out.append({j: by_size.setdefault(n, f"s{len(by_size)}") for j, n in enumerate(shape)
                    if n >= 2} or None)
    return out


def pinned_warning(where: str, names: Sequence[str], pinned: Sequence[tuple[int, int]]) -> str:
    """The TracerWarning text for dims asked symbolic that a guard of the trace pins."""
    dims = ", ".join(f"dim {j} of {names[i]!r}" for i, j in pinned)
    return (f"trace of {where}: {dims} stay{'s' if len(pinned) == 1 else ''} concrete: a size "
            f"check the trace recorded (a Python decision on the size, such as range(x.size(1)) "
            f"or an if on it) holds only at the traced size, so each size specializes")
