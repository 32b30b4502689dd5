"""Programs that use the ops returning a named (values, indices) pair: topk, sort, max(dim),
min(dim), kthvalue, median(dim). Per op: ``<op>_runtime(x, n)`` takes the int (``k``, or the
dim) as an argument, ``<op>_const(x)`` writes it in, ``<op>_sized(x)`` computes it from the
input's size, ``<op>_whole(x)`` returns the pair itself. Each reads the pair by unpacking, by
position and by name. Only Tensor methods, no annotations on tensors: torch.jit.script runs
the same source. Kept out of the test module so that they have plain source."""
from __future__ import annotations


def topk_runtime(x, n: int):
    v, i = x.view(-1).topk(n)
    r = x.topk(n, dim=0, largest=False)
    return v, i, r[0] * 2.0, r[1] + 1, x.topk(n, 0).values, x.topk(n, 0).indices


def topk_const(x):
    v, i = x.topk(2)
    return v, i, x.topk(1, dim=0)[0], x.topk(2, 0, False).indices


def topk_sized(x):
    v, i = x.topk(x.size(1) - 1, dim=1)
    return v, i, x.topk(x.size(0) - 1, 0).values


def topk_whole(x):
    return x.topk(2, 1)


def sort_runtime(x, n: int):
    v, i = x.sort(n)
    r = x.sort(n, descending=True)
    return v, i, r[0] - 1.0, r[1] * 2, x.sort(dim=n).values, x.sort(n).indices


def sort_const(x):
    v, i = x.sort()
    return v, i, x.sort(0, True)[1], x.sort(dim=0).values


def sort_sized(x):
    v, i = x.sort(x.dim() - 1)
    return v, i


def sort_whole(x):
    return x.sort(0)


def max_runtime(x, n: int):
    v, i = x.max(n)
    r = x.max(n, keepdim=True)
    return v, i, r[0] + 1.0, r[1], x.max(dim=n).values, x.max(n).indices


def max_const(x):
    v, i = x.max(1)
    return v, i, x.max(0)[0], x.max(0, True).indices


def max_sized(x):
    return x.max(x.dim() - 1).values


def max_whole(x):
    return x.max(0)


def min_runtime(x, n: int):
    v, i = x.min(n)
    r = x.min(n, keepdim=True)
    return v, i, r[0] + 1.0, r[1], x.min(dim=n).values, x.min(n).indices


def min_const(x):
    v, i = x.min(1)
    return v, i, x.min(0)[0], x.min(0, True).indices


def min_sized(x):
    return x.min(x.dim() - 1).values


def min_whole(x):
    return x.min(1)


def kthvalue_runtime(x, n: int):
    v, i = x.kthvalue(n, 0)
    r = x.kthvalue(n, dim=0, keepdim=True)
    return v, i, r[0] * 3.0, r[1], x.kthvalue(n, 0).values, x.kthvalue(n, 0).indices


def kthvalue_const(x):
    v, i = x.kthvalue(2)
    return v, i, x.kthvalue(1, 0)[0], x.kthvalue(3, 1, True).indices


def kthvalue_sized(x):
    v, i = x.kthvalue(x.size(0) - 1, 0)
    return v, i, x.kthvalue(x.size(1) // 2).values


def kthvalue_whole(x):
    return x.kthvalue(2, 0)


def median_runtime(x, n: int):
    v, i = x.median(n)
    r = x.median(n, keepdim=True)
    return v, i, r[0] + x.median(), r[1], x.median(dim=n).values, x.median(n).indices


def median_const(x):
    v, i = x.median(0)
    return v, i, x.median(1)[0], x.median(1, True).indices, x.median()


def median_sized(x):
    v, i = x.median(x.dim() - 1)
    return v, i


def median_whole(x):
    return x.median(1)


OPS = ("topk", "sort", "max", "min", "kthvalue", "median")
RUNTIME_INTS = {"topk": (1, 3), "sort": (0, 1), "max": (0, 1), "min": (0, -1),
                "kthvalue": (1, 3), "median": (0, 1)}


def print_pairs(x, n: int):
    print(x.topk(n), x.max(0))
    print([x.sort(0)[0], x], (n, (x.min(1)[1],)))
    return x
