"""``scriptmod.nn.init``: distributions (mean, std, bounds), gains and fans, in-place and
no-grad semantics, reproducibility under ``manual_seed``."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import init
from nn_testutil import arr


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(sm.empty(*shape))


@pytest.mark.parametrize("fn,args,check", [
    (init.uniform_, (-2.0, 3.0), lambda a: (a.min() >= -2 and a.max() <= 3
                                            and abs(a.mean() - 0.5) < 0.05)),
    (init.normal_, (1.0, 2.0), lambda a: abs(a.mean() - 1) < 0.05 and abs(a.std() - 2) < 0.05),
    (init.trunc_normal_, (0.0, 1.0, -1.0, 1.5),  # scipy.stats.truncnorm(-1, 1.5).mean()
     lambda a: a.min() >= -1 and a.max() <= 1.5 and abs(a.mean() - 0.1452) < 0.03),
    (init.constant_, (0.3,), lambda a: np.all(a == np.float32(0.3))),
    (init.zeros_, (), lambda a: np.all(a == 0)),
    (init.ones_, (), lambda a: np.all(a == 1)),
])
def test_fills_in_place_without_recording_grad(fn, args, check) -> None:  # noqa: ANN001
    p = _param(200, 100)
    ptr, version = p.data_ptr(), p._vc[0]
    out = fn(p, *args)
    assert out is p and p.data_ptr() == ptr and p._vc[0] > version
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
    assert check(arr(p))


def test_xavier_and_kaiming_bounds_and_stds() -> None:
    w = _param(300, 200)
    bound = math.sqrt(6 / 500)
    a = arr(init.xavier_uniform_(w, gain=2.0))
    assert np.abs(a).max() <= 2 * bound and np.abs(a).max() > 1.9 * bound
    assert arr(init.xavier_normal_(w)).std() == pytest.approx(math.sqrt(2 / 500), rel=0.03)
    b = arr(init.kaiming_uniform_(w, a=math.sqrt(5)))
    assert np.abs(b).max() <= 1 / math.sqrt(200) and np.abs(b).max() > 0.95 / math.sqrt(200)
    c = arr(init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"))
    assert c.std() == pytest.approx(math.sqrt(2 / 300), rel=0.03)
    conv = _param(16, 8, 3, 3)
    assert init._calculate_fan_in_and_fan_out(conv) == (72, 144)
    assert np.abs(arr(init.kaiming_uniform_(conv))).max() <= math.sqrt(6 / (1.0001 * 72))


def test_calculate_gain_table() -> None:
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", "x")  # type: ignore[arg-type]


def test_fan_errors_and_modes() -> None:
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(_param(5))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(_param(3, 4), mode="fan_avg")
    with pytest.warns(UserWarning, match="zero-element"):
        init.kaiming_normal_(_param(0, 4))


def test_manual_seed_makes_draws_reproducible_and_dtype_is_kept() -> None:
    sm.manual_seed(3)
    a = arr(init.kaiming_uniform_(_param(4, 5)))
    sm.manual_seed(3)
    b = arr(init.kaiming_uniform_(_param(4, 5)))
    np.testing.assert_array_equal(a, b)
    w = nn.Parameter(sm.empty(3, 3, dtype=sm.float64))
    assert init.normal_(w).dtype is sm.float64
    assert init.eye_(w) is w and np.array_equal(arr(w), np.eye(3))


def test_calculate_gain_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    for name, param in (("tanh", None), ("relu", None), ("leaky_relu", None),
                        ("leaky_relu", 0.3), ("selu", None), ("conv2d", None)):
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param))
    t = torch.empty(6, 4, 2, 5)
    assert init._calculate_fan_in_and_fan_out(_param(6, 4, 2, 5)) == \
        torch.nn.init._calculate_fan_in_and_fan_out(t)
