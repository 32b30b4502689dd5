"""``with torch.no_grad():`` in scripted code (torchvision's ``complete_box_iou_loss``): the
tensors the block binds carry no gradient, so gradients through the scripted function equal
eager's; ``enable_grad`` is accepted; any other context manager stays a FrontendError."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.jit.frontend.errors import FrontendError


def _alpha_without_grad(x: sm.Tensor, w: sm.Tensor) -> sm.Tensor:
    v = x * w
    with sm.no_grad():
        alpha = v / (1 + v)
    with sm.enable_grad():
        beta = v * 2
    return alpha * v + beta


def _returns_inside(x: sm.Tensor) -> sm.Tensor:
    with sm.no_grad():
        return x * 3


def _suppresses(x: sm.Tensor) -> sm.Tensor:
    with contextlib.suppress(ValueError):
        x = x + 1
    return x


@pytest.mark.parametrize("fn", [_alpha_without_grad, _returns_inside])
def test_no_grad_blocks_give_eager_gradients(fn) -> None:
    n = 2 if fn is _alpha_without_grad else 1
    grads = []
    for f in (sm.jit.script(fn), fn):
        args = [sm.from_numpy(np.linspace(0.5, 2, 4, dtype=np.float32) * (i + 1))
                .requires_grad_(True) for i in range(n)]
        out = f(*args)
        assert out.requires_grad == fn(*[a.detach().requires_grad_(True)
                                         for a in args]).requires_grad
        if out.requires_grad:
            out.sum().backward()
        grads.append([None if a.grad is None else a.grad.numpy() for a in args])
    for g, w in zip(*grads):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_other_context_managers_are_refused() -> None:
    with pytest.raises(FrontendError, match="'with' statements are not supported"):
        sm.jit.script(_suppresses)
