"""ONNX emitters of scans, statistics and random draws: cumprod/cummax/logcumsumexp,
quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal.

The statistics are decompositions and export through their parts; of the family's own ops
none is emitted yet (``cummax``, ``logcumsumexp``, ``mode`` and ``poisson`` have no ONNX node;
the two that have one are listed in ``NOT_EMITTED`` with the reason)."""
from __future__ import annotations

from ._table import emits  # noqa: F401

NOT_EMITTED = {
    "cumprod": "ONNX's CumProd exists from opset 26 on, above the opsets the exporter targets "
               "and onnxruntime runs",
    "multinomial": "ONNX's Multinomial draws with replacement only, from log-probabilities, "
                   "and its draws cannot match scriptmod's generator",
}
