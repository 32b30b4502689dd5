"""``scriptmod.nn.functional``: the stateless forms of every layer (PyTorch's signatures).

Activations are decompositions into primitive ops (``ir.ops``), written in numerically safe
forms, so a backend only implements the primitives and the tracer sees plain elementwise
chains that fuse::

    >>> import scriptmod.nn.functional as F
    >>> F.gelu(scriptmod.tensor([0.0, 1.0]))
    tensor([0.0000, 0.8413])

``inplace=True`` writes the result into the input tensor and returns that same object.
"""
from __future__ import annotations

# The families, each in its own module, below this one: none imports it back.
from scriptmod.nn._functional_activation import (elu, gelu, hardtanh, leaky_relu, log_softmax,
                                                 logsigmoid, prelu, relu, relu6, relu_, sigmoid,
                                                 silu, softmax, softplus, tanh, threshold,
                                                 threshold_)
from scriptmod.nn._functional_activation import (_apply, _floating, _opmath, _pair, _rounded_once,
                                                 _softplus, _tracing)  # noqa: F401
from scriptmod.nn._functional_layers import (avg_pool2d, batch_norm, conv2d, cosine_similarity,
                                             dropout, embedding, layer_norm, linear, max_pool2d,
                                             normalize, one_hot, pad)
from scriptmod.nn._functional_attention import (multi_head_attention_forward,
                                                scaled_dot_product_attention)
from scriptmod.nn._functional_loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss,
                                           mse_loss, nll_loss)

__all__ = [
    "relu", "relu_", "relu6", "hardtanh", "gelu", "silu", "elu", "leaky_relu", "prelu",
    "threshold", "sigmoid", "tanh", "softplus", "logsigmoid", "softmax", "log_softmax",
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "dropout", "batch_norm", "layer_norm",
    "embedding", "pad", "normalize", "cosine_similarity", "one_hot", "scaled_dot_product_attention",
    "multi_head_attention_forward", "mse_loss", "l1_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy_with_logits",
]

