"""Random draws (``scriptmod/_ops_random.py``): each distribution's moments (or quantiles) from
20,000 seeded draws within five standard errors, shapes and dtypes as PyTorch's, the
``generator=`` argument, fresh draws from a traced model, and the refusals."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

N = 20_000


@pytest.fixture(autouse=True)
def _seeded() -> None:
    sm.manual_seed(1234)


def _near(values: Any, want: float, sd: float, what: str) -> None:
    """The sample mean of ``values`` within five standard errors of ``want``."""
    got = float(np.mean(np.asarray(values, dtype=np.float64)))
    assert abs(got - want) < 5 * sd / math.sqrt(np.size(values)), (what, got, want)


def test_bernoulli() -> None:
    p = sm.tensor([0.1, 0.5, 0.9]).expand(N, 3).contiguous()
    draws = sm.bernoulli(p)
    assert draws.shape == p.shape and draws.dtype is sm.float32
    for j, q in enumerate((0.1, 0.5, 0.9)):
        _near(draws[:, j].numpy(), q, math.sqrt(q * (1 - q)), f"p={q}")
    assert set(np.unique(draws.numpy())) <= {0.0, 1.0}
    _near(sm.bernoulli(sm.zeros(N, dtype=sm.float64), 0.25).numpy(), 0.25, 0.433, "p=0.25")


def test_bernoulli_in_place() -> None:
    x = sm.zeros(N, dtype=sm.int64)
    assert x.bernoulli_(0.3) is x and x.dtype is sm.int64
    _near(x.numpy(), 0.3, 0.458, "bernoulli_(0.3)")
    y = sm.empty(N, 2)
    y.bernoulli_(sm.tensor([0.2, 0.8]))
    _near(y[:, 1].numpy(), 0.8, 0.4, "bernoulli_(tensor)")


def test_multinomial_frequencies() -> None:
    w = sm.tensor([1.0, 0.0, 3.0, 6.0])
    draws = sm.multinomial(w, N, replacement=True).numpy()
    assert draws.shape == (N,) and draws.dtype == np.int64 and not (draws == 1).any()
    for k, p in ((0, 0.1), (2, 0.3), (3, 0.6)):
        _near(draws == k, p, math.sqrt(p * (1 - p)), f"category {k}")
    rows = sm.multinomial(w.expand(N // 10, 4), 3).numpy()       # without replacement
    assert rows.shape == (N // 10, 3) and all(len(set(r)) == 3 for r in rows.tolist())
    _near(rows[:, 0] == 3, 0.6, 0.49, "first pick")              # the first pick is ~ p


def test_normal_overloads() -> None:
    mean, std = sm.full((N,), 2.0), sm.full((N,), 0.5)
    for draws in (sm.normal(mean, std), sm.normal(mean, 0.5), sm.normal(2.0, std),
                  sm.normal(2.0, 0.5, (N,))):
        assert draws.shape == (N,) and draws.dtype is sm.float32
        _near(draws.numpy(), 2.0, 0.5, "mean")
        _near((draws.numpy() - 2.0) ** 2, 0.25, 0.36, "variance")
    assert sm.normal(sm.zeros(2, 1), sm.ones(3)).shape == (2, 3)
    assert sm.normal(0.0, 1.0, (2, 3), dtype=sm.float64).dtype is sm.float64


def test_normal_gradient_is_zero_as_in_torch() -> None:
    mean = sm.zeros(5, requires_grad=True)
    std = sm.ones(5, requires_grad=True)
    sm.normal(mean, std).sum().backward()
    assert mean.grad.tolist() == [0.0] * 5 and std.grad.tolist() == [0.0] * 5


def test_poisson() -> None:
    rates = sm.full((N,), 3.5)
    draws = sm.poisson(rates).numpy()
    assert draws.dtype == np.float32 and (draws == np.round(draws)).all()
    _near(draws, 3.5, math.sqrt(3.5), "mean")
    assert sm.poisson(sm.zeros(4)).tolist() == [0.0] * 4


FILLS: list[tuple[str, Callable[[sm.Tensor], Any], Callable[[np.ndarray], None]]] = [
    ("uniform_", lambda t: t.uniform_(-1.0, to=3.0),
     lambda v: (_near(v, 1.0, 4 / math.sqrt(12), "mean"), _check(v.min() >= -1 and v.max() < 3))),
    ("normal_", lambda t: t.normal_(1.0, 2.0), lambda v: _near(v, 1.0, 2.0, "mean")),
    ("exponential_", lambda t: t.exponential_(4.0),
     lambda v: (_near(v, 0.25, 0.25, "mean"), _check(v.min() >= 0))),
    ("geometric_", lambda t: t.geometric_(0.25),
     lambda v: (_near(v, 4.0, math.sqrt(0.75) / 0.25, "mean"),
                _check(v.min() >= 1 and (v == np.round(v)).all()))),
    ("log_normal_", lambda t: t.log_normal_(0.5, 0.25),
     lambda v: (_near(np.log(v), 0.5, 0.25, "log mean"), _check(v.min() > 0))),
    ("cauchy_", lambda t: t.cauchy_(1.0, 2.0),       # quartiles: median -+ sigma
     lambda v: _check(abs(np.quantile(v, 0.25) + 1.0) < 0.15 and
                      abs(np.quantile(v, 0.75) - 3.0) < 0.15 and abs(np.median(v) - 1) < 0.1)),
    ("random_", lambda t: t.random_(3, 7),
     lambda v: (_near(v, 4.5, math.sqrt(1.25), "mean"), _check(set(np.unique(v)) == {3, 4, 5, 6}))),
]


def _check(ok: bool) -> None:
    assert ok


@pytest.mark.parametrize("name,fill,check", FILLS, ids=[f[0] for f in FILLS])
def test_in_place_fills(name: str, fill: Callable[..., Any], check: Callable[..., None]) -> None:
    t = sm.zeros(N, dtype=sm.float64)
    assert fill(t) is t and t.dtype is sm.float64
    check(t.numpy())
    half = sm.zeros(8, dtype=sm.float16)
    fill(half)
    assert half.dtype is sm.float16 and not bool(half.isnan().any())


def test_complex_fills() -> None:
    """Real and imaginary parts drawn apart; a complex normal's variance std ** 2 in all."""
    z = sm.zeros(N, dtype=sm.complex128).normal_(1.0, 2.0)
    for part in (z.real.numpy(), z.imag.numpy()):
        _near((part - 1.0) ** 2, 2.0, 2.0 * math.sqrt(2), "variance of a part")
    u = sm.zeros(N, dtype=sm.complex64).uniform_(1.0, 2.0)
    assert u.dtype is sm.complex64 and 1 <= u.imag.min().item() and u.real.max().item() < 2
    with pytest.raises(NotImplementedError, match="ComplexFloat"):
        sm.zeros(2, dtype=sm.complex64).exponential_()


