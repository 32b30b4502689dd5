"""Batch classes (``_executor``'s module docstring): the key that lets every batch size of a
traced method after the first share one symbolic specialization, and the checks that decide
whether a symbolic graph may serve them."""
from __future__ import annotations

from scriptmod.ir.graph import Graph
from scriptmod.ir.symdims import symbols
from scriptmod.ir.types import TensorType


def is_tensor_entry(e: object) -> bool:
    """Whether a signature entry (``_executor.signature``) or batch-class entry is a
    tensor's (dtype, shape, device, requires_grad); a tuple argument's entry is a tuple of
    entries, another argument's a (type, value) pair."""
    return isinstance(e, tuple) and len(e) == 4 and isinstance(e[1], tuple) and \
        all(isinstance(d, (int, str)) for d in e[1])


def batch_class(sig: tuple, dims: tuple) -> tuple | None:
    """``sig`` (``signature``) with each size at a symbolic dim (``dims``: per argument, a
    name or None per dim) replaced by its name; None when no such size is >= 2 or when two
    dims of one name differ (those calls specialize concretely). A named dim of size 0 or 1
    keeps its size (it broadcasts and empties differently: PyTorch's 0/1 specialization),
    unless the same name is >= 2 elsewhere in the call (then the call is concrete)."""
    out, sizes, small = list(sig), {}, set()
    for i, names in enumerate(dims):
        if names is None or i >= len(sig):
            continue
        entry = sig[i]
        if not is_tensor_entry(entry) or len(entry[1]) != len(names):
            return None
        shape = list(entry[1])
        for j, name in enumerate(names):
            if name is not None:
                n = shape[j]
                if n < 2:
                    small.add(name)
                    continue
                if sizes.setdefault(name, n) != n:
                    return None
                shape[j] = name
        out[i] = (entry[0], tuple(shape), entry[2], entry[3])
    return tuple(out) if sizes and not small & sizes.keys() else None


def class_dims(csig: tuple) -> tuple:
    """Per argument of a batch class's signature, the names at its symbolic dims (None
    where a dim is a size, or for an argument with none)."""
    out = []
    for entry in csig:
        shape = entry[1] if is_tensor_entry(entry) else ()
        names = tuple(d if isinstance(d, str) else None for d in shape)
        out.append(names if any(names) else None)
    return tuple(out)


def named_sizes(sig: tuple, dims: tuple) -> tuple:
    """((name, size), ...) of the symbolic dims in a signature of the batch class."""
    found: dict[str, int] = {}
    for entry, names in zip(sig, dims):
        for name, n in zip(names or (), entry[1] if names else ()):
            if name is not None:
                found.setdefault(name, n)
    return tuple(found.items())


def typed_in(graph: Graph, names: set) -> bool:
    """Whether every tensor of ``graph`` (fusion subgraphs too) has each dim a size or an
    expression over the batch class's ``names`` (``B``, ``B*T``, ``T - 1``): then shape propagation checked every op for all sizes
    of the class, and no call can fail inside on a shape (a dim of unknown size, from a
    size-dependent slice say, is checked only per concrete size)."""
    def typed(g: Graph) -> bool:
        for v in list(g.inputs) + [o for n in g.walk() for o in n.outputs]:
            t = v.type
            if isinstance(t, TensorType) and (t.shape is None or any(
                    not isinstance(d, int) and (d is None or not symbols(d) <= names)
                    for d in t.shape)):
                return False
        return all(typed(n.attrs["subgraph"]) for n in g.walk()
                   if isinstance(n.attrs.get("subgraph"), Graph))
    return typed(graph)
