"""Overwriting a tensor of a graph with a value that needs no gradient (``zero_``, ``fill_``,
``copy_`` of a constant) leaves it requiring grad, and its old value's gradient is 0, as
PyTorch's FillBackward/CopyBackwards give (it was 1: the write was invisible to autograd)."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm

WRITES = {   # (tensor, library) -> the write
    "zero_": lambda y, lib: y.zero_(),
    "fill_": lambda y, lib: y.fill_(3.0),
    "fill_0d": lambda y, lib: y.fill_(lib.tensor(2.0)),
    "copy_const": lambda y, lib: y.copy_(lib.ones(3)),
    "copy_broadcast": lambda y, lib: y.copy_(lib.tensor(5.0)),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_old_value_gets_zero_gradient(name: str) -> None:
    x = sm.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    WRITES[name](y, sm)
    assert y.requires_grad and y.grad_fn is not None
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))


def test_copy_of_a_tensor_that_needs_grad_routes_the_gradient_to_it() -> None:
    x = sm.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = sm.tensor([4.0, 5.0, 6.0], requires_grad=True)
    y = x * 2
    y.copy_(z)
    (y * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(z.grad.numpy(), np.full(3, 3.0, np.float32))


def test_a_write_under_no_grad_keeps_the_old_history() -> None:
    x = sm.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with sm.no_grad():
        y.zero_()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(2, 2.0, np.float32))


@pytest.mark.parametrize("name", sorted(WRITES))
def test_matches_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (torch, sm):
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        y = x * 2
        WRITES[name](y, lib)
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
