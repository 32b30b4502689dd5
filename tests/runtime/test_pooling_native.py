"""runtime.pooling_native: native max, average and adaptive average pooling (1-D to 3-D)
against a NumPy reference (the strided-window view the reference kernels use, in float64) and torch, at odd
sizes (widths under, at and past a vector, batch 1 and 33, odd channels), strides 1-3,
dilation, padding, ceil_mode, count_include_pad, divisor_override, NaN for max; the routing
of the reference kernels; None for what it does not take."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.runtime import pooling_native as pn
from scriptmod.runtime.kernels.pooling import _avg_divisor, windows

# (shape, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), (1, 1), False),        # resnet-like, odd
    ((1, 5, 24, 24), (2, 2), (2, 2), (0, 0), (1, 1), False),       # MNIST's max_pool2d(2)
    ((33, 2, 7, 17), (3, 2), (1, 3), (1, 1), (2, 1), True),        # batch 33, dilation
    ((3, 40, 33), (5, 3), (3, 2), (2, 1), (1, 2), True),           # unbatched, ceil
    ((2, 3, 16, 1), (3, 1), (2, 1), (1, 0), (1, 1), False),        # one column
    ((2, 7, 35), (4,), (3,), (2,), (1,), True),                    # 1-D
    ((1, 2, 50), (3,), (1,), (1,), (3,), False),                   # 1-D, dilation
    ((2, 3, 5, 9, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), False),   # 3-D
    ((1, 2, 7, 6, 17), (2, 3, 2), (1, 2, 3), (1, 1, 0), (3, 1, 2), True),    # dilation, ceil
    ((3, 6, 5, 20), (3, 2, 4), (3, 1, 2), (1, 0, 2), (1, 1, 1), True),       # unbatched
]
AVG_CASES = [
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), False, True, None),
    ((1, 5, 24, 24), (2, 2), (2, 2), (0, 0), False, True, None),
    ((33, 2, 7, 17), (3, 2), (1, 3), (1, 1), True, False, None),
    ((3, 40, 33), (5, 3), (3, 2), (2, 1), True, True, None),
    ((2, 3, 15, 19), (3, 3), (2, 2), (1, 1), True, False, 5),
    ((2, 7, 35), (4,), (3,), (2,), True, False, None),
    ((2, 3, 5, 9, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1), False, True, None),  # 3-D
    ((1, 2, 7, 6, 17), (2, 3, 2), (2, 2, 3), (1, 1, 0), True, False, None),
    ((3, 6, 5, 20), (3, 2, 4), (3, 1, 2), (1, 0, 2), True, True, None),
    ((2, 2, 6, 7, 8), (2, 3, 3), (2, 2, 2), (1, 1, 1), True, False, 7),
]


def _x(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _planes(x, n):
    return x.reshape((-1,) + x.shape[-n:]).astype(np.float64)


def _max_ref(x, k, s, p, d, ceil):
    n = len(k)
    win = windows(np, _planes(x, n), k, s, p, d, ceil, -np.inf)
    out = win.max(axis=tuple(range(1 + n, 1 + 2 * n)))
    return out.reshape(x.shape[:-n] + out.shape[1:])


def _avg_ref(x, k, s, p, ceil, include, override):
    n = len(k)
    planes = _planes(x, n)
    total = windows(np, planes, k, s, p, (1,) * n, ceil, 0.0).sum(
        axis=tuple(range(1 + n, 1 + 2 * n)))
    div = override or _avg_divisor(np, planes.shape[1:], total.shape[1:], k, s, p, include,
                                   np.float64)
    out = total / div
    return out.reshape(x.shape[:-n] + out.shape[1:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", MAX_CASES, ids=str)
def test_max_pool_matches_the_window_reference(case, dtype):
    shape, k, s, p, d, ceil = case
    x = _x(shape, dtype)
    got = pn.max_pool(x, len(k), k, s, p, d, ceil)
    want = _max_ref(x, k, s, p, d, ceil)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", AVG_CASES, ids=str)
def test_avg_pool_matches_the_window_reference(case, dtype):
    shape, k, s, p, ceil, include, override = case
    x = _x(shape, dtype)
    got = pn.avg_pool(x, len(k), k, s, p, ceil, include, override)
    want = _avg_ref(x, k, s, p, ceil, include, override)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14,
                               atol=1e-6 if dtype == np.float32 else 1e-14)


def test_nan_propagates_through_max_as_in_torch():
    torch = pytest.importorskip("torch")
    x = _x((2, 3, 13, 21))
    x[0, 0, 4, 5] = x[1, 2, 0, 0] = x[1, 1, 12, 20] = np.nan
    x[0, 1, 6, 6] = np.inf
    got = pn.max_pool(x, 2, (3, 3), (2, 2), (1, 1), (1, 1), False)
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1).numpy()
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).sum() == np.isnan(want).sum() > 3


@pytest.mark.parametrize("size,out", [((7, 7), (1, 1)), ((24, 36), (6, 4)), ((33, 1), (1, 1)),
                                      ((9, 12), (3, 1)), ((40,), (8,)), ((37,), (1,)),
                                      ((4, 6, 9), (1, 1, 1)), ((4, 6, 9), (2, 3, 3))])
def test_adaptive_avg_pool_matches_torch(size, out):
    torch = pytest.importorskip("torch")
    x = _x((3, 5) + size, seed=2)
    got = pn.adaptive_avg_pool(x, len(size), out)
    fn = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")
    want = fn(torch.from_numpy(x), out).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_pools_match_torch_through_the_functional_api():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    x = _x((3, 17, 23, 30), seed=3)
    tx, sx = torch.from_numpy(x), sm.from_numpy(x)
    pairs = [(F.max_pool2d(sx, 3, 2, 1, ceil_mode=True),
              TF.max_pool2d(tx, 3, 2, 1, ceil_mode=True)),
             (F.avg_pool2d(sx, 3, 2, 1, count_include_pad=False),
              TF.avg_pool2d(tx, 3, 2, 1, count_include_pad=False)),
             (F.adaptive_avg_pool2d(sx, (1, 1)), TF.adaptive_avg_pool2d(tx, (1, 1))),
             (F.max_pool1d(sm.from_numpy(x[0]), 2), TF.max_pool1d(tx[0], 2))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_3d_pools_match_torch_through_the_functional_api():
    """3-D pools (native: 2-D slices combined along depth) with NaN and inf, against torch;
    and the index-returning 3-D max pool (the reference kernel) still agrees."""
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    x = _x((2, 3, 7, 12, 13), seed=6)
    x[0, 0, 3, 4, 5] = x[1, 2, 0, 0, 0] = np.nan
    x[0, 1, 6, 11, 12] = np.inf
    tx, sx = torch.from_numpy(x), sm.from_numpy(x)
    assert pn.max_pool(x, 3, (3,) * 3, (2,) * 3, (1,) * 3, (1,) * 3, True) is not None
    pairs = [(F.max_pool3d(sx, 3, 2, 1, ceil_mode=True), TF.max_pool3d(tx, 3, 2, 1, ceil_mode=True)),
             (F.avg_pool3d(sx, (2, 3, 3), (1, 2, 2), 1, count_include_pad=False),
              TF.avg_pool3d(tx, (2, 3, 3), (1, 2, 2), 1, count_include_pad=False)),
             (F.max_pool3d(sx, 2, return_indices=True)[0], TF.max_pool3d(tx, 2, return_indices=True)[0]),
             (F.adaptive_avg_pool3d(sx, 1), TF.adaptive_avg_pool3d(tx, 1))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.isnan(ours.numpy()), np.isnan(theirs.numpy()))


def test_threads_give_the_same_bits():
    from scriptmod.runtime import threads
    x = _x((8, 16, 64, 70))
    before = threads.get_num_threads()
    try:
        threads.set_num_threads(1)
        one = pn.max_pool(x, 2, (3, 3), (2, 2), (1, 1), (1, 1), False)
        mean1 = pn.adaptive_avg_pool(x, 2, (1, 1))
        threads.set_num_threads(2)
        np.testing.assert_array_equal(pn.max_pool(x, 2, (3, 3), (2, 2), (1, 1), (1, 1), False),
                                      one)
        np.testing.assert_array_equal(pn.adaptive_avg_pool(x, 2, (1, 1)), mean1)
    finally:
        threads.set_num_threads(before)


def test_what_it_does_not_take_is_none():
    x = _x((2, 3, 8, 8))
    assert pn.max_pool(x.astype(np.float16), 2, (2, 2), (2, 2), (0, 0), (1, 1), False) is None
    assert pn.max_pool(x.astype(np.int32), 2, (2, 2), (2, 2), (0, 0), (1, 1), False) is None
    assert pn.max_pool_with_indices(_x((1, 2, 4, 4, 4)), 3, (2,) * 3, (2,) * 3, (0,) * 3,
                                    (1,) * 3, False) is None     # 3-D indices: the reference
    assert pn.max_pool(_x((2, 4, 4, 4)).astype(np.float16), 3, (2,) * 3, (2,) * 3, (0,) * 3,
                       (1,) * 3, False) is None
    assert pn.max_pool(x[:0], 2, (2, 2), (2, 2), (0, 0), (1, 1), False) is None
    assert pn.adaptive_avg_pool(x, 2, (3, 3)) is None          # windows of 2 and 3 taps
    assert pn.adaptive_avg_pool(x, 2, (8, 8)) is None          # the reference's copy
    strided = x[:, :, ::2, ::2]                                  # any layout is read by value
    np.testing.assert_array_equal(pn.max_pool(strided, 2, (2, 2), (1, 1), (0, 0), (1, 1), False),
                                  _max_ref(strided, (2, 2), (1, 1), (0, 0), (1, 1), False))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_avx2_shape_is_as_exact(dtype, monkeypatch):
    from scriptmod.runtime import conv_direct
    monkeypatch.setattr(conv_direct, "lanes", lambda dt="f32": 8 if dt == "f32" else 4)
    for shape, k, s, p, d, ceil in MAX_CASES[:4]:
        x = _x(shape, dtype, seed=4)
        np.testing.assert_array_equal(pn.max_pool(x, len(k), k, s, p, d, ceil),
                                      _max_ref(x, k, s, p, d, ceil).astype(dtype))


def test_an_empty_output_is_the_reference_error():
    x = _x((1, 2, 3, 3))
    assert pn.max_pool(x, 2, (2, 2), (1, 1), (0, 0), (4, 4), False) is None
    with pytest.raises(Exception, match="too small"):
        F.max_pool2d(sm.from_numpy(x), 2, 1, 0, dilation=4)
