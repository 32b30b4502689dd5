"""Derivatives of torch.fft (pocketfft through NumPy/SciPy) and stft/istft (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
