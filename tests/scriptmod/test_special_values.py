"""Special values (NaN, ±inf, ±0.0, denormals, the largest finite values, values at each
op's thresholds) through every elementwise op of the registry and every composite
activation, on every path: eager, traced and fused (LLVM), traced and unfused (reference
kernels), and the CUDA C of a one-op fusion group on the CPU shim; all against PyTorch.

NaN must sit where torch's NaNs sit, infinities must match exactly, and zeros must carry
torch's sign. Finite values are compared at the dtype's tolerance (``op_cases.TOLERANCE``).
"""
from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import op_cases as OC
import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.ir.schema import BINARY, ELEMENTWISE, IMPURE, REGISTRY, UNARY

torch = pytest.importorskip("torch")
TF = torch.nn.functional

FLOATS = ("float32", "float64", "float16", "bfloat16")
_TORCH_DT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
             "bfloat16": torch.bfloat16}


def specials(dtype: str, extra: tuple[float, ...] = ()) -> np.ndarray:
    """The special values of ``dtype`` (as float64), plus values near an op's thresholds."""
    info = ml_dtypes.finfo(OC.np_dtype(dtype))
    tiny = float(info.smallest_subnormal)
    big = float(info.max)
    base = (np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, float(info.tiny), big, -big,
            1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 10.0, -10.0, 30.0, -30.0, 100.0, -100.0)
    return np.array(base + extra, dtype=np.float64)


def as_dtype(vals: np.ndarray, dtype: str) -> np.ndarray:
    return vals.astype(OC.np_dtype(dtype))


def torch_of(a: np.ndarray, dtype: str) -> Any:
    return torch.tensor(a.astype(np.float64), dtype=torch.float64).to(_TORCH_DT[dtype])


def from_torch(t: Any) -> np.ndarray:
    return t.to(torch.float64).numpy() if t.dtype.is_floating_point else t.numpy()


def assert_specials_match(got: np.ndarray, want: np.ndarray, dtype: str, where: str,
                          inputs: np.ndarray, zero_sign: bool = True) -> None:
    """NaN where torch has NaN, equal infinities, torch's sign of zero (unless torch's own
    paths disagree on it: ``zero_sign=False``), close elsewhere."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, torch {want.shape}"
    bad = np.isnan(got) != np.isnan(want)
    both = ~np.isnan(got) & ~np.isnan(want)
    bad |= both & (np.isinf(got) | np.isinf(want)) & (got != want)
    zero = both & (want == 0) & (got == 0)
    if zero_sign and dtype in ("float32", "float64"):   # halves: underflow to ±0 differs
                                                          # with where rounding happens
        bad |= zero & (np.signbit(got) != np.signbit(want))
    finite = both & np.isfinite(got) & np.isfinite(want)
    rtol, atol = OC.TOLERANCE[dtype]
    bad |= finite & ~np.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        idx = np.flatnonzero(bad.ravel())
        rows = [f"  in={inputs.ravel()[i]!r}: got {got.ravel()[i]!r}, torch {want.ravel()[i]!r}"
                for i in idx[:8]]
        raise AssertionError(f"{where}: {len(idx)} mismatches\n" + "\n".join(rows))


# ---- the paths ----------------------------------------------------------------------------
def eager(fn: Callable[..., Any], *xs: np.ndarray) -> np.ndarray:
    with sm.no_grad():
        return fn(*[sm.from_numpy(x.copy()) for x in xs]).numpy()


def traced(fused: bool) -> Callable[..., np.ndarray]:
    def run(fn: Callable[..., Any], *xs: np.ndarray) -> np.ndarray:
        args = tuple(sm.from_numpy(x.copy()) for x in xs)
        tr = sm.jit.trace(lambda *a: fn(*a), args, check_trace=False)
        with sm.jit.fuser(fused), sm.no_grad():
            return tr(*args).numpy()
    return run


PATHS: dict[str, Callable[..., np.ndarray]] = {
    "eager": eager, "fused": traced(True), "unfused": traced(False)}


# ---- registry ops -------------------------------------------------------------------------
def _registry(flag: str) -> list[str]:
    skip = {"cast", "clamp", "where"}          # attribute-driven: covered by their own cases
    return sorted(n for n, s in REGISTRY.items() if s.has(ELEMENTWISE) and s.has(flag)
                  and not s.has(IMPURE) and n not in skip and hasattr(torch, n))


UNARY_OPS = _registry(UNARY)
BINARY_OPS = _registry(BINARY)


def _float_cases(ops: list[str], dtypes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(op, dtype) pairs the op takes (bitwise ops take no floats)."""
    return [(op, dt) for op in ops for dt in dtypes
            if op in OC.CASES and dt in OC.CASES[op].dtypes and not op.startswith("bitwise")]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("op,dtype", _float_cases(UNARY_OPS, FLOATS))
def test_unary_registry_op(op: str, dtype: str, path: str) -> None:
    v = specials(dtype)
    x = as_dtype(v, dtype)
    want = from_torch(getattr(torch, op)(torch_of(x, dtype)))
    got = PATHS[path](lambda t: getattr(sm, op)(t), x)
    assert_specials_match(got, want, dtype, f"{op}[{dtype}, {path}]", x)


# torch computes these as a - b * floor(a / b), which breaks down once a / b overflows
# (remainder(max, 0.5) is NaN there); they get the special values whose quotients stay finite
_QUOTIENT_OPS = {"remainder", "floor_divide", "fmod"}


