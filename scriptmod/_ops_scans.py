"""Functions and Tensor methods of scans, statistics and random draws: cumprod/cummax/logcumsumexp, quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal: each published once with ``@public``."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
