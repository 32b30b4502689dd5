"""The one op registry: every op declared in ``ir.ops`` has a reference kernel, a derivative
unless it is non-differentiable, a test case, and (if fusible elementwise) a scalar formula;
no table has a row for an op that was never declared."""
from __future__ import annotations

import numpy as np
import pytest

import op_cases as OC
from scriptmod.ir import schema as S
from scriptmod.ir.schema import ELEMENTWISE, FACTORY, IMPURE, NONDIFF, REGISTRY, ROW, VIEW, parse_schema
from scriptmod.runtime.kernels import KERNELS
from scriptmod.autograd.derivatives import DERIVATIVES

TABLES = {"KERNELS": KERNELS, "DERIVATIVES": DERIVATIVES, "op_cases.CASES": OC.CASES}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_no_rows_for_undeclared_ops(table: str) -> None:
    assert sorted(set(TABLES[table]) - set(REGISTRY)) == []


def test_every_op_has_a_kernel_and_a_case() -> None:
    assert sorted(set(REGISTRY) - set(KERNELS)) == []
    assert sorted(set(REGISTRY) - set(OC.CASES)) == []


def test_differentiable_ops_have_derivatives_and_nondiff_ops_do_not() -> None:
    diff = {n for n, s in REGISTRY.items() if NONDIFF not in s.flags}
    assert sorted(diff - set(DERIVATIVES)) == []
    assert sorted(set(DERIVATIVES) - diff) == []


def test_fusible_elementwise_ops_have_scalar_formulas() -> None:
    formulas = pytest.importorskip("scriptmod.codegen.formulas").FORMULAS
    ew = {n for n, s in REGISTRY.items() if ELEMENTWISE in s.flags and IMPURE not in s.flags}
    assert sorted(ew - set(formulas)) == []
    assert sorted(set(formulas) - set(REGISTRY)) == []


def test_row_ops_have_row_expansions() -> None:
    """One row per table: every ``ROW`` op expands in ``codegen.rows``, and nothing else."""
    rows = pytest.importorskip("scriptmod.codegen.rows").ROW_OPS
    assert set(rows) == {n for n, s in REGISTRY.items() if ROW in s.flags}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_schema_is_consistent(name: str) -> None:
    s = REGISTRY[name]
    assert s.kind == f"sm::{name}"
    assert parse_schema(f"{name}(Tensor self) -> Tensor")[0] == name
    assert len(set(a.name for a in s.inputs + s.attrs)) == len(s.inputs + s.attrs)
    if FACTORY in s.flags:
        assert NONDIFF in s.flags and "device" in {a.name for a in s.attrs}
    if VIEW in s.flags:
        assert s.n_outputs == 1 and s.inputs[0].accepts_tensor
    variadic = [a for a in s.inputs if a.variadic]
    assert len(variadic) <= 1


def test_registering_twice_is_an_error() -> None:
    from scriptmod.ir.ops import rules as R
    from scriptmod.ir.schema import op
    with pytest.raises(ValueError, match="declared twice"):
        op("add(Tensor self, Tensor other) -> Tensor", R.promote, R.broadcast)


def test_kernel_for_undeclared_op_is_an_error() -> None:
    from scriptmod.runtime.kernels import kernel
    with pytest.raises(KeyError, match="undeclared"):
        kernel("not_an_op")(lambda xp, x: x)


# ---- op groups are registry flags ---------------------------------------------------------
# The hand lists these flags replaced (issue 12), kept once here as the proof of the switch.
_OLD_VIEW_OPS = {"transpose", "permute", "unsqueeze", "squeeze", "narrow", "expand", "reshape"}
_OLD_UPCAST_OPS = {"softmax", "log_softmax", "cumsum", "matmul", "conv2d", "avg_pool2d", "logsumexp"}
_OLD_LONG_OPS = {"exp", "exp2", "expm1", "log", "log2", "log1p", "sigmoid", "tanh", "erf", "erfc",
                 "sin", "cos", "atan2", "pow", "remainder", "floor_divide"}
