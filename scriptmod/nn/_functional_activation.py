"""Activations of ``scriptmod.nn.functional`` and the helpers every functional family shares
(re-exported by ``scriptmod.nn.functional``; the other families build on this module)."""
from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable

import numpy as np

from scriptmod import _dispatch
from scriptmod._creation import arange, rand
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes
from scriptmod.autograd import grad_mode
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.ir.ops.rules import no_kernel
from scriptmod.tensor import Tensor

__all__ = [
    "relu", "relu_", "relu6", "hardtanh", "hardtanh_", "gelu", "silu", "elu", "elu_", "celu",
    "celu_", "selu", "selu_", "leaky_relu", "leaky_relu_", "prelu", "rrelu", "rrelu_",
    "threshold", "threshold_", "sigmoid", "tanh", "softplus", "logsigmoid", "softmax",
    "log_softmax", "softmin", "hardswish", "hardsigmoid", "mish", "glu", "softsign",
    "softshrink", "hardshrink", "tanhshrink", "gumbel_softmax",
]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_HALVES = (dtypes.float16, dtypes.bfloat16)


# ---- helpers ----------------------------------------------------------------------------
def _tracing() -> bool:
    return bool(_dispatch.TRACERS)


def _pair(v: Any, name: str) -> tuple[int, int]:
    """``3`` or ``(3, 2)`` -> ``(3, 2)``; the error names the argument."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v), int(v)
    if isinstance(v, (tuple, list)) and len(v) in (1, 2):
        return (int(v[0]), int(v[-1]))
    raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")


def _apply(input: Tensor, fn: Callable[[Tensor], Tensor], inplace: bool) -> Tensor:
    """``fn(input)``, or with ``inplace`` written back into ``input`` (same object returned).

    In place under autograd, ``fn`` reads a clone so that the values its derivative saved
    are not the ones overwritten (PyTorch saves the result instead; same gradients)."""
    if not inplace:
        return fn(input)
    needs_clone = input.requires_grad and grad_mode.is_grad_enabled()
    out = fn(input.clone() if needs_clone else input)
    if out._data is input._data and not _tracing():   # nothing written (eval dropout): torch
        return input                                   # leaves the version as it is
    return input.copy_(out)


def _floating(x: Tensor, name: str) -> Tensor:
    """The activations PyTorch has float kernels only for refuse an integer or bool input
    (NotImplementedError) instead of computing in float."""
    if x.dtype.category < dtypes.FLOAT:
        raise no_kernel(name, x.dtype)
    return x


def _opmath(x: Tensor) -> Tensor:
    """What PyTorch compares a half tensor with a bound in: float32 (``x <= 0.1`` on a
    bfloat16 tensor would round 0.1 to bfloat16 first)."""
    return x.float() if x.dtype in _HALVES else x


def _rounded_once(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``fn`` computed in float32 for a float16/bfloat16 input and its result rounded once to
    the input's dtype, as PyTorch's activation kernels compute (silu(-20.3) in float16 is
    -6e-08, not the -0.0 of a decomposition that rounds after each op). A traced graph holds
    the two casts, and a fused kernel computes the same."""
    @functools.wraps(fn)
    def once(x: Tensor) -> Tensor:
        return fn(x.float()).to(x.dtype) if x.dtype in _HALVES else fn(x)
    return once


# ---- activations ------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return input.relu_() if inplace else input.relu()


def relu_(input: Tensor) -> Tensor:
    return input.relu_()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError("hardtanh: min_val cannot be greater than max_val")
    if input.dtype is dtypes.bool_:
        raise DTypeError("Bool inputs not supported for hardtanh")
    if input.dtype is dtypes.uint8 and (min_val < 0 or max_val < 0):
        raise DTypeError("cannot do hardtanh on an unsigned type with negative limits")
    return _apply(input, lambda x: _hardtanh(x, min_val, max_val), inplace)


def _hardtanh(x: Tensor, lo: float, hi: float) -> Tensor:
    """where, not clamp: PyTorch's gradient is 0 at the bounds themselves. A bound of 0 is
    relu, which keeps -0.0 (as PyTorch's clamp does) and has gradient 0 at 0; NaN stays NaN."""
    c = _opmath(x)
    lower = x.relu() if lo == 0 else where(c <= lo, lo, x)
    return where(c >= hi, hi, lower).to(x.dtype)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


@_rounded_once
def _gelu_none(x: Tensor) -> Tensor:
    # erfc form: no cancellation for large negative x (0.5 x (1 + erf) loses all digits there)
    return 0.5 * x * (x * -_SQRT1_2).erfc()


