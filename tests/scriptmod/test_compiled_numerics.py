"""Compiled equals eager, and eager equals PyTorch, for the elementwise semantics the issue-17
fuzzing found apart: 0-d and size-1 broadcasts, clamp, floor_divide, remainder, float to int
casts of NaN/inf/out-of-range values, integer pow with negative exponents, mixed-dtype
comparisons, int tensors with Python ints outside their dtype, float16/bfloat16 rounding after
every fused op, and sigmoid/silu where exp(-x) overflows. Each case runs eager, traced and
fused (its first call), and torch (skipped when absent); floats compare bit for bit (NaN
equal to NaN, the sign of zero checked)."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit
from scriptmod.ir import parse
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.jit._fuser import kernels_for
from scriptmod.runtime.fusion import FusedKernel

NAN, INF = math.nan, math.inf
FLOATS = [-INF, -1e30, -7.5, -3.0, -2.5, -1.0, -0.5, -0.0, 0.0, 1e-40, 0.5, 1.0, 2.5, 3.0,
          7.0, 16777217.0, 1e30, INF, NAN]
INTS = {"int8": [-128, -7, -3, -1, 0, 1, 2, 3, 7, 127],
        "uint8": [0, 1, 2, 3, 7, 100, 200, 255],
        "int32": [-2**31, -7, -3, -1, 0, 1, 2, 3, 7, 2**31 - 1],
        "int64": [-2**63, -2**53 - 1, -7, -1, 0, 1, 3, 7, 2**53 + 1, 2**63 - 1]}


@pytest.fixture(autouse=True)
def _env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION", raising=False)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), (got, want)
        assert np.array_equal(got[~nan], want[~nan]), (got, want)
        assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan])), (got, want)
    else:
        assert np.array_equal(got, want), (got, want)


def _run(fn: Callable, *arrays: np.ndarray, fused: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(eager, compiled first call) of ``fn(module, *tensors)``; compiled is traced and, with
    ``fused``, must run a fused kernel (without, it must not)."""
    xs = tuple(sm.tensor(a) for a in arrays)
    eager = fn(sm, *xs).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(lambda *a: fn(sm, *a), xs, check_trace=False)
    compiled = traced(*xs).numpy()
    assert bool(kernels_for(traced, *xs)) == fused, "fused" if fused else "not fused"
    return eager, compiled


def _check(fn: Callable, *arrays: np.ndarray, fused: bool = True) -> None:
    """Compiled == eager == torch (when installed), bit for bit."""
    eager, compiled = _run(fn, *arrays, fused=fused)
    _same(compiled, eager)
    try:
        import torch
    except ImportError:
        return
    _same(eager, fn(torch, *(torch.tensor(a) for a in arrays)).numpy())


def _floats(dt: str, n: int | None = None, seed: int = 0) -> np.ndarray:
    vals = np.array(FLOATS, np.float64)
    if n is not None:
        vals = np.random.default_rng(seed).choice(vals, n)
    with np.errstate(over="ignore"):
        return vals.astype(dt)


# ---- 0-d and size-1 broadcasts -------------------------------------------------------------
@pytest.mark.parametrize("sx,sy", [((), (5,)), ((5,), ()), ((1,), ()), ((), (1,)), ((), ()),
                                   ((1, 1), (3, 1, 4)), ((1,), (3, 1, 4)), ((3, 1), (1, 4)),
                                   ((1, 4), (4,)), ((1,), (1, 1, 1))])
def test_zero_dim_and_size_one_broadcasts_run_fused(sx: tuple, sy: tuple) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(sx).astype(np.float32)
    y = rng.standard_normal(sy).astype(np.float32)
    _check(lambda m, a, b: (a * b + 1.0).relu() - a, x, y)


def test_a_traced_program_takes_size_one_and_zero_dim_inputs_later() -> None:
    def f(x: Any, y: Any) -> Any:
        return (x * y + 1).relu()
    traced = jit.trace(f, (sm.ones(3, 4), sm.ones(4)))
    for sx, sy in [((1, 4), (4,)), ((1, 4), (1,)), ((5, 4), ())]:
        x, y = sm.full(sx, 2.0), sm.full(sy, -3.0)
        _same(traced(x, y).numpy(), f(x, y).numpy())


# ---- clamp -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
@pytest.mark.parametrize("lo,hi", [(-1.0, 2.5), (None, 0.0), (0.0, None), (2.0, 1.0),
                                   (NAN, 1.0), (-1.0, NAN), (-INF, INF)])
