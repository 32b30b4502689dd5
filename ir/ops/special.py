"""Schemas of special functions (torch.special and the top-level gamma/erfinv/Bessel family), on SciPy's special."""
from __future__ import annotations
