"""The top-level window functions of PyTorch (``scriptmod.hann_window``, ``hamming_window``,
``blackman_window``, ``bartlett_window``, ``kaiser_window``): ``periodic=True`` (the default)
gives the first ``N`` points of the symmetric window of ``N + 1``, as spectral analysis wants.
``layout`` and ``pin_memory`` are accepted for PyTorch's signatures and have no effect.

Windows are computed in float64 by NumPy from their closed forms and rounded once to
``dtype``; they take no tensor input, so a traced model holds them as constants.

    >>> import scriptmod as sm
    >>> sm.hann_window(4)
    tensor([0.0000, 0.5000, 1.0000, 0.5000])
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from scriptmod._public import public
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError
from scriptmod.tensor import Tensor


def window_tensor(values: np.ndarray, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    """A float64 array as a new tensor of ``dtype`` on ``device``."""
    from scriptmod._creation import tensor
    return tensor(values, dtype=dtype, device=device, requires_grad=requires_grad)


def _window(name: str, formula: Callable[[np.ndarray, int], np.ndarray], window_length: int,
            periodic: bool, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    """``formula(k, N - 1)`` at ``k = 0 .. N - 1`` of the symmetric window (of ``N + 1``
    points when ``periodic``), after PyTorch's argument checks."""
    dtype = dtype or D.get_default_dtype()
    if dtype.category != D.FLOAT:
        raise DTypeError(f"{name} expects floating point dtypes, got: {dtype}")
    if not isinstance(window_length, int) or window_length < 0:
        raise ArgumentValueError(f"{name} requires non-negative window_length, got "
                                 f"window_length={window_length}")
    if window_length <= 1:
        return window_tensor(np.ones(window_length), dtype, device, requires_grad)
    n = window_length + 1 if periodic else window_length
    values = formula(np.arange(n, dtype=np.float64), n - 1)[:window_length]
    return window_tensor(values, dtype, device, requires_grad)


def cosine_sum(k: np.ndarray, m: int, coefficients: tuple[float, ...]) -> np.ndarray:
    """``sum_i (-1)^i a_i cos(2 pi i k / m)``: Hann, Hamming, Blackman, Nuttall."""
    return sum((-1) ** i * a * np.cos(2 * math.pi * i * k / m)
               for i, a in enumerate(coefficients))


def bartlett(k: np.ndarray, m: int) -> np.ndarray:
    """The triangle ``1 - |2k/m - 1|``."""
    return 1 - np.abs(2 * k / m - 1)


def kaiser(k: np.ndarray, m: int, beta: float) -> np.ndarray:
    """``I0(beta sqrt(1 - (2k/m - 1)^2)) / I0(beta)``."""
    r = 2 * k / m - 1
    return np.i0(beta * np.sqrt(np.clip(1 - r * r, 0, None))) / np.i0(beta)


@public(method=False, out=False)
def hann_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                layout: Any = None, device: Any = None, pin_memory: bool = False,
                requires_grad: bool = False) -> Tensor:
    """Hann window, ``0.5 - 0.5 cos(2 pi k / (N - 1))`` (``torch.hann_window``)."""
    return _window("hann_window", lambda k, m: cosine_sum(k, m, (0.5, 0.5)), window_length,
                   periodic, dtype, device, requires_grad)


@public(method=False, out=False)
def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54,
                   beta: float = 0.46, *, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: bool = False,
                   requires_grad: bool = False) -> Tensor:
    """Hamming window, ``alpha - beta cos(2 pi k / (N - 1))`` (``torch.hamming_window``)."""
    return _window("hamming_window", lambda k, m: cosine_sum(k, m, (alpha, beta)),
                   window_length, periodic, dtype, device, requires_grad)


@public(method=False, out=False)
def blackman_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                    layout: Any = None, device: Any = None, pin_memory: bool = False,
                    requires_grad: bool = False) -> Tensor:
    """Blackman window, ``0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))``."""
    return _window("blackman_window", lambda k, m: cosine_sum(k, m, (0.42, 0.5, 0.08)),
                   window_length, periodic, dtype, device, requires_grad)


@public(method=False, out=False)
def bartlett_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                    layout: Any = None, device: Any = None, pin_memory: bool = False,
                    requires_grad: bool = False) -> Tensor:
    """Bartlett (triangular) window, ``1 - |2k / (N - 1) - 1|``."""
    return _window("bartlett_window", bartlett, window_length, periodic, dtype, device,
                   requires_grad)


@public(method=False, out=False)
def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *,
                  dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """Kaiser window, ``I0(beta sqrt(1 - (2k / (N - 1) - 1)^2)) / I0(beta)``."""
    return _window("kaiser_window", lambda k, m: kaiser(k, m, beta), window_length, periodic,
                   dtype, device, requires_grad)
