"""``op_cases`` rows of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
