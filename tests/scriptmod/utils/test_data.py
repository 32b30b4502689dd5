"""scriptmod.utils.data against torch.utils.data: batch contents and order, lengths,
drop_last, collation, samplers, random_split, workers (threads) and argument errors."""
from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.utils.data import (BatchSampler, ConcatDataset, DataLoader, IterableDataset,
                                  RandomSampler, SequentialSampler, Subset, TensorDataset,
                                  default_collate, default_convert, get_worker_info,
                                  random_split)


def plain(obj: Any) -> Any:
    """A batch of either library as nested Python values, tensors as (dtype name, values)."""
    if hasattr(obj, "numpy") and hasattr(obj, "dtype"):
        return (str(obj.dtype).split(".")[-1], obj.numpy().tolist())
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.tolist())
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return (type(obj).__name__, [plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [plain(v) for v in obj])
    return obj


def both(values: np.ndarray) -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    return sm.from_numpy(values.copy()), torch.from_numpy(values.copy())


# ---- batching, order, lengths, drop_last ---------------------------------------------------

@pytest.mark.parametrize("batch_size", [1, 3, 4, 10, 12])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_and_len_match_torch(batch_size: int, drop_last: bool) -> None:
    torch = pytest.importorskip("torch")
    xs, xt = both(np.arange(20, dtype=np.float32).reshape(10, 2))
    ys, yt = both(np.arange(10))
    ours = DataLoader(TensorDataset(xs, ys), batch_size=batch_size, drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt),
                                         batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_batch_size_none_converts_each_sample_as_torch() -> None:
    torch = pytest.importorskip("torch")
    data = [np.array([1, 2], dtype=np.int32), {"a": np.float32(1.5), "b": "s"}, (1, 2.5)]
    ours = list(DataLoader(data, batch_size=None))
    theirs = list(torch.utils.data.DataLoader(data, batch_size=None))
    assert len(DataLoader(data, batch_size=None)) == 3
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize("samples", [
    [np.array([1.0, 2.0], dtype=np.float32), np.array([3.0, 4.0], dtype=np.float32)],
    [np.float32(1.5), np.float32(2.5)],
    [np.int64(3), np.int64(4)],
    [1.5, 2.5], [1, 2], [True, False], ["a", "b"],
    [{"x": 1, "y": [1.0, 2.0]}, {"x": 2, "y": [3.0, 4.0]}],
    [Point(1, 2.0), Point(3, 4.0)],
    [(1, "a", 0.5), (2, "b", 1.5)],
    [[1, 2], [3, 4]],
], ids=["arrays", "np-float32", "np-int64", "floats", "ints", "bools", "strings", "dicts",
        "namedtuples", "tuples", "lists"])
def test_default_collate_matches_torch(samples: list) -> None:
    pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate
    assert plain(default_collate(samples)) == plain(torch_collate(samples))


def test_default_collate_stacks_tensors_and_rejects_what_torch_rejects() -> None:
    torch = pytest.importorskip("torch")
    a, ta = both(np.ones((2, 3), dtype=np.float64))
    assert plain(default_collate([a, a * 2])) == plain(torch.utils.data.default_collate([ta, ta * 2]))
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="found"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="numpy arrays"):
        default_collate([np.array(["a"]), np.array(["b"])])


def test_default_convert_matches_torch() -> None:
    pytest.importorskip("torch")
    from torch.utils.data import default_convert as torch_convert
    for data in (np.arange(3), {"k": np.float64(2.0)}, Point(np.int32(1), "z"), [1, 2.0],
                 np.array(["a", "b"])):
        assert plain(default_convert(data)) == plain(torch_convert(data)), data


# ---- shuffle, generators, samplers ----------------------------------------------------------

def order(loader: DataLoader) -> list[int]:
    return [int(v) for _, y in loader for v in y.tolist()]


def test_shuffle_is_a_new_permutation_each_epoch_reproducible_with_manual_seed() -> None:
    ds = TensorDataset(sm.zeros(50, 1), sm.arange(50))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    sm.manual_seed(3)
    first, second = order(loader), order(loader)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second and first != list(range(50))
    sm.manual_seed(3)
    assert order(loader) == first and order(loader) == second


