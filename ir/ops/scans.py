"""Schemas of scans, statistics and random draws: cumprod/cummax/logcumsumexp,
quantile/median/mode, std_mean, cov, trapezoid, bernoulli/multinomial/normal.

Only what a decomposition cannot do well is a row here: the scans (a running product, maximum
or log-sum-exp is one NumPy accumulate), ``mode`` (a count of equal values) and the draws
whose distribution is not a formula of a uniform one (``multinomial``, ``poisson``). The
statistics (quantile, cov, std_mean, trapezoid, ...) are decompositions in
``scriptmod/_ops_scans.py``."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..schema import ANY_RANK, IMPURE, NONDIFF, op
from ..types import Shape


def _real(opname: str) -> Any:
    """The input's dtype, which must be real (PyTorch has no ordering of complex numbers)."""
    def rule(ops: Sequence[Any], attrs: dict) -> D.DType:
        t = R.same(ops, attrs)
        if t.category == D.COMPLEX:
            raise DTypeError(f"{opname}(): expected a real (bool, integer or floating point) "
                             f"input, got {t.name}")
        return t
    return rule


def _scan_pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    """(values, indices) of a running maximum or minimum: both of the input's shape."""
    s = ops[0][1]
    if s is not None:
        R.norm_dim(attrs["dim"], len(s))
    return s, s


def _scan_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is not None:
        R.norm_dim(attrs["dim"], len(s))
    return s


def _multinomial_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """(num_samples,) from a vector of weights, (rows, num_samples) from a matrix."""
    s = ops[0][1]
    if s is None:
        return None
    if len(s) not in (1, 2):
        raise ShapeError(f"multinomial(): prob_dist must be 1 or 2 dim, got a tensor of "
                           f"shape {tuple(s)}")
    return tuple(s[:-1]) + (attrs["num_samples"],)


def _multinomial_dtype(ops: Sequence[Any], attrs: dict) -> D.DType:
    t = R.same(ops, attrs)
    if t.category != D.FLOAT:
        raise DTypeError(f"multinomial(): expected a floating point tensor of weights, got "
                         f"{t.name}")
    return D.int64


op("cumprod(Tensor self, *, int dim, ScalarType? dtype=None) -> Tensor", R.sum_like,
   _scan_shape, ANY_RANK, doc="Running product along dim; integers and bools in int64.")
op("cummax(Tensor self, *, int dim) -> (Tensor, Tensor)", R.pair(_real("cummax"), R.to_int64),
   _scan_pair, ANY_RANK,
   doc="Running maximum and the index it came from (the latest of equal values; a NaN is "
       "kept from where it appears, at the latest NaN's index).")
op("cummin(Tensor self, *, int dim) -> (Tensor, Tensor)", R.pair(_real("cummin"), R.to_int64),
   _scan_pair, ANY_RANK, doc="Running minimum; indices as cummax's.")
op("logcumsumexp(Tensor self, *, int dim) -> Tensor", R.float_only("logcumsumexp", kernel=True),
   _scan_shape, ANY_RANK, doc="log(cumsum(exp(x))) without overflow or underflow.")
op("mode(Tensor self, *, int dim=-1, bool keepdim=False) -> (Tensor, Tensor)",
   R.pair(_real("mode"), R.to_int64), R.reduce_pair, ANY_RANK,
   doc="The most frequent value along dim (the smallest of equally frequent ones) and the "
       "last index holding it.")
op("multinomial(Tensor self, *, int num_samples, bool replacement=False) -> Tensor",
   _multinomial_dtype, _multinomial_shape, IMPURE, NONDIFF,
   doc="Category indices drawn with the rows' weights as probabilities.")
op("poisson(Tensor self) -> Tensor", _real("poisson"), R.same_shape, IMPURE, NONDIFF, ANY_RANK,
   doc="A Poisson draw per element with that element as its rate.")
