"""Every elementwise formula, compiled by LLVM and run against a float64 NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

from scriptmod.codegen.formulas import FORMULAS
from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from harness import (FLOATS, INTS, REF_BINARY, REF_UNARY, assert_close, binary_spec, np_dtype,
                     run_llvm, unary_spec)
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops import ops_with
from scriptmod.ir.schema import ELEMENTWISE

FLOAT_UNARY = ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "exp", "log",
               "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
               "erfc", "reciprocal", "log2", "exp2"]
FLOAT_BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
                "minimum", "atan2"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"]
INT_UNARY = ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "bitwise_not"]
INT_BINARY = ["add", "sub", "mul", "floor_divide", "remainder", "maximum", "minimum",
              "bitwise_and", "bitwise_or", "bitwise_xor"]
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30]


def test_table_covers_every_elementwise_op():
    assert set(ops_with(ELEMENTWISE)) <= set(FORMULAS)


def _float_data(dt, n=4097, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(n - len(SPECIALS)) * 3, SPECIALS])
    return x.astype(np_dtype(dt))


@pytest.fixture(scope="module")
def float_unary():
    out = {}
    for dt in FLOATS:
        x = _float_data(dt)
        spec = unary_spec(FLOAT_UNARY + ["isnan", "isinf"], dt,
                          lambda op: D.bool_ if op.startswith("is") else dt)
        out[dt.name] = (x, dict(zip(FLOAT_UNARY + ["isnan", "isinf"], run_llvm(spec, [x]))))
    return out


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", FLOAT_UNARY + ["isnan", "isinf"])
def test_float_unary(float_unary, op, dt):
    x, got = float_unary[dt.name]
    with np.errstate(all="ignore"):
        ref = REF_UNARY[op](x.astype(np.float64))
    if op.startswith("is"):
        assert np.array_equal(got[op], ref)
    else:
        assert_close(got[op], ref, dt, what=f"{op}[{dt.name}]")


@pytest.fixture(scope="module")
def float_binary():
    out = {}
    for dt in FLOATS:
        a, b = _float_data(dt, seed=1), _float_data(dt, seed=2)[::-1].copy()
        spec = binary_spec(FLOAT_BINARY + COMPARE, dt, dt,
                           lambda op: D.bool_ if op in COMPARE else dt)
        out[dt.name] = (a, b, dict(zip(FLOAT_BINARY + COMPARE, run_llvm(spec, [a, b]))))
    return out


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", FLOAT_BINARY + COMPARE)
def test_float_binary(float_binary, op, dt):
    a, b, got = float_binary[dt.name]
    with np.errstate(all="ignore"):
        ref = REF_BINARY[op](a.astype(np.float64), b.astype(np.float64))
    if op in COMPARE:
        assert np.array_equal(got[op], ref)
        return
    rtol = {"float64": 1e-12}.get(dt.name) if op == "pow" else None
    g = got[op]
    if op in ("floor_divide", "remainder"):   # documented: fmod exact for |a/b| < 2**20
        with np.errstate(all="ignore"):
            q = np.abs(a.astype(np.float64) / b.astype(np.float64))
        keep = ~(np.isfinite(q) & (q >= 2.0 ** 20))
        g, ref = g[keep], ref[keep]
    assert_close(g, ref, dt, rtol=rtol, what=f"{op}[{dt.name}]")


def _int_data(dt, n, seed, nonzero=False):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dt.name)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    x = rng.integers(lo, hi + 1, n, dtype=np.int64)
    x[:4] = [lo, hi, 0, 1]
    if nonzero:
        x[x == 0] = 3
    return x.astype(dt.name)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_ops(dt):
    a, b = _int_data(dt, 1023, 3), _int_data(dt, 1023, 4, nonzero=True)
    got = dict(zip(INT_BINARY, run_llvm(binary_spec(INT_BINARY, dt, dt, lambda op: dt), [a, b])))
    for op in INT_BINARY:
        with np.errstate(all="ignore"):
            assert np.array_equal(got[op], REF_BINARY[op](a, b)), op
    got = dict(zip(INT_UNARY, run_llvm(unary_spec(INT_UNARY, dt, lambda op: dt), [a])))
    ref = {"relu": np.maximum(a, 0).astype(dt.name), "floor": a, "ceil": a, "round": a, "trunc": a}
    for op in INT_UNARY:
        with np.errstate(all="ignore"):
            want = ref.get(op, REF_UNARY[op](a) if op in REF_UNARY else None)
            assert np.array_equal(got[op], want), op
    cmp = run_llvm(binary_spec(COMPARE, dt, dt, lambda op: D.bool_), [a, b])
    for op, g in zip(COMPARE, cmp):
        assert np.array_equal(g, REF_BINARY[op](a, b)), op


@pytest.mark.parametrize("dt", [D.int32, D.int64, D.uint8], ids=lambda d: d.name)
def test_int_pow_and_float_results(dt):
    rng = np.random.default_rng(5)
    a = rng.integers(0 if dt is D.uint8 else -6, 7, 999).astype(dt.name)
    e = rng.integers(0, 6, 999).astype(dt.name)
    got = run_llvm(binary_spec(["pow"], dt, dt, lambda op: dt), [a, e])[0]
    assert np.array_equal(got, np.power(a, e))
    f = run_llvm(unary_spec(["exp", "sqrt", "sigmoid"], dt, lambda op: D.float32), [a])
    with np.errstate(all="ignore"):
        assert_close(f[0], np.exp(a.astype(np.float64)), D.float32)
        assert_close(f[1], np.sqrt(a.astype(np.float64)), D.float32)


def test_int_division_by_zero_does_not_trap():
    a = np.array([7, -7, np.iinfo(np.int32).min, 5], np.int32)
    b = np.array([0, 0, -1, 0], np.int32)
    run_llvm(binary_spec(["floor_divide", "remainder"], D.int32, D.int32, lambda op: D.int32),
             [a, b])       # reaching here is the test: no SIGFPE


def test_bool_ops():
    rng = np.random.default_rng(6)
    a, b = rng.random(777) < 0.5, rng.random(777) < 0.5
    ops = ["logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
           "bitwise_xor", "add", "mul", "eq", "ne", "maximum", "minimum"]
    for op, g in zip(ops, run_llvm(binary_spec(ops, D.bool_, D.bool_, lambda op: D.bool_),
                                   [a, b])):
        ref = {"add": a | b, "mul": a & b}.get(op)
        assert np.array_equal(g, REF_BINARY[op](a, b) if ref is None else ref), op
    got = run_llvm(unary_spec(["logical_not", "bitwise_not", "abs"], D.bool_,
                              lambda op: D.bool_), [a])
    assert np.array_equal(got[0], ~a) and np.array_equal(got[1], ~a)
    assert np.array_equal(got[2], a)


CAST_DTYPES = (D.bool_, D.uint8, D.int8, D.int16, D.int32, D.int64, D.float16, D.bfloat16,
               D.float32, D.float64)


@pytest.mark.parametrize("src", CAST_DTYPES, ids=lambda d: d.name)
def test_casts_between_all_dtypes(src):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(0 if src is D.uint8 else -100, 100, 509), [0, 1, 2.5, 3.5]])
    x = (x > 0) if src is D.bool_ else x.astype(np_dtype(src))
    if src.is_floating_point:
        x = np.abs(x)          # float -> unsigned of a negative value is not portable
    steps = [OpStep("cast", (0,), {"dtype": d}, d) for d in CAST_DTYPES]
    spec = KernelSpec([InputSpec(src)], steps, list(range(1, 11)), list(CAST_DTYPES))
    for d, g in zip(CAST_DTYPES, run_llvm(spec, [x])):
        assert np.array_equal(g, x.astype(np_dtype(d))), f"{src.name} -> {d.name}"


def test_where_clamp_and_immediates():
    rng = np.random.default_rng(8)
    x = rng.standard_normal(1000).astype(np.float32)
    c = x > 0.25
    steps = [OpStep("where", (1, 0, Imm(-1.5, D.float32)), {}, D.float32),
             OpStep("clamp", (0,), {"min": -0.5, "max": 0.75}, D.float32),
             OpStep("clamp", (0,), {"max": 0.0}, D.float32),
             OpStep("pow", (0, Imm(2, D.int64)), {}, D.float32),
             OpStep("pow", (0, Imm(-3, D.int64)), {}, D.float32),
             OpStep("pow", (0, Imm(0.5, D.float32)), {}, D.float32),
             OpStep("pow", (0, Imm(-0.5, D.float32)), {}, D.float32),
             OpStep("gt", (0, Imm(0.1, D.float32)), {}, D.bool_)]
    spec = KernelSpec([InputSpec(D.float32), InputSpec(D.bool_)], steps,
                      list(range(2, 2 + len(steps))), [s.dtype for s in steps])
    got = run_llvm(spec, [x, c])
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = [np.where(c, x64, -1.5), np.clip(x64, -0.5, 0.75), np.minimum(x64, 0),
                x64 ** 2, x64 ** -3.0, np.sqrt(x64), 1 / np.sqrt(x64), x > np.float32(0.1)]
    for s, g, r in zip(steps, got, refs):
        assert_close(g, r, s.dtype, what=s.text())


def test_integer_powers_lower_to_multiplies():
    from scriptmod.codegen.llvm_ir import render_llvm
    spec = KernelSpec([InputSpec(D.float32)],
                      [OpStep("pow", (0, Imm(3, D.int64)), {}, D.float32)], [1], [D.float32])
    text = render_llvm(spec).text
    calls = [ln for ln in text.splitlines() if "call " in ln and ".body" not in ln]
    assert not calls and text.count("fmul") == 2          # (the entry calls its noalias body)


def _both_renderers(spec, inputs):
    """The outputs of ``spec`` from the LLVM kernel and, where g++ exists, the CUDA C source
    run on the CPU shim."""
    from harness import have_gxx, run_shim
    outs = [run_llvm(spec, inputs)]
    if have_gxx():
        outs.append(run_shim(spec, inputs))
    return outs


def _per_op_rounded(x, dt):
    """x*x + x, then - 3x, then / 7, each op in float32 rounded to ``dt`` as PyTorch does."""
    h = np_dtype(dt)
    f = lambda v: v.astype(h).astype(np.float32)     # noqa: E731
    x = x.astype(np.float32)
    sq = f(x * x)
    s = f(sq + x)
    t = f(s - f(x * np.float32(3)))
    return f(t / np.float32(7)).astype(h)


@pytest.mark.parametrize("dt", [D.float16, D.bfloat16], ids=lambda d: d.name)
def test_half_steps_round_every_result_in_both_renderers(dt):
    """Each op of a fused float16/bfloat16 chain rounds its result (bit for bit the per-op
    rounding of eager and PyTorch), also where float32 intermediates would give another
    value; one op computes in float32 and rounds once (exp then log1p at 11.5: exp is inf
    in float16, so the result is inf, not 11.5); selections (relu, maximum, clamp) of
    rounded values stay exact without another rounding."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(3000) * 300, [11.5, 255.0, 301.0, 65000.0, -0.0,
                                                        np.inf, np.nan]]).astype(np_dtype(dt))
    steps = [OpStep("mul", (0, 0), {}, dt), OpStep("add", (1, 0), {}, dt),
             OpStep("mul", (0, Imm(3, dt)), {}, dt), OpStep("sub", (2, 3), {}, dt),
             OpStep("div", (4, Imm(7, dt)), {}, dt),
             OpStep("exp", (0,), {}, dt), OpStep("log1p", (6,), {}, dt),
             OpStep("relu", (5,), {}, dt), OpStep("maximum", (8, Imm(0.3, dt)), {}, dt),
             OpStep("clamp", (9,), {"max": 1000.1}, dt)]
    spec = KernelSpec([InputSpec(dt)], steps, [5, 7, 10], [dt, dt, dt])
    with np.errstate(all="ignore"):
        want = _per_op_rounded(x, dt)
        x32 = x.astype(np.float32)
        unrounded = ((x32 * x32 + x32 - 3 * x32) / 7).astype(want.dtype)
    assert not np.array_equal(want, unrounded, equal_nan=True)   # the case tells them apart
    h = np_dtype(dt).type
    selected = np.minimum(np.maximum(np.maximum(want, h(0)), h(0.3)), h(1000.1))  # exact ops
    for chain, log1p_exp, sel in _both_renderers(spec, [x]):
        assert np.array_equal(chain, want, equal_nan=True)
        assert np.array_equal(sel, selected, equal_nan=True)
        at = list(x).index(11.5)
        assert log1p_exp[at] == (np.inf if dt is D.float16 else np.float32(11.5))


@pytest.mark.parametrize("op,args,attrs,match", [
    ("pow", (0, Imm(128, D.int64)), {}, "value 128 cannot be converted to type int8"),
    ("where", (1, 0, Imm(-129, D.int64)), {}, "value -129 cannot be converted to type int8"),
    ("clamp", (0,), {"max": 1000}, "value 1000 cannot be converted to type int8"),
])
def test_python_ints_that_torch_checks_are_refused_not_wrapped(op, args, attrs, match):
    """pow's exponent, where's values and clamp's bounds are converted with PyTorch's
    overflow check (add, mul, comparisons wrap instead)."""
    from scriptmod.codegen.llvm_ir import render_llvm
    from scriptmod.ir.errors import ArgumentValueError
    spec = KernelSpec([InputSpec(D.int8), InputSpec(D.bool_)], [OpStep(op, args, attrs, D.int8)],
                      [2], [D.int8])
    with pytest.raises(ArgumentValueError, match=match):
        render_llvm(spec)
