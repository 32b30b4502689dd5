"""A convolution with its epilogue group (``runtime.epilogue``, kind ``conv``) as one step:
our float32 convolution kernel (``kernel_for``: the direct kernel of ``runtime.conv_direct``
for depthwise and small-channel shapes, else the implicit GEMM of ``runtime.conv``) writes
each block of the output and calls the group's kernel on it while it is in cache.

An inference ``batch_norm`` between them (``Conv -> BatchNorm -> ReLU``) is folded per call:
``y = conv(x, w * s) + (b - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``, the
weight scaled into a fresh array (never in place: the module's weight is the user's). That
is a pass over the weight per call, where an unfolded BatchNorm is a pass over the
activations, which for a CNN are much larger; ``jit.freeze`` folds it once instead. On batch
statistics (training, or no running statistics) the chain runs node by node.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir.ops.conv import _out_size
from .epilogue import Source, run_fused


def kernel_for(x: Any, w: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
               dilation: Sequence[int], groups: int) -> Callable[..., Any] | None:
    """The ``conv(x, w, bias, stride, padding, dilation, groups, out=, epilogue=)`` of our
    kernel that takes these arrays, or None (then the reference kernel runs)."""
    from . import conv, conv_direct
    if conv_direct.taken(x, w, bias, stride, padding, dilation, groups):
        return conv_direct.conv
    if conv.taken(x, w, bias, stride, padding, dilation, groups):
        return conv.conv
    return None


def geometry(conv: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """A convolution node's ``(stride, padding, dilation, groups)``."""
    a = conv.attrs
    return tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]), int(a["groups"])


def fold_batch_norm(w: np.ndarray, bias: Any, mean: Any, var: Any, gamma: Any, beta: Any,
                    eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The weight and bias of ``batch_norm(conv(x, w, bias))`` on running statistics as one
    convolution (float32, computed in float64 as ``jit.freeze``'s fold)."""
    s = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    if gamma is not None:
        s = s * gamma
    b = -mean.astype(np.float64) if bias is None else bias - mean.astype(np.float64)
    b = b * s
    if beta is not None:
        b = b + beta
    w2 = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    return w2, b.astype(np.float32)


def conv_epilogue_step(src: Source, fk: Any, group: Callable[[list], list],
                       fallback: Callable[[list], Any]) -> Callable[[list], Any]:
    """The step of ``src``'s convolution (and BatchNorm) with the group as its epilogue,
    called with ``src.inputs()`` then the group's inputs (slot ``src.slot`` a placeholder).
    Where our kernel or the group's launch does not take the arrays: ``fallback`` (the
    chain node by node) and then ``group``."""
    conv = src.head
    geo = geometry(conv)
    bn = src.nodes[1] if len(src.nodes) > 1 else None
    eps = float(bn.attrs.get("eps", 1e-5)) if bn is not None else 0.0
    n_chain = 3 + (6 if bn is not None else 0)
    slot = src.slot
    pools: dict[tuple, Any] = {}

    def step(args: list) -> Any:
        chain, ins = args[:n_chain], list(args[n_chain:])
        if fk is not None:
            out = _fused(fk, slot, chain, ins, geo, bn is not None, eps, pools)
            if out is not None:
                return out
        ins[slot] = fallback(chain)
        return group(ins)[0]
    return step


def _fused(fk: Any, slot: int, chain: list, ins: list, geo: tuple, has_bn: bool,
           eps: float, pools: dict) -> Any:
    """The group's output computed by our kernel with the group as its epilogue, or None
    where the arrays, the statistics or the group's launch do not fit (nothing computed)."""
    x, w, bias = chain[:3]
    stride, padding, dilation, groups = geo
    if has_bn:
        mean, var, gamma, beta, training = chain[3:8]
        if training or type(mean) is not np.ndarray or type(var) is not np.ndarray:
            return None
    run = kernel_for(x, w, bias, stride, padding, dilation, groups)
    if run is None:
        return None
    if has_bn:
        w, bias = fold_batch_norm(w, bias, mean, var, gamma, beta, eps)
    shape = (x.shape[0], w.shape[0], *(
        _out_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], dilation[i])
        for i in range(w.ndim - 2)))
    return run_fused(fk, slot, ins, shape, shape, pools, lambda c, ep: run(
        x, w, bias, stride, padding, dilation, groups, out=c, epilogue=ep))


def conv_batch_norm_step(bn: Any, bn_step: Callable[[list], Any],
                         fallback: Callable[[list], Any]) -> Callable[[list], Any]:
    """The step of an inference ``batch_norm`` with its convolution folded in
    (``runtime.epilogue.batch_norm_source``), called with the convolution's inputs then the
    BatchNorm's (input 0 a placeholder): one convolution with the folded weight and bias on
    running statistics; else the convolution (``fallback``) and ``bn_step``."""
    stride, padding, dilation, groups = geometry(bn.inputs[0].node)
    eps = float(bn.attrs.get("eps", 1e-5))

    def step(args: list) -> Any:
        (x, w, bias), ins = args[:3], list(args[3:])
        mean, var, gamma, beta, training = ins[1:6]
        if not training and type(mean) is np.ndarray and type(var) is np.ndarray:
            run = kernel_for(x, w, bias, stride, padding, dilation, groups)
            if run is not None:
                w2, b2 = fold_batch_norm(w, bias, mean, var, gamma, beta, eps)
                return run(x, w2, b2, stride, padding, dilation, groups)
        ins[0] = fallback([x, w, bias])
        return bn_step(ins)
    return step
