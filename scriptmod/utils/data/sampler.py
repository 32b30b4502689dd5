"""Samplers: the order in which a ``DataLoader`` visits a map-style dataset's indices, and
how it groups them into batches (``BatchSampler``), as ``torch.utils.data``.

    >>> list(SequentialSampler(range(4)))
    [0, 1, 2, 3]
    >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
    [[0, 1], [2, 3], [4]]
    >>> import scriptmod as sm
    >>> order = list(RandomSampler(range(5), generator=sm.Generator().manual_seed(1)))
    >>> sorted(order)
    [0, 1, 2, 3, 4]
"""
from __future__ import annotations

import contextlib
from typing import Any, Generic, Iterable, Iterator, Sized, TypeVar

T_co = TypeVar("T_co", covariant=True)


def check_generator(owner: str, generator: Any) -> Any:
    """``generator`` if it is ``None`` or a ``scriptmod.Generator``, else ``TypeError``."""
    import scriptmod
    if generator is not None and not isinstance(generator, scriptmod.Generator):
        raise TypeError(f"{owner}: generator: expected a scriptmod.Generator or None, got "
                        f"{type(generator).__name__}")
    return generator


def permutation(n: int, generator: Any = None) -> list[int]:
    """A random order of ``range(n)`` drawn from ``generator`` (a ``scriptmod.Generator``;
    default: the global one, reseeded by ``scriptmod.manual_seed``)."""
    import scriptmod
    return scriptmod.randperm(n, generator=generator).tolist()


def draws(high: int, n: int, generator: Any = None) -> list[int]:
    """``n`` ints uniform in ``[0, high)``, from ``generator`` as ``permutation``."""
    import scriptmod
    with generator._drawing("cpu") if generator is not None else contextlib.nullcontext():
        return scriptmod.randint(0, high, (n,)).tolist()       # (randint takes no generator=)


class Sampler(Generic[T_co]):
    """Yields indices (or, for a batch sampler, lists of them); ``__len__`` is optional."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SequentialSampler(Sampler[int]):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A new random order every epoch; ``replacement=True`` draws ``num_samples`` indices
    independently instead. Without replacement, ``num_samples`` past the dataset's length
    chains whole permutations (PyTorch's rule)."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: Any = None) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement: expected a bool, got "
                            f"{type(replacement).__name__}")
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples: expected a positive int, got "
                             f"{num_samples!r}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples = num_samples
        self.generator = check_generator("RandomSampler", generator)
        if self.num_samples <= 0:
            raise ValueError(f"RandomSampler: num_samples: expected a positive int, got "
                             f"{self.num_samples} (the length of an empty data_source)")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, wanted = len(self.data_source), self.num_samples
        if self.replacement:
            yield from draws(n, wanted, self.generator)
            return
        for _ in range(wanted // n):
            yield from permutation(n, self.generator)
        yield from permutation(n, self.generator)[:wanted % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in a new random order every epoch."""

    def __init__(self, indices: Iterable[int], generator: Any = None) -> None:
        self.indices = list(indices)
        self.generator = check_generator("SubsetRandomSampler", generator)

    def __iter__(self) -> Iterator[int]:
        return (self.indices[i] for i in permutation(len(self.indices), self.generator))

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler[list]):
    """Groups the indices of ``sampler`` into lists of ``batch_size``; the last, shorter one
    is dropped when ``drop_last``."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size: expected a positive int, got "
                             f"{batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last: expected a bool, got {drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list]:
        batch: list = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