def test_clamp_floats(dt: str, lo: float | None, hi: float | None) -> None:
    _check(lambda m, x: m.clamp(x, lo, hi), _floats(dt))


@pytest.mark.parametrize("dt", sorted(INTS))
@pytest.mark.parametrize("lo,hi", [(-2, 5), (3, -2), (None, 100), (-100, 127), (2**53 + 1, None)])
def test_clamp_ints_keep_int_bounds_exact_and_wrap_them(dt: str, lo: int | None,
                                                        hi: int | None) -> None:
    if dt != "int64" and 2**53 + 1 in (lo, hi):
        pytest.skip("out of the dtype's range: PyTorch refuses it")
    _check(lambda m, x: m.clamp(x, lo, hi), np.array(INTS[dt], dt))


@pytest.mark.parametrize("dt,bound", [("int8", 1000), ("int8", -129), ("uint8", 256),
                                      ("uint8", -256), ("int32", 2**31)])
def test_clamp_int_bound_out_of_range_raises(dt: str, bound: int) -> None:
    with pytest.raises(RuntimeError, match="cannot be converted to type"):
        sm.tensor(INTS[dt], dtype=getattr(sm, dt)).clamp(min=bound)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="cannot be converted to type"):
        torch.tensor(INTS[dt], dtype=getattr(torch, dt)).clamp(min=bound)


@pytest.mark.parametrize("dt", ["int64", "uint8", "bool"])
@pytest.mark.parametrize("lo,hi", [(None, -0.25), (-1.0, NAN), (INF, 1e30), (0.5, 2)])
def test_clamp_int_and_bool_with_float_bounds_promote(dt: str, lo: float | None,
                                                      hi: float) -> None:
    x = np.array(INTS.get(dt, [True, False, True]), dt)
    _check(lambda m, t: m.clamp(t, lo, hi), x)


def test_clamp_with_tensor_bounds() -> None:
    x = _floats("float32")
    lo = np.full(x.shape, -1.0, np.float32)
    hi = np.random.default_rng(0).choice([NAN, 0.5, 3.0, -2.0], x.shape).astype(np.float32)
    _check(lambda m, a, b, c: m.clamp(a, b, c), x, lo, hi)


# ---- floor_divide and remainder ----------------------------------------------------------------
@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_floor_divide_and_remainder_floats(op: str, dt: str) -> None:
    a, b = _floats(dt, 400, seed=1), _floats(dt, 400, seed=2)
    with np.errstate(all="ignore"):
        keep = np.abs(a / np.where(b == 0, 1, b)) < 2.0 ** 20 if op == "remainder" else True
        _check(lambda m, x, y: getattr(m, op)(x, y), a[keep], b[keep])


@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
@pytest.mark.parametrize("dt", ["int8", "int32", "int64"])
def test_floor_divide_and_remainder_ints(op: str, dt: str) -> None:
    vals = INTS[dt]
    a = np.array([x for x in vals for _ in vals], dt)
    b = np.array([y for _ in vals for y in vals], dt)
    nonzero = b != 0     # int division stays unfused: a zero divisor must raise, as eager
    _check(lambda m, x, y: getattr(m, op)(x, y), a[nonzero], b[nonzero], fused=False)


@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
def test_integer_division_by_zero_raises_in_eager(op: str) -> None:
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        getattr(sm, op)(sm.tensor([7, -7]), sm.tensor([2, 0]))


