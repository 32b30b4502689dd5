"""``op_cases`` rows of losses (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations
