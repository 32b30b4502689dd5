"""Inputs of another rank than traced: re-specialized from the traced graph where every op
follows the rank (results equal eager at the new rank), a clear error naming the op, the
user's line and both ranks where one pins it."""
from __future__ import annotations

import io
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir.graph import Prim


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION", raising=False)


class Head(nn.Module):
    """Linear, GELU, LayerNorm, an elementwise chain, log_softmax(-1), a sum over dim 1."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.GELU(approximate="tanh")
        self.ln = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 5)

    def forward(self, x: Any) -> Any:
        h = self.ln(self.act(self.fc1(x)))
        h = (h * 0.5 + 1.0).relu().sigmoid() * h
        return self.fc2(h).log_softmax(-1) + h.softmax(dim=-1).sum(dim=-1, keepdim=True)


def _close(a: Any, b: Any, tol: float = 2e-5) -> None:
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


@pytest.fixture
def head() -> tuple[nn.Module, Any]:
    sm.manual_seed(0)
    model = Head().eval()
    return model, jit.trace(model, sm.randn(2, 4))


SHAPES = [(3, 2, 4), (1, 5, 4), (4,), (2, 3, 1, 4), (6, 4), (2, 7, 4)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fused", [True, False])
def test_other_ranks_equal_eager(head: Any, shape: tuple, fused: bool) -> None:
    model, traced = head
    x = sm.randn(*shape)
    with sm.no_grad(), jit.fuser(fused):
        _close(traced(x), model(x))
        _close(traced(x), model(x))                # the cached specialization too


def test_linear_on_a_stack_of_matrices_as_in_the_issue() -> None:
    sm.manual_seed(1)
    lin = nn.Linear(4, 6)
    traced = jit.trace(lin, sm.randn(2, 4))
    x = sm.randn(3, 2, 4)
    with sm.no_grad():
        y = traced(x)
    assert tuple(y.shape) == (3, 2, 6)
    _close(y, lin(x))


def test_each_rank_specializes_once(head: Any) -> None:
    model, traced = head
    ex = traced.executor()
    with sm.no_grad():
        traced(sm.randn(2, 4))
        before = ex.stats["specializations"]
        for b in (3, 5):
            traced(sm.randn(b, 2, 4))
            traced(sm.randn(b, 2, 4))
    assert ex.stats["specializations"] == before + 2    # one per 3-D shape, reused after


def test_other_ranks_under_autograd_match_eager_gradients(head: Any) -> None:
    model, traced = head
    for shape in [(3, 2, 4), (4,)]:
        x = sm.randn(*shape)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        model.zero_grad()
        traced(xa).sum().backward()
        got = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        model(xb).sum().backward()
        for g, p in zip(got, model.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-5)
        _close(xa.grad, xb.grad, 1e-4)


def test_other_ranks_after_save_and_load(head: Any) -> None:
    model, traced = head
    buf = io.BytesIO()
    jit.save(traced, buf)
    buf.seek(0)
    loaded = jit.load(buf)
    for shape in [(3, 2, 4), (4,), (5, 4)]:
        x = sm.randn(*shape)
        with sm.no_grad():
            _close(loaded(x), model(x))


def test_against_torch_at_rank_3(head: Any) -> None:
    torch = pytest.importorskip("torch")
    model, traced = head
    t = torch.nn.ModuleDict({"fc1": torch.nn.Linear(4, 8), "ln": torch.nn.LayerNorm(8),
                             "fc2": torch.nn.Linear(8, 5)})
    with torch.no_grad():
        for name, p in model.named_parameters():
            dict(t.named_parameters())[name].copy_(torch.from_numpy(p.detach().numpy()))
    x = sm.randn(3, 2, 4)
    tx = torch.from_numpy(x.numpy())
    with torch.no_grad():
        h = t["ln"](torch.nn.functional.gelu(t["fc1"](tx), approximate="tanh"))
        h = (h * 0.5 + 1.0).relu().sigmoid() * h
        ref = t["fc2"](h).log_softmax(-1) + h.softmax(dim=-1).sum(dim=-1, keepdim=True)
    with sm.no_grad():
        np.testing.assert_allclose(traced(x).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


# ---- ops that pin the rank -----------------------------------------------------------------

class View(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.view(x.size(0), -1) * 2            # PIN: reshape


class Flatten01(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.flatten(0, 1) + 1                  # PIN: reshape


class T(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.t() + 1                            # PIN: transpose


class Permute(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.permute(1, 0) - 1                  # PIN: permute


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: Any) -> Any:
        return self.conv(x)                         # PIN: conv2d


class PReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.PReLU(3)

    def forward(self, x: Any) -> Any:
        return self.act(x)                          # PIN: mul


def _pin_line(cls: type) -> int:
    import inspect
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, s in enumerate(lines) if "# PIN" in s)


PINNED: list[tuple[Callable[[], nn.Module], tuple, tuple, str]] = [
    (View, (2, 6), (2, 3, 2), "reshape"),
    (Flatten01, (2, 6, 2), (2, 3, 2, 2), "reshape"),
    (T, (2, 6), (2, 3, 2), "transpose"),
    (Permute, (2, 6), (2, 3, 2), "permute"),
    (Conv, (1, 3, 8, 8), (3, 8, 8), "conv2d"),
    (PReLU, (2, 3, 4), (2, 3, 4, 5), "mul"),
]


@pytest.mark.parametrize("make,traced_at,given,op", PINNED,
                         ids=[p[0].__name__ for p in PINNED])
def test_an_op_that_pins_the_rank_is_named(make: Any, traced_at: tuple, given: tuple,
                                           op: str) -> None:
    model = make()
    traced = jit.trace(model, sm.randn(*traced_at))
    with sm.no_grad(), pytest.raises(sm.ShapeError) as info:
        traced(sm.randn(*given))
    msg = str(info.value)
    assert f"cannot follow: {op} " in msg and "pins the rank" in msg and "sm::" not in msg
    assert f"test_rank_respecialize.py:{_pin_line(make)}" in msg
    assert f"argument 'x' (position 0) was traced at rank {len(traced_at)}, got rank " \
           f"{len(given)}" in msg
    assert isinstance(info.value, RuntimeError)
    with sm.no_grad():                               # the traced rank still runs
        x = sm.randn(*traced_at)
        _close(traced(x), model(x))


def test_the_traced_rank_keeps_working_after_a_pinned_error() -> None:
    model = View()
    traced = jit.trace(model, sm.randn(2, 6))
    with sm.no_grad():
        with pytest.raises(sm.ShapeError):
            traced(sm.randn(2, 3, 2))
        x = sm.randn(5, 6)
        _close(traced(x), model(x))


def test_a_pinned_error_survives_save_and_load() -> None:
    traced = jit.trace(T(), sm.randn(2, 6))
    buf = io.BytesIO()
    jit.save(traced, buf)
    buf.seek(0)
    loaded = jit.load(buf)
    with sm.no_grad(), pytest.raises(sm.ShapeError, match=r"follow: transpose .*pins the rank"):
        loaded(sm.randn(2, 3, 2))


def test_a_type_rule_rejecting_the_rank_is_reported_with_its_op() -> None:
    class SumDim1(nn.Module):
        def forward(self, x: Any) -> Any:
            return x.sum(dim=1) * 2

    traced = jit.trace(SumDim1(), sm.randn(2, 3))
    with sm.no_grad(), pytest.raises(sm.ShapeError,
                                     match=r"traced at rank 2, got rank 1.*follow: sum "):
        traced(sm.randn(3))


def test_positive_dims_keep_their_meaning_as_in_eager() -> None:
    class Dims(nn.Module):
        def forward(self, x: Any) -> Any:
            return x.softmax(dim=1) + x.sum(dim=1, keepdim=True)

    model = Dims()
    traced = jit.trace(model, sm.randn(2, 3))
    x = sm.randn(2, 3, 4)
    with sm.no_grad():
        _close(traced(x), model(x))


def test_the_respecialized_graph_has_the_new_rank(head: Any) -> None:
    _, traced = head
    x = sm.randn(3, 2, 4)
    with sm.no_grad():
        traced(x)
    g = traced.graph_for(x)
    out = g.outputs[0].type
    assert out.shape == (3, 2, 5)
    assert not any(n.kind == Prim.CALL_METHOD for n in g.walk())
