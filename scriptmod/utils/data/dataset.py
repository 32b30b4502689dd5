"""Datasets: indexable (``Dataset``) or iterable (``IterableDataset``), and ways to cut
one up (``Subset``, ``random_split``), as ``torch.utils.data``.

    >>> import scriptmod as sm
    >>> ds = TensorDataset(sm.arange(6).reshape(3, 2), sm.tensor([0, 1, 0]))
    >>> len(ds), ds[1]
    (3, (tensor([2, 3]), tensor(1)))
    >>> part = Subset(ds, [2, 0])
    >>> len(part), part[0][1].item()
    (2, 0)
"""
from __future__ import annotations

import bisect
import math
import warnings
from itertools import accumulate
from typing import Any, Generic, Iterable, Iterator, Sequence, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: ``__getitem__(index)`` returns one sample and, for a
    ``DataLoader`` without a custom sampler, ``__len__`` says how many there are.
    Optionally ``__getitems__(indices)`` returns a whole batch's samples at once."""

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset that is a stream: ``__iter__`` yields the samples. With ``num_workers > 0``
    every worker iterates its own ``iter(dataset)``: split the work with
    ``get_worker_info()`` (``id``, ``num_workers``), or each sample comes once per worker,
    as in PyTorch."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SizeMismatchError(AssertionError, ValueError):
    """``TensorDataset`` of tensors whose first sizes differ: PyTorch's ``AssertionError``
    ('Size mismatch between tensors'), and the ``ValueError`` earlier releases raised."""


class TensorDataset(Dataset[tuple]):
    """Samples are ``tuple(t[i] for t in tensors)``; every tensor has the same first size."""

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor, got none")
        for t in tensors:
            if not len(t.shape):                      # PyTorch's t.size(0) of a 0-d tensor
                raise IndexError("TensorDataset: Dimension specified as 0 but tensor has no "
                                 "dimensions")
        if len({t.shape[0] for t in tensors}) != 1:
            shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
            raise SizeMismatchError(f"Size mismatch between tensors: TensorDataset expects the "
                                    f"same size in dimension 0, got shapes {shapes}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])


class ConcatDataset(Dataset[T_co]):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets: Iterable[Dataset[T_co]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets: expected a non-empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset: datasets: IterableDataset is not supported")
        self.cumulative_sizes = list(accumulate(len(d) for d in self.datasets))  # type: ignore

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> T_co:
        if index < 0:
            if -index > len(self):
                raise IndexError(f"ConcatDataset: index {index} out of range for length "
                                 f"{len(self)}")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        getitems = getattr(self.dataset, "__getitems__", None)
        picked = [self.indices[i] for i in indices]
        return getitems(picked) if getitems else [self.dataset[i] for i in picked]

    def __len__(self) -> int:
        return len(self.indices)


def split_lengths(total: int, lengths: Sequence[int | float]) -> list[int]:
    """``lengths`` as sample counts: counts are kept; fractions summing to 1 become
    ``floor(total * f)``, the remainder handed out one by one from the first part on
    (PyTorch's rule).

    >>> split_lengths(10, [0.5, 0.3, 0.2]), split_lengths(11, [0.5, 0.5]), split_lengths(5, [2, 3])
    ([5, 3, 2], [6, 5], [2, 3])
    """
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"random_split: lengths: fraction at index {i} is not "
                                 f"between 0 and 1, got {frac}")
        counts = [int(math.floor(total * frac)) for frac in lengths]
        for i in range(total - sum(counts)):
            counts[i % len(counts)] += 1
        for i, n in enumerate(counts):
            if n == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this "
                              f"results in an empty dataset", stacklevel=3)
        return counts
    if any(not isinstance(n, int) or n < 0 for n in lengths):
        raise ValueError(f"random_split: lengths: expected non-negative ints or fractions "
                         f"summing to 1, got {list(lengths)}")
    if sum(lengths) != total:
        raise ValueError(f"random_split: lengths: sum of input lengths ({sum(lengths)}) does "
                         f"not equal the length of the input dataset ({total})")
    return [int(n) for n in lengths]


def random_split(dataset: Dataset[T_co], lengths: Sequence[int | float],
                 generator: Any = None) -> list[Subset[T_co]]:
    """Non-overlapping random subsets of the given ``lengths`` (counts, or fractions summing
    to 1). ``generator``: a ``scriptmod.Generator`` (default: the global one, so
    ``scriptmod.manual_seed`` makes the split reproducible).

        >>> import scriptmod as sm
        >>> train, val = random_split(range(10), [0.8, 0.2], generator=sm.Generator().manual_seed(0))
        >>> len(train), len(val), sorted(list(train) + list(val)) == list(range(10))
        (8, 2, True)
    """
    from scriptmod.utils.data.sampler import check_generator, permutation
    check_generator("random_split", generator)
    counts = split_lengths(len(dataset), lengths)  # type: ignore[arg-type]
    order = permutation(sum(counts), generator)
    return [Subset(dataset, order[end - n:end]) for end, n in zip(accumulate(counts), counts)]
