"""Traced equals eager for the W1-W5 workload models and for every layer."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.bench.workloads import WORKLOADS


@pytest.mark.parametrize("wid", sorted(w for w in WORKLOADS if not WORKLOADS[w].script))
def test_workload_traced_equals_eager(wid):
    model, x = WORKLOADS[wid].build(quick=True)
    traced = jit.trace(model, x)
    dim = WORKLOADS[wid].batch_dim                          # A128/A512: dim 0 stacks q, k, v
    for batch in (x.shape[dim], max(1, x.shape[dim] - 1)):  # also a batch it was not traced with
        shape = list(x.shape)
        shape[dim] = batch
        xb = sm.randn(*shape)
        with sm.no_grad():
            np.testing.assert_allclose(traced(xb).numpy(), model(xb).numpy(), rtol=1e-5, atol=1e-5)


LAYERS = [
    (lambda: nn.GELU(), (3, 5)), (lambda: nn.GELU(approximate="tanh"), (3, 5)),
    (lambda: nn.PReLU(), (3, 5)), (lambda: nn.PReLU(4), (2, 4, 3)), (lambda: nn.ReLU(), (3, 5)),
    (lambda: nn.Sigmoid(), (3, 5)), (lambda: nn.Tanh(), (3, 5)),
    (lambda: nn.Threshold(0.1, 20.0), (3, 5)), (lambda: nn.LeakyReLU(0.2), (3, 5)),
    (lambda: nn.SiLU(), (3, 5)), (lambda: nn.ELU(), (3, 5)), (lambda: nn.Softmax(dim=1), (3, 5)),
    (lambda: nn.LogSoftmax(dim=-1), (3, 5)), (lambda: nn.Identity(), (3, 5)),
    (lambda: nn.Linear(5, 4), (3, 5)), (lambda: nn.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 6)),
    (lambda: nn.Conv2d(4, 4, 3, stride=2, groups=2), (2, 4, 7, 7)),
    (lambda: nn.MaxPool2d(2), (2, 3, 6, 6)), (lambda: nn.AvgPool2d(3, stride=2, padding=1), (2, 3, 7, 7)),
    (lambda: nn.Flatten(), (2, 3, 4)), (lambda: nn.Dropout(0.3), (3, 5)),
    (lambda: nn.BatchNorm1d(5), (4, 5)), (lambda: nn.BatchNorm2d(3), (2, 3, 4, 4)),
    (lambda: nn.LayerNorm(5), (3, 5)),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=True), (2, 3, 8)),
    (lambda: nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2)), (3, 5)),
]


@pytest.mark.parametrize("make,shape", LAYERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_layer_traced_equals_eager(make, shape):
    sm.manual_seed(0)
    layer = make().eval()
    x = sm.randn(*shape)
    if isinstance(layer, nn.MultiheadAttention):
        class Wrap(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.attn = layer

            def forward(self, q):
                return self.attn(q, q, q)[0]
        layer = Wrap().eval()
    traced = jit.trace(layer, x)
    with sm.no_grad():
        np.testing.assert_allclose(traced(x).numpy(), layer(x).numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_traced_equals_eager():
    emb = nn.Embedding(10, 4, padding_idx=0)
    idx = sm.tensor([[1, 2, 0], [4, 5, 9]])
    traced = jit.trace(emb, idx)
    with sm.no_grad():
        np.testing.assert_allclose(traced(idx).numpy(), emb(idx).numpy())