@_rounded_once
def _gelu_tanh(x: Tensor) -> Tensor:
    # x * (1 + tanh u) / 2 == x * sigmoid(2u): one exp, no cancellation; sigmoid saturates to
    # exactly 0 or 1, so backward never meets 0 * inf, and x = -inf gives -inf * 0 = NaN,
    # large negative x gives -0.0, as PyTorch's formula does
    u = (x + 0.044715 * (x * x * x)) * _SQRT_2_PI
    return x * (u * 2.0).sigmoid()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit; ``approximate='tanh'`` is the tanh approximation."""
    _floating(input, "gelu")
    if approximate == "none":
        return _gelu_none(input)
    if approximate == "tanh":
        return _gelu_tanh(input)
    raise ArgumentValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _apply(_floating(input, "silu"), _rounded_once(lambda x: x * x.sigmoid()), inplace)


def _elu(alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> Callable[[Tensor], Tensor]:
    """PyTorch's one ELU kernel: ``scale * x`` for x > 0, else ``alpha * scale *
    (exp(input_scale * x) - 1)`` (ELU, SELU and CELU are its three settings). expm1 sees
    min(x, 0), so the unused branch never overflows (its gradient would be NaN)."""
    def fn(x: Tensor) -> Tensor:
        neg = x.clamp(max=0.0)
        neg = (neg if input_scale == 1 else neg * input_scale).expm1() * (alpha * scale)
        return where(x > 0, x if scale == 1 else x * scale, neg)
    return _rounded_once(fn)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return _apply(_floating(input, "elu"), _elu(alpha), inplace)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, True)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants (Klambauer et al., 2017)."""
    return _apply(_floating(input, "selu"), _elu(_SELU_ALPHA, _SELU_SCALE), inplace)


def selu_(input: Tensor) -> Tensor:
    return selu(input, True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    if alpha == 0:
        raise ArgumentValueError("celu: alpha cannot be 0 for CELU (the input is divided by it)")
    return _apply(_floating(input, "celu"), _elu(alpha, 1.0, 1.0 / alpha), inplace)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, True)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _apply(_floating(input, "leaky_relu"), lambda x: where(x > 0, x, x * negative_slope),
                  inplace)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, True)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Randomized leaky ReLU: in training each x <= 0 is scaled by its own slope drawn from
    U(lower, upper) (its gradient is that slope); in eval, leaky_relu with the mean slope.
    ``training`` is a Python flag here, so a traced model keeps the mode it was traced in."""
    if lower > upper:
        raise ArgumentValueError(f"rrelu: lower bound ({lower}) must be less than or equal to "
                                 f"the upper bound ({upper})")
    _floating(input, "rrelu")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)

    def fn(x: Tensor) -> Tensor:
        slope = rand(list(x.shape), device=x.device) * (upper - lower) + lower
        return where(_opmath(x) > 0, x, (_opmath(x) * slope).to(x.dtype))
    return _apply(input, fn, inplace)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
           training: bool = False) -> Tensor:
    return rrelu(input, lower, upper, training, True)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """where(x > 0, x, w * x) with ``weight`` broadcast over channel dim 1; with more than one
    weight a 1-D input (one channel) raises, as PyTorch documents."""
    _floating(input, "prelu")
    if weight.dtype is not input.dtype:
        raise DTypeError(f"prelu: Type promoting not supported. Got {input.dtype.short} and "
                         f"{weight.dtype.short}")
    if weight.dim() > 1:
        raise ShapeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                         f"ndim = {weight.dim()}")
    n = weight.numel()
    if n != 1:   # PyTorch: the channel dim is dim 1, and a 1-D input has one channel
        if input.dim() == 0:
            raise ShapeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.dim() >= 2 else 1
        if channels != n:
            raise ShapeError(f"Mismatch of parameter numbers and input channel size. Found "
                             f"parameter numbers = {n} and channel size = {channels}.")
        if input.dim() >= 2:
            weight = weight.reshape([n] + [1] * (input.dim() - 2))
    elif weight.dim() != 0:
        weight = weight.reshape([])
    return where(input > 0, input, weight * input)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """value if x <= threshold else x (so NaN stays NaN, as in PyTorch)."""
    if input.dtype is dtypes.bool_:
        raise no_kernel("threshold", input.dtype)
    return _apply(input, lambda x: where(_opmath(x) <= threshold, value, x).to(x.dtype), inplace)


def threshold_(input: Tensor, threshold_: float, value: float) -> Tensor:
    return threshold(input, threshold_, value, True)


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def _softplus(z: Tensor) -> Tensor:
    """log(1 + e^z) with an exact gradient everywhere, sigmoid(z), including z == 0:
    both branches only ever exponentiate -|z|, so neither overflows nor yields 0 * inf."""
    pos = z > 0
    return where(pos, z, 0.0) + where(pos, -z, z).exp().log1p()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    @_rounded_once
    def fn(x: Tensor) -> Tensor:
        z = x * beta if beta != 1 else x
        sp = _softplus(z) if beta == 1 else _softplus(z) / beta
        return where(z > threshold, x, sp)
    return fn(_floating(input, "softplus"))


def logsigmoid(input: Tensor) -> Tensor:
    """min(x, 0) - log1p(exp(-|x|)), PyTorch's form (logsigmoid(+inf) is +0.0); -|x| is
    written as a where so that the gradient at 0 is exact (1/2)."""
    return _logsigmoid(_floating(input, "log_sigmoid"))


@_rounded_once
def _logsigmoid(input: Tensor) -> Tensor:
    neg = input < 0
    return where(neg, input, 0.0) - where(neg, input, -input).exp().log1p()


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.dim())
    return input.softmax(dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim())
    return input.log_softmax(dim, dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    """softmax(-x)."""
    if dim is None:
        dim = _softmax_dim("softmin", input.dim())
    return (-input).softmax(dim, dtype=dtype)


# ---- piecewise and gated activations -----------------------------------------------------
@_rounded_once
def _hardswish(x: Tensor) -> Tensor:
    # PyTorch's values, x * relu6(x + 3) / 6 (-inf gives NaN, -3 gives -0.0, x * 6 overflows
    # to inf above 5.7e37 in float32), with its gradient: the middle piece is the open
    # (-3, 3), so the gradient is 0 at -3 and 1 at 3
    return where(x <= -3.0, x * 0.0, where(x >= 3.0, x * 6.0 / 6.0, x * (x + 3.0) / 6.0))


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * relu6(x + 3) / 6."""
    return _apply(_floating(input, "hardswish"), _hardswish, inplace)


