"""runtime.pooling_native: native max pooling with indices, adaptive max pooling and the
scatter-add backward,
against torch (values, int64 indices: the first maximum in row-major order, the last NaN of
a window, the first in-bounds tap of a window of -inf) and float64 NumPy references, at odd
sizes (widths under, at and past a vector, batch 1 and 33), strides 1-3, dilation,
padding, ceil_mode, 1-D; the gradients through the functional API (gradcheck in float64);
the routing of the reference kernels; None for what it does not take."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.runtime import pooling_native as pn
from scriptmod.runtime.kernels import pooling as ref_kernels

# (shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), (1, 1), False),        # resnet-like, odd
    ((1, 5, 24, 24), (2, 2), (2, 2), (0, 0), (1, 1), False),       # batch 1, MNIST's
    ((33, 2, 7, 17), (3, 2), (1, 3), (1, 1), (2, 1), True),        # batch 33, dilation
    ((3, 40, 33), (5, 3), (3, 2), (2, 1), (1, 2), True),           # unbatched, ceil
    ((2, 3, 16, 1), (3, 1), (2, 1), (1, 0), (1, 1), False),        # one column
    ((2, 3, 5, 37), (3, 3), (1, 1), (1, 1), (1, 1), True),         # stride 1, long rows
    ((2, 7, 35), (4,), (3,), (2,), (1,), True),                    # 1-D
    ((1, 2, 50), (3,), (1,), (1,), (3,), False),                   # 1-D, dilation
]


def _x(shape, dtype=np.float32, seed=0):
    """Normal values rounded to halves: many ties inside a window."""
    return np.round(2 * np.random.default_rng(seed).standard_normal(shape)).astype(dtype) / 2


def _torch_pool(torch, x, k, s, p, d, ceil):
    fn = torch.nn.functional.max_pool2d if len(k) == 2 else torch.nn.functional.max_pool1d
    v, i = fn(torch.from_numpy(x), k, s, p, d, ceil, return_indices=True)
    return v.numpy(), i.numpy()


def _scatter_ref(g, index, numel):
    """float64 ``np.add.at`` of each plane's gradients at its indices inside the plane."""
    g, index = g.reshape(g.shape[0], -1), index.reshape(g.shape[0], -1)
    out = np.zeros((g.shape[0], numel))
    for b in range(g.shape[0]):
        inside = (index[b] >= 0) & (index[b] < numel)
        np.add.at(out[b], index[b][inside], g[b][inside].astype(np.float64))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_values_and_indices_match_torch(case, dtype):
    torch = pytest.importorskip("torch")
    shape, k, s, p, d, ceil = case
    x = _x(shape, dtype)
    values, index = pn.max_pool_with_indices(x, len(k), k, s, p, d, ceil)
    want_v, want_i = _torch_pool(torch, x, k, s, p, d, ceil)
    assert values.dtype == dtype and index.dtype == np.int64
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(index, want_i)


@pytest.mark.parametrize("case", CASES[:4], ids=str)
def test_indices_point_at_the_float64_maximum(case):
    shape, k, s, p, d, ceil = case
    x = np.random.default_rng(1).standard_normal(shape)
    values, index = pn.max_pool_with_indices(x, len(k), k, s, p, d, ceil)
    want = ref_kernels.windows(np, x.reshape((-1,) + x.shape[-len(k):]), k, s, p, d, ceil,
                               -np.inf).max(axis=tuple(range(1 + len(k), 1 + 2 * len(k))))
    np.testing.assert_array_equal(values.reshape(want.shape), want)
    planes = x.reshape(want.shape[0], -1)
    picked = np.take_along_axis(planes, index.reshape(want.shape[0], -1), axis=1)
    np.testing.assert_array_equal(picked.reshape(want.shape), want)


