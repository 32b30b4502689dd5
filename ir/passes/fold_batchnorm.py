"""BatchNorm folding for inference: an eval-mode ``batch_norm`` with constant statistics is
an affine map per channel, ``y = x * s + t`` with ``s = gamma / sqrt(var + eps)`` and
``t = beta - mean * s``. After a convolution (or a ``matmul`` by a constant matrix, plus its
bias: ``nn.Linear``) that nothing else reads, ``s`` and ``t`` go into that layer's weight and
bias; elsewhere the BatchNorm becomes the elementwise ``x * s + t``, which fuses.

The pass only rewrites the graph into ops on the constants; ``fold_constants`` with an
evaluator then computes the new weights (the IR does not run kernels).
"""
from __future__ import annotations

from ..builder import Builder
from ..dtypes import float32, float64
from ..graph import Graph, Node, Prim, Value, known_value
from ..printer import is_payload
from ..types import TensorType

_FOLDED_DTYPES = (float32, float64)     # lower precision would round the folded weights
_CONV_KINDS = ("sm::conv1d", "sm::conv2d", "sm::conv3d")


def fold_batchnorm(graph: Graph) -> Graph:
    """Fold every eval-mode ``sm::batch_norm`` with constant statistics, in place.

        >>> import numpy as np
        >>> from scriptmod.ir import parse
        >>> from scriptmod.ir.passes import eliminate_dead_code, fold_constants
        >>> from scriptmod.runtime.interpreter import evaluate_node
        >>> ones = np.ones(2, np.float32)
        >>> g = parse('''graph(%x : Float(B, 2, 4, 4)):
        ...   %w : Float(2, 2, 1, 1) = prim::Constant[value=<Tensor>]()
        ...   %none : NoneType = prim::Constant[value=None]()
        ...   %c : Float(B, 2, 4, 4) = sm::conv2d(%x, %w, %none)
        ...   %m : Float(2) = prim::Constant[value=<Tensor>]()
        ...   %v : Float(2) = prim::Constant[value=<Tensor>]()
        ...   %train : bool = prim::Constant[value=0]()
        ...   %y : Float(B, 2, 4, 4) = sm::batch_norm(%c, %m, %v, %none, %none, %train, %none)
        ...   return (%y)
        ... ''', constants=[np.ones((2, 2, 1, 1), np.float32), ones, ones])
        >>> g = eliminate_dead_code(fold_constants(fold_batchnorm(g), evaluate=evaluate_node))
        >>> print(g)
        graph(%x : Float(B, 2, 4, 4)):
          %0 : Float(2) = prim::Constant[value=<Tensor>]()
          %1 : Float(2, 2, 1, 1) = prim::Constant[value=<Tensor>]()
          %2 : Float(B, 2, 4, 4) = sm::conv2d[...](%x, %1, %0)
          return (%2)
    """
    for node in list(graph.walk()):
        if node.kind == "sm::batch_norm" and _foldable(node):
            _fold(node)
    return graph


def _payload(v: Value) -> bool:
    return v.node.kind == Prim.CONSTANT and is_payload(v.node.attrs.get("value"))


def _none(v: Value) -> bool:
    return v.node.kind == Prim.CONSTANT and v.node.attrs.get("value") is None


def _dtype(v: Value) -> object:
    return v.type.dtype if isinstance(v.type, TensorType) else None


def _rank(v: Value) -> int | None:
    shape = v.type.shape if isinstance(v.type, TensorType) else None
    return None if shape is None else len(shape)


def _foldable(bn: Node) -> bool:
    """Eval mode, constant statistics and affine parameters, all of the input's dtype."""
    x, mean, var, gamma, beta, training = bn.inputs[:6]
    if known_value(training) is not False or not (_payload(mean) and _payload(var)):
        return False
    if not all(_payload(p) or _none(p) for p in (gamma, beta)):
        return False
    dtype, rank = _dtype(x), _rank(x)
    return dtype in _FOLDED_DTYPES and rank is not None and rank >= 2 and all(
        _dtype(p) is dtype for p in (mean, var, gamma, beta) if _payload(p))


def _fold(bn: Node) -> None:
    x = bn.inputs[0]
    with Builder(bn.graph, bn.source).insert_before(bn) as b:
        scale, shift = _affine(b, bn)
        producer = x.node if len(x.uses) == 1 else None
        if producer is not None and _into_layer(b, producer, scale, shift, bn):
            return
        per_channel = [-1] + [1] * ((_rank(x) or 2) - 2)
        out = b.op("add", b.op("mul", x, b.op("reshape", scale, per_channel)),
                   b.op("reshape", shift, per_channel))
    _replace(bn, out)


def _affine(b: Builder, bn: Node) -> tuple[Value, Value]:
    """``scale = gamma * rsqrt(var + eps)``, ``shift = beta - mean * scale`` (as ops)."""
    _, mean, var, gamma, beta = bn.inputs[:5]
    scale = b.op("rsqrt", b.op("add", var, float(bn.attrs.get("eps", 1e-5))))
    if not _none(gamma):
        scale = b.op("mul", scale, gamma)
    shift = b.op("neg", b.op("mul", mean, scale))
    if not _none(beta):
        shift = b.op("add", shift, beta)
    return scale, shift


def _shifted_bias(b: Builder, bias: Value | None, scale: Value, shift: Value) -> Value:
    """The layer's bias after the fold: ``bias * scale + shift``."""
    return shift if bias is None else b.op("add", b.op("mul", bias, scale), shift)


def _into_layer(b: Builder, producer: Node, scale: Value, shift: Value, bn: Node) -> bool:
    if producer.kind in _CONV_KINDS:
        return _into_conv(b, producer, scale, shift, bn)
    return _into_linear(b, producer, scale, shift, bn)


def _into_conv(b: Builder, conv: Node, scale: Value, shift: Value, bn: Node) -> bool:
    x, weight, bias = conv.inputs
    if not _payload(weight) or not (_payload(bias) or _none(bias)) \
            or _dtype(weight) is not _dtype(bn.inputs[1]):
        return False
    out_channels = [-1] + [1] * ((_rank(weight) or 1) - 1)
    w = b.op("mul", weight, b.op("reshape", scale, out_channels))
    new_bias = _shifted_bias(b, None if _none(bias) else bias, scale, shift)
    _replace(bn, b.op(conv.kind.split("::")[1], x, w, new_bias, **conv.attrs))
    conv.destroy()
    return True


def _into_linear(b: Builder, node: Node, scale: Value, shift: Value, bn: Node) -> bool:
    """``matmul(x, W) [+ bias]`` with a constant 2-D ``W`` and a 2-D output (N, C)."""
    matmul, bias = node, None
    if node.kind == "sm::add":
        a, c = node.inputs
        matmul, bias = (a.node, c) if _payload(c) else (c.node, a)
        if matmul.kind != "sm::matmul" or len(matmul.output.uses) != 1 \
                or not _payload(bias) or _rank(bias) != 1:
            return False
    if matmul.kind != "sm::matmul":
        return False
    x, weight = matmul.inputs
    if not _payload(weight) or _rank(weight) != 2 or _rank(matmul.output) != 2 \
            or _dtype(weight) is not _dtype(bn.inputs[1]):
        return False
    out = b.op("add", b.op("matmul", x, b.op("mul", weight, scale)),
               _shifted_bias(b, bias, scale, shift))
    _replace(bn, out)
    if node is not matmul:
        node.destroy()
    matmul.destroy()
    return True


def _replace(bn: Node, out: Value) -> None:
    bn.output.replace_all_uses_with(out)
    bn.destroy()