# ``where`` left the list: with a bool result its inputs are bool already, so casting is a no-op
_OLD_RAW_INPUT_OPS = {"cast", "logical_not", "isnan", "isinf", "logical_and", "logical_or",
                      "logical_xor"}
_OLD_UNARY_METHODS = {"neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "exp", "log",
                      "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
                      "erfc", "reciprocal", "log2", "exp2", "logical_not", "isnan", "isinf",
                      "bitwise_not"}
_OLD_BINARY_METHODS = {"sub", "mul", "floor_divide", "remainder", "pow", "maximum", "minimum",
                       "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                       "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"}


def test_flag_groups_equal_the_hand_lists_they_replaced() -> None:
    from scriptmod import _tensor_ops as T
    from scriptmod.codegen.llvm_ir import LONG_OPS
    assert S.ops_with(S.VIEW, without=(S.IMPURE,)) == _OLD_VIEW_OPS | {"detach"} | {   # detach: issue 15
        "diagonal", "unfold", "as_strided", "real", "imag", "view_as_real",
        "view_as_complex"}                                  # the views family: issue 39
    assert {n for n, s in REGISTRY.items() if S.upcasts(s)} == (
        _OLD_UPCAST_OPS | {"conv1d", "conv3d"}                  # conv2d's other ranks: issue 38
        | _SPECIAL_UPCAST                                       # the special family: issue 39
        | S.ops_with(S.ELEMENTWISE) | S.ops_with(S.REDUCTION)) - _OLD_RAW_INPUT_OPS
    assert LONG_OPS == S.ops_with(S.LONG) == _OLD_LONG_OPS | _MATH_LONG
    assert S.ops_with(S.OWN_DTYPES) == _OLD_RAW_INPUT_OPS
    assert set(T.UNARY) == _OLD_UNARY_METHODS | _MATH_UNARY
    assert set(T.BINARY) == _OLD_BINARY_METHODS | {"add", "div"} | _MATH_BINARY   # hand methods
    # replace add and div


# issue 39's families: special functions computing half inputs in float32, and the math
# family's fused unary and binary ops (LONG: their formulas are long vector-math chains)
_SPECIAL_UPCAST = {"digamma", "erfinv", "i0", "i0e", "i1", "i1e", "igamma", "igammac", "lgamma",
                   "polygamma"}
_MATH_UNARY = {"acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "log10", "sinh", "tan"}
_MATH_BINARY = {"bitwise_left_shift", "bitwise_right_shift", "copysign", "fmod", "hypot"}
_MATH_LONG = _MATH_UNARY | {"fmod", "hypot"}


def test_ops_with_takes_all_flags_and_exclusions() -> None:
    both = S.ops_with(S.ELEMENTWISE, S.UNARY)
    assert both == S.ops_with(S.UNARY) and "add" not in both
    assert "copy_" in S.ops_with(S.VIEW) and "copy_" not in S.ops_with(S.VIEW, without=(S.IMPURE,))
    assert S.ops_with("no such flag") == frozenset()


def test_every_flag_is_a_declared_constant() -> None:
    declared = {v for k, v in vars(S).items() if k.isupper() and isinstance(v, str)}
    used = set().union(*(s.flags for s in REGISTRY.values()))
    assert sorted(used - declared) == []


@pytest.mark.parametrize("name", sorted(S.ops_with(S.UNARY) | S.ops_with(S.BINARY)))
def test_unary_and_binary_ops_are_elementwise_with_that_many_inputs(name: str) -> None:
    s = REGISTRY[name]
    assert ELEMENTWISE in s.flags and s.n_outputs == 1
    assert len(s.inputs) == (1 if s.has(S.UNARY) else 2)
    assert not (s.has(S.UNARY) and s.has(S.BINARY))


@pytest.mark.parametrize("name", sorted(S.ops_with(S.LONG)))
def test_long_ops_are_fusible_elementwise_with_a_formula(name: str) -> None:
    formulas = pytest.importorskip("scriptmod.codegen.formulas").FORMULAS
    s = REGISTRY[name]
    assert ELEMENTWISE in s.flags and IMPURE not in s.flags and name in formulas


def test_upcast_flag_is_only_on_ops_not_upcast_by_another_flag() -> None:
    for name in S.ops_with(S.UPCAST):
        assert not REGISTRY[name].flags & {ELEMENTWISE, S.REDUCTION}, name


def _first_sample(name: str, dtype: str) -> OC.Sample:
    return OC.CASES[name].samples(OC.Gen(dtype))[0]


@pytest.mark.parametrize("name", sorted(S.ops_with(S.VIEW, without=(S.IMPURE,))))
def test_view_ops_reference_kernel_returns_a_view_of_a_contiguous_input(name: str) -> None:
    seen = 0
    for s in OC.CASES[name].samples(OC.Gen("float32")):
        x = s.inputs[0]
        if not x.flags.c_contiguous:
            continue
        out = KERNELS[name](np, *s.inputs, **s.attrs)
        if out.size:
            assert np.shares_memory(out, x), f"{name}[{s.label}] copied its input"
            seen += 1
    assert seen, f"{name}: no contiguous, non-empty sample"


def _recording_kernel(name: str, monkeypatch: pytest.MonkeyPatch) -> list:
    """Swap op ``name``'s reference kernel for one that records what it is given."""
    from scriptmod.runtime import kernels as K
    seen: list = []
    inner = K.KERNELS[name]

    def spy(xp: object, *inputs: object, **attrs: object) -> object:
        seen.append(inputs)
        return inner(xp, *inputs, **attrs)
    monkeypatch.setitem(K.KERNELS, name, spy)
    monkeypatch.setattr(K, "_PLANS", {})
    monkeypatch.setattr(K, "_EW_CACHE", {})
    return seen


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if S.upcasts(s)
                                        and "float16" in OC.CASES[n].dtypes))
