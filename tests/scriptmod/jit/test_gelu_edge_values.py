"""GELU at the edges gives the formula's value, eager and fused, in every float dtype, where
torch 2.13 does not: erf-GELU(+inf) is +inf (torch: NaN in float32, bfloat16 and float16),
erf-GELU(3e38) is 3e38 (torch: inf, its x * (1 + erf) overflows before the halving), and
below x = -3 both forms stay close to the exact value (float32 within 4e-6 relative, the
inline erf/exp forms' bound; half dtypes within 2 ulps; torch's 1 + erf and
1 + tanh cancel: float32 erf-GELU(-5) is -1.19e-06 against -1.43e-06, and -0.0 from
x = -6 on). The README's differences list quotes these numbers."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

# the exact values (mpmath, 50 digits), rounded to float64: 0.5 x erfc(-x / sqrt 2) and
# 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
EXACT = {
    "none": {-3.0: -0.0040496940948902836, -3.5: -0.00081420177662433763,
             -4.0: -0.00012668496733247969, -5.0: -1.4332578593959696e-06,
             -6.0: -5.9195258702261888e-09, -10.0: -7.6198530241605261e-23},
    "tanh": {-3.0: -0.0036373920817730188, -3.5: -0.00061619765537366331,
             -4.0: -7.024594819237269e-05, -5.0: -2.291796196629506e-07,
             -6.0: -8.4396467007622971e-11, -10.0: -1.2040923482098107e-37},
}
DTYPES = ["float32", "float64", "bfloat16", "float16"]
RELATIVE = {"float32": 4e-6, "float64": 1e-13}
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NumPy's inf * 0
_INT = {2: np.int16, 4: np.int32, 8: np.int64}


def _gelu(x: sm.Tensor, approximate: str, path: str) -> np.ndarray:
    layer = nn.GELU(approximate=approximate)
    if path == "fused":
        layer = sm.jit.trace(layer, x)
    with sm.no_grad():
        return layer(x).numpy()


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Floats as integers in value order (adjacent floats differ by 1)."""
    i = a.view(_INT[a.dtype.itemsize])
    return np.where(i < 0, np.iinfo(i.dtype).min - i, i).astype(np.int64)


def _in_dtype(values: list[float], dtype: str) -> np.ndarray:
    return sm.tensor(values, dtype=sm.float64).to(getattr(sm, dtype)).numpy()


@pytest.mark.parametrize("path", ["eager", "fused"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_infinities_and_the_largest_values_give_x(approximate, dtype, path):
    big = 3e38 if dtype in ("float32", "bfloat16") else 6e4 if dtype == "float16" else 1e308
    x = sm.tensor([float("inf"), big, float("-inf"), float("nan")],
                  dtype=sm.float64).to(getattr(sm, dtype))
    got = _gelu(x, approximate, path).astype(np.float64)
    want = x.numpy().astype(np.float64)
    assert got[0] == np.inf and got[1] == want[1]
    assert np.isnan(got[2]) and np.isnan(got[3])     # -inf * 0 and NaN: NaN, as torch


@pytest.mark.parametrize("path", ["eager", "fused"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_below_minus_three_the_result_is_close_to_the_exact_value(approximate, dtype, path):
    xs = list(EXACT[approximate])
    got = _gelu(sm.tensor(xs, dtype=sm.float64).to(getattr(sm, dtype)), approximate, path)
    exact = [EXACT[approximate][x] for x in xs]
    shown = dict(zip(xs, zip(got.tolist(), exact)))
    if dtype in RELATIVE:
        np.testing.assert_allclose(got, exact, rtol=RELATIVE[dtype], atol=0, err_msg=str(shown))
    else:
        ulps = np.abs(_ordinal(got) - _ordinal(_in_dtype(exact, dtype)))
        assert ulps.max() <= 2, shown


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_differs_there():
    """What the README's differences list says torch 2.13 gives (float32, this CPU family):
    if torch changes, the list must change."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional.gelu
    x = torch.tensor([float("inf"), 3e38, -5.0, -6.0])
    t = f(x).tolist()
    ours = _gelu(sm.tensor(x.numpy()), "none", "eager").tolist()
    assert ours[0] == float("inf") and ours[1] == pytest.approx(3e38)
    assert abs(ours[2] - EXACT["none"][-5.0]) < abs(t[2] - EXACT["none"][-5.0])
    assert t[3] == 0.0 and ours[3] < 0
    if not (np.isnan(t[0]) and t[1] == float("inf")):
        pytest.skip(f"this torch build gives gelu(inf) = {t[0]}, gelu(3e38) = {t[1]} "
                    f"(torch 2.13's float32 gelu differs between CPUs at the edges)")