def _grid(op: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    v = specials(dtype)[:14]
    if op in _QUOTIENT_OPS:
        v = v[np.isnan(v) | (np.abs(v) == np.inf) | (v == 0) | ((np.abs(v) >= 0.5) & (np.abs(v) < 1e4))]
    a, b = np.meshgrid(v, v, indexing="ij")
    return as_dtype(a, dtype), as_dtype(b, dtype)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("op,dtype", _float_cases(BINARY_OPS, ("float32", "float64")))
def test_binary_registry_op(op: str, dtype: str, path: str) -> None:
    a, b = _grid(op, dtype)
    want = from_torch(getattr(torch, op)(torch_of(a, dtype), torch_of(b, dtype)))
    got = PATHS[path](lambda x, y: getattr(sm, op)(x, y), a, b)
    assert_specials_match(got, want, dtype, f"{op}[{dtype}, {path}]", a)


# ---- composite activations ---------------------------------------------------------------
# name -> (scriptmod fn, torch fn, values near the op's thresholds)
COMPOSITES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], tuple[float, ...]]] = {
    "relu": (F.relu, TF.relu, ()),
    "relu6": (F.relu6, TF.relu6, (6.0, 6.5, 5.99)),
    "hardtanh": (lambda x: F.hardtanh(x, -2.0, 2.0), lambda x: TF.hardtanh(x, -2.0, 2.0),
                 (2.0, -2.0, 2.01)),
    "threshold": (lambda x: F.threshold(x, 0.1, 20.0), lambda x: TF.threshold(x, 0.1, 20.0),
                  (0.1, 0.1001, 0.0999)),
    "gelu": (F.gelu, TF.gelu, (5.0, -5.0, 40.0, -40.0)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh"), (5.0, -5.0, 40.0, -40.0)),
    "silu": (F.silu, TF.silu, (88.0, -88.0, 89.0, -89.0)),
    "elu": (lambda x: F.elu(x, 0.5), lambda x: TF.elu(x, 0.5), (-88.0, 88.0)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2), ()),
    "softplus": (F.softplus, TF.softplus, (20.0, 20.001, 19.999, -20.0)),
    "softplus_beta": (lambda x: F.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0),
                      (2.5, 2.501, 2.499)),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid, (-88.0, 88.0, -104.0)),
    "sigmoid": (F.sigmoid, torch.sigmoid, (88.0, -88.0, -104.0)),
    "tanh": (F.tanh, torch.tanh, (9.0, -9.0, 20.0)),
    "prelu": (lambda x: F.prelu(x, sm.tensor([0.25], dtype=x.dtype)),
              lambda x: TF.prelu(x, torch.tensor([0.25], dtype=x.dtype)), ()),
    "clamp": (lambda x: x.clamp(-1.0, 1.0), lambda x: x.clamp(-1.0, 1.0), (1.0, -1.0)),
    "clamp_min": (lambda x: x.clamp(min=0.5), lambda x: x.clamp(min=0.5), ()),
    "clamp_max": (lambda x: x.clamp(max=0.5), lambda x: x.clamp(max=0.5), ()),
    "clamp_nan_min": (lambda x: x.clamp(min=float("nan")),
                      lambda x: x.clamp(min=float("nan")), ()),
    "clamp_nan_max": (lambda x: x.clamp(max=float("nan")),
                      lambda x: x.clamp(max=float("nan")), ()),
}
for _name, _sm, _tf, _extra in (
        ("mish", "mish", TF.mish, (20.0, -20.0)),
        ("hardswish", "hardswish", TF.hardswish, (3.0, -3.0, 2.99, -2.99)),
        ("hardsigmoid", "hardsigmoid", TF.hardsigmoid, (3.0, -3.0, 2.99, -2.99)),
        ("selu", "selu", TF.selu, (-88.0, 88.0)),
        ("celu", "celu", lambda x: TF.celu(x, 0.5), (-88.0, 88.0))):
    if hasattr(F, _sm):
        _f = getattr(F, _sm)
        COMPOSITES[_name] = ((lambda f: (lambda x: f(x, 0.5)))(_f) if _name == "celu" else _f,
                             _tf, _extra)


# torch's float32 gelu gives +0.0 where its float64 gelu (and the formula) gives -0.0
NO_ZERO_SIGN = {"gelu"}


def gelu_limit(x: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``want`` with erf-GELU's value ``x`` (Phi(x) = 1) at +inf and above 1e38: torch 2.13
    gives that on some CPUs and NaN (+inf) / +inf (near the max) on others (a Zen 5 host,
    where its float32 and bfloat16 gelu compute x * (1 + erf) before halving)."""
    xf = np.asarray(x, np.float64)
    return np.where(xf > 1e38, xf, want)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_activation(name: str, dtype: str, path: str) -> None:
    fn, tfn, extra = COMPOSITES[name]
    x = as_dtype(specials(dtype, extra), dtype)
    want = from_torch(tfn(torch_of(x, dtype)))
    if name == "gelu":
        want = gelu_limit(x, want)
    got = PATHS[path](fn, x)
    assert_specials_match(got, want, dtype, f"{name}[{dtype}, {path}]", x,
                          zero_sign=name not in NO_ZERO_SIGN)


def test_threshold_keeps_nan_and_gelu_tanh_of_minus_inf_is_torchs() -> None:
    """The issue's two examples, by name."""
    x = sm.tensor([float("nan"), float("-inf"), 0.05, 1.0])
    th = sm.nn.Threshold(0.1, 20)(x).numpy()
    assert np.isnan(th[0]) and th[1] == 20 and th[2] == 20 and th[3] == 1
    g = sm.nn.GELU("tanh")(x).numpy()
    want = TF.gelu(torch.tensor(x.numpy()), approximate="tanh").numpy()
    assert np.isnan(g[0]) and np.isnan(g[1]) == np.isnan(want[1])
    tr = sm.jit.trace(sm.nn.Threshold(0.1, 20), x, check_trace=False)
    assert np.isnan(tr(x).numpy()[0])
