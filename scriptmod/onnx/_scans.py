"""ONNX emitters of scans, statistics and random draws: cumprod/cummax/logcumsumexp, quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal."""
from __future__ import annotations

from ._table import emits  # noqa: F401
