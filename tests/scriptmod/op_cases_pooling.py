"""``op_cases`` rows of pooling (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders). ``max_pool2d``, ``avg_pool2d`` and their ``_grad`` ops keep
their rows in ``op_cases``; these are the rows of every other rank and pool.

The references loop over output positions in float64: each pool is a list of windows per
dim (the input positions a window reads, and how many taps an average divides by).
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from op_cases import FLOATS, Gen, Sample, SampleFn, case

Window = tuple[list[int], int]          # (input positions read, divisor count)
Windows = list[list[Window]]            # per dim, per output position


# ---- references ----------------------------------------------------------------------------
def _out_size(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    return out - 1 if ceil and (out - 1) * s >= n + p else out


def _strided(size: int, k: int, s: int, p: int, d: int, ceil: bool, include_pad: bool) -> list[Window]:
    out = []
    for o in range(_out_size(size, k, s, p, d, ceil)):
        start = o * s - p
        taps = [start + j * d for j in range(k)]
        end = min(start + k, size + p)
        valid = [t for t in taps if 0 <= t < size]
        out.append((valid, end - start if include_pad else min(end, size) - max(start, 0)))
    return out


def _adaptive(size: int, out: int) -> list[Window]:
    bounds = [(o * size // out, -(-(o + 1) * size // out)) for o in range(out)]
    return [(list(range(a, b)), b - a) for a, b in bounds]


def _pool(x: np.ndarray, windows: Windows, reduce: str) -> tuple[np.ndarray, np.ndarray]:
    """Values and flat indices (max) or averages (mean) of every window."""
    n = len(windows)
    lead, size = x.shape[:-n], x.shape[-n:]
    out = np.zeros(lead + tuple(len(w) for w in windows))
    idx = np.zeros(out.shape, dtype=np.int64)
    for pos in itertools.product(*(range(len(w)) for w in windows)):
        taps = [windows[i][pos[i]][0] for i in range(n)]
        vals = x[(...,) + np.ix_(*taps)].reshape(lead + (-1,))
        if reduce == "max":
            arg = np.argmax(vals, axis=-1)
            out[(...,) + pos] = np.take_along_axis(vals, arg[..., None], -1)[..., 0]
            where = np.unravel_index(arg, [len(t) for t in taps])
            flat = np.zeros(arg.shape, dtype=np.int64)
            for i in range(n):
                flat = flat * size[i] + np.asarray(taps[i])[where[i]]
            idx[(...,) + pos] = flat
        else:
            out[(...,) + pos] = vals.sum(axis=-1) / math.prod(windows[i][pos[i]][1] for i in range(n))
    return out, idx


def _spread(gy: np.ndarray, windows: Windows, input_size: Sequence[int]) -> np.ndarray:
    """The adjoint of an average pool: each window's gradient over its divisor, added to
    every position the window read."""
    n = len(windows)
    out = np.zeros(tuple(input_size))
    for pos in itertools.product(*(range(len(w)) for w in windows)):
        taps = [windows[i][pos[i]][0] for i in range(n)]
        div = math.prod(windows[i][pos[i]][1] for i in range(n))
        out[(...,) + np.ix_(*taps)] += (gy[(...,) + pos] / div).reshape(
            gy.shape[:-n] + (1,) * n)
    return out


def _max_windows(x: np.ndarray, kernel_size: Sequence[int], stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool) -> Windows:
    n = len(kernel_size)
    return [_strided(x.shape[-n + i], kernel_size[i], stride[i], padding[i], dilation[i],
                     ceil_mode, True) for i in range(n)]


def _max_pool_ref(x: np.ndarray, **attrs: Any) -> tuple[np.ndarray, np.ndarray]:
    return _pool(x, _max_windows(x, **attrs), "max")


def _avg_pool_ref(x: np.ndarray, kernel_size: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], ceil_mode: bool = False, count_include_pad: bool = True,
                  divisor_override: int | None = None) -> np.ndarray:
    n = len(kernel_size)
    windows = [_strided(x.shape[-n + i], kernel_size[i], stride[i], padding[i], 1, ceil_mode,
                        count_include_pad) for i in range(n)]
    if divisor_override:
        windows = [[(w, 1) for w, _ in dim] for dim in windows]
        return _pool(x, windows, "mean")[0] / divisor_override
    return _pool(x, windows, "mean")[0]


def _adaptive_ref(reduce: str) -> Callable[..., Any]:
    def ref(x: np.ndarray, output_size: Sequence[int]) -> Any:
        n = len(output_size)
        out = _pool(x, [_adaptive(x.shape[-n + i], o) for i, o in enumerate(output_size)], reduce)
        return out if reduce == "max" else out[0]
    return ref


def _fractional_ref(x: np.ndarray, samples: np.ndarray, kernel_size: Sequence[int],
                    output_size: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per plane: PyTorch's ``generate_intervals`` (2-d reads the samples as (w, h))."""
    n = len(kernel_size)
    planes = x.reshape((-1,) + x.shape[-n:])
    u = samples[:1 if x.ndim == n + 1 else x.shape[0]].reshape(-1, n)
    vals, idx = [], []
    for b in range(planes.shape[0]):
        windows = []
        for i in range(n):
            size, o, k = planes.shape[1 + i], output_size[i], kernel_size[i]
            ui = u[b, n - 1 - i if n == 2 else i]
            alpha = (size - k) / (o - 1) if o > 1 else 0.0
            starts = [int((j + ui) * alpha) - int(ui * alpha) for j in range(o - 1)] + [size - k]
            windows.append([(list(range(s, s + k)), k) for s in starts])
        v, j = _pool(planes[b], windows, "max")
        vals.append(v)
        idx.append(j)
    shape = x.shape[:-n] + tuple(output_size)
    return np.stack(vals).reshape(shape), np.stack(idx).reshape(shape)


