"""``F.interpolate`` and the Upsample layers: every mode against torch where it is installed
(values and gradients, float32 and float64, sizes and per-dim scale factors, float32 nearest
picks on boundaries), against hand-computed float64 numbers, torch's errors and warnings,
reprs, and traced models that follow the image size (never a stale one)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import arr, assert_close_lists, run_both, torch_or_none

needs_torch = pytest.mark.skipif(torch_or_none() is None, reason="torch not installed")

# (input shape, interpolate keywords): each mode and option at least once
_CALLS = [
    ((2, 3, 5), {"size": 8}),
    ((1, 2, 4, 6), {"scale_factor": (1.7, 0.6)}),
    ((1, 2, 3, 3, 4), {"scale_factor": 1.5, "mode": "nearest"}),
    ((1, 2, 5, 7), {"size": (3, 11), "mode": "nearest-exact"}),
    ((2, 2, 5), {"scale_factor": 2.3, "mode": "linear", "align_corners": True}),
    ((1, 2, 5, 4), {"size": (7, 3), "mode": "bilinear"}),
    ((1, 2, 2, 3, 4), {"scale_factor": (1.5, 2.0, 0.7), "mode": "trilinear"}),
    ((1, 2, 4, 5), {"scale_factor": 1.6, "mode": "bicubic", "recompute_scale_factor": True}),
    ((1, 1, 4, 5), {"size": (6, 9), "mode": "bicubic", "align_corners": True}),
    ((1, 2, 7, 5), {"scale_factor": 0.6, "mode": "area"}),
    ((1, 2, 3, 7, 5), {"size": (2, 3, 4), "mode": "area"}),
    ((1, 2, 9, 11), {"size": (4, 5), "mode": "bilinear", "antialias": True}),
    ((1, 1, 11, 8), {"scale_factor": 0.45, "mode": "bicubic", "antialias": True}),
    ((1, 1, 9, 12), {"size": (4, 5), "mode": "lanczos", "antialias": True}),
]


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kw", _CALLS, ids=[str(i) for i in range(len(_CALLS))])
def test_interpolate_matches_torch(shape: tuple, kw: dict, dtype: type) -> None:
    torch = torch_or_none()
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    ours, theirs = run_both(lambda t: F.interpolate(t, **kw),
                            lambda t: torch.nn.functional.interpolate(t, **kw), [x])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert_close_lists(ours, theirs, atol=tol, rtol=tol)


@needs_torch
def test_float32_nearest_picks_are_torchs_on_boundaries() -> None:
    """Source positions are computed in float32 as torch does: 1/3-type ratios land on the
    same side of an integer, and 2-D keeps torch's exact same-size and double-size paths."""
    torch = torch_or_none()
    for n_in, n_out, mode in [(3, 7, "nearest"), (7, 3, "nearest"), (10, 30, "nearest-exact"),
                              (9, 21, "nearest-exact"), (6, 14, "nearest")]:
        for shape in [(1, 1, n_in), (1, 1, 1, n_in)]:
            x = np.arange(float(n_in), dtype=np.float32).reshape(shape)
            size = (n_out,) * 1 if len(shape) == 3 else (1, n_out)
            got = F.interpolate(sm.tensor(x), size=size, mode=mode).numpy()
            want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode=mode).numpy()
            np.testing.assert_array_equal(got, want)
    x = np.arange(4.0, dtype=np.float32).reshape(1, 1, 1, 4)     # 2-D, double size, odd scale
    got = F.interpolate(sm.tensor(x), scale_factor=(1.0, 2.3), mode="nearest").numpy()
    want = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=(1.0, 2.3)).numpy()
    np.testing.assert_array_equal(got, want)


