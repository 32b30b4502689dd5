"""``F.grid_sample`` and ``F.affine_grid``: every mode and padding against torch where it is
installed (values, input and grid gradients, 4-D and 5-D, float32 and float64), hand-checked
float64 numbers, torch's errors and warnings, and a traced spatial transformer at two batch
and image sizes."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import arr, assert_close_lists, run_both, torch_or_none

needs_torch = pytest.mark.skipif(torch_or_none() is None, reason="torch not installed")

_SAMPLES = [(mode, pad, align, rank) for mode in ("bilinear", "nearest", "bicubic")
            for pad in ("zeros", "border", "reflection") for align in (False, True)
            for rank in ((4,) if mode == "bicubic" else (4, 5)) if (align or rank == 4)]


@needs_torch
@pytest.mark.parametrize("mode,pad,align,rank", _SAMPLES)
def test_grid_sample_matches_torch(mode: str, pad: str, align: bool, rank: int) -> None:
    torch = torch_or_none()
    rng = np.random.default_rng(rank)
    dtype = np.float64 if align else np.float32
    x = rng.standard_normal((2, 2) + (3, 4, 5)[5 - rank:]).astype(dtype)
    grid = rng.uniform(-1.4, 1.4, (2,) + (2, 3, 2)[5 - rank:] + (rank - 2,)).astype(dtype)
    kw = {"mode": mode, "padding_mode": pad, "align_corners": align}
    ours, theirs = run_both(lambda a, g: F.grid_sample(a, g, **kw),
                            lambda a, g: torch.nn.functional.grid_sample(a, g, **kw), [x, grid])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert_close_lists(ours, theirs, atol=tol, rtol=tol)


@needs_torch
def test_non_finite_grid_points_are_torchs() -> None:
    """NaN reads the border's first pixel under border/reflection padding, and gives NaN
    (zeros padding, and bicubic: its weights are NaN), as PyTorch's CPU kernel."""
    torch = torch_or_none()
    x = np.arange(1.0, 10.0, dtype=np.float32).reshape(1, 1, 3, 3)
    grid = np.array([[[[np.nan, 0.0], [0.0, np.nan], [np.inf, 0.2], [-np.inf, 0.3],
                       [1e20, 0.1]]]], np.float32)
    for mode in ("bilinear", "nearest", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            kw = {"mode": mode, "padding_mode": pad, "align_corners": False}
            np.testing.assert_array_equal(
                F.grid_sample(sm.tensor(x), sm.tensor(grid), **kw).numpy(),
                torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grid), **kw).numpy())


@needs_torch
def test_large_image_positions_are_torchs() -> None:
    """Pixel positions of a 900 x 1100 image are rounded as PyTorch's fused multiply-add."""
    torch = torch_or_none()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 1, 900, 1100)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (1, 8, 9, 2)).astype(np.float32)
    for mode in ("bilinear", "bicubic"):
        got = F.grid_sample(sm.tensor(x), sm.tensor(grid), mode=mode, align_corners=False)
        want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grid), mode=mode,
                                               align_corners=False)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=3e-6)


def test_grid_sample_hand_values() -> None:
    x = sm.tensor(np.arange(4.0).reshape(1, 1, 2, 2))
    # the image centre averages all four pixels; (x=1, y=-1) with align_corners is pixel (0, 1)
    grid = sm.tensor([[[[0.0, 0.0], [1.0, -1.0]]]], dtype=sm.float64)
    np.testing.assert_allclose(F.grid_sample(x, grid, align_corners=True).numpy(),
                               [[[[1.5, 1.0]]]])
    # without align_corners, -1 is the left edge of pixel 0: half of it is zero padding
    edge = sm.tensor([[[[-1.0, -0.5]]]], dtype=sm.float64)
    np.testing.assert_allclose(F.grid_sample(x, edge, align_corners=False).numpy(),
                               [[[[0.0]]]])
    np.testing.assert_allclose(F.grid_sample(x, edge, padding_mode="border",
                                             align_corners=False).numpy(), [[[[0.0]]]])


@needs_torch
@pytest.mark.parametrize("size,align", [((2, 3, 4, 5), False), ((2, 3, 4, 5), True),
                                        ((1, 2, 3, 1, 4), False), ((2, 1, 2, 3, 2), True)])
