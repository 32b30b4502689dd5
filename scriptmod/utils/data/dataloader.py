"""``DataLoader``: batches from a dataset, as ``torch.utils.data.DataLoader``.

    >>> import scriptmod as sm
    >>> from scriptmod.utils.data import TensorDataset
    >>> ds = TensorDataset(sm.arange(10).reshape(5, 2), sm.arange(5))
    >>> loader = DataLoader(ds, batch_size=2)
    >>> len(loader), [y.tolist() for _, y in loader]
    (3, [[0, 1], [2, 3], [4]])
    >>> [y.tolist() for _, y in DataLoader(ds, batch_size=2, drop_last=True)]
    [[0, 1], [2, 3]]
"""
from __future__ import annotations

import itertools
import math
import weakref
from collections import deque
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import scriptmod
from scriptmod.utils.data.collate import default_collate, default_convert
from scriptmod.utils.data.dataset import Dataset, IterableDataset, TensorDataset
from scriptmod.utils.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                          SequentialSampler, check_generator, draws)
from scriptmod.utils.data.worker import EXHAUSTED, WorkerPool

T_co = TypeVar("T_co", covariant=True)


class _MapFetcher:
    """Fetches one batch of a map-style dataset: a list of indices (or, without
    auto-batching, one index), collated."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable) -> None:
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn

    def fetch(self, indices: Any) -> Any:
        if not self.auto_collation:
            return self.collate_fn(self.dataset[indices])
        if self.collate_fn is default_collate and _gathers(self.dataset):
            # what collating the samples gives (one stacked tensor per field, the fields as a
            # list), with one gather per tensor instead of an index per sample and tensor
            at = scriptmod.tensor(list(indices), dtype=scriptmod.int64)
            return [t[at] for t in self.dataset.tensors]
        getitems = getattr(self.dataset, "__getitems__", None)
        return self.collate_fn(getitems(indices) if getitems else
                               [self.dataset[i] for i in indices])


def _gathers(dataset: Any) -> bool:
    """A plain ``TensorDataset`` of scriptmod Tensors (not a subclass, which may change
    ``__getitem__``): a batch is one gather per tensor."""
    return type(dataset) is TensorDataset and all(isinstance(t, scriptmod.Tensor)
                                                 for t in dataset.tensors)


class _IterFetcher:
    """Fetches the next batch of an ``IterableDataset``'s stream (``StopIteration`` at its
    end; a last partial batch is dropped with ``drop_last``)."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable,
                 batch_size: int | None, drop_last: bool) -> None:
        self.stream, self.auto_collation, self.collate_fn = iter(dataset), auto_collation, collate_fn
        self.batch_size, self.drop_last = batch_size, drop_last

    def fetch(self, _: Any = None) -> Any:
        if not self.auto_collation:
            return self.collate_fn(next(self.stream))
        batch = list(itertools.islice(self.stream, self.batch_size))
        if not batch or (self.drop_last and len(batch) < (self.batch_size or 0)):
            raise StopIteration
        return self.collate_fn(batch)


