"""``DataLoader`` workers (``num_workers > 0``): threads of this process, each with its own
request and result queues, so that results come back in the order they were asked for.

Why threads, not processes as in PyTorch: forking a process that holds LLVM's JIT, BLAS and
kernel thread pools is unsafe, and spawning one costs a fresh ``import scriptmod`` per worker
and a picklable dataset. Threads overlap what releases the GIL (file reads, decoding, NumPy
and compiled kernels) with the training step; pure-Python per-sample work is not faster.
Every worker shares the process's random generator, so random augmentations drawn in
workers are not reproducible per worker (``WorkerInfo.seed`` is given for datasets that
seed their own generator).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

_local = threading.local()      # .info: the WorkerInfo of this worker thread
_STOP = object()                # request: the thread ends
_RESET = object()               # request: a new epoch (the fetcher starts over)
EXHAUSTED = object()            # result: an IterableDataset's stream ended in this worker


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


def get_worker_info() -> WorkerInfo | None:
    """This worker's ``WorkerInfo`` inside a ``DataLoader`` worker, ``None`` elsewhere (an
    ``IterableDataset`` uses it to give each worker its own share of the stream).

    >>> get_worker_info() is None
    True
    """
    return getattr(_local, "info", None)


@dataclass
class _Failure:
    """An exception a worker raised, carried to the main thread to be raised there."""

    error: BaseException
    worker: int

    def reraise(self) -> None:
        add_note = getattr(self.error, "add_note", None)    # Python >= 3.11
        if add_note is not None:
            add_note(f"(raised in DataLoader worker {self.worker}, a thread)")
        raise self.error


class _Worker:
    """One worker thread: runs ``worker_init_fn``, then ``fetch(request)`` per request."""

    def __init__(self, info: WorkerInfo, make_fetcher: Callable[[], Any],
                 init_fn: Callable[[int], None] | None) -> None:
        self.info, self.pending = info, 0
        self.requests: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(make_fetcher, init_fn),
                                       name=f"scriptmod-dataloader-{info.id}", daemon=True)
        self.thread.start()

    def _run(self, make_fetcher: Callable[[], Any], init_fn: Callable[[int], None] | None) -> None:
        _local.info = self.info
        fetcher, failure = None, None
        try:
            if init_fn is not None:
                init_fn(self.info.id)
            fetcher = make_fetcher()
        except BaseException as exc:        # reported for every request, never lost
            failure = _Failure(exc, self.info.id)
        while (request := self.requests.get()) is not _STOP:
            if request is _RESET:
                fetcher = fetcher if failure else make_fetcher()
                continue
            self.results.put(failure or self._fetch(fetcher, request))

    def _fetch(self, fetcher: Any, request: Any) -> Any:
        try:
            return fetcher.fetch(request)
        except StopIteration:
            return EXHAUSTED
        except BaseException as exc:
            return _Failure(exc, self.info.id)


class WorkerPool:
    """``num_workers`` threads; ``send`` a request to one, ``receive`` its oldest result."""

    def __init__(self, num_workers: int, make_fetcher: Callable[[], Any],
                 init_fn: Callable[[int], None] | None, base_seed: int, dataset: Any,
                 timeout: float) -> None:
        self.timeout = timeout
        self.workers = [_Worker(WorkerInfo(i, num_workers, base_seed + i, dataset),
                                make_fetcher, init_fn) for i in range(num_workers)]

    def send(self, worker: int, request: Any) -> None:
        self.workers[worker].pending += 1
        self.workers[worker].requests.put(request)

    def receive(self, worker: int) -> Any:
        """The next result of ``worker``; its exception is raised here."""
        w = self.workers[worker]
        try:
            result = w.results.get(timeout=self.timeout or None)
        except queue.Empty:
            raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds "
                               f"(worker {worker}; the timeout= argument)") from None
        w.pending -= 1
        if isinstance(result, _Failure):
            result.reraise()
        return result

    def reset(self) -> None:
        """Start a new epoch on the same threads (``persistent_workers``): results of the
        last epoch's unfinished requests are dropped."""
        for w in self.workers:
            while w.pending:
                w.results.get()
                w.pending -= 1
            w.requests.put(_RESET)

    def shutdown(self) -> None:
        for w in self.workers:
            w.requests.put(_STOP)