def test_hand_computed_values() -> None:
    x = sm.tensor([[[0.0, 1.0, 4.0]]], dtype=sm.float64)
    np.testing.assert_allclose(F.interpolate(x, size=5, mode="linear", align_corners=True).numpy(),
                               [[[0.0, 0.5, 1.0, 2.5, 4.0]]])
    # half-pixel centres: output 1 of 3->6 sits at 0.25, between inputs 0 and 1
    np.testing.assert_allclose(F.interpolate(x, size=6, mode="linear").numpy(),
                               [[[0.0, 0.25, 0.75, 1.75, 3.25, 4.0]]])
    np.testing.assert_allclose(F.interpolate(x, size=2, mode="area").numpy(), [[[0.5, 2.5]]])
    np.testing.assert_array_equal(F.interpolate(x, scale_factor=2).numpy(),
                                  [[[0.0, 0.0, 1.0, 1.0, 4.0, 4.0]]])
    # cubic (a = -0.75) halfway between the middle two of four samples of x^2
    y = sm.tensor(np.array([0.0, 1.0, 4.0, 9.0]).reshape(1, 1, 1, 4))
    mid = F.interpolate(y, size=(1, 7), mode="bicubic", align_corners=True).numpy()[0, 0, 0, 3]
    weights = np.array([-0.09375, 0.59375, 0.59375, -0.09375])    # Keys' kernel at 1.5, 0.5
    assert mid == pytest.approx(weights @ [0.0, 1.0, 4.0, 9.0])


def test_integer_inputs_nearest_keep_their_dtype() -> None:
    x = sm.tensor(np.arange(6, dtype=np.uint8).reshape(1, 1, 2, 3))
    y = F.interpolate(x, scale_factor=2)
    assert y.dtype == sm.uint8 and y.numpy()[0, 0, 3].tolist() == [3, 3, 4, 4, 5, 5]


@needs_torch
@pytest.mark.parametrize("call", [
    lambda F, x: F.interpolate(x, size=2, scale_factor=2),
    lambda F, x: F.interpolate(x),
    lambda F, x: F.interpolate(x, size=(2,)),
    lambda F, x: F.interpolate(x, scale_factor=(2.0, 2.0, 2.0)),
    lambda F, x: F.interpolate(x, size=2, recompute_scale_factor=True),
    lambda F, x: F.interpolate(x, size=2, mode="bogus"),
    lambda F, x: F.interpolate(x, size=2, mode="linear"),
    lambda F, x: F.interpolate(x, size=2, mode="trilinear"),
    lambda F, x: F.interpolate(x, size=2, antialias=True),
    lambda F, x: F.interpolate(x, size=2, align_corners=True),
    lambda F, x: F.interpolate(x, size=2, mode="lanczos"),
    lambda F, x: F.interpolate(x, size=2, mode="lanczos", antialias=True, align_corners=True),
    lambda F, x: F.interpolate(x, scale_factor=0.2, mode="bilinear"),
    lambda F, x: F.interpolate(x[0, 0], size=2),
])
def test_errors_are_torchs(call) -> None:
    torch = torch_or_none()
    x = np.zeros((1, 1, 3, 3), np.float32)
    with pytest.raises(Exception) as theirs:
        call(torch.nn.functional, torch.tensor(x))
    with pytest.raises(type(theirs.value)) as ours:
        call(F, sm.tensor(x))
    assert str(theirs.value) in str(ours.value)     # ours may name the op first


def test_deprecated_aliases_warn_and_match() -> None:
    x = sm.randn(1, 2, 3, 4)
    for fn, want in [(F.upsample, F.interpolate(x, scale_factor=2)),
                     (F.upsample_nearest, F.interpolate(x, scale_factor=2)),
                     (F.upsample_bilinear, F.interpolate(x, scale_factor=2, mode="bilinear",
                                                         align_corners=True))]:
        with pytest.warns(UserWarning, match="is deprecated"):
            got = fn(x, scale_factor=2)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@needs_torch