class DataLoader(Generic[T_co]):
    """Iterates over batches of ``dataset``.

    Map-style datasets are visited in the order of ``sampler`` (default: sequential, or
    ``RandomSampler(dataset, generator=generator)`` with ``shuffle=True``, a new order every
    epoch, reproducible with ``scriptmod.manual_seed`` or a seeded ``generator``), grouped by
    ``batch_sampler`` (default: ``BatchSampler(sampler, batch_size, drop_last)``) and merged
    by ``collate_fn`` (default: ``default_collate``). ``batch_size=None`` turns batching
    off: each sample is passed through ``default_convert``.

    ``num_workers > 0`` fetches batches on that many worker threads (not processes: see
    ``scriptmod.utils.data.worker``), ``prefetch_factor`` (default 2) batches ahead per
    worker, in order; ``worker_init_fn(worker_id)`` runs first in each, ``get_worker_info()``
    says which worker runs, ``persistent_workers=True`` keeps the threads between epochs,
    ``timeout`` (seconds, 0: none) bounds the wait for a batch. ``multiprocessing_context``
    is refused (there are no processes). ``pin_memory`` (and ``pin_memory_device``) are
    accepted for PyTorch code and do nothing: page-locked host memory only speeds up copies
    to a GPU, and batches stay where the dataset put them, as PyTorch's do.
    """

    _FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
               "persistent_workers")

    def __init__(self, dataset: Dataset[T_co], batch_size: int | None = 1,
                 shuffle: bool | None = None, sampler: Sampler | Iterable | None = None,
                 batch_sampler: Sampler[list] | Iterable[list] | None = None,
                 num_workers: int = 0, collate_fn: Callable[[list], Any] | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: Any = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "") -> None:
        _check_workers(num_workers, timeout, prefetch_factor, persistent_workers,
                       multiprocessing_context)
        check_generator("DataLoader", generator)
        batch_size = _check_batching(dataset, batch_size, shuffle, sampler, batch_sampler,
                                     drop_last)
        if not isinstance(dataset, IterableDataset):
            if sampler is None:
                sampler = (RandomSampler(dataset, generator=generator) if shuffle  # type: ignore
                           else SequentialSampler(dataset))  # type: ignore[arg-type]
            if batch_size is not None and batch_sampler is None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.generator = generator
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.prefetch_factor = 2 if num_workers and prefetch_factor is None else prefetch_factor
        self.persistent_workers, self.multiprocessing_context = persistent_workers, None
        self.pin_memory, self.pin_memory_device = bool(pin_memory), pin_memory_device
        self.collate_fn = collate_fn or (default_collate if self._auto_collation
                                         else default_convert)
        self._pool: WorkerPool | None = None
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_initialized", False) and name in self._FROZEN:
            raise ValueError(f"DataLoader: {name} cannot be set after the DataLoader is "
                             f"created; make a new DataLoader")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None or (
            isinstance(self.dataset, IterableDataset) and self.batch_size is not None)

    def _fetcher(self) -> _MapFetcher | _IterFetcher:
        if isinstance(self.dataset, IterableDataset):
            return _IterFetcher(self.dataset, self._auto_collation, self.collate_fn,
                                self.batch_size, self.drop_last)
        return _MapFetcher(self.dataset, self._auto_collation, self.collate_fn)

    def _requests(self) -> Iterator[Any]:
        """What each fetch is asked for: index lists (or indices), or ``None`` forever for a
        stream, which ends itself."""
        if isinstance(self.dataset, IterableDataset):
            return itertools.repeat(None)
        return iter(self.batch_sampler if self._auto_collation else self.sampler)  # type: ignore

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self._pool is None or not self.persistent_workers:
            self._pool = self._start_workers()
            if self.persistent_workers:
                weakref.finalize(self, self._pool.shutdown)
        else:
            self._pool.reset()
        return _WorkerIter(self, self._pool, own_pool=not self.persistent_workers)

    def _start_workers(self) -> WorkerPool:
        base_seed = draws(2 ** 62, 1, self.generator)[0]
        return WorkerPool(self.num_workers, self._fetcher, self.worker_init_fn, base_seed,
                          self.dataset, self.timeout)

    def __len__(self) -> int:
        """Batches per epoch (for an ``IterableDataset``: from its ``len``, which must exist;
        with several workers each drops or pads its own last batch, so the real count can
        differ, as in PyTorch)."""
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return len(self.batch_sampler if self._auto_collation else self.sampler)  # type: ignore