@pytest.mark.parametrize("op", ["remainder", "floor_divide"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_large_ratios_are_exact_compiled(op: str, dt: str) -> None:
    """|a/b| far beyond 2**20 (the fast path's limit): the exact fmod, rerun scalar. Compiled
    equals eager everywhere, and the exact fmod; torch's vectorized CPU kernel gives NaN where
    a/b overflows (its scalar one, for fewer than 8 elements, is exact), so torch is compared
    where a/b is finite."""
    rng = np.random.default_rng(3)
    scale = 120 if dt == "float32" else 900
    a = (rng.choice([-1, 1], 300) * 2.0 ** rng.uniform(-scale, scale, 300)).astype(dt)
    b = (rng.choice([-1, 1], 300) * 2.0 ** rng.uniform(-scale, scale, 300)).astype(dt)
    a[:4], b[:4] = [3e9, 1e30, -1e30, 1e7], [-0.7, 3.3, 7.1, 1e-40]
    eager, compiled = _run(lambda m, x, y: getattr(m, op)(x, y), a, b)
    _same(compiled, eager)
    exact = [math.fmod(float(x), float(y)) for x, y in zip(a, b)]
    exact = np.array([r + float(y) if r and (r < 0) != (y < 0) else r
                      for r, y in zip(exact, b)], dt)
    if op == "remainder":
        _same(eager, exact)
    torch = pytest.importorskip("torch")
    with np.errstate(all="ignore"):
        finite = np.isfinite(a / b)
    want = getattr(torch, op)(torch.tensor(a), torch.tensor(b)).numpy()
    _same(eager[finite], want[finite])


# ---- float to int casts ------------------------------------------------------------------------
CAST_VALUES = [NAN, INF, -INF, 2.0**31 + 256, -(2.0**31) - 256, 2.0**32 + 2**17, 1e10, -1e10,
               2.0**63, -(2.0**63), 1e30, 300.0, -300.0, -3.5, 65535.9, 70000.0, -70000.0, 40000.0,
               127.9, -128.9, 255.5]


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "int32", "int64", "bool"])
def test_float_to_int_casts_of_special_values(src: str, dst: str) -> None:
    with np.errstate(over="ignore"):
        x = np.array(CAST_VALUES, np.float64).astype(src)
    _check(lambda m, t: t.to(getattr(m, dst)), x)


@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "int32", "int64"])
def test_bfloat16_to_int_casts(dst: str) -> None:
    torch = pytest.importorskip("torch")
    got = sm.tensor(CAST_VALUES, dtype=sm.bfloat16).to(getattr(sm, dst)).tolist()
    assert got == torch.tensor(CAST_VALUES, dtype=torch.bfloat16).to(getattr(torch, dst)).tolist()


def test_the_cast_rule_of_this_platform() -> None:
    """NaN/inf/out of range: int64's minimum for int64, int32's minimum wrapped for the
    narrower ints (so 0); in range, narrower ints wrap from int32 (300 -> int8 44)."""
    x = sm.tensor([NAN, INF, -INF, 3e9, 300.0, -3.5])
    assert x.to(sm.int64).tolist()[:4] == [-2**63] * 3 + [3 * 10**9]
    assert x.to(sm.int32).tolist() == [-2**31] * 4 + [300, -3]
    assert x.to(sm.int8).tolist() == [0, 0, 0, 0, 44, -3]
    assert x.to(sm.uint8).tolist() == [0, 0, 0, 0, 44, 253]


# ---- integer pow with negative exponents ------------------------------------------------------
@pytest.mark.parametrize("dt", ["uint8", "int8", "int64"])
def test_int_pow_scalar_negative_exponent_raises(dt: str) -> None:
    for exponent in (-1, -300):         # checked before it wraps into uint8 (-1 is 255)
        with pytest.raises(ArgumentValueError, match="Integers to negative integer powers"):
            sm.tensor([1, 2], dtype=getattr(sm, dt)) ** exponent
    graph = fuse_elementwise(parse('''graph(%x : Long(3)):
  %k : int = prim::Constant[value=-2]()
  %p : Long(3) = sm::pow(%x, %k)
  %y : Long(3) = sm::add(%p, %x)
  return (%y)
'''))
    group = next(n for n in graph.nodes if n.kind == "prim::FusionGroup")
    with pytest.raises(ArgumentValueError, match="Integers to negative integer powers"):
        FusedKernel(group.attrs["subgraph"])([np.array([1, 2, 3])])


@pytest.mark.parametrize("dt", ["int8", "int32", "int64"])
def test_int_pow_tensor_negative_exponent_gives_torch_values(dt: str) -> None:
    base = np.array([1, -1, -1, 2, 0, 3, -2, 5], dt)
    ex = np.array([-1, -1, -2, -1, -1, 2, 3, -3], dt)
    _check(lambda m, x, y: m.pow(x, y), base, ex)
    _check(lambda m, x, y: m.pow(x, y), base, np.array(-1, dt))


def test_pow_of_bool_tensors_is_refused_as_in_torch() -> None:
    t = sm.tensor([True, False])
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        t ** t
    _check(lambda m, x: m.pow(x, 2), np.array([True, False]))
    _check(lambda m, x, y: m.pow(x, y), np.array([2, 3]), np.array([True, False]))


# ---- mixed-dtype comparisons -----------------------------------------------------------------
@pytest.mark.parametrize("op", ["eq", "lt", "ge"])
@pytest.mark.parametrize("x,y", [
    (np.array([INF, -INF, 65504.0, 2048.0], np.float16),
     np.array([2**63 - 1, -2**63, 65504, 2049], np.int64)),
    (np.array([INF, -INF, 1.0], np.float16), np.array(2**63 - 1, np.int64)),
    (np.array([2**24 + 1, 2**24, -2**24 - 1], np.int64), np.array([2.0**24] * 3, np.float32)),
    (np.array([2**53 + 1, 2**53], np.int64), np.array([2.0**53] * 2, np.float64)),
    (np.array([5, 200, 255], np.uint8), np.array(-1, np.int8)),
    (np.array([5, -3, 127], np.int8), np.array([1000, -1000, 127], np.int32)),
])
def test_mixed_dtype_comparisons_promote_first(op: str, x: np.ndarray, y: np.ndarray) -> None:
    _check(lambda m, a, b: getattr(m, op)(a, b), x, y)
    _check(lambda m, a, b: getattr(m, op)(b, a), x, y)


def test_half_arithmetic_rounds_its_other_operand_to_half_first() -> None:
    x = np.array([-2**31, 100, 70000], np.int64)
    with np.errstate(invalid="ignore"):
        _check(lambda m, a, b: a + b, x, np.array(INF, np.float16))
        _check(lambda m, a, b: m.floor_divide(a, b), x, np.array(-1.0, np.float16))


# ---- the CUDA C path, on the CPU shim (the formulas are shared) ---------------------------------
def _shim(spec_ops: list, in_dtypes: list, arrays: list) -> list[np.ndarray]:
    harness = pytest.importorskip("tests.codegen.harness")
    if not harness.have_gxx():
        pytest.skip("g++ not found")
    from scriptmod.codegen.kernel import InputSpec, KernelSpec
    n = len(in_dtypes)
    spec = KernelSpec([InputSpec(d) for d in in_dtypes], spec_ops,
                      list(range(n, n + len(spec_ops))), [s.dtype for s in spec_ops], rank=1)
    return harness.run_shim(spec, arrays)


def test_cuda_c_casts_and_large_remainders_on_the_cpu_shim() -> None:
    from scriptmod.codegen.kernel import OpStep
    from scriptmod.ir import dtypes as D
    x = np.array(CAST_VALUES, np.float32)
    dsts = [D.int8, D.uint8, D.int16, D.int32, D.int64]
    outs = _shim([OpStep("cast", (0,), {"dtype": d}, d) for d in dsts], [D.float32], [x])
    for d, got in zip(dsts, outs):
        with np.errstate(invalid="ignore"):
            want = sm.tensor(x).to(getattr(sm, d.name)).numpy()
        _same(got, want)
    a = np.array([3e9, 1e30, -1e30, 1e7, 7.5, -7.5], np.float32)
    b = np.array([-0.7, 3.3, 7.1, 1e-40, 2.0, 2.0], np.float32)
    rem, fdiv = _shim([OpStep("remainder", (0, 1), {}, D.float32),
                       OpStep("floor_divide", (0, 1), {}, D.float32)],
                      [D.float32, D.float32], [a, b])
    _same(rem, sm.remainder(sm.tensor(a), sm.tensor(b)).numpy())
    _same(fdiv, sm.floor_divide(sm.tensor(a), sm.tensor(b)).numpy())


# ---- Python ints outside an int tensor's dtype ------------------------------------------------
OUT_OF_RANGE = [-1, 256, -129, 2**31, 2**63 - 1, -2**63]


def _with_scalar(m: Any, x: Any, s: int) -> tuple:
    return (x / s, s / x, x + s, s - x, x * s, x == s, x < s, s >= x,
            m.remainder(x, s) if s % 256 else x)


