"""``x.shape[-1]`` / ``x.size(-1)`` in a traced model read the last dim at every rank the graph
is re-specialized for (issue 35): the trace recorded the traced rank's positive index, so a
model traced at rank 2 divided by dim 1 of a rank-3 input, a silent wrong result."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn

FORMS: dict[str, Callable[[Any], Any]] = {
    "shape[-1]": lambda x: x.sum(-1) / x.shape[-1],
    "size(-1)": lambda x: x.mean(-1) * x.size(-1),
    "shape[-2]": lambda x: x.sum(-1) + x.shape[-2] if x.dim() >= 2 else x.sum(-1),
    "scaled": lambda x: (x / x.shape[-1]).softmax(-1),
    "shape[0]": lambda x: x.sum(-1) - x.shape[0],
}


class Fn(nn.Module):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_a_negative_size_index_follows_the_rank(name: str) -> None:
    model = Fn(FORMS[name])
    traced = jit.trace(model, sm.randn(2, 4), check_trace=False)
    shapes = [(3, 2, 4), (2, 3, 1, 7), (6, 5)] + ([(5,)] if name != "shape[-2]" else [])
    for shape in shapes:
        x = sm.randn(*shape)
        with sm.no_grad():
            got, want = traced(x), model(x)
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_the_graph_records_the_negative_dim() -> None:
    traced = jit.trace(Fn(FORMS["shape[-1]"]), sm.randn(2, 4), check_trace=False)
    sizes = [n.attrs["dim"] for n in traced.graph.walk() if n.kind == "sm::size"]
    assert sizes == [-1]


def test_slices_and_unpacking_keep_working() -> None:
    class Heads(nn.Module):
        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            return x.reshape(b, t, 2, c // 2).sum(-1), x.shape[-2:]

    model = Heads()
    traced = jit.trace(model, sm.randn(2, 3, 8), check_trace=False)
    x = sm.randn(5, 3, 8)
    with sm.no_grad():
        got, want = traced(x), model(x)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-6)
    assert tuple(got[1]) == tuple(want[1]) == (3, 8)
