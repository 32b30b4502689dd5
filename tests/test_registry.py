"""The one op registry: every op declared in ``ir.ops`` has a reference kernel, a derivative
unless it is non-differentiable, a test case, and (if fusible elementwise) a scalar formula;
no table has a row for an op that was never declared."""
from __future__ import annotations

import pytest

import op_cases as OC
from scriptmod.ir.schema import ELEMENTWISE, FACTORY, IMPURE, NONDIFF, REGISTRY, VIEW, parse_schema
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