def _three_ways(fn: Any, x: np.ndarray, to_torch: Any) -> tuple:
    """``fn(library, tensor)`` on ``x``: eager, traced and run fused (a kernel must exist),
    and through torch (skipped without it)."""
    xs = sm.tensor(x)
    eager = fn(sm, xs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(lambda t: fn(sm, t), (xs,), check_trace=False)
    compiled = traced(xs)
    assert kernels_for(traced, xs)
    torch = pytest.importorskip("torch")
    return eager, compiled, fn(torch, to_torch(torch))


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("s", OUT_OF_RANGE)
def test_int_tensor_with_a_python_int_outside_its_dtype(dt: str, s: int) -> None:
    """True division computes in float32 (uint8 5 / -1 is -5.0, not 5 / 255); add, sub, mul,
    remainder and comparisons wrap the int as PyTorch does. Compiled (one fused kernel) ==
    eager == torch, bit for bit."""
    x = np.array(INTS[dt][1:], dt)             # no 0: s / x stays finite
    eager, compiled, want = _three_ways(lambda L, t: _with_scalar(L, t, s), x,
                                        lambda torch: torch.tensor(x))
    for e, c, w in zip(eager, compiled, want):
        _same(c.numpy(), e.numpy())
        _same(e.numpy(), w.numpy())


@pytest.mark.parametrize("dt,s", [("int8", 128), ("uint8", 256), ("int32", 2**31),
                                  ("uint8", 2**63 - 1)])
def test_pow_exponent_and_where_value_outside_the_dtype_raise(dt: str, s: int) -> None:
    """PyTorch converts these two with an overflow check instead of wrapping; so do eager and
    the kernels (a graph that never ran eagerly)."""
    x = sm.tensor([1, 2], dtype=getattr(sm, dt))
    cond = sm.tensor([True, False])
    for fn in (lambda m, t, c: t ** s, lambda m, t, c: m.where(c, t, s)):
        with pytest.raises(ArgumentValueError, match="cannot be converted to type"):
            fn(sm, x, cond)
    torch = pytest.importorskip("torch")
    for fn in (lambda m, t, c: t ** s, lambda m, t, c: m.where(c, t, s)):
        with pytest.raises(RuntimeError, match="cannot be converted to type"):
            fn(torch, torch.tensor([1, 2], dtype=getattr(torch, dt)), torch.tensor([True, False]))
    graph = fuse_elementwise(parse('''graph(%x : Char(3)):
  %k : int = prim::Constant[value=300]()
  %p : Char(3) = sm::pow(%x, %k)
  %y : Char(3) = sm::add(%p, %x)
  return (%y)
'''))
    group = next(n for n in graph.nodes if n.kind == "prim::FusionGroup")
    with pytest.raises(ArgumentValueError, match="value 300 cannot be converted to type int8"):
        FusedKernel(group.attrs["subgraph"])([np.array([1, 2, 3], np.int8)])


# ---- float16/bfloat16: every op rounds its result -----------------------------------------------
def _to_torch(torch: Any, a: np.ndarray) -> Any:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a)


def _as_f32(t: Any) -> np.ndarray:
    return (t.float() if hasattr(t, "float") else t).numpy().astype(np.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # eager NumPy: inf, NaN
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_chains_round_after_every_op_as_eager(dt: str) -> None:
    """A fused chain rounds each op's result to the half dtype, as eager does: exp then log1p
    at 11.5 in float16 is inf (exp overflows float16), not 11.5. Arithmetic chains equal
    torch bit for bit; the chain through exp/tanh equals eager bit for bit."""
    import ml_dtypes
    h = ml_dtypes.bfloat16 if dt == "bfloat16" else np.float16
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(2000) * 40, [11.5, 255.0, 301.0, 60000.0, -0.0,
                                                       INF, NAN]]).astype(h)
    arith = lambda m, t: ((t * t + t) - t * 3) / 7          # noqa: E731
    transc = lambda m, t: (t * 0.5).exp().log1p() + (t + 1).tanh()   # noqa: E731
    for fn in (arith, transc):
        eager, compiled = _run(fn, x)
        _same(compiled.astype(np.float32), eager.astype(np.float32))
    if dt == "float16":
        eager, compiled = _run(lambda m, t: t.exp().log1p(), np.array([11.5, 2.0], h))
        assert eager[0] == compiled[0] == INF
    torch = pytest.importorskip("torch")
    eager = arith(sm, sm.tensor(x)).numpy().astype(np.float32)
    _same(eager, _as_f32(arith(torch, _to_torch(torch, x))))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # eager NumPy: inf, NaN