def test_affine_grid_matches_torch(size: tuple, align: bool) -> None:
    torch = torch_or_none()
    n = len(size) - 2
    theta = np.random.default_rng(n).standard_normal((size[0], n, n + 1))
    ours, theirs = run_both(lambda t: F.affine_grid(t, size, align_corners=align),
                            lambda t: torch.nn.functional.affine_grid(t, size,
                                                                      align_corners=align),
                            [theta])
    assert_close_lists(ours, theirs, atol=1e-12, rtol=1e-12)


def test_identity_affine_grid_resamples_the_image() -> None:
    x = sm.randn(2, 3, 4, 5, dtype=sm.float64)
    theta = sm.eye(2, 3, dtype=sm.float64).unsqueeze(0).expand(2, 2, 3)
    for align in (False, True):
        grid = F.affine_grid(theta, list(x.shape), align_corners=align)
        np.testing.assert_allclose(F.grid_sample(x, grid, align_corners=align).numpy(),
                                   x.numpy(), atol=1e-12)


@needs_torch
@pytest.mark.parametrize("call", [
    lambda F, x, g: F.grid_sample(x, g, mode="area", align_corners=False),
    lambda F, x, g: F.grid_sample(x, g, padding_mode="wrap", align_corners=False),
    lambda F, x, g: F.grid_sample(x, g[..., :1], align_corners=False),
    lambda F, x, g: F.grid_sample(x, g[:1], align_corners=False),
    lambda F, x, g: F.grid_sample(x, g.unsqueeze(1), align_corners=False),
    lambda F, x, g: F.grid_sample(x.unsqueeze(2), g.unsqueeze(1).expand(2, 1, 3, 4, 2),
                                  mode="bicubic", align_corners=False),
    lambda F, x, g: F.affine_grid(x[0, :, :2, :3].int(), [2, 1, 2, 2], align_corners=False),
    lambda F, x, g: F.affine_grid(x[0, :, :2, :3], [2, 1, 2], align_corners=False),
    lambda F, x, g: F.affine_grid(x[0, :, :2, :3], [2, 1, 2, 2, 2], align_corners=False),
    lambda F, x, g: F.affine_grid(x[0, :, :2, :3], [2, 1, 2, 0], align_corners=False),
])
def test_errors_are_torchs(call) -> None:
    torch = torch_or_none()
    x, g = np.zeros((2, 2, 3, 4)), np.zeros((2, 3, 4, 2))
    with pytest.raises(Exception) as theirs:
        call(torch.nn.functional, torch.tensor(x), torch.tensor(g))
    with pytest.raises((type(theirs.value), RuntimeError)) as ours:
        call(F, sm.tensor(x), sm.tensor(g))
    message = str(ours.value).replace("scriptmod.", "torch.")
    assert str(theirs.value).split(":")[-1].strip() in message


def test_align_corners_none_warns_as_torch() -> None:
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(sm.zeros(1, 1, 2, 2), sm.zeros(1, 1, 1, 2))
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.affine_grid(sm.zeros(1, 2, 3), [1, 1, 2, 2])


class _SpatialTransformer(nn.Module):
    """A localization net predicts theta; the input is resampled through its grid."""

    def __init__(self) -> None:
        super().__init__()
        self.loc = nn.Linear(3, 6)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        theta = self.loc(x.mean((2, 3))).view(-1, 2, 3) * 0.1 + sm.eye(2, 3).unsqueeze(0)
        grid = F.affine_grid(theta, x.shape, align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection",
                             align_corners=False)


def test_traced_spatial_transformer_at_two_sizes() -> None:
    model = _SpatialTransformer()
    traced = sm.jit.trace(model, sm.randn(2, 3, 6, 7))
    for x in [sm.randn(2, 3, 6, 7), sm.randn(3, 3, 5, 8)]:
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = traced(xa), model(xb)
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-5, atol=1e-5)
        model.zero_grad()
        got.sum().backward()
        traced_grads = [arr(p.grad) for p in model.parameters()]
        model.zero_grad()
        want.sum().backward()
        np.testing.assert_allclose(arr(xa.grad), arr(xb.grad), rtol=1e-4, atol=1e-5)
        for a, p in zip(traced_grads, model.parameters()):
            np.testing.assert_allclose(a, arr(p.grad), rtol=1e-4, atol=1e-5)
