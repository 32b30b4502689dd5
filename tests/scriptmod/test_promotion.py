"""PyTorch's type promotion: dtype pairs, the dim / 0-dim / Python-scalar tiers, the default
dtype. Checked against a hand-written table and, where installed, against torch itself."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.ir import dtypes as D

ALL = list(D.ALL)
SCALARS: list[Any] = [True, 3, 2.5, 1 + 2j]


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture
def default_float64() -> Iterator[None]:
    sm.set_default_dtype(sm.float64)
    try:
        yield
    finally:
        sm.set_default_dtype(sm.float32)


def _tt(torch: Any, d: D.DType) -> Any:
    return getattr(torch, d.name)


def _make(d: D.DType, shape: tuple) -> sm.Tensor:
    return sm.ones(shape, dtype=d)


@pytest.mark.parametrize("a,b,want", [
    (sm.int32, sm.float16, sm.float16), (sm.uint8, sm.int8, sm.int16), (sm.bool, sm.uint8, sm.uint8),
    (sm.float16, sm.bfloat16, sm.float32), (sm.int64, sm.float16, sm.float16),
    (sm.float64, sm.complex64, sm.complex128), (sm.int8, sm.int64, sm.int64),
])
def test_promote_types_table(a: D.DType, b: D.DType, want: D.DType) -> None:
    assert sm.promote_types(a, b) is want and sm.promote_types(b, a) is want


@pytest.mark.parametrize("expr,want", [
    (lambda: sm.tensor([1, 2]) * 2.5, sm.float32),                     # int * Python float
    (lambda: sm.tensor([1, 2], dtype=sm.int8) + 1000, sm.int8),        # Python int keeps int8
    (lambda: sm.tensor([1, 2], dtype=sm.int32) + sm.tensor(5), sm.int32),   # 0-d same category
    (lambda: sm.tensor([1, 2]) + sm.tensor(5.0, dtype=sm.float64), sm.float64),  # 0-d higher
    (lambda: sm.tensor([1.0], dtype=sm.float16) * sm.tensor(2.0, dtype=sm.float64), sm.float16),
    (lambda: sm.tensor([True]) + True, sm.bool),
    (lambda: sm.tensor([True]) + 1, sm.int64),
    (lambda: sm.tensor([1, 2]) / sm.tensor([2, 2]), sm.float32),        # true division
    (lambda: sm.tensor([1, 2]) // 2, sm.int64),
    (lambda: sm.tensor([1.0]) + 1j, sm.complex64),
    (lambda: sm.tensor([1.0], dtype=sm.float64) + 1j, sm.complex128),
    (lambda: sm.tensor(1) + sm.tensor(2.5), sm.float32),               # two 0-d tensors
    (lambda: sm.tensor([1, 2]).exp(), sm.float32),
    (lambda: sm.tensor([1, 2]).sum(), sm.int64),
    (lambda: sm.tensor([True, False]).sum(), sm.int64),
    (lambda: sm.where(sm.tensor([True]), sm.tensor([1]), 2.5), sm.float32),
    (lambda: sm.tensor([1], dtype=sm.uint8) < 2.5, sm.bool),
])
def test_promotion_in_ops(expr: Any, want: D.DType) -> None:
    assert expr().dtype is want


def test_default_dtype_drives_factories_and_scalar_promotion(default_float64: None) -> None:
    assert sm.get_default_dtype() is sm.float64
    assert sm.tensor([1.0]).dtype is sm.float64
    assert sm.zeros(2).dtype is sm.float64 and sm.randn(2).dtype is sm.float64
    assert (sm.tensor([1, 2]) * 0.5).dtype is sm.float64
    assert sm.tensor([1 + 1j]).dtype is sm.complex128


def test_set_default_dtype_rejects_non_floating() -> None:
    with pytest.raises(TypeError, match="floating"):
        sm.set_default_dtype(sm.int64)
    assert sm.get_default_dtype() is sm.float32


@pytest.mark.parametrize("a", ALL, ids=str)
def test_promote_types_matches_torch(torch: Any, a: D.DType) -> None:
    for b in ALL:
        want = torch.promote_types(_tt(torch, a), _tt(torch, b))
        assert sm.promote_types(a, b).name == _name(want), (a, b)


def _name(torch_dtype: Any) -> str:
    """scriptmod has no complex32 (ComplexHalf): float16 with complex gives complex64."""
    name = str(torch_dtype).split(".")[1]
    return "complex64" if name == "complex32" else name


def _torch_result(torch: Any, a: D.DType, other: Any, zero_dim: bool) -> str:
    x = torch.ones(2, dtype=_tt(torch, a))
    y = torch.ones((), dtype=_tt(torch, other)) if zero_dim else other
    return _name(torch.result_type(x, y))


@pytest.mark.parametrize("a", ALL, ids=str)
def test_tiers_match_torch(torch: Any, a: D.DType) -> None:
    """dim tensor with a 0-dim tensor of every dtype, and with every kind of Python scalar."""
    x = _make(a, (2,))
    for z in ALL:
        got = sm.result_type(x, _make(z, ()))
        assert got.name == _torch_result(torch, a, z, True), (a, z)
    for s in SCALARS:
        assert sm.result_type(x, s).name == _torch_result(torch, a, s, False), (a, s)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "maximum", "eq", "pow"])
def test_op_result_dtypes_match_torch(torch: Any, op: str) -> None:
    pairs = [(a, b) for a in ALL for b in ALL if not (op == "sub" and D.bool_ in (a, b))
             and not (op in ("maximum", "pow") and D.COMPLEX in (a.category, b.category))]
    for a, b in pairs:
        x, y = sm.ones(2, dtype=a), sm.ones((), dtype=b)
        try:
            want = getattr(torch, op)(torch.ones(2, dtype=_tt(torch, a)), torch.ones((), dtype=_tt(torch, b)))
        except (NotImplementedError, RuntimeError):   # torch has no kernel (complex32, bool pow)
            continue
        assert getattr(sm, op)(x, y).dtype.name == _name(want.dtype), (op, a, b)


@pytest.mark.parametrize("a", ALL, ids=str)
def test_can_cast_matches_torch(torch: Any, a: D.DType) -> None:
    for b in ALL:
        assert sm.can_cast(a, b) == torch.can_cast(_tt(torch, a), _tt(torch, b)), (a, b)


def test_numpy_operands_promote_like_tensors() -> None:
    out = sm.tensor([1.0], dtype=sm.float16) + np.ones(1, dtype=np.float64)
    assert out.dtype is sm.float64
