"""Datasets, samplers and ``DataLoader``, as ``torch.utils.data``.

    >>> import scriptmod as sm
    >>> from scriptmod.utils.data import DataLoader, TensorDataset
    >>> x, y = sm.arange(12, dtype=sm.float32).reshape(6, 2), sm.arange(6)
    >>> for xb, yb in DataLoader(TensorDataset(x, y), batch_size=4):
    ...     print(tuple(xb.shape), yb.tolist())
    (4, 2) [0, 1, 2, 3]
    (2, 2) [4, 5]
"""
from scriptmod.utils.data.collate import default_collate, default_convert
from scriptmod.utils.data.dataloader import DataLoader
from scriptmod.utils.data.dataset import (ConcatDataset, Dataset, IterableDataset, Subset,
                                          TensorDataset, random_split)
from scriptmod.utils.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                          SequentialSampler, SubsetRandomSampler)
from scriptmod.utils.data.worker import WorkerInfo, get_worker_info

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset",
           "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
           "TensorDataset", "WorkerInfo", "default_collate", "default_convert",
           "get_worker_info", "random_split"]
