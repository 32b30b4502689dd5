"""Rebuilding a list or tuple with new items, keeping its type: a namedtuple (``topk``'s
``(values, indices)``, a user's ``NamedTuple``) takes its items as separate arguments, so
``type(x)(generator)`` raises for it; every place that maps over a nest of values (wrapping
arrays as tensors and back, copying, printing) rebuilds through ``rebuilt``.

    >>> from collections import namedtuple
    >>> Pair = namedtuple("Pair", ["values", "indices"])
    >>> rebuilt(Pair(1, 2), (i * 10 for i in Pair(1, 2)))
    Pair(values=10, indices=20)
    >>> rebuilt([1, 2], (i + 1 for i in [1, 2]))
    [2, 3]
"""
from __future__ import annotations

from typing import Any, Iterable, TypeVar

S = TypeVar("S", list, tuple)


def is_namedtuple(x: Any) -> bool:
    """Whether ``x`` is an instance of a ``collections.namedtuple``/``typing.NamedTuple``
    class (a tuple subclass with ``_fields`` and ``_make``)."""
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make")


def rebuilt(x: S, items: Iterable[Any]) -> S:
    """A container of ``x``'s type holding ``items``: a namedtuple through ``_make``, any
    other list or tuple (subclasses and ``torch.return_types`` included) from the items."""
    if is_namedtuple(x):
        return type(x)._make(items)
    return type(x)(items)
