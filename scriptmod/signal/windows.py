"""``scriptmod.signal.windows``: PyTorch's ``torch.signal.windows`` (SciPy's window
functions with keyword-only options; ``sym=False`` gives the periodic window for spectral
analysis). Each is computed in float64 by NumPy from its closed form at PyTorch's sample
points and rounded once to ``dtype`` (float32 or float64).

    >>> import scriptmod as sm
    >>> sm.signal.windows.bartlett(5)
    tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.signal._window_functions import bartlett as _triangle
from scriptmod.signal._window_functions import cosine_sum, kaiser as _kaiser, window_tensor
from scriptmod.tensor import Tensor

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
           "general_hamming", "hamming", "hann", "kaiser", "nuttall"]


def _checked(name: str, M: int, dtype: Any, layout: Any) -> Any:
    """PyTorch's ``_window_function_checks``: the dtype to compute in."""
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout is not None and str(layout) not in ("torch.strided", "strided"):
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    dtype = dtype or D.get_default_dtype()
    if dtype not in (D.float32, D.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _make(name: str, M: int, sym: bool, dtype: Any, layout: Any, device: Any,
          requires_grad: bool, values: Callable[[np.ndarray, int], np.ndarray]) -> Tensor:
    """``values(k, L)`` at ``k = 0 .. M - 1`` where ``L`` is the symmetric window's span
    (``M - 1``; ``M`` for a periodic one); 0 and 1 points are empty and ``[1.]``."""
    dtype = _checked(name, M, dtype, layout)
    if M <= 1:
        return window_tensor(np.ones(M), dtype, device, requires_grad)
    span = M - 1 if sym else M
    return window_tensor(values(np.arange(M, dtype=np.float64), span), dtype, device,
                         requires_grad)


def exponential(M: int, *, center: float | None = None, tau: float = 1.0, sym: bool = True,
                dtype: Any = None, layout: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    """``exp(-|k - center| / tau)``; ``center`` defaults to the window's middle."""
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    c = center

    def values(k: np.ndarray, span: int) -> np.ndarray:
        mid = span / 2.0 if c is None else c
        return np.exp(-np.abs(k - mid) / tau)
    return _make("exponential", M, sym, dtype, layout, device, requires_grad, values)


def cosine(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:
    """The sine window, ``sin(pi (k + 0.5) / (L + 1))``."""
    return _make("cosine", M, sym, dtype, layout, device, requires_grad,
                 lambda k, span: np.sin(math.pi * (k + 0.5) / (span + 1)))


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype: Any = None,
             layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """``exp(-((k - L / 2) / std)^2 / 2)``."""
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    return _make("gaussian", M, sym, dtype, layout, device, requires_grad,
                 lambda k, span: np.exp(-((k - span / 2.0) / std) ** 2 / 2))


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype: Any = None,
           layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """``I0(beta sqrt(1 - (2k / L - 1)^2)) / I0(beta)``."""
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    return _make("kaiser", M, sym, dtype, layout, device, requires_grad,
                 lambda k, span: _kaiser(k, span, beta))


def hamming(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:
    """``general_hamming`` with ``alpha=0.54``."""
    return general_hamming(M, alpha=0.54, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def hann(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
         device: Any = None, requires_grad: bool = False) -> Tensor:
    """``general_hamming`` with ``alpha=0.5``."""
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def general_hamming(M: int, *, alpha: float = 0.54, sym: bool = True, dtype: Any = None,
                    layout: Any = None, device: Any = None,
                    requires_grad: bool = False) -> Tensor:
    """``alpha - (1 - alpha) cos(2 pi k / L)``."""
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def general_cosine(M: int, *, a: Iterable[float], sym: bool = True, dtype: Any = None,
                   layout: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:
    """``sum_i (-1)^i a_i cos(2 pi i k / L)``."""
    if a is None:
        raise TypeError("Coefficients are required")
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    coefficients = tuple(float(w) for w in a)
    if not coefficients:
        raise ValueError("Coefficients cannot be empty")
    return _make("general_cosine", M, sym, dtype, layout, device, requires_grad,
                 lambda k, span: cosine_sum(k, span, coefficients))


def blackman(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    """``general_cosine`` with ``a = [0.42, 0.5, 0.08]``."""
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def bartlett(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    """The triangle ``1 - |2k / L - 1|``."""
    return _make("bartlett", M, sym, dtype, layout, device, requires_grad, _triangle)


def nuttall(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:
    """``general_cosine`` with Nuttall's four coefficients."""
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym,
                          dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)
