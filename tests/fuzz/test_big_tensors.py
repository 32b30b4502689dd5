"""Tensors above 2^31 elements through each native kernel family (issue 17: every index,
count and offset in native code is 64-bit), compared with NumPy.

With ``--long`` each tensor holds more than 2^31 elements (int8/bool: 2 GiB each, the row
reduction's float16 input 4 GiB; at most two such arrays are alive at once, about 6 GiB at
the peak); the CI-sized run checks the same programs on tensors of about 2^16 elements.
NumPy references are computed in slices, so they add no big array of their own. The cheap
checks of the emitted index types are ``tests/codegen/test_int64_indexing.py``."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

BIG = (1 << 31) + 4099           # elements with --long: no 32-bit index or count holds them
SMALL = (1 << 16) + 3
SLICE = 1 << 26                  # elements per slice of a NumPy reference


@pytest.fixture(scope="module")
def numel(fuzz_long: bool) -> int:
    return BIG if fuzz_long else SMALL


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request: pytest.FixtureRequest):
    before = sm.get_num_threads()
    sm.set_num_threads(request.param)
    yield request.param
    sm.set_num_threads(before)
    gc.collect()


def _int8(n: int, seed: int) -> np.ndarray:
    """``n`` random int8 values, generated slice by slice."""
    rng = np.random.default_rng(seed)
    out = np.empty(n, np.int8)
    for lo in range(0, n, SLICE):
        hi = min(n, lo + SLICE)
        out[lo:hi] = rng.integers(-128, 128, hi - lo, dtype=np.int8)
    return out


def _trace(module: nn.Module, x, *rest):
    """``module`` traced on the first rows of ``x`` (a view: tracing runs the module eagerly,
    and its check run copies every input), to be called on the whole tensor."""
    return sm.jit.trace(module, (x[:8], *rest), check_trace=False)


def _check_slices(got: np.ndarray, want, n: int) -> None:
    """``got[lo:hi] == want(lo, hi)`` for every slice of ``[0, n)`` of a flat result."""
    assert got.shape == (n,)
    for lo in range(0, n, SLICE):
        hi = min(n, lo + SLICE)
        np.testing.assert_array_equal(got[lo:hi], want(lo, hi), err_msg=f"[{lo}:{hi}]")


class _Reductions(nn.Module):
    def forward(self, x):
        return x.all(), x.any(), x.sum(), (x != 0).all()


def test_all_any_sum_of_int8_and_bool(numel, threads):
    """The issue's case: ``all()`` over an int8 tensor of 2^31+ ones, traced and eager."""
    ones = np.ones(numel, np.int8)
    x = sm.from_numpy(ones)
    module = _trace(_Reductions(), x)
    for where_zero in (None, numel - 1, 0):
        if where_zero is not None:
            ones[:] = 1
            ones[where_zero] = 0
        want = (where_zero is None, True, numel - (where_zero is not None),
                where_zero is None)
        got = tuple(v.item() for v in module(x))
        assert got == want, (where_zero, got, want)
        assert (x.all().item(), x.any().item(), x.sum().item()) == want[:3]
    del x, module, ones
    gc.collect()
    flags = np.zeros(numel, np.bool_)
    flags[-1] = True
    b = sm.from_numpy(flags)
    assert (b.all().item(), b.any().item(), b.sum().item()) == (False, True, 1)
    got = tuple(v.item() for v in _trace(_Reductions(), b)(b))
    assert got == (False, True, 1, False)


class _Chain(nn.Module):
    def forward(self, x):
        return (x * 3 + 1) * x - 7          # one fused int8 group, wrapping as torch does


def test_fused_elementwise_chain(numel, threads):
    a = _int8(numel, 1)
    x = sm.from_numpy(a)
    y = _trace(_Chain(), x)(x).numpy()

    def want(lo, hi):
        v = a[lo:hi]
        return (v * np.int8(3) + np.int8(1)) * v - np.int8(7)
    _check_slices(y, want, numel)


class _Add(nn.Module):
    def forward(self, x, b):
        return x + b


def test_broadcast_add(numel, threads):
    cols = 1024
    rows = -(-numel // cols)
    a = _int8(rows * cols, 2).reshape(rows, cols)
    bias = _int8(cols, 3)
    x, b = sm.from_numpy(a), sm.from_numpy(bias)
    y = _trace(_Add(), x, b)(x, b).numpy()
    assert y.shape == (rows, cols)
    flat = a.reshape(-1)
    _check_slices(y.reshape(-1), lambda lo, hi: flat[lo:hi] + np.tile(bias, (hi - lo) // cols),
                  rows * cols)


class _RowStats(nn.Module):
    def forward(self, x):
        return x.sum(-1), x.amax(-1)


def test_row_reduction_with_offsets_above_2_31(numel, threads):
    """float16 rows of 4096: the last rows start past element 2^31 (4 GiB with --long)."""
    cols = 4096
    rows = -(-numel // cols)
    step = max(1, SLICE // cols)
    block = np.random.default_rng(4).standard_normal((step, cols), np.float32)
    h = np.empty((rows, cols), np.float16)
    for r in range(0, rows, step):         # one random block, shifted per slice (cheap)
        h[r:r + step] = block[:rows - r] + (r // step) % 7
    x = sm.from_numpy(h)
    total, top = (v.numpy() for v in _trace(_RowStats(), x)(x))
    assert total.shape == top.shape == (rows,)
    for r in range(0, rows, step):
        part = h[r:r + step]
        np.testing.assert_allclose(total[r:r + step].astype(np.float64),
                                   part.astype(np.float64).sum(-1), rtol=2e-3, atol=0.07)
        np.testing.assert_array_equal(top[r:r + step], part.max(-1))


class _Transpose(nn.Module):
    def forward(self, x):
        return x.permute(1, 0).reshape(-1)  # a copy kernel: no view has this shape


def test_permute_copy(numel):
    cols = 64
    rows = -(-numel // cols)
    a = _int8(rows * cols, 5).reshape(rows, cols)
    x = sm.from_numpy(a)
    y = _trace(_Transpose(), x)(x).numpy().reshape(cols, rows)
    for c in range(cols):
        np.testing.assert_array_equal(y[c], a[:, c], err_msg=f"column {c}")
