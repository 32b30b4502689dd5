"""Reference kernels of torch.fft's three transform families: pocketfft through ``scipy.fft``
(which keeps float32 as complex64, where NumPy's own fft would compute in float64), cuFFT
through ``cupyx.scipy.fft`` when the arrays are CuPy's. SciPy is imported on first use, so
importing scriptmod never loads it.

The ops' ``normalization`` is a scale; SciPy's ``norm=`` names a scale by the direction it
applies to, so each kernel picks the name that gives its scale in its direction. The
``forward`` variants of ``fft_r2c`` and ``fft_c2r`` (ihfft, hfft) are the conjugates of the
plain ones: ``r2c(x, forward=False) = conj(rfft(x))`` and ``c2r(z, forward=True) =
irfft(conj(z))`` at the same scale.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import kernel

# (normalization, forward) -> SciPy's norm= that applies that scale in that direction
_SCIPY_NORM = {("none", True): "backward", ("by_root_n", True): "ortho",
               ("by_n", True): "forward", ("none", False): "forward",
               ("by_root_n", False): "ortho", ("by_n", False): "backward"}


def _fft_module(xp: Any) -> Any:
    """``scipy.fft`` for NumPy arrays, ``cupyx.scipy.fft`` for CuPy's."""
    if xp is np:
        import scipy.fft as fft
    else:
        import cupyx.scipy.fft as fft  # type: ignore
    return fft


def _axes(x: Any, dim: Sequence[int]) -> list[int]:
    return [d % x.ndim for d in dim]


@kernel("fft_c2c")
def _c2c(xp: Any, x: Any, *, dim: Sequence[int], normalization: str, forward: bool) -> Any:
    fft = _fft_module(xp)
    transform = fft.fftn if forward else fft.ifftn
    return transform(x, axes=_axes(x, dim), norm=_SCIPY_NORM[normalization, forward])


@kernel("fft_r2c")
def _r2c(xp: Any, x: Any, *, dim: Sequence[int], normalization: str, forward: bool) -> Any:
    out = _fft_module(xp).rfftn(x, axes=_axes(x, dim), norm=_SCIPY_NORM[normalization, True])
    return out if forward else xp.conj(out)


@kernel("fft_c2r")
def _c2r(xp: Any, x: Any, *, dim: Sequence[int], normalization: str, forward: bool,
         last_dim_size: int) -> Any:
    axes = _axes(x, dim)
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    return _fft_module(xp).irfftn(xp.conj(x) if forward else x, s=sizes, axes=axes,
                                  norm=_SCIPY_NORM[normalization, False])
