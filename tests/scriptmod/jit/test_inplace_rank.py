"""An in-place op on an argument, traced at one rank and called at another (issue 35): the
write-back into the caller's tensor follows the argument's rank as the op does, so every rank
0..4 runs from a trace at any other, in both directions, with eager's result, the argument
mutated as eager mutates it and the same tensor returned; fused, unfused, under autograd,
through ``Module.compile`` and after save/load."""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import jit, nn
from scriptmod.jit import fuser

RANKS = range(5)


def _shape(rank: int) -> tuple[int, ...]:
    """Trailing-aligned, so that a (5,) bias broadcasts at every rank from 1."""
    return (3, 4, 2, 5)[4 - rank:]


def _x(rank: int, seed: int) -> Any:
    vals = np.random.default_rng(seed).standard_normal(_shape(rank)) * 2
    if rank:
        vals.flat[:1] = [-0.0]
    return sm.tensor(vals, dtype=sm.float32)


class Fn(nn.Module):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


class Scaled(nn.Module):
    """The write happens in a submodule; the caller reads the written argument again."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Threshold(0.1, 20.0, inplace=True)

    def forward(self, x: Any) -> Any:
        y = self.act(x)
        return y * 2 + x


class FillFromParameter(nn.Module):
    """``copy_`` from a tensor of another rank: broadcast into the argument, then read."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(sm.tensor(0.75))

    def forward(self, x: Any) -> Any:
        with sm.no_grad():
            x.copy_(self.w)
        return x + 1


def _setitem_all(x: Any) -> Any:
    x[...] = x * 2 - 1
    return x


def _setitem_mask(x: Any) -> Any:
    x[x > 0.5] = 0.25
    return x


def _two_writes(x: Any) -> Any:
    x.mul_(3).clamp_(-1.0, 2.0)
    return x.sum() + x.add_(0.5).mean()


OPS: dict[str, Callable[[], nn.Module]] = {
    "ReLU": lambda: nn.ReLU(inplace=True),
    "Threshold": lambda: nn.Threshold(0.1, 20.0, inplace=True),
    "LeakyReLU": lambda: nn.LeakyReLU(0.2, inplace=True),
    "Hardtanh": lambda: nn.Hardtanh(-0.5, 0.5, inplace=True),
    "SiLU": lambda: nn.SiLU(inplace=True),
    "Dropout-eval": lambda: nn.Dropout(0.5, inplace=True).eval(),
    "F.relu_": lambda: Fn(F.relu_),
    "add_": lambda: Fn(lambda x: x.add_(1.5)),
    "mul_self": lambda: Fn(lambda x: x.mul_(x)),
    "div_": lambda: Fn(lambda x: x.div_(-4.0)),
    "clamp_": lambda: Fn(lambda x: x.clamp_(-0.5, 0.5)),
    "sigmoid_": lambda: Fn(lambda x: x.sigmoid_()),
    "masked_fill_": lambda: Fn(lambda x: x.masked_fill_(x < 0, 0.0)),
    "fill_": lambda: Fn(lambda x: x.fill_(3.0)),
    "zero_": lambda: Fn(lambda x: x.zero_()),
    "copy_": lambda: Fn(lambda x: x.copy_(x * 3)),
    "copy_broadcast": FillFromParameter,
    "setitem_ellipsis": lambda: Fn(_setitem_all),
    "setitem_mask": lambda: Fn(_setitem_mask),
    "two_writes": lambda: Fn(_two_writes),
    "submodule": Scaled,
    "sequential": lambda: nn.Sequential(nn.ReLU(inplace=True), nn.Hardtanh(-1.0, 1.0,
                                                                           inplace=True)),
}


def _trace(model: nn.Module, rank: int) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return jit.trace(model, _x(rank, 0), check_trace=False)


def _same(got: Any, want: Any) -> None:
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6,
                               atol=1e-6)


def _check_call(model: nn.Module, traced: Any, rank: int, fused: bool) -> None:
    x_eager, x = _x(rank, 1), _x(rank, 1)
    want = model(x_eager)
    with sm.no_grad(), fuser(fused):
        got = traced(x)
    _same(got, want)
    _same(x, x_eager)                                   # the argument mutated as eager does
    if want is x_eager:
        assert got is x, "the traced call returned a new tensor, not its argument"


@pytest.mark.parametrize("traced_at", RANKS)
@pytest.mark.parametrize("kind", sorted(OPS))
def test_every_other_rank_follows_the_in_place_write(kind: str, traced_at: int) -> None:
    model = OPS[kind]()
    traced = _trace(model, traced_at)
    for rank in RANKS:
        _check_call(model, traced, rank, fused=True)


@pytest.mark.parametrize("kind", ["ReLU", "add_", "setitem_mask", "two_writes", "submodule"])
def test_other_ranks_unfused(kind: str) -> None:
    model = OPS[kind]()
    traced = _trace(model, 1)
    for rank in (0, 2, 4):
        _check_call(model, traced, rank, fused=False)


@pytest.mark.parametrize("kind", ["ReLU", "Threshold", "mul_self", "submodule", "setitem_mask"])
@pytest.mark.parametrize("traced_at,rank", [(1, 2), (2, 1), (1, 4), (3, 0)])
def test_other_ranks_under_autograd_match_eager_gradients(kind: str, traced_at: int,
                                                          rank: int) -> None:
    model = OPS[kind]()
    traced = _trace(model, traced_at)
    grads, outs = [], []
    for run in (model, traced):
        leaf = sm.tensor(_x(rank, 2).numpy(), requires_grad=True)
        x = leaf * 1.5                                  # a non-leaf: in-place is allowed
        y = run(x)
        (y * y).sum().backward()
        grads.append(leaf.grad)
        outs.append(x.detach())
    _same(grads[1], grads[0])
    _same(outs[1], outs[0])


def test_module_compile_follows_another_rank() -> None:
    model = nn.Sequential(nn.ReLU(inplace=True))
    model.compile()
    for rank in (1, 2, 0, 3):
        x = _x(rank, 3)
        want = np.maximum(x.numpy(), 0)
        assert model(x) is x
        np.testing.assert_array_equal(x.numpy(), want)


def test_another_rank_after_save_and_load() -> None:
    model = Scaled()
    buf = io.BytesIO()
    jit.save(_trace(model, 1), buf)
    buf.seek(0)
    loaded = jit.load(buf)
    for rank in (2, 3, 0):
        _check_call(model, loaded, rank, fused=True)


def test_a_broadcast_that_eager_refuses_is_still_refused() -> None:
    """A (5,) source copied into a 0-d argument fails in eager; the trace fails as well."""
    class Bias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b = nn.Parameter(sm.ones(5))

        def forward(self, x: Any) -> Any:
            with sm.no_grad():
                return x.copy_(self.b)

    model = Bias()
    traced = _trace(model, 2)
    with pytest.raises(RuntimeError):
        model(sm.tensor(1.0))
    with sm.no_grad(), pytest.raises(sm.ShapeError, match="argument 'x'.*rank 0"):
        traced(sm.tensor(1.0))


def test_torch_agrees_on_another_rank() -> None:
    torch = pytest.importorskip("torch")
    tr = torch.jit.trace(torch.nn.ReLU(inplace=True), torch.randn(5))
    x = torch.randn(3, 5)
    assert tr(x) is x and bool((x >= 0).all())
