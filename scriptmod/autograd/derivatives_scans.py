"""Derivatives of scans, statistics and random draws: cumprod/cummax/logcumsumexp, quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
