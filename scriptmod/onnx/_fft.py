"""ONNX emitters of torch.fft (pocketfft through NumPy/SciPy) and stft/istft."""
from __future__ import annotations

from ._table import emits  # noqa: F401