# ---- sigmoid and silu below -87 ---------------------------------------------------------------
@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["sigmoid", "silu"])
def test_sigmoid_and_silu_underflow_as_torch(dt: str, op: str) -> None:
    """exp(-x) overflows float32 below x = -88.72: PyTorch's sigmoid is then 0 and silu -0.0
    (float64 below -709.78); compiled gives exactly those zeros, eager's values elsewhere
    (within a few ulps of torch's), and the IEEE results at +-inf, NaN, -0.0."""
    import ml_dtypes
    h = ml_dtypes.bfloat16 if dt == "bfloat16" else np.dtype(dt)
    x = np.concatenate([np.linspace(-110, -87, 2301), np.linspace(-720, -700, 201),
                        [-88.72283172607422, -88.72283935546875, -INF, INF, NAN, -0.0, 0.0,
                         -3.0, 5.0]]).astype(h)
    fn = (lambda m, t: t.sigmoid()) if op == "sigmoid" else \
        (lambda m, t: (m.nn.functional.silu(t)))
    eager, compiled = _run(fn, x)
    e64, c64 = eager.astype(np.float64), compiled.astype(np.float64)
    num = ~np.isnan(e64)
    assert np.array_equal(e64 == 0, c64 == 0)
    assert np.array_equal(np.signbit(e64[num]), np.signbit(c64[num]))
    rtol = {"float32": 2e-6, "float64": 1e-14}.get(dt, 0.0)
    np.testing.assert_allclose(c64, e64, rtol=rtol, atol=0)
    torch = pytest.importorskip("torch")
    t = fn(torch, _to_torch(torch, x)).to(torch.float64).numpy()
    assert np.array_equal(c64 == 0, t == 0) and np.array_equal(np.isnan(c64), np.isnan(t))
    assert np.array_equal(np.signbit(c64[c64 == 0]), np.signbit(t[t == 0]))


# ---- float16/bfloat16 with a Python scalar: the scalar PyTorch reads in float32 ----------------
HALF_SCALARS = [1e30, -1e30, 1.1, 1 / 3, 65519.9, 1e-8, 70000, 2.5, -3]


def _half(dt: str, values: list) -> np.ndarray:
    import ml_dtypes
    return np.array(values, np.float32).astype(ml_dtypes.bfloat16 if dt == "bfloat16" else dt)


def _half_with_scalar(m: Any, x: Any, s: float) -> tuple:
    """Every binary elementwise op with a scalar operand, both orders where Python has them:
    mul, div and floor_divide read a scalar ``other`` in float32 (opmath), ``s * x`` is
    ``x * s`` and ``s / x`` is ``x.reciprocal() * s`` (torch's reflected operators); the rest
    round the scalar to the half dtype. Not ``s // x``: torch's own bfloat16 result depends
    on whether its vectorized loop runs (70000 // 300 is 233 or 234)."""
    return (x * s, s * x, x / s, s / x, x // s, x % s, x + s, s - x, x - s,
            m.mul(x, s), m.div(x, s, rounding_mode="trunc"), m.floor_divide(x, s),
            m.atan2(x, m.tensor(s)), x < s, x == s, s >= x, m.where(x > 0, x, s),
            m.add(x, x, alpha=2.5), (x * s + 1) * s)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("s", HALF_SCALARS)
def test_half_tensor_with_a_python_scalar_as_torch(dt: str, s: float) -> None:
    """float16 0 * 1e30 is 0 and 3 * 1.1 is 3.3008 (torch's mul/div/floor_divide keep the
    scalar in float32), while add, sub, remainder, comparisons and where round it to the
    half dtype first (1e30 is inf). Compiled (fused) == eager == torch, bit for bit."""
    x = _half(dt, [0.0, 3.0, 1.0, -2.5, 1e-3, 7.3, 65500.0, -0.0, 300.0])
    eager, compiled, want = _three_ways(lambda L, t: _half_with_scalar(L, t, s), x,
                                        lambda torch: _to_torch(torch, x))
    for e, c, w in zip(eager, compiled, want):
        _same(_as_f32(c), _as_f32(e))
        _same(_as_f32(e), _as_f32(w))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("sdt", ["float32", "float64", "int64"])
def test_half_tensor_with_a_zero_dim_tensor_reads_it_in_float32(dt: str, sdt: str) -> None:
    """A 0-d tensor of another dtype leaves the result half, and torch's mul/div read it
    unrounded too; compiled (the 0-d operand an input of the fused kernel) == eager == torch."""
    x = _half(dt, [0.0, 3.0, 1.0, -2.5, 7.3])
    s = np.array(70000 if sdt == "int64" else 1.1, sdt)
    fn = lambda m, a, b: (a * b + a / b) * b    # noqa: E731
    eager, compiled = _run(fn, x, s)
    _same(compiled.astype(np.float32), eager.astype(np.float32))
    torch = pytest.importorskip("torch")
    _same(eager.astype(np.float32), _as_f32(fn(torch, _to_torch(torch, x), torch.tensor(s))))


def _scalar_first(x):   # scripted: an unannotated argument is a Tensor
    return 1.1 * x + x * 1e30


