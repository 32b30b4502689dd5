"""The benchmark workloads of WORKLOADS.md (W1–W5, and W4G: W4 with grad enabled), built
from scriptmod's own layers.

    >>> w = WORKLOADS["W1"]; model, x = w.build(quick=True)
    >>> x.shape
    scriptmod.Size([256, 256])
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager

import scriptmod as sm
from scriptmod import nn


class EwChain(nn.Module):
    """W1: ``y = gelu_tanh(x * a + b) + x`` with learnable row vectors ``a`` and ``b``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.a = nn.Parameter(sm.randn(n))
        self.b = nn.Parameter(sm.randn(n))
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.act(x * self.a + self.b) + x


class ActivationZoo(nn.Module):
    """W2: GELU -> PReLU -> Sigmoid*Tanh -> Threshold -> ReLU(h + x)."""

    def __init__(self) -> None:
        super().__init__()
        self.gelu = nn.GELU()
        self.prelu = nn.PReLU(init=0.25)
        self.sigmoid = nn.Sigmoid()
        self.tanh = nn.Tanh()
        self.threshold = nn.Threshold(0.1, 0.0)
        self.relu = nn.ReLU()

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = self.gelu(x)
        h = self.prelu(h)
        h = self.sigmoid(h) * self.tanh(h)
        h = self.threshold(h)
        return self.relu(h + x)


class MLP(nn.Module):
    """W3: ``Linear(d, 4d) -> GELU(tanh) -> Linear(4d, d)`` plus the residual."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.fc2(self.act(self.fc1(x))) + x


def tiny_latency() -> nn.Module:
    """W4: four times ``Linear(64, 64) -> ReLU``, then ``Linear(64, 10)``."""
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(64, 10))


class TransformerBlock(nn.Module):
    """W5: pre-norm block, ``h = x + MHA(LN(x))``, ``y = h + MLP(LN(h))`` (GELU erf form)."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = self.ln1(x)
        h = x + self.attn(h, h, h, need_weights=False)[0]
        return h + self.mlp(self.ln2(h))


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    make: Callable[[bool], nn.Module]
    shape: tuple[int, ...]
    quick_shape: tuple[int, ...]
    floor: str            # "bytes", "flops" or "none"
    description: str
    grad: bool = False    # run with grad enabled (parameters require grad), not no_grad

    def grad_mode(self) -> ContextManager[object]:
        """``no_grad()``, or no change for a grad-enabled workload (W4G)."""
        return contextlib.nullcontext() if self.grad else sm.no_grad()

    def build(self, quick: bool = False, seed: int = 0, batch: int | None = None,
              dtype: sm.dtype = sm.float32) -> tuple[nn.Module, sm.Tensor]:
        """The model in eval mode and a fresh random-normal input (fixed seed)."""
        sm.manual_seed(seed)
        model = self.make(quick).eval().to(dtype)
        shape = list(self.quick_shape if quick else self.shape)
        if batch is not None:
            shape[0] = batch
        return model, sm.randn(*shape, dtype=dtype)


WORKLOADS: dict[str, Workload] = {w.id: w for w in (
    Workload("W1", "ew-chain", lambda q: EwChain(256 if q else 4096), (4096, 4096), (256, 256),
             "bytes", "gelu_tanh(x * a + b) + x"),
    Workload("W2", "activation-zoo", lambda q: ActivationZoo(), (2048, 2048), (256, 256),
             "bytes", "GELU, PReLU, Sigmoid*Tanh, Threshold, ReLU(h + x)"),
    Workload("W3", "mlp", lambda q: MLP(128, 512) if q else MLP(1024, 4096), (256, 1024),
             (32, 128), "flops", "Linear -> GELU(tanh) -> Linear + x"),
    Workload("W4", "tiny-latency", lambda q: tiny_latency(), (1, 64), (1, 64), "none",
             "4 x (Linear(64, 64) -> ReLU) -> Linear(64, 10)"),
    Workload("W5", "transformer-block", lambda q: TransformerBlock(64, 4, 256) if q else
             TransformerBlock(256, 4, 1024), (8, 128, 256), (2, 16, 64), "flops",
             "pre-norm MHA(4 heads) + MLP(GELU) block"),
    Workload("W4G", "tiny-latency (grad enabled)", lambda q: tiny_latency(), (1, 64), (1, 64),
             "none", "W4 called with grad enabled: its parameters require grad", grad=True),
)}
