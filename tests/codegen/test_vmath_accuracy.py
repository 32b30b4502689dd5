"""Accuracy of the vectorized math over millions of points, tails and special values.

float32: relative error <= 4e-6 wherever the exact result (float64 reference) is a normal
float32; float64: <= 1e-14 (1e-13 for erf/erfc). Special values (+-0, +-inf, NaN) must give
the IEEE/C99 results: NaN where the reference is NaN, equal infinities, signed zeros.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sps

from harness import run_llvm, unary_spec
from scriptmod.ir import dtypes as D

REF = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
       "sigmoid": sps.expit, "erf": sps.erf, "erfc": sps.erfc, "sqrt": np.sqrt,
       "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "exp2": np.exp2,
       "log2": np.log2}
F64_TOL = {"erf": 1e-13, "erfc": 1e-13}
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, 0.5])


def sweep(dt, n: int = 1 << 20) -> np.ndarray:
    """Log-spaced magnitudes of both signs from the subnormals to the overflow range,
    a dense uniform [-30, 30] band, and the special values."""
    info = np.finfo(dt)
    rng = np.random.default_rng(11)
    mags = np.exp2(rng.uniform(np.log2(info.smallest_subnormal), np.log2(info.max), n))
    dense = rng.uniform(-30, 30, n)
    near1 = 1 + rng.uniform(-1e-3, 1e-3, n // 4)
    x = np.concatenate([mags, -mags, dense, near1, -near1, SPECIALS])
    return x.astype(dt)


def _check(name: str, x: np.ndarray, got: np.ndarray, dt, tol: float) -> None:
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        ref = REF[name](x64)
    g = got.astype(np.float64)
    bad_nan = np.isnan(g) != np.isnan(ref)
    assert not bad_nan.any(), f"{name}: NaN mismatch at x={x64[bad_nan][:5]}"
    info = np.finfo(dt)
    inf = np.isinf(ref) | (np.abs(ref) > info.max * (1 + 2 ** -24))
    assert np.array_equal(g[inf], np.sign(ref[inf]) * np.inf), f"{name}: overflow mismatch"
    normal = np.isfinite(ref) & (np.abs(ref) >= info.tiny) & ~inf
    rel = np.abs(g[normal] - ref[normal]) / np.abs(ref[normal])
    worst = np.argmax(rel)
    assert rel[worst] <= tol, (f"{name}[{np.dtype(dt).name}]: rel err {rel[worst]:.3g} at "
                               f"x={x64[normal][worst]!r}")
    zeros = (ref == 0) & (x64 == 0)          # f(+-0) = +-0 must keep the sign
    assert np.array_equal(np.signbit(g[zeros]), np.signbit(ref[zeros])), f"{name}: signed zero"


@pytest.fixture(scope="module", params=[np.float32, np.float64], ids=["float32", "float64"])
def computed(request):
    dt = request.param
    x = sweep(dt)
    sdt = D.float32 if dt is np.float32 else D.float64
    names = list(REF)
    outs = run_llvm(unary_spec(names, sdt, lambda op: sdt), [x])
    return dt, x, dict(zip(names, outs))


@pytest.mark.parametrize("name", list(REF))
def test_accuracy(computed, name):
    dt, x, outs = computed
    tol = 4e-6 if dt is np.float32 else F64_TOL.get(name, 1e-14)
    _check(name, x, outs[name], dt, tol)


def test_signed_zero_and_specials():
    x = np.array([-0.0, 0.0, -np.inf, np.inf, np.nan], np.float32)
    names = ["sin", "tanh", "expm1", "log1p", "erf", "sqrt"]
    outs = dict(zip(names, run_llvm(unary_spec(names, D.float32, lambda op: D.float32), [x])))
    for name in names:
        assert np.signbit(outs[name][0]), name
    assert np.array_equal(outs["tanh"][2:4], [-1, 1]) and np.array_equal(outs["erf"][2:4], [-1, 1])
    assert np.array_equal(outs["expm1"][2:4], [-1, np.inf])


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_sigmoid_underflows_to_zero_where_torch_does(dt):
    """Below x = -88.72 (float32) PyTorch's 1 / (1 + e**-x) is 1 / inf = 0; above it, down
    to -87.3, a subnormal. The kernels (LLVM, and CUDA C on the CPU shim) give 0 exactly
    where torch does and torch's values elsewhere; float64 likewise at its -709.78."""
    torch = pytest.importorskip("torch")
    from harness import have_gxx, run_shim
    x = np.concatenate([np.linspace(-110, -80, 30001), np.linspace(-760, -700, 6001),
                        np.linspace(-30, 30, 601), [-np.inf, np.inf, np.nan, -0.0, 0.0],
                        [-88.72283172607422, -88.72283935546875, -709.782712893384]])
    x = np.concatenate([x, np.nextafter(x.astype(dt), dt(-np.inf))]).astype(dt)
    want = torch.sigmoid(torch.from_numpy(x)).numpy()
    sdt = D.float32 if dt is np.float32 else D.float64
    spec = unary_spec(["sigmoid"], sdt, lambda op: sdt)
    runs = {"llvm": run_llvm(spec, [x])[0]}
    if have_gxx():
        runs["cuda c"] = run_shim(spec, [x])[0]
    for name, got in runs.items():
        assert np.array_equal(got == 0, want == 0), f"{name}: zero at other x"
        assert np.array_equal(np.isnan(got), np.isnan(want)), name
        rel = np.abs(got - want) / np.where(want == 0, 1, want)
        worst = np.nanargmax(rel)
        assert rel[worst] <= 4e-6, f"{name}: rel err {rel[worst]:.3g} at x={x[worst]!r}"