def test_a_scripted_scalar_first_mul_reads_the_scalar_in_float32() -> None:
    """The script frontend emits ``mul(1.1, x)`` for ``1.1 * x``; mul is commutative, so a
    Python number ``self`` is read as ``other`` is (torch's script swaps the operands)."""
    x = sm.tensor(_half("float16", [3.0, 0.0, 7.0]))
    scripted = jit.script(_scalar_first)
    _same(scripted(x).numpy(), _scalar_first(x).numpy())
    torch = pytest.importorskip("torch")
    _same(_scalar_first(x).numpy(), _scalar_first(torch.tensor([3.0, 0.0, 7.0]).half()).numpy())


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
def test_scalars_a_float_dtype_cannot_hold_raise_as_in_torch(dt: str) -> None:
    """clamp's bounds, add's alpha and a half pow's exponent are converted with PyTorch's
    overflow check: a finite value beyond the dtype raises instead of becoming inf."""
    big = 70000 if dt == "float16" else 1e300
    x = sm.tensor(_half(dt, [1.0, 2.0]))
    calls = [lambda m, t: m.clamp(t, max=big), lambda m, t: m.clamp(t, min=-big),
             lambda m, t: m.add(t, t, alpha=big)]
    if dt != "float32":
        calls.append(lambda m, t: t ** big)
    for fn in calls:
        with pytest.raises(ArgumentValueError, match=f"cannot be converted to type {dt}"):
            fn(sm, x)
    torch = pytest.importorskip("torch")
    for fn in calls:
        with pytest.raises(RuntimeError, match="cannot be converted to type"):
            fn(torch, _to_torch(torch, _half(dt, [1.0, 2.0])))
    assert sm.clamp(x, max=math.inf).tolist() == [1.0, 2.0]      # inf converts


# ---- a Python int beyond int64 and uint64 ----------------------------------------------------
@pytest.mark.parametrize("s", [2**64, 2**70, -2**63 - 1])
def test_a_python_int_beyond_uint64_raises_overflow_error_as_torch(s: int) -> None:
    """PyTorch takes a Python int as an int64 or a uint64 and raises OverflowError beyond
    them, in a float op too (where it would have fit a float); so do eager, tracing and a
    fused kernel built from a graph that never ran eagerly."""
    calls = [lambda m, t: t + s, lambda m, t: s * t, lambda m, t: t / s, lambda m, t: t < s,
             lambda m, t: m.where(t > 1, t, s), lambda m, t: m.clamp(t, max=s),
             lambda m, t: t.long() + s, lambda m, t: m.add(t, 1.0, alpha=s)]
    what = "int too big to convert" if s > 0 else "can't convert negative int to unsigned"
    x = sm.tensor([1.0, 2.0])
    for fn in calls:
        with pytest.raises(OverflowError, match=what):
            fn(sm, x)
        with pytest.raises(OverflowError, match=what):
            jit.trace(lambda t: fn(sm, t), (x,), check_trace=False)
    graph = fuse_elementwise(parse(f'''graph(%x : Float(3)):
  %k : int = prim::Constant[value={s}]()
  %p : Float(3) = sm::mul(%x, %k)
  %y : Float(3) = sm::add(%p, %x)
  return (%y)
'''))
    group = next(n for n in graph.nodes if n.kind == "prim::FusionGroup")
    with pytest.raises(OverflowError, match=what):
        FusedKernel(group.attrs["subgraph"])([np.array([1, 2, 3], np.float32)])
    torch = pytest.importorskip("torch")
    for fn in calls:
        with pytest.raises(OverflowError, match=what):
            fn(torch, torch.tensor([1.0, 2.0]))


