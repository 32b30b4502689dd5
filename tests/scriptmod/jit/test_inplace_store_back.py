"""``x[i] op= v`` traces (issue 35): Python changes the view ``x[i]`` in place, then stores it
back with ``x[i] = view``. The tracer refused that store as a stale read of ``x`` (the
TracingError's own advice, ``y = x.clone(); y[:, 0] *= 2``, failed); the store overwrites
exactly the stale region, so it is right unless another view's write would be lost."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit import fuser


def _on_argument(x: Any) -> Any:
    x[:, 0] *= 2
    return x


def _on_a_clone(x: Any) -> Any:
    y = x.clone()
    y[:, 0] *= 2
    y[1:] += 1
    return y * 3


def _from_another_row(x: Any) -> Any:
    x[0] += x[1]
    return x.sum(-1)


def _last_column(x: Any) -> Any:
    x[..., -1] -= 1
    x[:, 1:3] /= 2
    return x


def _step(x: Any) -> Any:
    y = x * 1.0
    y[::2, 1] **= 2
    return y


FORMS: dict[str, Callable[[Any], Any]] = {
    "argument": _on_argument, "clone": _on_a_clone, "another_row": _from_another_row,
    "last_column": _last_column, "step": _step,
}


class Fn(nn.Module):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", sorted(FORMS))
def test_augmented_index_assignment_traces_as_eager(name: str, fused: bool) -> None:
    model = Fn(FORMS[name])
    traced = jit.trace(model, sm.randn(4, 5), check_trace=False)
    for rows in (4, 7):
        x = sm.randn(rows, 5)
        xa, xb = x.clone(), x.clone()
        with sm.no_grad(), fuser(fused):
            got = traced(xa)
        want = model(xb)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(xa.numpy(), xb.numpy(), rtol=1e-6, atol=1e-6)


def test_a_second_views_write_that_the_store_would_lose_is_still_refused() -> None:
    def two_views(x: Any) -> Any:
        a, b = x[0], x[1]
        a *= 2
        b *= 2
        x[1] = b                     # a's write is in x's memory, not in the value stored
        return x

    with pytest.raises(jit.TracingError, match="in-place write"):
        jit.trace(Fn(two_views), sm.randn(3, 4), check_trace=False)


def test_storing_another_tensor_is_unchanged() -> None:
    def store(x: Any) -> Any:
        x[:, 0] = x[:, 1] * 2
        return x

    model = Fn(store)
    traced = jit.trace(model, sm.randn(3, 4), check_trace=False)
    x = sm.randn(6, 4)
    xa, xb = x.clone(), x.clone()
    with sm.no_grad():
        traced(xa)
    model(xb)
    np.testing.assert_allclose(xa.numpy(), xb.numpy(), rtol=1e-6)