def test_random_ranges_by_dtype() -> None:
    assert set(sm.zeros(500, dtype=sm.bool).random_().numpy().tolist()) == {False, True}
    u8 = sm.zeros(2000, dtype=sm.uint8).random_().numpy()
    assert u8.max() > 200
    assert sm.zeros(100).random_(5).max().item() < 5
    assert sm.zeros(10, dtype=sm.int64).geometric_(0.5).min().item() >= 1


def test_generator_repeats_draws() -> None:
    draw = lambda: sm.bernoulli(sm.full((50,), 0.5), generator=sm.Generator().manual_seed(7))  # noqa: E731
    assert draw().tolist() == draw().tolist()
    a = sm.zeros(20).normal_(generator=sm.Generator().manual_seed(3))
    b = sm.zeros(20).normal_(generator=sm.Generator().manual_seed(3))
    assert a.tolist() == b.tolist()


class _Noisy(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return sm.bernoulli(x.sigmoid()) + sm.normal(x, 0.1) + sm.poisson(x.abs())


def test_traced_draws_are_fresh_and_follow_the_size() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # torch's nondeterminism warning too
        traced = sm.jit.trace(_Noisy(), (sm.randn(4, 5),))
    x = sm.randn(4, 5)
    assert bool((traced(x) != traced(x)).any())
    assert traced(sm.randn(6, 3)).shape == (6, 3)


@pytest.mark.parametrize("call,message", [
    (lambda: sm.bernoulli(sm.ones(2), 1.5), "in \\[0, 1\\]"),
    (lambda: sm.bernoulli(sm.tensor([0.5, 2.0])), "in \\[0, 1\\]"),
    (lambda: sm.bernoulli(sm.ones(2, dtype=sm.int64)), "not implemented for 'Long'"),
    (lambda: sm.multinomial(sm.tensor([1.0, -1.0]), 1), "element < 0"),
    (lambda: sm.multinomial(sm.tensor([0.0, 0.0]), 1), "sum of probabilities <= 0"),
    (lambda: sm.multinomial(sm.tensor([1.0, 1.0]), 3), "without replacement"),
    (lambda: sm.multinomial(sm.tensor([1.0, 0.0, 0.0]), 2), "not enough non-negative"),
    (lambda: sm.multinomial(sm.ones(2, 2, 2), 1), "1 or 2 dim"),
    (lambda: sm.normal(sm.zeros(2), -1.0), "std >= 0.0"),
    (lambda: sm.normal(0.0, 1.0), "size"),
    (lambda: sm.zeros(2).uniform_(1, 0), "from=1 > to=0"),
    (lambda: sm.zeros(2).exponential_(0), "lambda > 0.0"),
    (lambda: sm.zeros(2).geometric_(1.0), "in \\(0, 1\\)"),
    (lambda: sm.zeros(2).log_normal_(0, 0), "std > 0.0"),
    (lambda: sm.zeros(2, dtype=sm.int64).normal_(), "not implemented for 'Long'"),
    (lambda: sm.zeros(2).random_(5, 5), "from=5 >= to=5"),
    (lambda: sm.poisson(sm.tensor([-1.0])), "non-negative"),
])
def test_refusals(call: Callable[[], Any], message: str) -> None:
    with pytest.raises((RuntimeError, TypeError, NotImplementedError, ValueError), match=message):
        call()
