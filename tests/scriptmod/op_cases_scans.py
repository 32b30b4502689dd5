"""``op_cases`` rows of scans, statistics and random draws: cumprod/cummax/logcumsumexp, quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