# ---- activations on float16/bfloat16: computed in float32, rounded once ------------------------
def _every_half(dt: str) -> np.ndarray:
    """Every float16/bfloat16 value (all 65536 bit patterns: subnormals, +-0, +-inf, NaNs)."""
    import ml_dtypes
    return np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16 if dt == "bfloat16"
                                                  else np.float16)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in steps of their (same) half dtype, NaN positions excluded by the caller."""
    def ordered(v: np.ndarray) -> np.ndarray:
        i = v.view(np.int16).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFF), i)
    return np.abs(ordered(a) - ordered(b))


ACTIVATIONS = {   # name: (call, ulps from torch: 0, or 1 where torch's float32 formula differs)
    "silu": (lambda F, t: F.silu(t), 1), "softplus": (lambda F, t: F.softplus(t), 0),
    "softplus_beta": (lambda F, t: F.softplus(t, beta=2.5, threshold=10.0), 0),
    "elu": (lambda F, t: F.elu(t), 0), "elu_alpha": (lambda F, t: F.elu(t, alpha=1.7), 1),
    "gelu": (lambda F, t: F.gelu(t), 2), "gelu_tanh": (lambda F, t: F.gelu(t, approximate="tanh"), 3),
    "logsigmoid": (lambda F, t: F.logsigmoid(t), 0),
    "leaky_relu": (lambda F, t: F.leaky_relu(t, 0.3), 0), "hardtanh": (lambda F, t: F.hardtanh(t, -0.7, 1.3), 0),
    "threshold": (lambda F, t: F.threshold(t, 0.1, 20.0), 0), "relu6": (lambda F, t: F.relu6(t), 0),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_half_activations_round_once_as_torch(dt: str, name: str) -> None:
    """Over every value of the dtype, eager equals torch bit for bit (silu(-20.3) in float16
    is -6e-08, not -0.0), or within the stated ulps where torch's float32 formula differs
    (silu x / (1 + exp(-x)); elu exp(x) - 1; gelu 1 + erf, which cancels below x = -3,
    where only x >= -3 is compared; logsigmoid's zero for x > 88 is -0.0 here, +0.0 in
    torch); compiled is eager within one ulp (its float32 exp and
    erf are not NumPy's, and a result near a rounding tie may land on the other side)."""
    fn, tol = ACTIVATIONS[name]
    x = _every_half(dt)
    eager, compiled = _run(lambda m, t: fn(m.nn.functional, t), x)
    torch = pytest.importorskip("torch")
    want = fn(torch.nn.functional, _to_torch(torch, x)).float().numpy().astype(x.dtype)
    if name.startswith("gelu"):
        # torch 2.13's bfloat16 gelu differs between CPUs at the edges (on a Zen 5 host, under
        # every ATEN_CPU_CAPABILITY: NaN at +inf, +inf from x ~ 1.7e38 where x * (1 + erf)
        # overflows before the halving, 0 for subnormal results); there the dtype's value of
        # the float64 formula is the reference, within one ulp
        xf = x.astype(np.float32)
        tiny = float(np.finfo(np.float16).tiny) if dt == "float16" else 2.0 ** -126
        edge = ((np.abs(xf) < tiny) | (np.abs(xf) > 1e38)) & ~np.isnan(xf) & ~(xf < -3)
        x64 = xf[edge].astype(np.float64)
        with np.errstate(all="ignore"):
            ref = (x64 * 0.5 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
                   if name == "gelu" else
                   x64 * 0.5 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3))))
        ref = np.where(np.isinf(x64), x64, ref).astype(np.float32).astype(x.dtype)
        assert _ulps(eager[edge], ref).max(initial=0) <= 1, name
        assert _ulps(compiled[edge], ref).max(initial=0) <= 1, name
        keep = ~(xf < -3) & ~edge & ~(np.abs(want.astype(np.float32)) < tiny) | (xf == 0)
        x, eager, compiled, want = x[keep], eager[keep], compiled[keep], want[keep]
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(eager.astype(np.float32)), nan)
    assert np.array_equal(np.isnan(compiled.astype(np.float32)), nan)
    assert _ulps(eager[~nan], want[~nan]).max() <= tol, name
    if tol == 0 and name != "logsigmoid":    # torch's logsigmoid of x > 88 is +0.0, ours -0.0
        _same(eager.astype(np.float32), want.astype(np.float32))
    assert _ulps(compiled[~nan], eager[~nan]).max() <= 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_clamp_bounds_are_checked_by_the_op_itself(dtype: str) -> None:
    """The registry op (what a graph runs unfused, and what the program fuzzer calls), not
    only ``Tensor.clamp``, refuses a bound its half dtype cannot hold, as PyTorch and the
    fused kernel do (the fuzzer found the op accepting 1e30 while the kernel refused it)."""
    from scriptmod._dispatch import dispatch
    x = sm.tensor([0.5, 2.0], dtype=getattr(sm, dtype))
    big = 1e30 if dtype == "float16" else 1e300
    for attrs in ({"min": big, "max": 1.0}, {"min": -big, "max": 0.001}, {"max": big}):
        with pytest.raises(ValueError, match="cannot be converted"):
            dispatch("clamp", [x], attrs)
    assert dispatch("clamp", [x], {"min": float("-inf"), "max": 1.0}).tolist() == [0.5, 1.0]