def test_nan_inf_and_ties_pick_torch_s_index():
    torch = pytest.importorskip("torch")
    x = _x((2, 3, 13, 21))
    x[0, 0, 4, 5] = x[0, 0, 4, 6] = x[0, 0, 5, 5] = np.nan      # several NaNs in a window
    x[1, 2, 0, 0] = x[1, 1, 12, 20] = np.nan
    x[0, 1, 6, 6] = np.inf
    x[1, 0] = -np.inf                                             # windows of -inf only
    x[0, 2] = 1.0                                                 # all ties
    for args in [((3, 3), (2, 2), (1, 1), (1, 1), False), ((2, 3), (1, 2), (1, 1), (2, 1), True)]:
        values, index = pn.max_pool_with_indices(x, 2, *args)
        want_v, want_i = _torch_pool(torch, x, *args)
        np.testing.assert_array_equal(values, want_v)
        np.testing.assert_array_equal(index, want_i)
        assert np.isnan(values).sum() > 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_adds_overlapping_windows(dtype):
    x = _x((33, 3, 11, 14), dtype, seed=2)
    _, index = pn.max_pool_with_indices(x, 2, (3, 3), (1, 2), (1, 1), (1, 1), True)
    g = np.random.default_rng(3).standard_normal(index.shape).astype(dtype)
    got = pn.scatter_add(g.reshape(99, *g.shape[2:]), index.reshape(99, *g.shape[2:]), (11, 14))
    want = _scatter_ref(g.reshape(99, -1), index.reshape(99, -1), 11 * 14)
    assert got.dtype == dtype and got.shape == (99, 11, 14)
    np.testing.assert_allclose(got.reshape(99, -1), want, rtol=1e-6, atol=1e-6)


def test_scatter_add_skips_indices_outside_the_plane():
    g = np.ones((2, 3), np.float32)
    index = np.array([[0, 5, -1], [3, 3, 99]], np.int64)
    got = pn.scatter_add(g, index, (2, 2))
    np.testing.assert_array_equal(got.reshape(2, 4), [[1, 0, 0, 0], [0, 0, 0, 2]])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_through_the_functional_api_match_torch(dtype):
    torch = pytest.importorskip("torch")
    x = _x((3, 17, 23, 30), np.dtype(dtype), seed=4)
    g = np.random.default_rng(5).standard_normal((3, 17, 12, 16)).astype(dtype)
    sx, tx = sm.from_numpy(x).requires_grad_(True), torch.from_numpy(x).requires_grad_(True)
    F.max_pool2d(sx, 3, 2, 1, ceil_mode=True).backward(sm.from_numpy(g))
    torch.nn.functional.max_pool2d(tx, 3, 2, 1, ceil_mode=True).backward(torch.from_numpy(g))
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    sx.grad = None
    tx.grad = None
    values, index = F.max_pool1d(sx[0], 4, 3, 2, ceil_mode=True, return_indices=True)
    t_values, t_index = torch.nn.functional.max_pool1d(tx[0], 4, 3, 2, ceil_mode=True,
                                                        return_indices=True)
    np.testing.assert_array_equal(index.numpy(), t_index.numpy())
    (values * values).sum().backward()
    (t_values * t_values).sum().backward()
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_gradcheck_in_float64():
    from scriptmod.autograd.gradcheck import gradcheck
    x = sm.from_numpy(np.random.default_rng(6).standard_normal((2, 3, 7, 9))).requires_grad_(True)
    assert gradcheck(lambda t: F.max_pool2d(t, 3, (2, 1), 1, dilation=(1, 2)), (x,))
    assert gradcheck(lambda t: F.max_pool2d(t, 2, return_indices=True)[0], (x,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size,out", [((7, 7), (1, 1)), ((30, 30), (7, 7)), ((5, 7), (2, 3)),
                                      ((13, 17), (13, 4)), ((2, 19), (5, 3)), ((1, 1), (2, 2)),
                                      ((37,), (5,)), ((6,), (6,))])
def test_adaptive_max_matches_torch(size, out, dtype):
    torch = pytest.importorskip("torch")
    x = _x((33, 2) + size, dtype, seed=9)
    x[0, 0].flat[:2] = np.nan                       # two NaNs in one window: the last wins
    x[2, 1] = -np.inf
    values, index = pn.adaptive_max_pool(x, len(size), out)
    fn = torch.nn.functional.adaptive_max_pool2d if len(size) == 2 else \
        torch.nn.functional.adaptive_max_pool1d
    want_v, want_i = fn(torch.from_numpy(x), out, return_indices=True)
    np.testing.assert_array_equal(values, want_v.numpy())
    np.testing.assert_array_equal(index, want_i.numpy())


