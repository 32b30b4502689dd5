"""Ops that refuse mixed dtypes raise ``scriptmod.DTypeError`` (a ``RuntimeError``) naming
both dtypes, eagerly and after tracing, as PyTorch refuses them; elementwise ops keep
PyTorch's type promotion."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn

f32, f64, bf16 = sm.float32, sm.float64, sm.bfloat16

# name -> (callable that must raise, words the message must contain)
REFUSED: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "linear bf16 weight, f32 input": (lambda: nn.Linear(3, 4).to(bf16)(sm.randn(2, 3)),
                                      ("mat1 and mat2 must have the same dtype", "Float",
                                       "BFloat16")),
    "linear f32 weight, f64 input": (lambda: nn.Linear(3, 4)(sm.randn(2, 3).double()),
                                     ("same dtype", "Double", "Float")),
    "linear 3-d f64 input": (lambda: nn.Linear(3, 4)(sm.randn(5, 2, 3).double()),
                             ("same dtype", "Double", "Float")),
    "linear f64 bias": (lambda: F.linear(sm.randn(2, 3), sm.randn(4, 3), sm.randn(4).double()),
                        ("same dtype", "Double", "Float")),
    "matmul": (lambda: sm.randn(2, 3) @ sm.randn(3, 4).double(), ("same dtype", "float", "double")),
    "mm": (lambda: sm.mm(sm.randn(2, 3), sm.randn(3, 4).double()), ("same dtype",)),
    "bmm": (lambda: sm.bmm(sm.randn(2, 2, 3), sm.randn(2, 3, 4).double()), ("same dtype",)),
    "dot": (lambda: sm.dot(sm.randn(3), sm.randn(3).double()), ("same dtype",)),
    "matmul int and float": (lambda: sm.ones(2, 3, dtype=sm.int64) @ sm.randn(3, 4),
                             ("same dtype",)),
    "conv2d f64 input": (lambda: nn.Conv2d(2, 3, 3)(sm.randn(1, 2, 5, 5).double()),
                         ("Input type (double) and bias type (float) should be the same",)),
    "conv2d no bias": (lambda: nn.Conv2d(2, 3, 3, bias=False)(sm.randn(1, 2, 5, 5).double()),
                       ("double", "float")),
    "conv2d f64 bias": (lambda: F.conv2d(sm.randn(1, 2, 5, 5), sm.randn(3, 2, 3, 3),
                                         sm.randn(3).double()), ("bias type (double)",)),
    "layer_norm f64 input": (lambda: nn.LayerNorm(3)(sm.randn(2, 3).double()),
                             ("mixed dtype", "float64", "float32")),
    "layer_norm bf16 weight": (lambda: F.layer_norm(sm.randn(2, 3), (3,), sm.randn(3).to(bf16)),
                               ("mixed dtype",)),
    "batch_norm f64 input": (lambda: nn.BatchNorm1d(3).eval()(sm.randn(4, 3).double()),
                             ("mixed dtype", "float64", "float32")),
    "batch_norm train f64 input": (lambda: nn.BatchNorm1d(3).train()(sm.randn(4, 3).double()),
                                   ("mixed dtype",)),
    "embedding float indices": (lambda: F.embedding(sm.tensor([0.0, 1.0]), sm.randn(3, 4)),
                                ("indices", "float32")),
    "prelu f64 input": (lambda: nn.PReLU()(sm.randn(3).double()), ("Double", "Float")),
    "sdpa f64 key": (lambda: F.scaled_dot_product_attention(
        sm.randn(1, 2, 4, 8), sm.randn(1, 2, 4, 8).double(), sm.randn(1, 2, 4, 8)),
        ("same dtype", "float64", "float32")),
    "sdpa f64 mask": (lambda: F.scaled_dot_product_attention(
        sm.randn(1, 2, 4, 8), sm.randn(1, 2, 4, 8), sm.randn(1, 2, 4, 8),
        attn_mask=sm.zeros(4, 4, dtype=f64)), ("attn_mask", "float64")),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_mixed_dtypes_raise(name: str) -> None:
    fn, words = REFUSED[name]
    with pytest.raises(sm.DTypeError) as info:
        fn()
    assert isinstance(info.value, RuntimeError)
    for w in words:
        assert w in str(info.value), f"{name}: {w!r} not in {info.value}"


# the same calls in torch 2.13 raise too (the oracle for the table above)
TORCH_REFUSED = ["linear bf16 weight, f32 input", "linear f32 weight, f64 input", "matmul",
                 "conv2d f64 input", "layer_norm f64 input", "batch_norm f64 input",
                 "prelu f64 input", "sdpa f64 key"]


def test_torch_refuses_the_same_calls() -> None:
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    calls = {
        "linear bf16 weight, f32 input": lambda: torch.nn.Linear(3, 4).to(torch.bfloat16)(
            torch.randn(2, 3)),
        "linear f32 weight, f64 input": lambda: torch.nn.Linear(3, 4)(torch.randn(2, 3).double()),
        "matmul": lambda: torch.randn(2, 3) @ torch.randn(3, 4).double(),
        "conv2d f64 input": lambda: torch.nn.Conv2d(2, 3, 3)(torch.randn(1, 2, 5, 5).double()),
        "layer_norm f64 input": lambda: torch.nn.LayerNorm(3)(torch.randn(2, 3).double()),
        "batch_norm f64 input": lambda: torch.nn.BatchNorm1d(3).eval()(
            torch.randn(4, 3).double()),
        "prelu f64 input": lambda: torch.nn.PReLU()(torch.randn(3).double()),
        "sdpa f64 key": lambda: TF.scaled_dot_product_attention(
            torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8).double(), torch.randn(1, 2, 4, 8)),
    }
    for name in TORCH_REFUSED:
        with pytest.raises(RuntimeError):
            calls[name]()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_traced_float32_model_fed_float64_raises(fused: bool) -> None:
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    traced = sm.jit.trace(model, sm.randn(4, 3))
    with sm.jit.fuser(fused):
        with pytest.raises(sm.DTypeError, match="same dtype") as info:
            traced(sm.randn(4, 3).double())
        assert "double" in str(info.value) and "float" in str(info.value)
        assert traced(sm.randn(5, 3)).dtype == f32          # float32 still runs


def test_traced_conv_fed_float64_raises() -> None:
    traced = sm.jit.trace(nn.Conv2d(2, 3, 3).eval(), sm.randn(1, 2, 5, 5))
    with pytest.raises(sm.DTypeError, match=r"Input type \(double\) and bias type \(float\)"):
        traced(sm.randn(1, 2, 5, 5).double())


def test_traced_model_under_autograd_raises_too() -> None:
    traced = sm.jit.trace(nn.Linear(3, 2), sm.randn(4, 3))
    with pytest.raises(sm.DTypeError, match="same dtype"):
        traced(sm.randn(4, 3, dtype=f64, requires_grad=True))


def test_bfloat16_linear_fed_float32_raises_after_tracing() -> None:
    lin = nn.Linear(3, 4).to(bf16)
    traced = sm.jit.trace(lin, sm.randn(2, 3).to(bf16))
    with pytest.raises(sm.DTypeError, match="same dtype"):
        traced(sm.randn(2, 3))


def test_elementwise_promotion_stays_legal() -> None:
    assert (sm.randn(3) + sm.randn(3).double()).dtype == f64
    assert sm.where(sm.randn(3) > 0, sm.randn(3), sm.randn(3).double()).dtype == f64
    assert sm.maximum(sm.randn(3), sm.randn(3).double()).dtype == f64
    traced = sm.jit.trace(lambda a, b: a * b + 1, (sm.randn(3), sm.randn(3)))
    assert traced(sm.randn(3), sm.randn(3).double()).dtype == f64


def test_half_inputs_with_float32_norm_parameters_are_allowed() -> None:
    x = sm.randn(4, 3).to(bf16)
    assert nn.LayerNorm(3)(x).dtype == bf16
    assert nn.BatchNorm1d(3).eval()(x).dtype == bf16
    assert F.embedding(sm.tensor([0, 2]), sm.randn(3, 4).double()).dtype == f64
    with sm.no_grad():
        np.testing.assert_allclose(nn.LayerNorm(3)(x.float()).numpy(),
                                   nn.LayerNorm(3)(x).float().numpy(), atol=0.05)