@_rounded_once
def _hardsigmoid(x: Tensor) -> Tensor:
    # gradient 1/6 strictly inside (-3, 3) and 0 at the bounds, as PyTorch's
    return where(x <= -3.0, 0.0, where(x >= 3.0, 1.0, (x + 3.0) / 6.0))


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6."""
    return _apply(_floating(input, "hardsigmoid"), _hardsigmoid, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x)), softplus in its overflow-free form."""
    return _apply(_floating(input, "mish"), _rounded_once(lambda x: x * _softplus(x).tanh()),
                  inplace)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of ``input`` along ``dim``."""
    if input.dim() == 0:
        raise ShapeError("glu does not support scalars because halving size must be even")
    _floating(input, "glu")
    n = input.shape[dim]
    if n % 2:
        raise ShapeError(f"Halving dimension must be even, but dimension {dim} is size {n}")
    a, b = (_opmath(half) for half in input.chunk(2, dim))
    return (a * b.sigmoid()).to(input.dtype)


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|) (true division: an integer input gives a float result, as in PyTorch;
    a bool one has no abs there)."""
    if input.dtype is dtypes.bool_:
        raise no_kernel("abs", input.dtype)
    return input / (input.abs() + 1)


def _shrink_zone(x: Tensor, lambd: float) -> Tensor:
    """-lambd <= x <= lambd, compared in float32 for a half input (NaN is outside)."""
    return _opmath(x).abs() <= lambd


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, 0 between (gradient 0 at +-lambd)."""
    if lambd < 0:
        raise ArgumentValueError(f"lambda must be greater or equal to 0, but found to be "
                                 f"{lambd}.")
    fn = _rounded_once(lambda x: where(_shrink_zone(x, lambd), 0.0,
                                       where(x > 0, x - lambd, x + lambd)))
    return fn(_floating(input, "softshrink"))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x outside [-lambd, lambd], 0 inside it."""
    x = _floating(input, "hardshrink")
    return where(_shrink_zone(x, lambd), 0.0, x).to(x.dtype)


def tanhshrink(input: Tensor) -> Tensor:
    """x - tanh(x)."""
    return input - input.tanh()


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) with g ~ Gumbel(0, 1) drawn per element; ``hard=True``
    returns the one-hot of its argmax, with the soft sample's gradient (straight-through)."""
    u = rand(list(logits.shape), device=logits.device).to(logits.dtype)
    gumbels = -(-(1.0 - u).log()).log()     # -log(Exp(1)), the exponential from 1 - U in (0, 1]
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    d = dim % logits.dim()
    n = logits.shape[d]
    positions = arange(n, device=logits.device).reshape([n] + [1] * (logits.dim() - d - 1))
    y_hard = (positions == y_soft.argmax(dim=d, keepdim=True)).to(logits.dtype)
    return y_hard - y_soft.detach() + y_soft
