"""``scriptmod.special``: special functions (torch.special and the top-level gamma/erfinv/Bessel family), on SciPy's special."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401

__all__: list[str] = []
