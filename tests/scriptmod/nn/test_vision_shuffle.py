"""Pixel and channel shuffles (reshapes and permutes): against NumPy index arithmetic,
against torch where it is installed (values, gradients, reprs, errors), traced at one batch
and image size and run at another."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import arr, assert_close_lists, run_both, torch_or_none

needs_torch = pytest.mark.skipif(torch_or_none() is None, reason="torch not installed")


def test_pixel_shuffle_moves_each_channel_to_its_block_position() -> None:
    r, c, h, w = 2, 3, 2, 4
    x = np.random.default_rng(0).standard_normal((2, c * r * r, h, w))
    y = F.pixel_shuffle(sm.tensor(x), r).numpy()
    assert y.shape == (2, c, h * r, w * r)
    for ch, i, j in np.ndindex(c, h * r, w * r):
        assert y[1, ch, i, j] == x[1, ch * r * r + (i % r) * r + j % r, i // r, j // r]
    np.testing.assert_array_equal(F.pixel_unshuffle(sm.tensor(y), r).numpy(), x)


def test_channel_shuffle_interleaves_groups() -> None:
    x = np.arange(6.0).reshape(1, 6, 1)
    np.testing.assert_array_equal(F.channel_shuffle(sm.tensor(x), 3).numpy().ravel(),
                                  [0, 2, 4, 1, 3, 5])


@needs_torch
@pytest.mark.parametrize("name,arg,shape", [
    ("pixel_shuffle", 2, (2, 8, 3, 2)), ("pixel_shuffle", 3, (9, 2, 1)),
    ("pixel_shuffle", 2, (1, 2, 4, 1, 2)), ("pixel_unshuffle", 2, (2, 3, 4, 6)),
    ("pixel_unshuffle", 3, (3, 3, 6)), ("channel_shuffle", 2, (2, 4, 3)),
    ("channel_shuffle", 3, (1, 6, 2, 2, 2))])
def test_matches_torch(name: str, arg: int, shape: tuple) -> None:
    torch = torch_or_none()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ours, theirs = run_both(lambda t: getattr(F, name)(t, arg),
                            lambda t: getattr(torch.nn.functional, name)(t, arg), [x])
    assert_close_lists(ours, theirs, atol=0, rtol=0)


@needs_torch
@pytest.mark.parametrize("call", [
    lambda F, x: F.pixel_shuffle(x, 2),            # 6 channels: not divisible by 4
    lambda F, x: F.pixel_shuffle(x[0, 0], 2),
    lambda F, x: F.pixel_shuffle(x, 0),
    lambda F, x: F.pixel_unshuffle(x, 2),          # height 3
    lambda F, x: F.channel_shuffle(x, 4),
    lambda F, x: F.channel_shuffle(x[0, 0], 2),
    lambda F, x: F.channel_shuffle(x, 0),
])
def test_errors_are_torchs(call) -> None:
    torch = torch_or_none()
    x = np.zeros((1, 6, 3, 4), np.float32)
    with pytest.raises(Exception) as theirs:
        call(torch.nn.functional, torch.tensor(x))
    with pytest.raises(RuntimeError) as ours:
        call(F, sm.tensor(x))
    assert str(ours.value) == str(theirs.value)


@needs_torch
def test_module_reprs_are_torchs() -> None:
    torch = torch_or_none()
    for name, arg in [("PixelShuffle", 3), ("PixelUnshuffle", 2), ("ChannelShuffle", 4)]:
        assert repr(getattr(nn, name)(arg)) == repr(getattr(torch.nn, name)(arg))


class _SubPixel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 16, 3, padding=1)
        self.shuffle, self.unshuffle = nn.PixelShuffle(2), nn.PixelUnshuffle(2)
        self.mix = nn.ChannelShuffle(2)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.mix(self.unshuffle(self.shuffle(self.conv(x))))


def test_traced_at_another_batch_and_image_size() -> None:
    model = _SubPixel()
    traced = sm.jit.trace(model, sm.randn(2, 4, 3, 5))
    for x in [sm.randn(2, 4, 3, 5), sm.randn(3, 4, 6, 2)]:
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = traced(a), model(b)
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-5, atol=1e-6)
        (got * got).sum().backward()
        (want * want).sum().backward()
        np.testing.assert_allclose(arr(a.grad), arr(b.grad), rtol=1e-4, atol=1e-5)
