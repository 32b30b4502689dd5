"""Autograd semantics: leaves, .grad accumulation, broadcasting, grad modes, hooks, custom
Functions, in-place safety, double backward. (Per-op derivatives: test_ops.test_gradcheck.)"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import op_cases as OC
import scriptmod as sm
from scriptmod.autograd import gradcheck


def leaf(*vals: float, shape: tuple | None = None) -> sm.Tensor:
    t = sm.tensor(list(vals), dtype=sm.float64)
    return (t.reshape(shape) if shape else t).requires_grad_()


def test_leaf_semantics_and_grad_fn() -> None:
    x = leaf(1.0, 2.0)
    y = x * 3
    assert x.is_leaf and x.grad_fn is None and x.requires_grad
    assert not y.is_leaf and y.grad_fn.name() == "MulBackward0" and y.requires_grad
    assert sm.tensor([1.0]).is_leaf and not sm.tensor([1.0]).requires_grad
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = False


def test_backward_accumulates_into_grad() -> None:
    x = leaf(1.0, 2.0)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])
    assert x.grad.grad_fn is None and not x.grad.requires_grad


def test_gradients_are_reduced_over_broadcast_dims() -> None:
    a, b, c = leaf(1.0, 2.0, 3.0, shape=(3, 1)), leaf(1.0, 1.0, 1.0, 1.0), leaf(2.0)
    ((a * b) + c.reshape(())).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,) and c.grad.shape == (1,)
    np.testing.assert_allclose(a.grad.numpy(), [[4.0]] * 3)
    np.testing.assert_allclose(b.grad.numpy(), [6.0] * 4)
    np.testing.assert_allclose(c.grad.numpy(), [12.0])


def test_backward_with_gradient_and_nonscalar_error() -> None:
    x = leaf(1.0, 2.0)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(sm.tensor([1.0, 3.0], dtype=sm.float64))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 6.0])


def test_retain_graph() -> None:
    x = leaf(2.0)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [8.0])
    z = (x * x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()


def test_autograd_grad_leaves_dot_grad_alone() -> None:
    x, w = leaf(1.0, 2.0), leaf(3.0, 4.0)
    gx, gw = sm.autograd.grad((x * w).sum(), [x, w])
    np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0])
    assert x.grad is None and w.grad is None
    with pytest.raises(RuntimeError, match="not have been used"):
        sm.autograd.grad((x * 2).sum(), [x, w])
    assert sm.autograd.grad((x * 2).sum(), [x, w], allow_unused=True)[1] is None


@pytest.mark.parametrize("mode", [
    lambda: sm.no_grad(), lambda: sm.set_grad_enabled(False), lambda: sm.inference_mode()])
def test_modes_that_disable_recording(mode: Callable[[], Any]) -> None:
    x = leaf(1.0)
    with mode():
        y = x * 2
        assert not sm.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and sm.is_grad_enabled()


def test_enable_grad_inside_no_grad_and_decorators() -> None:
    x = leaf(1.0)
    with sm.no_grad():
        with sm.enable_grad():
            assert (x * 2).requires_grad
    f = sm.no_grad()(lambda t: t * 2)
    g = sm.set_grad_enabled(False)(lambda t: t * 2)
    assert not f(x).requires_grad and not g(x).requires_grad and sm.is_grad_enabled()
    sm.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        sm.set_grad_enabled(True)
    assert sm.inference_mode(False).__enter__() is not None and sm.is_grad_enabled()


def test_detach_and_requires_grad_() -> None:
    x = leaf(1.0, 2.0)
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    d[0] = 7.0   # shares memory with the non-leaf it came from
    t = sm.tensor([1.0]).requires_grad_()
    assert t.requires_grad and t.requires_grad_(False) is t and not t.requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        sm.tensor([1, 2]).requires_grad_()


def test_tensor_hooks_on_leaf_and_intermediate() -> None:
    x = leaf(1.0, 2.0)
    seen = []
    h = x.register_hook(lambda g: g * 10)
    y = x * 2
    y.register_hook(lambda g: seen.append(g.numpy().copy()))
    (y * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [60.0, 60.0])
    np.testing.assert_allclose(seen[0], [3.0, 3.0])
    h.remove()
    x.grad = None
    (x * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


def test_retain_grad_on_intermediate() -> None:
    x = leaf(1.0, 2.0)
    y = x * 2
    y.retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [4.0, 8.0])


class Cube(sm.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: sm.Tensor, k: float) -> sm.Tensor:
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * x * k

    @staticmethod
    def backward(ctx: Any, g: sm.Tensor) -> tuple:
        (x,) = ctx.saved_tensors
        return g * 3 * x * x * ctx.k, None


def test_custom_function() -> None:
    x = leaf(1.0, 2.0)
    y = Cube.apply(x, 2.0)
    assert y.grad_fn is not None and "Cube" in y.grad_fn.name()
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 24.0])
    assert gradcheck(lambda t: Cube.apply(t, 0.5), (leaf(0.3, -1.2),))
    with pytest.raises(RuntimeError, match="apply"):
        Cube()


@pytest.mark.parametrize("modify", [
    lambda t: t.mul_(2), lambda t: t.add_(1), lambda t: t.zero_(), lambda t: t.__setitem__(0, 5.0)])
def test_saved_tensor_modified_in_place_is_an_error(modify: Callable[[sm.Tensor], Any]) -> None:
    x = leaf(0.5, 1.0)
    y = x * 2
    z = y.sin()          # saves y
    modify(y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_in_place_on_leaf_and_on_view_of_leaf() -> None:
    x = leaf(1.0, 2.0)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="view of a leaf"):
        x[0:1].mul_(2)
    with sm.no_grad():
        x.add_(1)       # allowed: an optimizer step
    np.testing.assert_allclose(x.detach().numpy(), [2.0, 3.0])


def test_in_place_ops_record_history() -> None:
    x = leaf(1.0, -2.0)
    y = x * 3
    y.relu_()
    y.mul_(2)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 0.0])


def test_in_place_on_view_makes_stale_base_an_error() -> None:
    x = leaf(1.0, 2.0, 3.0)
    y = x * 2
    y[1:].mul_(3)
    with pytest.raises(RuntimeError, match="clone"):
        y.sum().backward()
    v = (x * 2).reshape(3)
    v.relu_()                # the view itself carries the new history
    v.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_setitem_records_gradient() -> None:
    x, v = leaf(1.0, 2.0, 3.0), leaf(5.0)
    y = x * 1
    y[0] = v.reshape(())
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 4.0, 6.0])
    np.testing.assert_allclose(v.grad.numpy(), [10.0])


def test_embedding_padding_row_gets_no_gradient() -> None:
    from scriptmod._dispatch import dispatch
    w = sm.randn(4, 2, dtype=sm.float64).requires_grad_()
    out = dispatch("embedding", (w, sm.tensor([1, 2, 1])), {"padding_idx": 1})
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[0, 0], [0, 0], [1, 1], [0, 0]])


def test_max_with_indices_backward_picks_the_argmax() -> None:
    x = sm.tensor([[1.0, 5.0], [3.0, 2.0]], dtype=sm.float64, requires_grad=True)
    values, indices = x.max(dim=1)
    values.sum().backward()
    assert indices.tolist() == [1, 0] and not indices.requires_grad
    np.testing.assert_allclose(x.grad.numpy(), [[0, 1], [1, 0]])


# ---- double backward ------------------------------------------------------------------
DOUBLE = {
    "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(), "exp": lambda x: x.exp(),
    "log": lambda x: (x * x + 1).log(), "mul-div": lambda x: x * x / (x + 3),
    "pow": lambda x: x ** 3, "sqrt": lambda x: (x * x + 1).sqrt(), "erf": lambda x: x.erf(),
    "softmax": lambda x: x.softmax(dim=0) * sm.arange(4, dtype=sm.float64),
    "log_softmax": lambda x: x.log_softmax(dim=0) * sm.arange(4, dtype=sm.float64),
    "logsumexp": lambda x: x.logsumexp(0), "var": lambda x: x.var(), "mean": lambda x: (x * x).mean(),
    "prod": lambda x: x.prod(), "matmul": lambda x: (x.reshape(2, 2) @ x.reshape(2, 2)).sum(),
    "amax": lambda x: (x * x).amax(), "where": lambda x: sm.where(x > 0, x * x, x * x * x),
}


@pytest.mark.parametrize("name", sorted(DOUBLE))
def test_double_backward(name: str) -> None:
    """gradcheck of x -> d f(x)/dx computed with create_graph=True."""
    f = DOUBLE[name]

    def first_grad(x: sm.Tensor) -> sm.Tensor:
        (g,) = sm.autograd.grad(f(x).sum(), x, create_graph=True)
        return g
    x = sm.tensor([0.3, -0.7, 1.1, 0.5], dtype=sm.float64, requires_grad=True)
    assert first_grad(x).requires_grad
    assert gradcheck(first_grad, (x,), atol=1e-5, rtol=1e-4)


def test_second_derivative_value() -> None:
    x = leaf(2.0)
    (g,) = sm.autograd.grad((x ** 3).sum(), x, create_graph=True)
    (gg,) = sm.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), [12.0])


def test_gradcheck_detects_a_wrong_derivative() -> None:
    class Wrong(sm.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: sm.Tensor) -> sm.Tensor:
            return x * x

        @staticmethod
        def backward(ctx: Any, g: sm.Tensor) -> sm.Tensor:
            return g
    assert not gradcheck(Wrong.apply, (leaf(1.0, 2.0),), raise_exception=False)


@pytest.mark.parametrize("op", ["add", "mul", "matmul", "sum", "reshape", "cat", "index"])
def test_gradients_have_input_dtype_and_shape(op: str) -> None:
    s = next(s for s in OC.CASES[op].samples(OC.Gen("float32")) if s.label in (
        "broadcast", "batch-bcast", "dims02", "infer", "dim0", "int-tensor-dup"))
    from scriptmod._dispatch import dispatch
    xs = [sm.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
          else a for a in s.inputs]
    dispatch(op, tuple(xs), dict(s.attrs)).sum().backward()
    for x in xs:
        if isinstance(x, sm.Tensor) and x.requires_grad:
            assert x.grad.dtype is x.dtype and x.grad.shape == x.shape


# ---- property: broadcast gradients reduce back to each input's shape --------------------
from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def broadcast_pair(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    out = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    a = [d if draw(st.booleans()) else 1 for d in out]
    b = [d if draw(st.booleans()) else 1 for d in out][draw(st.integers(0, len(out))):]
    return tuple(a), tuple(b)


@given(broadcast_pair())
def test_broadcast_gradients_match_numpy(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    sa, sb = shapes
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal(sa), rng.standard_normal(sb)
    a, b = sm.tensor(a_np, requires_grad=True), sm.tensor(b_np, requires_grad=True)
    (a * b).sum().backward()
    full = np.broadcast_shapes(sa, sb)
    want_a = np.broadcast_to(b_np, full).copy()
    lead = len(full) - len(sa)
    want_a = want_a.sum(axis=tuple(range(lead)))
    want_a = want_a.sum(axis=tuple(i for i, d in enumerate(sa) if d == 1), keepdims=True).reshape(sa)
    assert a.grad.shape == sa and b.grad.shape == sb
    np.testing.assert_allclose(a.grad.numpy(), want_a, rtol=1e-12)