def _unpool_ref(x: np.ndarray, indices: np.ndarray, output_size: Sequence[int]) -> np.ndarray:
    n = len(output_size)
    planes = x.reshape(-1, math.prod(x.shape[-n:]))
    out = np.zeros((planes.shape[0], math.prod(output_size)))
    for b in range(planes.shape[0]):
        out[b, indices.reshape(planes.shape)[b]] = planes[b]
    return out.reshape(x.shape[:-n] + tuple(output_size))


def _indices_grad_ref(n: int) -> Callable[..., np.ndarray]:
    """gy added at its flat indices into the last ``n`` dims of each plane."""
    def ref(gy: np.ndarray, indices: np.ndarray, input_size: Sequence[int]) -> np.ndarray:
        planes = math.prod(input_size[:-n])
        out = np.zeros((planes, math.prod(input_size[-n:])))
        g, ix = gy.reshape(planes, -1), indices.reshape(planes, -1)
        for b in range(planes):
            np.add.at(out[b], ix[b], g[b])
        return out.reshape(input_size)
    return ref


# ---- samples: per rank n, a batched and an unbatched input, padding, dilation, ceil mode --
SPATIAL = {1: (7,), 2: (5, 6), 3: (4, 3, 3)}


def _shape(n: int, batched: bool = True) -> tuple[int, ...]:
    return ((1, 2) if batched else (2,)) + SPATIAL[n]


def _max_attrs(n: int) -> list[tuple[str, dict[str, Any], bool]]:
    """(label, attrs, batched) of the windowed samples."""
    def w(k: int, s: int, p: int = 0, d: int = 1, ceil: bool = False) -> dict[str, Any]:
        return {"kernel_size": [k] * n, "stride": [s] * n, "padding": [p] * n,
                "dilation": [d] * n, "ceil_mode": ceil}
    return [("basic", w(2, 2), True), ("unbatched-pad", w(3, 2, 1), False),
            ("ceil-dilation", w(2, 2, 0, 2, True), True), ("overlap-ceil-pad", w(3, 1, 1, 1, True), True)]


def _max_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        return [Sample(label, (g.arr(_shape(n, batched)),), attrs, g.grad_of(0) if i < 2 else ())
                for i, (label, attrs, batched) in enumerate(_max_attrs(n))]
    return make


def _avg_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = []
        for label, attrs, batched in _max_attrs(n)[:3]:
            a = {k: v for k, v in attrs.items() if k != "dilation"}
            out.append(Sample(label, (g.arr(_shape(n, batched)),), a, g.grad_of(0)))
        pad = dict(out[1].attrs, ceil_mode=True)
        out.append(Sample("exclude-pad", out[1].inputs, dict(pad, count_include_pad=False)))
        out.append(Sample("divisor", out[1].inputs, dict(pad, divisor_override=3), g.grad_of(0)))
        return out
    return make


ADAPTIVE = {1: [(3,), (7,)], 2: [(3, 4), (2, 2)], 3: [(3, 2, 2), (1, 5, 1)]}


def _adaptive_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        return [Sample(f"to-{'x'.join(map(str, o))}", (g.arr(_shape(n, i == 0)),),
                       {"output_size": list(o)}, g.grad_of(0)) for i, o in enumerate(ADAPTIVE[n])]
    return make


def _fractional_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        big = (1, 2) + (7, 7) if n == 2 else (1, 2, 5, 4, 5)
        out_size = [2, 2, 3] if n == 3 else [4, 3]
        return [Sample("batched", (g.arr(big), g.arr((1, 2, n), 0.0, 1.0)),
                       {"kernel_size": [2] * n, "output_size": out_size}, g.grad_of(0)),
                Sample("unbatched", (g.arr(big[1:]), g.arr((1, 2, n), 0.0, 1.0)),
                       {"kernel_size": [3] * n, "output_size": [2] * n})]
    return make