def test_modules_reprs_and_attributes_are_torchs() -> None:
    torch = torch_or_none()
    for name, args, kw in [("Upsample", (), {"scale_factor": 2, "mode": "bilinear"}),
                           ("Upsample", ((3, 4),), {}), ("Upsample", (), {"scale_factor": (2, 3)}),
                           ("UpsamplingNearest2d", (), {"scale_factor": 2}),
                           ("UpsamplingBilinear2d", (5,), {})]:
        ours, theirs = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
        assert repr(ours) == repr(theirs)
        for attr in ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor"):
            assert getattr(ours, attr) == getattr(theirs, attr)
        x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(ours(sm.tensor(x)).numpy(),
                                   theirs(torch.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)


class _Decoder(nn.Module):
    """A U-Net style step: upsample by a factor, then to a skip connection's size."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: sm.Tensor, skip: sm.Tensor) -> sm.Tensor:
        y = self.conv(self.up(x))
        y = y + F.interpolate(x, scale_factor=(2.0, 2.0), mode="bicubic")
        return F.interpolate(y, size=skip.shape[-2:], mode="nearest") + skip


def test_traced_model_follows_the_image_size() -> None:
    model = _Decoder()
    first = (sm.randn(2, 3, 4, 5), sm.randn(2, 3, 7, 9))
    traced = sm.jit.trace(model, first)
    for x, skip in [first, (sm.randn(1, 3, 6, 3), sm.randn(1, 3, 10, 8)),
                    (sm.randn(3, 3, 5, 5), sm.randn(3, 3, 11, 9))]:
        xs = [t.detach().requires_grad_() for t in (x, skip)]
        ys = [t.detach().requires_grad_() for t in (x, skip)]
        got, want = traced(*xs), model(*ys)
        assert got.shape == want.shape
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-5, atol=1e-5)
        got.sum().backward()
        want.sum().backward()
        for a, b in zip(xs, ys):
            np.testing.assert_allclose(arr(a.grad), arr(b.grad), rtol=1e-4, atol=1e-5)


def test_scripted_model_matches_eager() -> None:
    model = _Decoder()
    scripted = sm.jit.script(model)
    for x, skip in [(sm.randn(2, 3, 4, 5), sm.randn(2, 3, 7, 9)),
                    (sm.randn(1, 3, 3, 3), sm.randn(1, 3, 5, 6))]:
        np.testing.assert_allclose(arr(scripted(x, skip)), arr(model(x, skip)), rtol=1e-5,
                                   atol=1e-5)


def test_no_warning_from_a_traced_scale_factor() -> None:
    """The output size is computed by the op, not from a baked Python float of the size."""
    model = nn.Upsample(scale_factor=1.5, mode="nearest")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traced = sm.jit.trace(model, sm.randn(1, 2, 4, 6))
    assert tuple(traced(sm.randn(1, 2, 5, 3)).shape) == (1, 2, 7, 4)


def test_symbolic_image_size_types_the_graph() -> None:
    """With dynamic dims the output's type is 2*H by 2*W for an integral scale and an
    unknown dim otherwise; one trace serves every size."""
    class _Net(nn.Module):
        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return F.interpolate(x, scale_factor=2) + F.interpolate(
                F.interpolate(x, scale_factor=1.5, mode="bilinear"), size=x.shape[-2:]).repeat(
                1, 1, 2, 2)

    model = _Net()
    traced = sm.jit.trace(model, sm.randn(2, 3, 4, 6),
                          dynamic_dims={"x": {0: "B", 2: "H", 3: "W"}})
    assert "Float(B, 3, 2*H, 2*W) = sm::upsample" in str(traced.graph)
    assert "Float(B, 3, *, *) = sm::upsample" in str(traced.graph)
    for shape in [(1, 3, 5, 3), (3, 3, 6, 7)]:
        x = sm.randn(*shape)
        np.testing.assert_allclose(arr(traced(x)), arr(model(x)), rtol=1e-5, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("n_in,size,mode,antialias", [
    (700, (1, 1500), "bilinear", False), (1001, (1, 300), "bicubic", False),
    (1500, (1, 700), "bilinear", True), (1200, (1, 433), "bicubic", True)])
def test_float32_positions_on_long_rows_are_torchs(n_in: int, size: tuple, mode: str,
                                                  antialias: bool) -> None:
    """Positions ~1000 pixels in lose float32 digits: they are rounded where PyTorch rounds
    them (its fused multiply-add, its float32 window bounds), so the answers stay within an
    ulp or two instead of 1e-4 apart."""
    torch = torch_or_none()
    x = np.random.default_rng(3).standard_normal((1, 1, 2, n_in)).astype(np.float32)
    got = F.interpolate(sm.tensor(x), size=size, mode=mode, antialias=antialias).numpy()
    want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode=mode,
                                           antialias=antialias).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-6)