def test_upcasting_ops_compute_half_inputs_in_float32(name: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from scriptmod.runtime.kernels import run_kernel
    seen = _recording_kernel(name, monkeypatch)
    s = _first_sample(name, "float16")
    run_kernel(name, s.inputs, dict(s.attrs))
    given = [x for x in seen[0] if isinstance(x, np.ndarray) and x.dtype.kind == "f"]
    assert given and all(x.dtype == np.float32 for x in given), [x.dtype for x in given]


@pytest.mark.parametrize("name", sorted(S.ops_with(S.OWN_DTYPES)))
@pytest.mark.parametrize("dtype", ["float16", "int8", "bool"])
def test_own_dtype_ops_get_their_inputs_uncast(name: str, dtype: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from scriptmod.runtime.kernels import run_kernel
    assert ELEMENTWISE in REGISTRY[name].flags
    if dtype not in OC.CASES[name].dtypes:
        pytest.skip(f"{name} takes no {dtype}")
    seen = _recording_kernel(name, monkeypatch)
    for s in OC.CASES[name].samples(OC.Gen(dtype)):
        run_kernel(name, s.inputs, dict(s.attrs))
        assert all(a is b for a, b in zip(seen[-1], s.inputs)), f"{name}[{s.label}]"


def test_tensor_methods_come_from_the_flags() -> None:
    import scriptmod as sm
    from scriptmod.tensor import Tensor
    for name in S.ops_with(S.UNARY) | S.ops_with(S.BINARY):
        if not REGISTRY[name].attrs:   # clamp and cast: hand-written, other signatures
            assert callable(getattr(Tensor, name)) and callable(getattr(sm, name)), name
    x = sm.tensor([1.0, -2.0])
    assert x.exp_() is x and np.allclose(x.numpy(), np.exp([1.0, -2.0]).astype(np.float32))
    assert not hasattr(Tensor, "isnan_")
