"""Turning a list of samples into a batch (``default_collate``) and, for loaders without
batching, NumPy data into tensors (``default_convert``), by PyTorch's rules.

    >>> import numpy as np, scriptmod as sm
    >>> default_collate([(sm.tensor([1., 2.]), 0), (sm.tensor([3., 4.]), 1)])
    [tensor([[1., 2.],
            [3., 4.]]), tensor([0, 1])]
    >>> default_collate([{"x": 1.5}, {"x": 2.5}])
    {'x': tensor([1.5000, 2.5000], dtype=scriptmod.float64)}
    >>> default_convert(np.array([1, 2], dtype=np.int32))
    tensor([1, 2], dtype=scriptmod.int32)
"""
from __future__ import annotations

import collections.abc
import copy
from typing import Any, Sequence

COLLATE_ERROR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
                 "or lists; found {}")


def _is_numpy(obj: object) -> bool:
    return type(obj).__module__ == "numpy" and type(obj).__name__ not in ("str_", "bytes_")


def _text_array(array: Any) -> bool:
    """NumPy arrays of strings or objects, which never become tensors."""
    return array.dtype.kind in "SaUO"


def _mapping(elem: Any, values: dict) -> Any:
    """``values`` in a mapping of ``elem``'s type where it can be copied, else a dict."""
    try:
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    except TypeError:
        return values


def _sequence(elem: Any, parts: list) -> Any:
    """``parts`` in a sequence of ``elem``'s type (tuples become lists, as in PyTorch)."""
    if isinstance(elem, tuple):
        return parts
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            clone[:] = parts
            return clone
        return type(elem)(parts)
    except TypeError:
        return parts


def default_collate(batch: Sequence[Any]) -> Any:
    """A batch from a list of samples: tensors and NumPy arrays are stacked along a new
    first dimension, Python floats become a float64 tensor, ints (and bools) an int64 (bool)
    tensor, strings stay a list; dicts, namedtuples and other sequences are collated field
    by field (a tuple's fields come back as a list)."""
    import scriptmod
    if not len(batch):
        raise ValueError("default_collate: batch: expected at least one sample, got none")
    elem = batch[0]
    if isinstance(elem, scriptmod.Tensor):
        return scriptmod.stack(list(batch), 0)
    if _is_numpy(elem):
        if elem.shape == () and type(elem).__name__ not in ("ndarray", "memmap"):
            return scriptmod.as_tensor(list(batch))
        if _text_array(elem):
            raise TypeError(COLLATE_ERROR.format(elem.dtype))
        return default_collate([scriptmod.as_tensor(b) for b in batch])
    if isinstance(elem, float):
        return scriptmod.tensor(list(batch), dtype=scriptmod.float64)
    if isinstance(elem, int):
        return scriptmod.tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):      # namedtuple
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of "
                               f"equal size, got sizes {[len(s) for s in batch]}")
        return _sequence(elem, [default_collate(s) for s in zip(*batch)])
    raise TypeError(COLLATE_ERROR.format(type(elem)))


def default_convert(data: Any) -> Any:
    """One sample as a loader with ``batch_size=None`` yields it: NumPy arrays and scalars
    become tensors (string and object arrays stay), containers are converted field by
    field, anything else is returned as it is."""
    import scriptmod
    if isinstance(data, scriptmod.Tensor):
        return data
    if _is_numpy(data):
        return data if hasattr(data, "dtype") and _text_array(data) else scriptmod.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _mapping(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _sequence(data, [default_convert(d) for d in data])
    return data