def _check_batching(dataset: Any, batch_size: int | None, shuffle: bool | None, sampler: Any,
                    batch_sampler: Any, drop_last: bool) -> int | None:
    """The batch size in effect (``None`` under a ``batch_sampler``); ``ValueError`` for
    arguments that contradict each other, as PyTorch's."""
    if isinstance(dataset, IterableDataset):
        given = {"shuffle": shuffle or None, "sampler": sampler, "batch_sampler": batch_sampler}
        for name, value in given.items():
            if value is not None:
                raise ValueError(f"DataLoader: {name}: an IterableDataset decides its own "
                                 f"order; expected {name} unspecified, got {value!r}")
    elif sampler is not None and shuffle:
        raise ValueError("DataLoader: sampler is mutually exclusive with shuffle=True")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError("DataLoader: batch_sampler is mutually exclusive with "
                             "batch_size, shuffle, sampler and drop_last")
        return None
    if batch_size is None:
        if drop_last:
            raise ValueError("DataLoader: batch_size=None disables batching and is mutually "
                             "exclusive with drop_last=True")
        return None
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise ValueError(f"DataLoader: batch_size: expected a positive int or None, got "
                         f"{batch_size!r}")
    return batch_size


def _check_workers(num_workers: int, timeout: float, prefetch_factor: int | None,
                   persistent_workers: bool, multiprocessing_context: Any) -> None:
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise ValueError(f"DataLoader: num_workers: expected an int >= 0 (0: load in the main "
                         f"thread), got {num_workers!r}")
    if not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"DataLoader: timeout: expected seconds >= 0, got {timeout!r}")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("DataLoader: prefetch_factor needs num_workers > 0, got "
                         f"prefetch_factor={prefetch_factor} with num_workers=0")
    if prefetch_factor is not None and (not isinstance(prefetch_factor, int)
                                        or prefetch_factor < 1):
        raise ValueError(f"DataLoader: prefetch_factor: expected a positive int, got "
                         f"{prefetch_factor!r}")
    if persistent_workers and num_workers == 0:
        raise ValueError("DataLoader: persistent_workers=True needs num_workers > 0")
    if multiprocessing_context is not None:
        raise ValueError(f"DataLoader: multiprocessing_context: scriptmod's workers are "
                         f"threads, not processes; expected None, got "
                         f"{multiprocessing_context!r}")


class _SingleProcessIter:
    """Batches fetched in the calling thread when they are asked for."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.requests, self.fetcher = loader, loader._requests(), loader._fetcher()

    def __iter__(self) -> _SingleProcessIter:
        return self

    def __next__(self) -> Any:
        return self.fetcher.fetch(next(self.requests))

    def __len__(self) -> int:
        return len(self.loader)


class _WorkerIter:
    """Batches fetched by worker threads, asked for round-robin (``prefetch_factor`` ahead
    per worker) and returned in the order asked; a worker whose stream has ended is asked
    no more."""

    def __init__(self, loader: DataLoader, pool: WorkerPool, own_pool: bool) -> None:
        self.loader, self.pool, self.own_pool = loader, pool, own_pool
        self.requests = loader._requests()
        n = len(pool.workers)
        self.active, self.turn = [True] * n, itertools.cycle(range(n))
        self.asked: deque[int] = deque()        # the worker of each request, oldest first
        for _ in range(n * (loader.prefetch_factor or 2)):
            self._ask()

    def _ask(self) -> None:
        worker = next((w for w in itertools.islice(self.turn, len(self.active))
                       if self.active[w]), None)
        request = next(self.requests, EXHAUSTED)
        if worker is None or request is EXHAUSTED:
            return
        self.pool.send(worker, request)
        self.asked.append(worker)

    def __iter__(self) -> _WorkerIter:
        return self

    def __next__(self) -> Any:
        try:
            while self.asked:
                worker = self.asked.popleft()
                batch = self.pool.receive(worker)
                if batch is EXHAUSTED:
                    self.active[worker] = False
                    continue
                self._ask()
                return batch
        except BaseException:
            self._close()
            raise
        self._close()
        raise StopIteration

    def _close(self) -> None:
        if self.own_pool:
            self.own_pool = False
            self.pool.shutdown()

    def __del__(self) -> None:
        self._close()

    def __len__(self) -> int:
        return len(self.loader)