def test_adaptive_max_gradients_match_torch():
    torch = pytest.importorskip("torch")
    x = _x((2, 5, 13, 11), seed=10)
    g = np.random.default_rng(11).standard_normal((2, 5, 4, 3)).astype(np.float32)
    sx, tx = sm.from_numpy(x).requires_grad_(True), torch.from_numpy(x).requires_grad_(True)
    F.adaptive_max_pool2d(sx, (4, 3)).backward(sm.from_numpy(g))
    torch.nn.functional.adaptive_max_pool2d(tx, (4, 3)).backward(torch.from_numpy(g))
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_the_reference_kernels_route_here(monkeypatch):
    calls = []
    for name in ("max_pool_with_indices", "scatter_add"):
        real = getattr(pn, name)
        monkeypatch.setattr(pn, name, lambda *a, _real=real, _name=name: calls.append(_name)
                            or _real(*a))
    x = sm.from_numpy(_x((2, 3, 9, 11))).requires_grad_(True)
    F.max_pool2d(x, 3, 2, 1).sum().backward()
    assert calls == ["max_pool_with_indices", "scatter_add"]
    monkeypatch.setattr(pn, "adaptive_max_pool", lambda *a: calls.append("adaptive") or None)
    values, index = F.adaptive_max_pool2d(x, 3, return_indices=True)
    assert calls[-1] == "adaptive" and values.shape == index.shape == (2, 3, 3, 3)


def test_threads_give_the_same_bits():
    from scriptmod.runtime import threads
    x = _x((8, 16, 64, 70), seed=7)
    before = threads.get_num_threads()
    try:
        runs = []
        for n in (1, 2):
            threads.set_num_threads(n)
            values, index = pn.max_pool_with_indices(x, 2, (3, 3), (2, 2), (1, 1), (1, 1), False)
            runs.append((values, index, pn.scatter_add(values.reshape(128, 32, 35),
                                                       index.reshape(128, 32, 35), (64, 70))))
        for a, b in zip(*runs):
            np.testing.assert_array_equal(a, b)
    finally:
        threads.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_avx2_shape_is_as_exact(dtype, monkeypatch):
    torch = pytest.importorskip("torch")
    from scriptmod.runtime import conv_direct
    monkeypatch.setattr(conv_direct, "lanes", lambda dt="f32": 8 if dt == "f32" else 4)
    for shape, k, s, p, d, ceil in CASES[:4]:
        x = _x(shape, dtype, seed=8)
        values, index = pn.max_pool_with_indices(x, len(k), k, s, p, d, ceil)
        want_v, want_i = _torch_pool(torch, x, k, s, p, d, ceil)
        np.testing.assert_array_equal(values, want_v)
        np.testing.assert_array_equal(index, want_i)


def test_what_it_does_not_take_is_none():
    x = _x((2, 3, 8, 8))
    args = ((2, 2), (2, 2), (0, 0), (1, 1), False)
    assert pn.max_pool_with_indices(x.astype(np.float16), 2, *args) is None
    assert pn.max_pool_with_indices(x.astype(np.int32), 2, *args) is None
    assert pn.max_pool_with_indices(x[:0], 2, *args) is None
    assert pn.max_pool_with_indices(_x((1, 2, 4, 4, 4)), 3, (2,) * 3, (2,) * 3, (0,) * 3,
                                    (1,) * 3, False) is None
    index = np.zeros((2, 4), np.int64)
    assert pn.scatter_add(np.ones((2, 4), np.float16), index, (4,)) is None
    assert pn.scatter_add(np.ones((2, 4), np.float32), index.astype(np.int32), (4,)) is None
    assert pn.scatter_add(np.ones((2, 5), np.float32), index, (4,)) is None
    assert pn.adaptive_max_pool(x, 2, (0, 2)) is None
    assert pn.adaptive_max_pool(x.astype(np.float16), 2, (2, 2)) is None
    assert pn.adaptive_max_pool(_x((1, 2, 4, 4, 4)), 3, (2,) * 3) is None