def test_a_generator_makes_shuffle_independent_of_other_draws() -> None:
    ds = TensorDataset(sm.arange(30))
    loader = DataLoader(ds, batch_size=7, shuffle=True, generator=sm.Generator().manual_seed(5))
    got = [int(v) for (b,) in loader for v in b.tolist()]
    sm.rand(100)                                          # the global stream moves on
    again = DataLoader(ds, batch_size=7, shuffle=True, generator=sm.Generator().manual_seed(5))
    assert [int(v) for (b,) in again for v in b.tolist()] == got
    assert sorted(got) == list(range(30))


def test_draws_with_replacement_follow_the_generator() -> None:
    def sample() -> list[int]:
        return list(RandomSampler(range(7), replacement=True, num_samples=30,
                                  generator=sm.Generator().manual_seed(4)))
    first = sample()
    sm.rand(10)
    assert sample() == first and set(first) <= set(range(7)) and len(set(first)) > 1


def test_samplers_match_torch() -> None:
    torch = pytest.importorskip("torch")
    tud = torch.utils.data
    assert list(SequentialSampler(range(5))) == list(tud.SequentialSampler(range(5)))
    for size, drop in ((2, False), (2, True), (5, False), (7, True)):
        ours = BatchSampler(SequentialSampler(range(5)), size, drop)
        theirs = tud.BatchSampler(tud.SequentialSampler(range(5)), size, drop)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    for kw in ({}, {"num_samples": 12}, {"num_samples": 3}, {"replacement": True, "num_samples": 9}):
        ours, theirs = RandomSampler(range(5), **kw), tud.RandomSampler(range(5), **kw)
        got = list(ours)
        assert len(ours) == len(theirs) == len(got) == len(list(theirs))
        assert all(0 <= i < 5 for i in got)
        if not kw.get("replacement"):          # whole permutations, then part of one
            full = len(got) // 5 * 5
            for start in range(0, full, 5):
                assert sorted(got[start:start + 5]) == list(range(5))
            assert len(set(got[full:])) == len(got) - full


def test_custom_sampler_and_batch_sampler() -> None:
    ds = TensorDataset(sm.arange(6))
    assert order_of(DataLoader(ds, sampler=[5, 0, 3], batch_size=2)) == [[5, 0], [3]]
    assert order_of(DataLoader(ds, batch_sampler=[[1, 2, 3], [0]])) == [[1, 2, 3], [0]]
    assert len(DataLoader(ds, batch_sampler=[[1, 2, 3], [0]])) == 2


def order_of(loader: DataLoader) -> list[list[int]]:
    return [b.tolist() for (b,) in loader]


# ---- random_split, Subset, ConcatDataset ----------------------------------------------------

@pytest.mark.parametrize("n, lengths", [(10, [3, 7]), (10, [0.5, 0.3, 0.2]), (11, [0.5, 0.5]),
                                        (10, [0.33, 0.33, 0.34]), (7, [0.1, 0.9])])
