"""runtime.conv_direct: the direct float32 convolution against a float64 NumPy reference at
odd sizes (widths under, at and past a vector, row blocks that end inside a register tile,
strides 1-3, dilation, padding, channel multipliers, a few channels per group, 1-D), and
against torch; threads, ``out=``, the epilogue ABI, which shapes it prefers, clear errors."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from scriptmod.runtime import conv_direct as cd
from scriptmod.runtime.gemm import Epilogue
from scriptmod.runtime.kernels.conv import convolution

# (N, C, O, groups, spatial, kernel, stride, padding, dilation)
CASES = [
    (2, 3, 3, 3, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),          # depthwise, odd width
    (1, 5, 10, 5, (16, 16), (3, 3), (2, 2), (1, 1), (1, 1)),        # multiplier 2, stride 2
    (33, 2, 2, 2, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),          # batch 33, 7x7 planes
    (1, 1, 5, 1, (300, 20), (3, 3), (1, 1), (1, 1), (1, 1)),        # stem: many row blocks
    (2, 3, 4, 1, (13, 33), (3, 3), (1, 1), (0, 2), (1, 1)),         # 3 channels, 27 taps
    (1, 4, 6, 2, (17, 17), (3, 2), (3, 2), (2, 1), (2, 3)),         # groups 2, dilation
    (3, 17, 17, 17, (12, 1), (5, 1), (1, 1), (2, 0), (1, 1)),       # one column
    (1, 2, 2, 2, (5, 40), (5, 5), (2, 3), (2, 2), (1, 1)),          # kernel = height
    (2, 3, 6, 1, (19, 26), (3, 2), (1, 2), (3, 0), (2, 3)),         # a column, dilated
    (1, 8, 8, 8, (9, 9), (7, 7), (1, 1), (3, 3), (1, 1)),           # 7 x 7 columns
    (2, 6, 6, 6, (23,), (3,), (2,), (1,), (1,)),                    # 1-D
    (1, 1, 3, 1, (70,), (4,), (1,), (3,), (2,)),                    # 1-D stem, dilation
]


def _arrays(case, seed=0):
    n, c, o, g, size, k = case[:6]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *size), dtype=np.float32)
    w = rng.standard_normal((o, c // g, *k), dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32)
    return x, w, b


def _reference(x, w, b, s, p, d, g):
    """float64 result and a float32 accumulation bound (taps ulps of sum |x w|)."""
    ref = convolution(np, x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                      s, p, d, g)
    mag = convolution(np, np.abs(x).astype(np.float64), np.abs(w).astype(np.float64),
                      np.abs(b).astype(np.float64), s, p, d, g)
    return ref, 2.0 * (w[0].size + 1) * 2.0 ** -24 * mag + 1e-30


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64(case):
    x, w, b = _arrays(case)
    s, p, d, g = case[6], case[7], case[8], case[3]
    got = cd.conv(x, w, b, s, p, d, g)
    ref, bound = _reference(x, w, b, s, p, d, g)
    assert got.shape == ref.shape and got.dtype == np.float32 and got.flags.c_contiguous
    assert np.all(np.abs(got - ref) <= bound)
    no_bias = cd.conv(x, w, None, s, p, d, g)
    ref0, bound0 = _reference(x, w, np.zeros_like(b), s, p, d, g)
    assert np.all(np.abs(no_bias - ref0) <= bound0)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[4], CASES[5], CASES[8]], ids=str)
def test_matches_torch(case):
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(case, seed=1)
    s, p, d, g = case[6], case[7], case[8], case[3]
    fn = torch.nn.functional.conv2d if x.ndim == 4 else torch.nn.functional.conv1d
    with torch.no_grad():
        want = fn(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), s, p, d,
                  g).numpy()
    np.testing.assert_allclose(cd.conv(x, w, b, s, p, d, g), want, rtol=1e-5, atol=1e-5)


def test_threads_give_the_same_bits_and_out_is_written():
    x, w, b = _arrays((4, 32, 32, 32, (40, 50), (3, 3)))
    args = ((1, 1), (1, 1), (1, 1), 32)
    one = cd.conv(x, w, b, *args, threads=1)
    out = np.full(one.shape, np.nan, np.float32)
    assert cd.conv(x, w, b, *args, out=out) is out
    np.testing.assert_array_equal(out, one)


def test_non_contiguous_input_is_read_as_its_values():
    x, w, b = _arrays((2, 4, 4, 4, (10, 24), (3, 3)))
    view = x[:, :, :, ::2]
    np.testing.assert_array_equal(cd.conv(view, w, b, (1, 1), (1, 1), (1, 1), 4),
                                  cd.conv(view.copy(), w, b, (1, 1), (1, 1), (1, 1), 4))


def test_epilogue_sees_each_finished_row_block_once():
    """The ABI: ``ep(start, end, args, meta)`` over flat output indices, after the rows are
    final. The callback applies a ReLU in place and records the ranges."""
    x, w, b = _arrays((3, 8, 16, 8, (37, 21), (3, 3)))
    want = np.maximum(cd.conv(x, w, b, (1, 1), (1, 1), (1, 1), 8), 0)
    out = np.empty_like(want)
    flat, ranges = out.reshape(-1), []

    @ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
    def relu(start, end, args, meta):
        ranges.append((start, end))
        np.maximum(flat[start:end], 0, out=flat[start:end])
    ep = Epilogue(ctypes.cast(relu, ctypes.c_void_p).value, 0, 0)
    cd.conv(x, w, b, (1, 1), (1, 1), (1, 1), 8, out=out, epilogue=ep)
    np.testing.assert_array_equal(out, want)
    ranges.sort()
    assert ranges[0][0] == 0 and ranges[-1][1] == out.size
    assert all(a[1] == c[0] for a, c in zip(ranges, ranges[1:]))


def test_prefers_depthwise_and_short_patches():
    assert cd.prefers((8, 32, 112, 112), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1), 32)
    assert cd.prefers((8, 32, 56, 56), (64, 1, 3, 3), (2, 2), (1, 1), (1, 1), 32)
    assert cd.prefers((32, 1, 28, 28), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    assert not cd.prefers((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    assert not cd.prefers((8, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1)
    assert not cd.prefers((1, 2, 8, 8, 8), (2, 1, 3, 3, 3), (1,) * 3, (1,) * 3, (1,) * 3, 2)
    x, w, b = _arrays(CASES[0])
    assert cd.taken(x, w, b, (1, 1), (1, 1), (1, 1), 3)
    assert not cd.taken(x.astype(np.float64), w, b, (1, 1), (1, 1), (1, 1), 3)
    assert not cd.taken(x, w, b[:2], (1, 1), (1, 1), (1, 1), 3)


def test_rows_too_wide_for_int32_column_masks_are_not_taken(monkeypatch):
    x, w, b = _arrays(CASES[0])
    assert cd.supported(x, w, b, (1, 1), (1, 1), (1, 1), 3)
    monkeypatch.setattr(cd, "MAX_WIDTH", x.shape[-1] + 2)
    assert not cd.supported(x, w, b, (1, 1), (1, 1), (1, 1), 3)
    from scriptmod.runtime import pooling_native as pn
    assert pn.max_pool(x, 2, (3, 3), (1, 1), (1, 1), (1, 1), False) is None
    assert pn.max_pool(x, 2, (3, 3), (1, 1), (0, 0), (1, 1), False) is not None


def test_bad_arrays_are_clear_errors():
    x, w, b = _arrays(CASES[0])
    with pytest.raises(ValueError, match="conv_direct.conv: expected float32"):
        cd.conv(x.astype(np.float64), w, b, (1, 1), (1, 1), (1, 1), 3)
    with pytest.raises(ValueError, match="non-empty output"):
        cd.conv(x, w, b, (1, 1), (0, 0), (9, 9), 3)
    with pytest.raises(ValueError, match="groups 2"):
        cd.conv(x, w, b, (1, 1), (1, 1), (1, 1), 2)
    with pytest.raises(ValueError, match="out must be"):
        cd.conv(x, w, b, (1, 1), (1, 1), (1, 1), 3, out=np.empty((2, 3, 9, 10), np.float32))


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2], CASES[5], CASES[9]], ids=str)
def test_the_avx2_shape_is_as_exact(case, monkeypatch):
    """8-lane vectors (AVX2's shape; either runs on any x86-64 host): rows shorter than,
    equal to and longer than a vector fall elsewhere than with 16."""
    monkeypatch.setattr(cd, "lanes", lambda dtype="f32": 8 if dtype == "f32" else 4)
    x, w, b = _arrays(case, seed=2)
    s, p, d, g = case[6], case[7], case[8], case[3]
    ref, bound = _reference(x, w, b, s, p, d, g)
    assert np.all(np.abs(cd.conv(x, w, b, s, p, d, g) - ref) <= bound)
