"""The reference kernels through ``run_kernel`` alone (no Tensor, no autograd): the whole op
table (``op_cases``) plus the contract ``run_kernel`` keeps for every executor."""
from __future__ import annotations

from typing import Any, Sequence

import ml_dtypes
import numpy as np
import pytest

import op_cases as OC
from scriptmod.runtime.kernels import KERNELS, operand, run_kernel


def direct(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The kernel with the attributes an executor gives it: the case's, defaults filled in
    from the schema (as a graph node's are)."""
    from scriptmod.ir.schema import REGISTRY
    return run_kernel(op, list(inputs), REGISTRY[op].bind_attrs(attrs))


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
@pytest.mark.parametrize("op,dtype", OC.params())
def test_kernel_matches_reference(op: str, dtype: str) -> None:
    OC.run_case(OC.CASES[op], dtype, direct)


def test_every_op_has_a_kernel() -> None:
    from scriptmod.ir.schema import REGISTRY
    assert sorted(set(REGISTRY) - set(KERNELS)) == []


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_half_types_compute_in_float32_and_round_once(dt: Any) -> None:
    x = np.array([1000.0, 3.0], dtype=dt)
    out = run_kernel("add", [x, np.array([0.4, 0.4], dtype=dt)], {})
    want = (x.astype(np.float32) + np.array([0.4, 0.4], dtype=dt).astype(np.float32)).astype(dt)
    assert out.dtype == np.dtype(dt)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("inputs,want", [
    ([np.ones(2, np.int32), 2.5], np.float32),          # int tensor * Python float -> default
    ([np.ones(2, np.uint8), np.int8(3) * np.ones((), np.int8)], np.uint8),   # 0-d same category
    ([np.ones(2, np.int32), np.ones((), np.float64)], np.float64),   # 0-d higher category wins
    ([np.ones(2, np.float16), np.ones((), np.float64)], np.float16),  # 0-d same category loses
    ([np.ones(2, bool), 3], np.int64),
])
def test_run_kernel_applies_promotion(inputs: list, want: Any) -> None:
    assert run_kernel("mul", inputs, {}).dtype == np.dtype(want)


def test_zero_dim_results_are_arrays() -> None:
    out = run_kernel("sum", [np.arange(3.0)], {"dim": None, "keepdim": False})
    assert isinstance(out, np.ndarray) and out.shape == ()


def test_operand_describes_what_rules_see() -> None:
    from scriptmod.ir import dtypes as D
    assert operand(np.zeros((2, 3), np.float32)) == (D.float32, (2, 3))
    assert operand(2.0) is float and operand(True) is bool and operand([1, 2]) is None


def test_unknown_op_is_a_clear_error() -> None:
    with pytest.raises((KeyError, NotImplementedError), match="no_such_op"):
        run_kernel("no_such_op", [np.zeros(1)], {})


def test_kernels_do_not_write_into_inputs() -> None:
    x = np.arange(6.0).reshape(2, 3)
    before = x.copy()
    for op, attrs in (("relu", {}), ("clone", {}), ("cumsum", {"dim": 1}), ("neg", {})):
        out = run_kernel(op, [x], attrs)
        out[...] = -7
        np.testing.assert_array_equal(x, before, err_msg=op)
