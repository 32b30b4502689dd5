"""A submodule that returns its argument as it came (``nn.Identity``, a ``return x``
placeholder, a ``Sequential`` of them) traces inside any module: the caller keeps its own
value for the tensor, no ``copy_`` is written back into the argument, and no stale-read
error is raised. Before the fix, ``Wrap(Sequential(Identity(), Linear(...)))`` failed to
trace with "an in-place write ... changed a tensor that shares memory"."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn


class PassThrough(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return x


class Wrap(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.inner(x)


class WithLoss(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: sm.Tensor, t: sm.Tensor) -> sm.Tensor:
        return nn.functional.mse_loss(self.model(x), t)


class ReusesArgument(nn.Module):
    """The argument is read again after an identity call returned it."""

    def __init__(self) -> None:
        super().__init__()
        self.skip = nn.Identity()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        y = self.skip(x)
        return self.fc(y) + x * 2 + y


class ReturnsBoth(nn.Module):
    """A tuple result holding the argument itself beside a new tensor."""

    def forward(self, x: sm.Tensor) -> tuple[sm.Tensor, sm.Tensor]:
        return x, x.sigmoid()


class UsesBoth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.both = ReturnsBoth()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        a, b = self.both(x)
        return self.fc(a) * b + x


MODELS: dict[str, Callable[[], nn.Module]] = {
    "Wrap(Sequential(Identity, Linear))": lambda: Wrap(nn.Sequential(nn.Identity(),
                                                                     nn.Linear(8, 8))),
    "Sequential(Identity, Linear, Identity) wrapped twice": lambda: Wrap(Wrap(nn.Sequential(
        nn.Identity(), nn.Linear(8, 8), nn.Identity()))),
    "Wrap(Sequential(PassThrough, PassThrough))": lambda: Wrap(nn.Sequential(PassThrough(),
                                                                             PassThrough())),
    "Wrap(Sequential(PassThrough, GELU, Linear))": lambda: Wrap(nn.Sequential(
        PassThrough(), nn.GELU(), nn.Linear(8, 8))),
    "ReusesArgument": ReusesArgument,
    "Wrap(ReusesArgument)": lambda: Wrap(ReusesArgument()),
    "Wrap(UsesBoth)": lambda: Wrap(UsesBoth()),
}


def _x(*shape: int, seed: int = 0) -> sm.Tensor:
    return sm.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_traces_and_matches_eager_at_other_batch_sizes(name: str) -> None:
    sm.manual_seed(0)
    model = MODELS[name]()
    with sm.no_grad():
        traced = sm.jit.trace(model, _x(4, 3, 8))
        assert "copy_" not in str(traced.inlined_graph)
        for batch in (4, 1, 6):
            x = _x(batch, 3, 8, seed=batch)
            before = x.numpy().copy()
            np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_array_equal(x.numpy(), before)    # the argument is untouched


@pytest.mark.parametrize("name", ["Wrap(Sequential(Identity, Linear))", "Wrap(ReusesArgument)",
                                  "Wrap(UsesBoth)"])
def test_training_through_the_trace_gives_eager_gradients(name: str) -> None:
    sm.manual_seed(0)
    model = WithLoss(MODELS[name]())
    traced = sm.jit.trace(model, (_x(4, 3, 8), _x(4, 3, 8, seed=1)))
    for batch in (4, 5):
        x, t = _x(batch, 3, 8, seed=2 * batch), _x(batch, 3, 8, seed=2 * batch + 1)
        want = _loss_and_grads(model, x, t)
        got = _loss_and_grads(traced, x, t)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _loss_and_grads(module: Any, x: sm.Tensor, t: sm.Tensor) -> list[np.ndarray]:
    for p in module.parameters():
        p.grad = None
    loss = module(x, t)
    loss.backward()
    return [loss.detach().numpy()] + [p.grad.numpy().copy() for p in module.parameters()]


def test_an_argument_written_in_place_and_not_returned_is_still_refused() -> None:
    """The fix keeps the guard it must not weaken: a submodule that writes its argument in
    place and returns something else leaves the caller's tensor stale."""
    class WritesArgument(nn.Module):
        def forward(self, x: sm.Tensor) -> sm.Tensor:
            x.relu_()
            return x * 2

    class ReadsAgain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = WritesArgument()

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            v = x[:, :2]
            return self.w(x)[:, :2] + v

    with sm.no_grad(), pytest.raises(sm.jit.TracingError, match="in-place write"):
        sm.jit.trace(ReadsAgain(), _x(3, 4))
