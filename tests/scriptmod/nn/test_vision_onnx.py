"""Image resampling exported to ONNX (Resize, AveragePool, GridSample, AffineGrid) runs in
onnxruntime with our numbers, at the traced batch size and another one."""
from __future__ import annotations

import io
from typing import Any, Callable

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import scriptmod as sm  # noqa: E402
from scriptmod import jit, nn  # noqa: E402
from scriptmod.nn import functional as F  # noqa: E402


class _Call(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _check(fn: Callable[..., Any], args: tuple, opset: int = 17,
           other: tuple | None = None) -> None:
    proto = io.BytesIO()
    sm.onnx.export(jit.trace(_Call(fn), args), proto, opset_version=opset)
    session = ort.InferenceSession(proto.getvalue())
    for call in (args, other or args):
        feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), call)}
        np.testing.assert_allclose(session.run(None, feeds)[0], fn(*call).numpy(), rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.parametrize("kw,opset", [
    ({"scale_factor": 2}, 17), ({"size": (5, 11), "mode": "nearest-exact"}, 17),
    ({"scale_factor": (1.5, 0.5), "mode": "bilinear"}, 17),
    ({"size": (5, 11), "mode": "bilinear", "align_corners": True}, 17),
    ({"size": (9, 5), "mode": "bicubic"}, 17), ({"size": (3, 4), "mode": "area"}, 17),
    ({"size": (3, 5), "mode": "bicubic", "antialias": True}, 18)])
def test_interpolate(kw: dict, opset: int) -> None:
    _check(lambda x: F.interpolate(x, **kw), (sm.randn(2, 3, 6, 8),), opset,
           (sm.randn(3, 3, 6, 8),))


@pytest.mark.parametrize("mode,pad,opset", [("bilinear", "zeros", 17), ("nearest", "border", 17),
                                            ("bicubic", "reflection", 20)])
def test_grid_sample(mode: str, pad: str, opset: int) -> None:
    grid = sm.rand(2, 4, 5, 2) * 2.4 - 1.2
    _check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=False),
           (sm.randn(2, 3, 6, 8), grid), opset)


@pytest.mark.parametrize("opset", [17, 20])
def test_affine_grid(opset: int) -> None:
    _check(lambda t: F.affine_grid(t, [2, 3, 4, 5], align_corners=False), (sm.randn(2, 2, 3),),
           opset)


def test_area_that_does_not_tile_is_refused() -> None:
    with pytest.raises(sm.onnx.ExportError, match="no ONNX AveragePool form"):
        sm.onnx.export(jit.trace(_Call(lambda x: F.interpolate(x, size=(4, 3), mode="area")),
                                 (sm.randn(1, 1, 6, 8),)), io.BytesIO())
