"""Reverse-mode automatic differentiation.

    >>> x = scriptmod.tensor(2.0, requires_grad=True)
    >>> scriptmod.autograd.grad(x * x, x)
    (tensor(4.),)
"""
from __future__ import annotations

from typing import Any, Sequence

from scriptmod.autograd.engine import Node, RemovableHandle, run_backward
from scriptmod.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                          is_inference_mode_enabled, no_grad, set_grad_enabled)


def _seq(x: Any) -> list:
    from scriptmod.tensor import Tensor
    return [x] if isinstance(x, Tensor) or x is None else list(x)


def _default_grads(outputs: list, grads: list) -> list:
    from scriptmod._creation import ones_like
    out = []
    for o, g in zip(outputs, grads):
        if g is None:
            if o.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; "
                                   f"got an output of shape {tuple(o.shape)}")
            g = ones_like(o)
        out.append(g)
    return out


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``."""
    outs, ins = _seq(outputs), _seq(inputs)
    gos = _seq(grad_outputs) if grad_outputs is not None else [None] * len(outs)
    if len(gos) != len(outs):
        raise RuntimeError(f"grad: got {len(gos)} grad_outputs for {len(outs)} outputs")
    retain = create_graph if retain_graph is None else retain_graph
    res = run_backward(outs, _default_grads(outs, gos), retain, create_graph, inputs=ins,
                       allow_unused=allow_unused, accumulate=False)
    return tuple(res)


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs: Any = None) -> None:
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad`` (only into those of
    ``inputs``, when given)."""
    outs = _seq(tensors)
    gos = _seq(grad_tensors) if grad_tensors is not None else [None] * len(outs)
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is None:
        run_backward(outs, _default_grads(outs, gos), retain, create_graph)
        return
    ins = _seq(inputs)
    grads = run_backward(outs, _default_grads(outs, gos), retain, create_graph, inputs=ins,
                         allow_unused=True, accumulate=False)
    for t, g in zip(ins, grads):
        if g is not None:
            t.grad = g if t.grad is None else t.grad + g


from scriptmod.autograd.function import Function, FunctionCtx  # noqa: E402
from scriptmod.autograd import gradcheck as _gc  # noqa: E402

gradcheck = _gc.gradcheck

__all__ = ["grad", "backward", "Function", "FunctionCtx", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled",
           "Node", "RemovableHandle", "gradcheck"]