def _pooled(n: int, label: str, batched: bool) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """A float64 input's max-pool values and indices (for the unpool and grad samples)."""
    attrs = dict(next(a for lb, a, _ in _max_attrs(n) if lb == label))
    x = Gen("float64", 5).arr(_shape(n, batched))
    return x, _max_pool_ref(x, **attrs)[1], attrs


def _unpool_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = []
        for label, batched in (("batched", True), ("unbatched", False)):   # no index twice
            x, idx, _ = _pooled(n, "basic", batched)
            out.append(Sample(label, (g.arr(idx.shape), idx, list(x.shape[-n:])), {},
                              g.grad_of(0)))
        return out
    return make


def _max_grad_samples(n: int, with_indices: bool) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = []
        for label, batched in (("basic", True), ("overlap-ceil-pad", True), ("unbatched-pad", False)):
            x, idx, attrs = _pooled(n, label, batched)
            gy = g.arr(idx.shape)
            if with_indices:
                out.append(Sample(label, (gy, idx, list(x.shape))))
            else:
                out.append(Sample(label, (gy, x.astype(gy.dtype)), attrs))
        return out
    return make


def _max_grad_ref(gy: np.ndarray, x: np.ndarray, **attrs: Any) -> np.ndarray:
    n = len(attrs["kernel_size"])
    return _indices_grad_ref(n)(gy, _max_pool_ref(x, **attrs)[1], x.shape)


def _avg_grad_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = []
        for s in _avg_samples(n)(Gen("float64", 9)):
            attrs = {"ceil_mode": False, "count_include_pad": True, **s.attrs}
            gy = g.arr(_avg_pool_ref(s.inputs[0], **attrs).shape)
            out.append(Sample(s.label, (gy, list(s.inputs[0].shape)), attrs))
        return out
    return make


def _avg_grad_ref(gy: np.ndarray, input_size: Sequence[int], kernel_size: Sequence[int],
                  stride: Sequence[int], padding: Sequence[int], ceil_mode: bool = False,
                  count_include_pad: bool = True, divisor_override: int | None = None) -> np.ndarray:
    n = len(kernel_size)
    windows = [_strided(input_size[-n + i], kernel_size[i], stride[i], padding[i], 1, ceil_mode,
                        count_include_pad) for i in range(n)]
    if divisor_override:
        windows = [[(w, divisor_override if i == 0 else 1) for w, _ in dim]
                   for i, dim in enumerate(windows)]
    return _spread(gy, windows, input_size)


def _adaptive_grad_samples(n: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        return [Sample(s.label, (g.arr(s.inputs[0].shape[:-n] + tuple(s.attrs["output_size"])),
                                 list(s.inputs[0].shape)))
                for s in _adaptive_samples(n)(Gen("float64", 9))]
    return make


def _adaptive_grad_ref(n: int) -> Callable[..., np.ndarray]:
    def ref(gy: np.ndarray, input_size: Sequence[int]) -> np.ndarray:
        windows = [_adaptive(input_size[-n + i], gy.shape[-n + i]) for i in range(n)]
        return _spread(gy, windows, input_size)
    return ref


_GRAD_DTYPES = ("float32", "float64")
for _n in (1, 2, 3):
    if _n != 2:      # max_pool2d and avg_pool2d (and their grads) have rows in op_cases
        case(f"max_pool{_n}d", _max_samples(_n), lambda x, **a: _max_pool_ref(x, **a)[0], FLOATS)
        case(f"avg_pool{_n}d", _avg_samples(_n), _avg_pool_ref, FLOATS)
        case(f"max_pool{_n}d_grad", _max_grad_samples(_n, False), _max_grad_ref, _GRAD_DTYPES,
             grad=False)
        case(f"avg_pool{_n}d_grad", _avg_grad_samples(_n), _avg_grad_ref, _GRAD_DTYPES,
             grad=False)
    case(f"max_pool{_n}d_with_indices", _max_samples(_n), _max_pool_ref, FLOATS)
    case(f"max_pool{_n}d_with_indices_grad", _max_grad_samples(_n, True), _indices_grad_ref(_n),
         _GRAD_DTYPES, grad=False)
    case(f"adaptive_avg_pool{_n}d", _adaptive_samples(_n), _adaptive_ref("mean"), FLOATS)
    case(f"adaptive_avg_pool{_n}d_grad", _adaptive_grad_samples(_n), _adaptive_grad_ref(_n),
         _GRAD_DTYPES, grad=False)
    case(f"adaptive_max_pool{_n}d", _adaptive_samples(_n), _adaptive_ref("max"), FLOATS)
    case(f"max_unpool{_n}d", _unpool_samples(_n), _unpool_ref, FLOATS)
for _n in (2, 3):
    case(f"fractional_max_pool{_n}d", _fractional_samples(_n), _fractional_ref, _GRAD_DTYPES)