def test_random_split_sizes_match_torch(n: int, lengths: list) -> None:
    torch = pytest.importorskip("torch")
    ours = random_split(range(n), lengths, generator=sm.Generator().manual_seed(0))
    theirs = torch.utils.data.random_split(range(n), lengths,
                                           generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    assert sorted(i for s in ours for i in s) == list(range(n))


def test_random_split_is_reproducible_and_checks_lengths() -> None:
    split = [list(s) for s in random_split(range(20), [5, 15], generator=sm.Generator().manual_seed(2))]
    again = [list(s) for s in random_split(range(20), [5, 15], generator=sm.Generator().manual_seed(2))]
    assert split == again
    with pytest.raises(ValueError, match="sum of input lengths"):
        random_split(range(5), [2, 2])
    with pytest.raises(TypeError, match="generator"):
        random_split(range(5), [2, 3], generator=1)


def test_subset_and_concat_dataset() -> None:
    torch = pytest.importorskip("torch")
    data = list(range(10))
    sub, tsub = Subset(data, [7, 2, 5]), torch.utils.data.Subset(data, [7, 2, 5])
    assert [sub[i] for i in range(3)] == [tsub[i] for i in range(3)] and len(sub) == 3
    cat = ConcatDataset([Subset(data, [0, 1]), Subset(data, [9])])
    assert [cat[i] for i in range(len(cat))] == [0, 1, 9] and cat[-1] == 9
    with pytest.raises(ValueError, match="same size in dimension 0"):
        TensorDataset(sm.zeros(3), sm.zeros(4))


# ---- IterableDataset ------------------------------------------------------------------------

class Stream(IterableDataset):
    """range(n), each worker taking every num_workers-th item when ``shard``."""

    def __init__(self, n: int, shard: bool = True) -> None:
        self.n, self.shard = n, shard

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        if info is None or not self.shard:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("kw", [dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                dict(batch_size=None), dict(batch_size=3, num_workers=2),
                                dict(batch_size=2, num_workers=2, drop_last=True)])
def test_iterable_dataset_matches_torch(kw: dict) -> None:
    torch = pytest.importorskip("torch")

    class TorchStream(torch.utils.data.IterableDataset):
        def __init__(self, n: int) -> None:
            self.n = n

        def __iter__(self):  # type: ignore[no-untyped-def]
            info = torch.utils.data.get_worker_info()
            if info is None:
                return iter(range(self.n))
            return iter(range(info.id, self.n, info.num_workers))

        def __len__(self) -> int:
            return self.n
    ours = DataLoader(Stream(10), **kw)
    theirs = torch.utils.data.DataLoader(TorchStream(10), **kw)
    assert len(ours) == len(theirs)
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_iterable_dataset_without_sharding_repeats_per_worker_as_torch() -> None:
    got = [int(v) for b in DataLoader(Stream(4, shard=False), batch_size=2, num_workers=3)
           for v in b.tolist()]
    assert sorted(got) == sorted(list(range(4)) * 3)


# ---- workers (threads) ----------------------------------------------------------------------

class Recording:
    """A map-style dataset noting which worker fetched each index."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n, self.delay, self.seen = n, delay, {}

    def __getitem__(self, i: int) -> Any:
        info = get_worker_info()
        self.seen[i] = (info.id if info else None, threading.get_ident())
        if self.delay:
            time.sleep(self.delay * (i % 3))            # out-of-order completion
        return sm.tensor(float(i))

    def __len__(self) -> int:
        return self.n


def test_workers_keep_order_and_run_in_worker_threads() -> None:
    ds = Recording(23, delay=0.002)
    batches = [b.tolist() for b in DataLoader(ds, batch_size=4, num_workers=3, prefetch_factor=1)]
    assert batches == [b.tolist() for b in DataLoader(Recording(23), batch_size=4)]
    assert {w for w, _ in ds.seen.values()} == {0, 1, 2}
    assert threading.get_ident() not in {t for _, t in ds.seen.values()}
    deadline = time.monotonic() + 5                # a finished epoch ends its threads
    while any(t.name.startswith("scriptmod-dataloader") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "worker threads still running after the epoch"
        time.sleep(0.01)


def test_worker_init_fn_and_worker_info() -> None:
    started = []
    loader = DataLoader(Recording(8), batch_size=2, num_workers=2,
                        worker_init_fn=lambda wid: started.append((wid, get_worker_info().id)))
    list(loader)
    assert sorted(started) == [(0, 0), (1, 1)]
    assert get_worker_info() is None
    infos = []
    list(DataLoader(Recording(2), batch_size=1, num_workers=2,
                    worker_init_fn=lambda wid: infos.append(get_worker_info())))
    base = min(info.seed for info in infos)
    assert sorted((i.id, i.seed - base, i.num_workers) for i in infos) == [(0, 0, 2), (1, 1, 2)]


def test_persistent_workers_reuse_threads_and_restart_after_a_break() -> None:
    ds = Recording(12)
    loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
    expected = [[2.0 * i, 2.0 * i + 1] for i in range(6)]
    assert [b.tolist() for b in loader] == expected
    threads_first = {t for _, t in ds.seen.values()}
    for b in loader:                      # stop early: pending batches must not leak
        break
    ds.seen.clear()
    assert [b.tolist() for b in loader] == expected
    assert {t for _, t in ds.seen.values()} == threads_first and len(threads_first) == 2


def test_a_worker_error_reaches_the_caller() -> None:
    class Broken(Recording):
        def __getitem__(self, i: int) -> Any:
            if i == 5:
                raise KeyError("sample 5 is broken")
            return super().__getitem__(i)
    with pytest.raises(KeyError, match="sample 5 is broken"):
        list(DataLoader(Broken(8), batch_size=2, num_workers=2))


def test_timeout_raises() -> None:
    with pytest.raises(RuntimeError, match="timed out after 0.05 seconds"):
        list(DataLoader(Recording(4, delay=0.2), batch_size=None, num_workers=1, timeout=0.05))


def test_pin_memory_is_accepted_and_changes_nothing() -> None:
    ds = TensorDataset(sm.arange(5))
    assert order_of(DataLoader(ds, batch_size=2, pin_memory=True)) == [[0, 1], [2, 3], [4]]


# ---- argument errors ------------------------------------------------------------------------

@pytest.mark.parametrize("kw, message", [
    (dict(shuffle=True, sampler=[0]), "mutually exclusive with shuffle"),
    (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler is mutually exclusive"),
    (dict(batch_size=None, drop_last=True), "drop_last"),
    (dict(batch_size=0), "batch_size: expected a positive int"),
    (dict(num_workers=-1), "num_workers: expected an int >= 0"),
    (dict(prefetch_factor=2), "prefetch_factor needs num_workers > 0"),
    (dict(persistent_workers=True), "persistent_workers=True needs num_workers > 0"),
    (dict(num_workers=1, multiprocessing_context="fork"), "threads, not processes"),
    (dict(timeout=-1), "timeout: expected seconds >= 0"),
])
def test_bad_arguments_name_the_argument(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(TensorDataset(sm.arange(3)), **kw)


def test_iterable_dataset_refuses_shuffle_and_samplers() -> None:
    for kw in (dict(shuffle=True), dict(sampler=[0]), dict(batch_sampler=[[0]])):
        with pytest.raises(ValueError, match="IterableDataset decides its own order"):
            DataLoader(Stream(3), **kw)


def test_generator_type_and_frozen_attributes() -> None:
    with pytest.raises(TypeError, match="DataLoader: generator: expected a scriptmod.Generator"):
        DataLoader(TensorDataset(sm.arange(3)), shuffle=True, generator=0)
    loader = DataLoader(TensorDataset(sm.arange(3)))
    with pytest.raises(ValueError, match="batch_size cannot be set"):
        loader.batch_size = 2


def test_a_tensor_dataset_batch_is_one_gather_per_tensor_and_equals_collated_samples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain TensorDataset with the default collate skips the per-sample indexing; its
    batches are what collating the samples gives, in the same order."""
    from scriptmod.utils.data.collate import default_collate
    x, y = sm.randn(50, 3), sm.randint(0, 5, (50,))
    ds = TensorDataset(x, y)

    def per_sample(samples):
        return default_collate(samples)
    sm.manual_seed(3)
    fast = list(DataLoader(ds, batch_size=8, shuffle=True))
    sm.manual_seed(3)
    slow = list(DataLoader(ds, batch_size=8, shuffle=True, collate_fn=per_sample))
    assert len(fast) == len(slow) == 7
    for f, s in zip(fast, slow):
        assert type(f) is type(s) is list
        assert [t.dtype for t in f] == [t.dtype for t in s]
        assert all((a == b).all().item() for a, b in zip(f, s))
    monkeypatch.setattr(TensorDataset, "__getitem__",
                        lambda self, i: pytest.fail("indexed one sample at a time"))
    assert len(list(DataLoader(ds, batch_size=8))) == 7

    class Doubled(TensorDataset):          # a subclass may change its samples: no shortcut
        def __getitem__(self, i):
            return tuple(t[i] * 2 for t in self.tensors)
    monkeypatch.undo()
    first = next(iter(DataLoader(Doubled(x, y), batch_size=4)))
    assert (first[0] == x[:4] * 2).all().item()
