"""ONNX rows added with the nn catalogue: ``linalg_vector_norm`` at every order (what
normalize, pairwise_distance, cosine_similarity and the triplet losses compute), ``cumsum``
and ``topk``, each run in onnxruntime against the model itself."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

import scriptmod as sm

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _run(model: sm.nn.Module, x: sm.Tensor) -> list:
    import scriptmod.onnx
    f = io.BytesIO()
    scriptmod.onnx.export(model, f, x)
    session = ort.InferenceSession(f.getvalue())
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


class _Norm(sm.nn.Module):
    def __init__(self, p: float, keepdim: bool) -> None:
        super().__init__()
        self.p, self.keepdim = p, keepdim

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return sm.linalg.vector_norm(x, ord=self.p, dim=1, keepdim=self.keepdim)


@pytest.mark.parametrize("p", [2.0, 1.0, math.inf, -math.inf, 0.0, 3.0, -1.0, 0.5])
@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norm_every_order(p: float, keepdim: bool) -> None:
    x = sm.tensor(np.random.default_rng(0).standard_normal((3, 5, 2)).astype(np.float32))
    x[0, 1] = 0.0
    model = _Norm(p, keepdim)
    (got,) = _run(model, x)
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)


class _Layers(sm.nn.Module):
    def forward(self, x: sm.Tensor) -> tuple:
        values, indices = x.topk(3, dim=1)
        F = sm.nn.functional
        return (x.cumsum(1), values, indices, F.normalize(x, dim=1),
                F.pairwise_distance(x, x.flip(0)), F.cosine_similarity(x, x * 2 + 1))


def test_cumsum_topk_and_the_layers_on_norms() -> None:
    x = sm.randn(4, 6)
    model = _Layers()
    for got, want in zip(_run(model, x), model(x)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
