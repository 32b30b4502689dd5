"""Every activation on nan, +-inf, +-0, +-max and denormals, eager and traced, as torch."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from ._common import F  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


# ---- special values: every activation on nan, +-inf, +-0, +-max, denormals -------------------
def _layers(L: Any) -> dict[str, Any]:
    nn = L.nn
    return {"GELU": nn.GELU(), "GELU-tanh": nn.GELU(approximate="tanh"), "SiLU": nn.SiLU(),
            "Softplus": nn.Softplus(beta=2.0, threshold=5.0), "Softplus-default": nn.Softplus(),
            "ELU": nn.ELU(alpha=0.7), "LeakyReLU": nn.LeakyReLU(0.2),
            "Hardtanh": nn.Hardtanh(-2.0, 3.0), "ReLU6": nn.ReLU6(), "ReLU": nn.ReLU(),
            "Threshold": nn.Threshold(0.1, 20.0), "Sigmoid": nn.Sigmoid(), "Tanh": nn.Tanh(),
            "Softmax": nn.Softmax(dim=-1), "LogSoftmax": nn.LogSoftmax(dim=-1),
            "PReLU": nn.PReLU(), "LayerNorm": nn.LayerNorm(8, elementwise_affine=False)}


FLOATS = ("float32", "float64", "float16", "bfloat16")


def _special_rows(dt: str) -> np.ndarray:
    """Rows of 8: the special values, an all -inf row (softmax gives nan), +inf/nan among
    finite values, a constant row (LayerNorm of zero variance), zeros, -inf first."""
    fi = torch.finfo(getattr(torch, dt))
    mx, den = float(fi.max), float(fi.smallest_normal) / 4
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, mx, -mx, den, -den, 1.0]
    return np.array([special[:8], [-np.inf] * 8, [np.inf, 1, 2, 3, 4, 5, 6, 7],
                     [np.nan, 1, 2, 3, 4, 5, 6, 7], [5.0] * 8, [0.0] * 8, special[2:],
                     [-np.inf, 0, 1, 2, 3, 4, 5, 6]])


def _check_special(name: str, dt: str, got: Any, want: Any, x: np.ndarray) -> None:
    tol = 1e-2 if dt in ("float16", "bfloat16") else 1e-5
    ok = np.isclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    bad = [(float(x[tuple(i)]), float(want[tuple(i)]), float(got[tuple(i)]))
           for i in np.argwhere(~ok)[:4]]
    assert not bad, f"{name} {dt}: (input, torch, ours) {bad}"


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", list(_layers(sm)))
def test_special_values_eager_and_traced_match_torch(name: str, dt: str) -> None:
    """Eager, then a trace taken at batch 3 run at batch 8 (fused where the op fuses)."""
    x = _special_rows(dt)
    theirs = _layers(torch)[name].to(getattr(torch, dt))
    ours = _layers(sm)[name].to(getattr(sm, dt))
    with torch.no_grad():
        want = theirs(torch.tensor(x).to(getattr(torch, dt))).double().numpy()
    if name == "GELU":      # x * Phi(x) = x at +inf and near the max; torch 2.13 gives NaN
        want = np.where(x.astype(np.float64) > 1e38, x, want)    # / +inf there on some CPUs
    sx = sm.tensor(x).to(getattr(sm, dt))
    _check_special(name, dt, np.asarray(ours(sx).detach().double().numpy()), want, x)
    traced = sm.jit.trace(ours, sm.randn(3, 8).to(getattr(sm, dt)))
    _check_special(f"traced {name}", dt, np.asarray(traced(sx).detach().double().numpy()), want, x)


FUNCTIONAL_SPECIALS: dict[str, Callable[[Any], Any]] = {
    "normalize of zeros": lambda L: F(L).normalize(L.zeros(2, 3), dim=1),
    "log_softmax of -inf": lambda L: F(L).log_softmax(
        L.tensor([[-float("inf"), 0.0], [-float("inf")] * 2]), dim=1),
    "softplus beyond threshold": lambda L: F(L).softplus(
        L.tensor([float("nan"), 1e30, -1e30, 2.4, 2.6]), beta=2, threshold=5),
    "clamp with nan bounds": lambda L: L.tensor([float("nan"), 2.0, -1.0]).clamp(
        L.tensor([0.0, float("nan"), 0.0])),
    "layer_norm constant row": lambda L: F(L).layer_norm(L.full((2, 4), 3.0), (4,)),
    "threshold of nan": lambda L: F(L).threshold(L.tensor([float("nan"), 0.05, 1.0]), 0.1, 20.0),
    "gelu tanh of -inf": lambda L: F(L).gelu(L.tensor([-float("inf"), float("inf")]),
                                             approximate="tanh"),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL_SPECIALS))
def test_functional_special_values_match_torch(name: str) -> None:
    want = FUNCTIONAL_SPECIALS[name](torch).numpy()
    got = np.asarray(FUNCTIONAL_SPECIALS[name](sm).numpy())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


