"""Helpers shared by the layer tests: conversions and the optional PyTorch oracle."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

import scriptmod as sm


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def arr(t: Any) -> np.ndarray:
    """A float64 NumPy copy of a scriptmod or torch tensor."""
    if hasattr(t, "detach"):
        t = t.detach()
    if hasattr(t, "numpy"):
        return np.array(t.numpy(), dtype=np.float64)
    return np.asarray(t, dtype=np.float64)


def leaf(a: np.ndarray, grad: bool = True) -> sm.Tensor:
    return sm.tensor(a, requires_grad=grad and a.dtype.kind == "f")


def run_both(sm_fn: Callable[..., Any], torch_fn: Callable[..., Any],
             arrays: Sequence[np.ndarray], seed: int = 0) -> tuple[list, list]:
    """Forward both with the same float inputs, backprop the same random cotangent; return
    ([out, *grads] for scriptmod, the same for torch) as float64 arrays."""
    torch = torch_or_none()
    xs = [leaf(a) for a in arrays]
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    y, ty = sm_fn(*xs), torch_fn(*ts)
    g = np.random.default_rng(seed).standard_normal(tuple(ty.shape))
    y.backward(sm.tensor(g, dtype=y.dtype))
    ty.backward(torch.tensor(g, dtype=ty.dtype))
    ours = [arr(y)] + [arr(x.grad) if x.grad is not None else None for x in xs]
    theirs = [arr(ty)] + [arr(t.grad) if t.grad is not None else None for t in ts]
    return ours, theirs


def assert_close_lists(ours: list, theirs: list, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a is None or b is None:
            assert a is None and b is None or (a is not None and not np.any(a)) or \
                (b is not None and not np.any(b)), f"entry {i}: one side has no gradient"
            continue
        np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=f"entry {i}")


def copy_state_to_torch(ours: Any, theirs: Any) -> None:
    """Load our module's state dict into the equivalent torch module (keys must match)."""
    torch = torch_or_none()
    sd = {k: torch.tensor(np.array(v.detach().numpy())) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd)


def param_grads(module: Any) -> dict[str, np.ndarray]:
    return {n: arr(p.grad) for n, p in module.named_parameters() if p.grad is not None}
