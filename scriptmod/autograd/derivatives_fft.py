"""Derivatives of torch.fft's three transform families (rows of ``autograd.derivatives``' table).

Each transform is linear, so its derivative is its adjoint (PyTorch's convention for complex
gradients: the conjugate transpose), written with the same three ops, so double backward
works:

- ``fft_c2c``: the same transform in the other direction at the same scale.
- ``fft_c2r`` (irfft, hfft): the real-to-complex transform in the other direction, with the
  entries whose mirror image lies outside the one-sided half counted twice (entries
  ``1 .. n - (n // 2 + 1)``), as PyTorch's ``fft_c2r_backward``.
- ``fft_r2c`` (rfft, ihfft): the adjoint is the real part of the zero-padded inverse
  transform; written as ``fft_c2r`` of the gradient with those same entries halved (c2r
  counts them twice), which needs neither a complex pad nor ``real``.
"""
from __future__ import annotations

import warnings
from typing import Any

from scriptmod._creation import arange
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.ir import dtypes as D
from scriptmod.tensor import Tensor


def _mirror_weights(g: Tensor, last: int, n: int, factor: float) -> Tensor:
    """Per-entry weights along dim ``last`` of a one-sided spectrum of a length-``n`` signal:
    ``factor`` on the entries mirrored outside the half (``1 .. n - (n // 2 + 1)``), 1
    elsewhere; shaped to broadcast against ``g``. Built from registry ops (``arange`` and
    comparisons), so a compiled backward records it."""
    half = n // 2 + 1
    k = arange(half, dtype=D.to_real(g.dtype), device=g.device)
    mirrored = ((k >= 1) & (k <= n - half)).to(k.dtype)
    trailing = g.dim() - 1 - last % g.dim()
    return (1 + (factor - 1) * mirrored).reshape((half,) + (1,) * trailing)


def real_part(z: Tensor) -> Tensor:
    """The real part of ``z`` as a real tensor: the gradient of a real input read as complex
    (``Tensor.real`` where the views family has it, else a cast that drops the imaginary
    part, which NumPy would warn about)."""
    if hasattr(Tensor, "real"):
        return z.real
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return z.to(D.to_real(z.dtype))


def _fitted(ctx: Any, g: Tensor) -> Tensor:
    """``g`` for a real input (read as complex by the op): its real part."""
    return g if ctx.input_meta[0][1].category == D.COMPLEX else real_part(g)


@derivative("fft_c2c")
def _c2c(ctx: Any, g: Tensor) -> tuple:
    a = ctx.attrs
    return (_fitted(ctx, _op("fft_c2c", g, dim=list(a["dim"]),
                             normalization=a["normalization"], forward=not a["forward"])),)


@derivative("fft_r2c")
def _r2c(ctx: Any, g: Tensor) -> tuple:
    a = ctx.attrs
    last = a["dim"][-1]
    n = int(ctx.input_meta[0][0][last])
    w = _mirror_weights(g, last, n, 0.5)
    return (_op("fft_c2r", g * w, dim=list(a["dim"]), normalization=a["normalization"],
                forward=not a["forward"], last_dim_size=n),)


@derivative("fft_c2r")
def _c2r(ctx: Any, g: Tensor) -> tuple:
    a = ctx.attrs
    gi = _op("fft_r2c", g, dim=list(a["dim"]), normalization=a["normalization"],
             forward=not a["forward"])
    return (_fitted(ctx, gi * _mirror_weights(gi, a["dim"][-1], a["last_dim_size"], 2.0)),)
