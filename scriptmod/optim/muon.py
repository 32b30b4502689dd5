"""Muon: momentum SGD whose update, a matrix, is orthogonalized by a Newton-Schulz
iteration in bfloat16 (as PyTorch's); for 2-D parameters only.

    >>> model = nn.Linear(4, 2, bias=False)
    >>> opt = Muon(model.parameters(), lr=1e-3)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight])
    ['momentum_buffer']
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from scriptmod._creation import zeros_like
from scriptmod.optim.optimizer import Optimizer, _lerp, _scalar
from scriptmod.tensor import Tensor

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def _bf16(x: Tensor) -> Tensor:
    """``x`` rounded to bfloat16, held in float32: PyTorch's bfloat16 matmul, ``addmm`` and
    division accumulate in float32 and round once, which float32 ops and this rounding
    reproduce (rounding after each of addmm's products and sums would not)."""
    return x.bfloat16().float()


def zeropower_via_newtonschulz(grad: Tensor, ns_coefficients: tuple[float, float, float],
                               ns_steps: int, eps: float) -> Tensor:
    """The quintic Newton-Schulz iteration towards ``U V^T`` of ``grad = U S V^T``, run on
    the wide orientation of ``grad`` in bfloat16 (returned as float32 holding bfloat16
    values, which is what the parameter update reads)."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    tall = grad.size(0) > grad.size(1)
    x = _bf16(grad)
    if tall:
        x = x.T
    x = _bf16(x / _bf16(x.norm()).clamp(min=eps))
    for _ in range(ns_steps):
        gram = _bf16(x @ x.T)
        gram_update = _bf16(gram @ gram * c + gram * b)
        x = _bf16(gram_update @ x + x * a)
    return x.T if tall else x


def _adjust_lr(lr: float, adjust_lr_fn: str | None, shape: Any) -> float:
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


class Muon(Optimizer):
    """buf = lerp(buf, g, 1 - mu); u = NS(lerp(g, buf, mu) if nesterov else buf);
    p *= 1 - lr wd; p -= adjusted_lr * u."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-3,
                 weight_decay: float = 0.1, momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B,
                                                                DEFAULT_C),
                 eps: float = EPS, ns_steps: int = DEFAULT_NS_STEPS,
                 adjust_lr_fn: str | None = None) -> None:
        for ok, message in [(0.0 <= _scalar(lr), f"Learning rate should be >= 0 but is: {lr}"),
                            (0.0 <= momentum, f"momentum should be >= 0 but is: {momentum}"),
                            (0.0 <= weight_decay,
                             f"weight decay should be >= 0 but is: {weight_decay}"),
                            (adjust_lr_fn in (None, "original", "match_rms_adamw"),
                             f"Adjust learning rate function {adjust_lr_fn} is not supported")]:
            if not ok:
                raise ValueError(message)
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                        adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {p.size()}")

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        if p.is_complex():
            raise RuntimeError("Muon does not support complex parameters")
        grad = p.grad
        if grad.ndim != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = zeros_like(grad)
        buf, momentum = state["momentum_buffer"], group["momentum"]
        buf.copy_(_lerp(buf, grad, 1 - momentum))
        update = _lerp(grad, buf, momentum) if group["nesterov"] else buf
        update = zeropower_via_newtonschulz(update, group["ns_coefficients"],
                                            group["ns_steps"], group["eps"])
        lr = _scalar(group["lr"])
        p.mul_(1 - lr * group["weight_decay"])
        p.add_(update, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], p.shape))
