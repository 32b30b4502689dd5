"""``scriptmod.signal``: PyTorch's ``torch.signal`` (its ``windows`` module).

    >>> import scriptmod as sm
    >>> sm.signal.windows.hann(4, sym=False)
    tensor([0.0000, 0.5000, 1.0000, 0.5000])
"""
from __future__ import annotations

from scriptmod.signal import windows  # noqa: F401

__all__ = ["windows"]
