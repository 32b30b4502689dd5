"""In-place activations after tracing: the caller's tensor is modified and returned (the
same object), as in eager mode and ``torch.jit.trace``; fused, unfused, under autograd, at
other batch sizes and in float64. An in-place activation between two layers stays fused."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.jit import fuser

LAYERS: dict[str, Callable[[], Any]] = {
    "ReLU": lambda: nn.ReLU(inplace=True),
    "ReLU6": lambda: nn.ReLU6(inplace=True),
    "Hardtanh": lambda: nn.Hardtanh(-0.5, 0.5, inplace=True),
    "LeakyReLU": lambda: nn.LeakyReLU(0.2, inplace=True),
    "ELU": lambda: nn.ELU(0.5, inplace=True),
    "SiLU": lambda: nn.SiLU(inplace=True),
    "Threshold": lambda: nn.Threshold(0.1, 20.0, inplace=True),
    "Dropout-eval": lambda: nn.Dropout(0.5, inplace=True).eval(),
}
for _name in ("SELU", "CELU", "Hardswish", "Hardsigmoid", "Mish"):
    if hasattr(nn, _name):
        LAYERS[_name] = (lambda n: lambda: getattr(nn, n)(inplace=True))(_name)

FUNCTIONS: dict[str, Callable[[Any], Any]] = {
    "F.relu_": F.relu_,
    "F.relu(inplace)": lambda x: F.relu(x, inplace=True),
    "Tensor.relu_": lambda x: x.relu_(),
    "F.threshold_": lambda x: F.threshold_(x, 0.1, 20.0),
    "F.leaky_relu(inplace)": lambda x: F.leaky_relu(x, 0.1, inplace=True),
    "F.hardtanh(inplace)": lambda x: F.hardtanh(x, inplace=True),
}


class Wrap(nn.Module):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


def _model(kind: str) -> Any:
    return LAYERS[kind]() if kind in LAYERS else Wrap(FUNCTIONS[kind])


def _x(shape: tuple[int, ...], dtype: Any = sm.float32, seed: int = 0) -> Any:
    vals = np.random.default_rng(seed).standard_normal(shape) * 2
    vals.flat[:3] = [np.nan, -0.0, 0.1]
    return sm.tensor(vals, dtype=dtype)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("kind", sorted(LAYERS) + sorted(FUNCTIONS))
def test_traced_inplace_modifies_and_returns_the_callers_tensor(kind: str, fused: bool) -> None:
    model = _model(kind)
    traced = sm.jit.trace(model, _x((4, 5)), check_trace=False)
    for shape, dtype in (((4, 5), sm.float32), ((7, 5), sm.float32), ((2, 5), sm.float64)):
        want = model(_x(shape, dtype, 1))                # eager, on its own copy
        x = _x(shape, dtype, 1)
        with fuser(fused), sm.no_grad():
            y = traced(x)
        assert y is x, f"{kind}: the traced call returned a new tensor, not its input"
        np.testing.assert_allclose(x.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)  # NaN == NaN
        assert y.dtype == dtype


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_sequential_with_inplace_relu_modifies_input(fused: bool) -> None:
    seq = nn.Sequential(nn.ReLU(inplace=True)).eval()
    traced = sm.jit.trace(seq, _x((3, 4)), check_trace=False)
    x = _x((6, 4), seed=2)
    want = np.where(x.numpy() < 0, 0.0, x.numpy())
    with fuser(fused):
        y = traced(x)
    assert y is x
    np.testing.assert_array_equal(x.numpy(), want)


def test_input_is_read_before_and_after_the_in_place_op() -> None:
    class M(nn.Module):
        def forward(self, x: Any) -> Any:
            before = x * 2
            F.relu_(x)
            return before + x, x

    m = M()
    traced = sm.jit.trace(m, _x((3, 4)), check_trace=False)
    for fused in (True, False):
        x, x_eager = _x((5, 4), seed=3), _x((5, 4), seed=3)
        want = m(x_eager)
        with fuser(fused):
            got = traced(x)
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        assert got[1] is x
        np.testing.assert_array_equal(x.numpy(), x_eager.numpy())


def test_intermediate_inplace_activation_stays_fused_and_leaves_input_alone() -> None:
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(inplace=True), nn.Linear(8, 3)).eval()
    traced = sm.jit.trace(model, _x((4, 5)), check_trace=False)
    x = sm.randn(9, 5)
    before = x.numpy().copy()
    with sm.no_grad():
        y, want = traced(x), model(x.clone())
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(x.numpy(), before)
    g = traced.graph_for(x)
    assert not [n for n in g.walk() if n.kind == "sm::copy_"]
    groups = [n for n in g.walk() if n.kind == "prim::FusionGroup"]
    assert any("sm::relu" in str(n.attrs["subgraph"]) for n in groups)


def test_leaf_that_requires_grad_raises_like_eager() -> None:
    traced = sm.jit.trace(nn.ReLU(inplace=True), _x((3, 4)), check_trace=False)
    leaf = sm.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        nn.ReLU(inplace=True)(leaf)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        traced(leaf)


@pytest.mark.parametrize("kind", ["ReLU", "Threshold", "LeakyReLU", "ELU", "SiLU"])
def test_non_leaf_input_gets_eager_gradients(kind: str) -> None:
    model = _model(kind)
    traced = sm.jit.trace(model, _x((3, 4)), check_trace=False)
    grads = []
    for run in (model, traced):
        leaf = sm.tensor(np.linspace(-2, 2, 20).reshape(5, 4), requires_grad=True)
        x = leaf * 1.5
        y = run(x)
        assert y is x
        (y * y).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)


def test_torch_agrees() -> None:
    """The reference behaviour: torch.jit.trace of ReLU(inplace=True) returns its input."""
    torch = pytest.importorskip("torch")
    tr = torch.jit.trace(torch.nn.ReLU(inplace=True), torch.randn(3, 4))
    x = torch.randn(5, 4)
    assert tr(x) is x and bool((x >= 0).all())
    ours = sm.jit.trace(nn.ReLU(inplace=True), sm.randn(3, 4), check_trace=False)
    xs = sm.tensor(x.numpy() - 1.0)
    assert ours(xs) is xs and bool((xs.numpy() >= 0).all())


def test_module_compile_in_place_relu() -> None:
    model = nn.Sequential(nn.ReLU(inplace=True))
    model.compile()
    x = _x((4, 3), seed=5)
    want = np.where(x.numpy() < 0, 0.0, x.numpy())
    y = model(x)
    assert y is x
    np.testing.assert_array_equal(x.numpy(), want)


def test_archive_round_trip_keeps_in_place_write(tmp_path: Any) -> None:
    traced = sm.jit.trace(nn.Sequential(nn.ReLU(inplace=True)), _x((3, 4)), check_trace=False)
    path = tmp_path / "m.smod"
    traced.save(str(path))
    loaded = sm.jit.load(str(path))
    x = _x((2, 4), seed=6)
    y = loaded(x)
    assert y is x and not (x.numpy() < 0).any()


class _ViewAfterWrite(nn.Module):
    """Views taken *after* an in-place write read the new value: nothing is stale."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc, self.act, self.how = nn.Linear(4, 6), nn.ReLU(inplace=True), how

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = self.act(self.fc(x)) if self.how == "module" else self.fc(x).relu_()
        a, b = h.split(h.size(-1) // 2, dim=-1)
        return a[: x.size(0) - 1] * 2 + b[1:]


@pytest.mark.parametrize("how", ["module", "method"])
@pytest.mark.parametrize("fused", [True, False])
def test_views_taken_after_an_inplace_write_trace_and_follow_the_batch(how: str,
                                                                      fused: bool) -> None:
    model = _ViewAfterWrite(how).eval()
    with sm.no_grad(), fuser(fused):
        traced = sm.jit.trace(model, _x((5, 4), seed=7))
        for n in (5, 3, 9):
            x = _x((n, 4), seed=n)
            # float32 tolerance: compiled matmuls may round differently from eager's
            np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5,
                                       atol=1e-6)


def test_a_view_taken_before_an_inplace_write_is_still_refused() -> None:
    class Stale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            h = self.fc(x)
            v = h[:, :2]
            h.relu_()
            return v * 1

    with sm.no_grad(), pytest.raises(sm.jit.TracingError, match="in-place write"):
        sm.jit.trace(Stale(), _x((3, 4), seed=1))
