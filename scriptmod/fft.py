"""``scriptmod.fft``: torch.fft (pocketfft through NumPy/SciPy) and stft/istft."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401

__all__: list[str] = []
