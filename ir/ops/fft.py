"""Schemas of torch.fft (pocketfft through NumPy/SciPy) and stft/istft."""
from __future__ import annotations
