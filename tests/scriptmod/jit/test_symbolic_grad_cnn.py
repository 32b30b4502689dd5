"""The compiled backward of a symbolic specialization covers convolutional models (issue 37):
``conv2d_grad_input``/``_weight`` and ``avg_pool2d_grad`` take the size they produce as an
``int[]`` input that the backward computes from ``sm::size`` nodes, so one ``CompiledGrad``,
built once, serves every batch size and (with ``dynamic_dims``) every image size, with
eager's gradients; strided, dilated, grouped and ceil-mode windows included, where the
input's size is not implied by the gradient's."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit._compiled_grad import CompiledGrad
from tests.scriptmod.jit.test_symbolic_grad import _check_every_size, _compiles, _gradients

FIRST, SIZES = 4, (6, 3, 9, 17, 32)      # the class's first batch size, then its shared sizes
TOLERANCE = {sm.float32: dict(rtol=1e-4, atol=1e-5), sm.float64: dict(rtol=1e-10, atol=1e-12)}


def _small_cnn() -> nn.Module:
    """Conv2d-BN-ReLU-MaxPool-Conv2d-AvgPool-Flatten-Linear on 3x8x8 images."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.AvgPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 2 * 2, 10))


class Conv1d(nn.Module):
    """A strided 1-d convolution over (N, C, L), as a (1, k) Conv2d over (N, C, 1, L)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, (1, 3), stride=(1, 2), padding=(0, 1))
        self.fc = nn.Linear(8, 5)

    def forward(self, x: Any) -> Any:
        return self.fc(self.conv(x.unsqueeze(2)).squeeze(2).relu())


class Upsample(nn.Module):
    """Conv, nearest-neighbour 2x upsampling (``interpolate(scale_factor=2)``, written as an
    expand and a reshape of the traced sizes), conv."""

    def __init__(self) -> None:
        super().__init__()
        self.down, self.up = nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x: Any) -> Any:
        h = self.down(x).tanh()
        n, c, hh, ww = h.shape
        big = h.reshape(n, c, hh, 1, ww, 1).expand(n, c, hh, 2, ww, 2)
        return self.up(big.reshape(n, c, 2 * hh, 2 * ww))


def _strided() -> nn.Module:
    """Grouped, strided and dilated convolution; ceil-mode pools that leave the input's size
    ambiguous from the gradient's (9 and 10 pool to the same size)."""
    return nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                         nn.Conv2d(6, 6, 3, padding=2, dilation=2),
                         nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False),
                         nn.MaxPool2d(2, ceil_mode=True))


def _images(c: int, h: int, w: int) -> Callable[[int, Any], tuple]:
    return lambda n, dt: (sm.randn(n, c, h, w, dtype=dt, requires_grad=True),)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int, Any], tuple]]] = {
    "small_cnn": (_small_cnn, _images(3, 8, 8)),
    "conv1d": (Conv1d, lambda n, dt: (sm.randn(n, 4, 16, dtype=dt, requires_grad=True),)),
    "upsample": (Upsample, _images(3, 6, 6)),
    "strided": (_strided, _images(4, 9, 9)),
}


def _assert_close(got: list, want: list, dtype: Any) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(MODELS))
def test_cnn_gradients_equal_eager_at_every_batch_size(name: str, dtype: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Traced at batch ``FIRST``: from the second size on, one symbolic compiled plan, built
    once, whose outputs and gradients equal eager's at every size."""
    _check_every_size(name, dtype, monkeypatch, MODELS, TOLERANCE)


class FullyConvolutional(nn.Module):
    """Strided conv, BN, ceil-mode max pool, conv, padded avg pool, 1x1 conv: any image size."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True), nn.Conv2d(4, 4, 3, padding=1),
            nn.AvgPool2d(2, padding=1, count_include_pad=False), nn.Conv2d(4, 2, 1))

    def forward(self, x: Any) -> Any:
        return self.body(x)


IMAGE_SIZES = ((5, 8, 8), (3, 9, 11), (7, 16, 12), (2, 13, 13), (6, 10, 21), (4, 8, 8))


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["float32", "float64"])
def test_one_backward_serves_every_image_size(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dynamic_dims`` names batch, height and width: from the second size on, one plan
    symbolic in all three, built once, serves every size, with eager's gradients (odd sizes
    included, which a stride-2 convolution maps to the same output size as even ones)."""
    sm.manual_seed(0)
    model = FullyConvolutional().to(dtype)
    traced = jit.trace(model, sm.randn(4, 3, 8, 8, dtype=dtype),
                       dynamic_dims={"x": {0: "B", 2: "H", 3: "W"}})
    params = list(model.parameters())
    ex = traced.executor("forward")
    plans, engines = _compiles(monkeypatch)
    built: tuple[int, int, int] | None = None
    for i, (n, h, w) in enumerate(IMAGE_SIZES):
        x = sm.randn(n, 3, h, w, dtype=dtype, requires_grad=True)
        _assert_close(_gradients(traced, params, (x,), n), _gradients(model, params, (x,), n),
                      dtype)
        if i == 1:                                  # the symbolic plan, built at this size
            built = (len(plans), len(engines), ex.stats["specializations"])
        if i >= 1:
            assert ex.grad_plan_for([x]) is plans[-1]
    assert isinstance(plans[-1], CompiledGrad) and plans[-1].symbolic
    assert (len(plans), len(engines), ex.stats["specializations"]) == built   # none later


def test_the_backward_reads_the_sizes_at_run_time() -> None:
    """The shared plan's grad ops take their sizes from ``sm::size`` nodes: typed with the
    symbolic dims, no size of the call that built it baked in."""
    model = FullyConvolutional()
    traced = jit.trace(model, sm.randn(4, 3, 8, 8),
                       dynamic_dims={"x": {0: "B", 2: "H", 3: "W"}})
    for n, h, w in ((6, 8, 8), (5, 11, 9)):    # the first call's plan is concrete
        x = sm.randn(n, 3, h, w, requires_grad=True)
        traced(x)
    backward = traced.executor("forward").grad_plan_for([x]).split.backward
    text = str(backward)
    assert "Float(B, 3, H, W) = sm::conv2d_grad_input" in text
    grad_ops = [n for n in backward.walk() if n.kind in ("sm::conv2d_grad_input",
                                                         "sm::avg_pool2d_grad")]
    assert len(grad_ops) == 4                      # three convolutions and the avg pool
    for node in grad_ops:
        assert "input_size" not in node.attrs
        assert any(i.node.kind == "sm::size" for i in node.inputs[-1].node.inputs)
    values = list(backward.inputs) + [o for n in backward.walk() for o in n.outputs]
    shapes = [getattr(v.type, "shape", None) or () for v in values]
    assert not any(d in (5, 11, 9) for s in shapes for d in s)     # none baked in
