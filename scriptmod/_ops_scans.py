"""Functions and Tensor methods of scans, statistics and random draws:
cumprod/cummax/logcumsumexp, quantile/median/mode, std_mean, cov, trapezoid,
bernoulli/multinomial/normal: each published once with ``@public``.

The scans and ``mode`` call their registry ops; the statistics are decompositions into
existing ops (so they trace, differentiate and export with no rows of their own), written as
PyTorch's ATen functions compute them so that rounding agrees. The draws are in
``scriptmod._ops_random``.

    >>> import scriptmod as sm
    >>> sm.tensor([1., 2., 3.]).cumprod(0)
    tensor([1., 2., 6.])
    >>> sm.quantile(sm.tensor([1., 2., 3., 4.]), 0.5)
    tensor(2.5000)
"""
from __future__ import annotations

import numbers
import warnings
from collections import namedtuple
from typing import Any

from scriptmod._creation import arange, tensor, zeros, zeros_like
from scriptmod._dispatch import TRACERS, dispatch
from scriptmod._public import inplace_of, public
from scriptmod._shape_ops import cat
from scriptmod import _tensor_ops
from scriptmod._tensor_ops import where
from scriptmod.autograd import grad_mode
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rules import norm_dim
from scriptmod.tensor import Tensor, _dtype_arg

# torch.return_types: indexable, unpackable, read by name
cummax_t = namedtuple("cummax", ["values", "indices"])
cummin_t = namedtuple("cummin", ["values", "indices"])
mode_t = namedtuple("mode", ["values", "indices"])
nanmedian_t = namedtuple("nanmedian", ["values", "indices"])
aminmax_t = namedtuple("aminmax", ["min", "max"])


def _dim(op: str, dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{op}(): argument 'dim' must be int, not {type(dim).__name__}")
    return int(dim)


def _checking() -> bool:
    """Whether value checks that read data may run (not while tracing: they would bake)."""
    return not TRACERS


# ---- scans -------------------------------------------------------------------------------
@public(inplace=True)
def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running product along ``dim`` (integers and bools multiply in int64).

        >>> import scriptmod as sm
        >>> sm.cumprod(sm.tensor([2, 3, 4]), 0)
        tensor([ 2,  6, 24])
    """
    return dispatch("cumprod", (input,), {"dim": _dim("cumprod", dim),
                                          "dtype": None if dtype is None else _dtype_arg(dtype)})


Tensor.cumsum_ = inplace_of(Tensor.cumsum, "cumsum")


@public()
def cummax(input: Tensor, dim: int) -> Any:
    """Running maximum along ``dim`` and where each came from, as ``(values, indices)``:
    the latest of equal values, and from a NaN on, NaN at the latest NaN's index."""
    return cummax_t(*dispatch("cummax", (input,), {"dim": _dim("cummax", dim)}))


@public()
def cummin(input: Tensor, dim: int) -> Any:
    """Running minimum along ``dim`` and where each came from (as ``cummax``)."""
    return cummin_t(*dispatch("cummin", (input,), {"dim": _dim("cummin", dim)}))


@public()
def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(x)))`` along ``dim``, with no overflow or underflow."""
    return dispatch("logcumsumexp", (input,), {"dim": _dim("logcumsumexp", dim)})


# ---- differences and integrals -----------------------------------------------------------
@public()
def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Any = None,
         append: Any = None) -> Tensor:
    """The ``n``-th forward difference along ``dim`` (bools: ``!=``), after joining
    ``prepend`` and ``append`` to ``input`` along it.

        >>> import scriptmod as sm
        >>> sm.diff(sm.tensor([1, 3, 6, 10]))
        tensor([2, 3, 4])
    """
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = norm_dim(_dim("diff", dim), input.ndim, "diff")
    parts = [_along_dim(v, input, d) for v in (prepend, input, append) if v is not None]
    x = cat(parts, dim=d) if len(parts) > 1 else input
    for _ in range(n):
        size = x.shape[d]
        if size == 0:
            break
        later, earlier = x.narrow(d, 1, size - 1), x.narrow(d, 0, size - 1)
        x = later != earlier if x.dtype is D.bool_ else later - earlier
    return x


def _along_dim(v: Any, like: Tensor, d: int) -> Tensor:
    """``prepend``/``append``: a tensor of ``like``'s rank, or a number, which becomes a
    slice of size 1 along ``d``."""
    if isinstance(v, Tensor) and v.ndim == like.ndim:
        return v
    if isinstance(v, Tensor) and v.ndim != 0:
        raise RuntimeError(f"diff expects prepend or append to be the same dimension as "
                           f"input (got {v.ndim} and {like.ndim})")
    shape = list(like.shape)
    shape[d] = 1
    v = v if isinstance(v, Tensor) else tensor(v, device=like.device)
    return v.expand(shape)


def _x_along(x: Tensor, y: Tensor, d: int) -> Tensor:
    """Sample points ``x`` laid along ``y``'s dim ``d`` (a vector) or padded to its rank."""
    if x.ndim == 1:
        if x.shape[0] != y.shape[d]:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
        shape = [1] * y.ndim
        shape[d] = x.shape[0]
        return x.reshape(shape)
    if x.ndim < y.ndim:
        return x.reshape([1] * (y.ndim - x.ndim) + list(x.shape))
    return x


def _trapezoid_args(op: str, y: Tensor, x: Any, dx: Any, dim: int) -> tuple[int, Any]:
    if y.ndim == 0:
        raise IndexError(f"{op}(): Dimension specified as {dim} but tensor has no dimensions")
    if x is not None and dx is not None:
        raise TypeError(f"{op}(): pass either x or dx, not both")
    d = norm_dim(_dim(op, dim), y.ndim, op)
    if y.shape[d] != 0 and (y.dtype is D.bool_ or (isinstance(x, Tensor) and x.dtype is D.bool_)):
        raise RuntimeError(f"{op}: received a bool input for `x` or `y`, but bool is not "
                           f"supported")
    if isinstance(x, Tensor):
        xv = _x_along(x, y, d)
        return d, xv.narrow(d, 1, xv.shape[d] - 1) - xv.narrow(d, 0, xv.shape[d] - 1)
    step = 1 if dx is None else (x if x is not None else dx)
    if isinstance(step, (bool, complex)):
        raise RuntimeError(f"{op}: Currently, we only support dx as a real number.")
    return d, float(step)


@public(method=False)
def trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The trapezoidal rule along ``dim``, at sample points ``x`` (a tensor) or spaced
    ``dx`` apart (default 1); no samples integrate to 0.

        >>> import scriptmod as sm
        >>> sm.trapezoid(sm.tensor([1., 2., 3.]))
        tensor(4.)
    """
    d, step = _trapezoid_args("trapezoid", y, x, dx, dim)
    n = y.shape[d]
    if n == 0:
        return zeros([s for i, s in enumerate(y.shape) if i != d], dtype=y.dtype,
                     device=y.device)
    if isinstance(step, Tensor):
        left, right = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
        return ((left + right) * step).sum(d) / 2.0
    ends = y.select(d, 0) + y.select(d, n - 1)
    return (y.sum(d) - ends * 0.5) * step


@public(method=False)
def trapz(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """``trapezoid`` under its older name (``dx`` defaults to 1)."""
    return trapezoid(y, x, dx=dx, dim=dim)


@public(method=False)
def cumulative_trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The running trapezoidal integral along ``dim`` (one element fewer than ``y``).

        >>> import scriptmod as sm
        >>> sm.cumulative_trapezoid(sm.tensor([1., 2., 3.]))
        tensor([1.5000, 4.0000])
    """
    d, step = _trapezoid_args("cumulative_trapezoid", y, x, dx, dim)
    n = y.shape[d]
    if n == 0:
        return y.to(D.promote_types(y.dtype, D.get_default_dtype()))
    left, right = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if isinstance(step, Tensor):
        return ((step * (left + right)) / 2.0).cumsum(d)
    return (step / 2.0 * (left + right)).cumsum(d)


@public(method=False, out=False)
def gradient(input: Tensor, *, spacing: Any = 1, dim: Any = None,
             edge_order: int = 1) -> tuple[Tensor, ...]:
    """Central differences along each of ``dim`` (default: every dim), one-sided of order
    ``edge_order`` (1 or 2) at the ends; ``spacing``: a number, one per dim, or each dim's
    coordinates (1-D tensors).

        >>> import scriptmod as sm
        >>> sm.gradient(sm.tensor([1., 4., 9., 16.]))
        (tensor([3., 4., 6., 7.]),)
    """
    dims = _gradient_dims(input, dim)
    steps = _gradient_spacing(input, spacing, dims, dim is None)
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    if any(input.shape[i] < edge_order + 1 for i in range(input.ndim)):
        raise RuntimeError("torch.gradient expected each dimension size to be at least "
                           "edge_order+1")
    return tuple(_gradient_along(input, d, h, edge_order) for d, h in zip(dims, steps))


def _gradient_dims(x: Tensor, dim: Any) -> list[int]:
    if dim is None:
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, numbers.Integral) else list(dim)
    out = [norm_dim(_dim("gradient", d), x.ndim, "gradient") for d in dims]
    if len(set(out)) != len(out):
        raise RuntimeError("torch.gradient expected each dimension to be unique")
    return out


def _gradient_spacing(x: Tensor, spacing: Any, dims: list[int], all_dims: bool) -> list[Any]:
    if spacing is None:
        spacing = 1
    if isinstance(spacing, (numbers.Number, Tensor)) and not (
            isinstance(spacing, Tensor) and spacing.ndim == 1):
        h = spacing.item() if isinstance(spacing, Tensor) else spacing
        return [h] * len(dims)
    spacing = [spacing] if isinstance(spacing, Tensor) else list(spacing)
    if len(spacing) != len(dims):
        what = f"'self.dim() = {x.ndim}', since dim argument was not given" if all_dims \
            else f"'len(dim) = {len(dims)}'"
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar, or "
                           f"a list of length equal to {what}, but got a list of length "
                           f"{len(spacing)}")
    for h in spacing:
        if isinstance(h, Tensor) and h.ndim != 1:
            raise RuntimeError(f"torch.gradient expected each element of spacing to have one "
                               f"dimension, but got an element with {h.ndim} dimensions!")
    return spacing


def _gradient_along(x: Tensor, d: int, h: Any, edge_order: int) -> Tensor:
    """PyTorch's ``gradient_helper``: one dim, uniform spacing ``h`` or coordinates."""
    n = x.shape[d]

    def s(lo: int, hi: int) -> Tensor:   # x[lo:hi] along d (negative: from the end)
        lo, hi = lo + n if lo < 0 else lo, hi + n if hi < 0 else hi
        return x.narrow(d, lo, hi - lo)
    if isinstance(h, Tensor):
        shape = [1] * x.ndim
        shape[d] = -1
        dx = h[1:] - h[:-1]
        dx1, dx2 = dx[:-1], dx[1:]
        a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
        b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
        c = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
        center = a * s(0, -2) + b * s(1, -1) + c * s(2, n)
        if edge_order == 1:
            first = (s(1, 2) - s(0, 1)) / dx[0]
            last = (s(-1, n) - s(-2, -1)) / dx[-1]
        else:
            h0, h1, hl, hm = dx[0], dx[1], dx[-1], dx[-2]
            first = (-(2.0 * h0 + h1) / (h0 * (h0 + h1)) * s(0, 1)
                     + (h0 + h1) / (h0 * h1) * s(1, 2) - h0 / (h1 * (h0 + h1)) * s(2, 3))
            last = (hl / (hm * (hl + hm)) * s(-3, -2) - (hl + hm) / (hl * hm) * s(-2, -1)
                    + (2 * hl + hm) / (hl * (hl + hm)) * s(-1, n))
        return cat([first, center, last], dim=d)
    center = (s(2, n) - s(0, -2)) / h
    if edge_order == 1:
        first = (s(1, 2) - s(0, 1)) / h
        last = (s(-1, n) - s(-2, -1)) / h
    else:
        first = (-1.5 * s(0, 1) + 2 * s(1, 2) - 0.5 * s(2, 3)) / h
        last = (0.5 * s(-3, -2) - 2 * s(-2, -1) + 1.5 * s(-1, n)) / h
    return cat([first, center / 2, last], dim=d)


# ---- moments -----------------------------------------------------------------------------
@public(method=False, out=False)
def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``dim`` in one call (``correction``: Bessel's, default 1).

        >>> import scriptmod as sm
        >>> sm.var_mean(sm.tensor([1., 2., 3., 4.]))
        (tensor(1.6667), tensor(2.5000))
    """
    if isinstance(dim, bool):           # var_mean(x, unbiased) legacy form
        dim, unbiased = None, dim
    var = input.var(dim, unbiased, keepdim, correction=correction)
    return var, input.mean(dim, keepdim)


@public(method=False, out=False)
def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """``(std, mean)`` over ``dim`` in one call."""
    var, mean = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return var.sqrt(), mean


@public()
def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``sum`` with NaN read as 0 (integers: ``sum``)."""
    if input.is_complex():
        raise RuntimeError("nansum does not support complex inputs")
    x = where(input.isnan(), 0, input) if input.is_floating_point() else input
    return x.sum(() if dim is None else dim, keepdim, dtype=dtype)


@public()
def nanmean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``mean`` of the non-NaN elements (NaN where there are none)."""
    if not (input.is_floating_point() or input.is_complex()):
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex "
                           f"dtype but got {input.dtype.short}")
    count = input.isnan().logical_not().sum(() if dim is None else dim, keepdim)
    return nansum(input, dim, keepdim, dtype=dtype) / count


@public(out=False)
def dist(input: Tensor, other: Tensor, p: Any = 2) -> Tensor:
    """The ``p``-norm of ``input - other`` (broadcast)."""
    from scriptmod import linalg
    return linalg.vector_norm(input - other, p)


@public(inplace=True)
def renorm(input: Tensor, p: Any, dim: int, maxnorm: Any) -> Tensor:
    """Each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled down to it
    (by ``maxnorm / (norm + 1e-7)``, as PyTorch)."""
    from scriptmod import linalg
    if input.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} "
                           f"dimensions")
    if not float(p) > 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported (got p={p})")
    if float(maxnorm) < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = norm_dim(_dim("renorm", dim), input.ndim, "renorm")
    others = [i for i in range(input.ndim) if i != d]
    acc = D.float32 if input.dtype in (D.float16, D.bfloat16) else None
    norm = linalg.vector_norm(input, p, others, True, dtype=acc)
    factor = where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return (input * factor).to(input.dtype)


# ---- order statistics --------------------------------------------------------------------
@public()
def aminmax(input: Tensor, *, dim: Any = None, keepdim: bool = False) -> Any:
    """``(min, max)`` over ``dim`` (every element when None) in one call."""
    if input.is_complex():
        raise NotImplementedError(f"\"aminmax_cpu\" not implemented for "
                                  f"'{input.dtype.short}': complex numbers have no order")
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as "
                               "the operation has no identity.")
        lo, hi = input.amin(), input.amax()
        if keepdim:
            lo, hi = lo.reshape([1] * input.ndim), hi.reshape([1] * input.ndim)
        return aminmax_t(lo, hi)
    d = norm_dim(_dim("aminmax", dim), input.ndim, "aminmax")
    if input.ndim and input.shape[d] == 0:
        raise IndexError(f"aminmax(): Expected reduction dim {d} to have non-zero size.")
    return aminmax_t(input.amin(d, keepdim), input.amax(d, keepdim))


@public()
def mode(input: Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and the
    last index where it occurs.

        >>> import scriptmod as sm
        >>> sm.mode(sm.tensor([3, 1, 3, 1, 2])).values
        tensor(1)
    """
    return mode_t(*dispatch("mode", (input,), {"dim": _dim("mode", dim),
                                               "keepdim": bool(keepdim)}))


@public()
def msort(input: Tensor) -> Tensor:
    """``input`` sorted along its first dim."""
    return input.sort(0).values


@public()
def median(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median along ``dim`` (NaN where the row holds one) and its index; without
    ``dim`` the lower median of all elements, a tensor whose gradient the elements equal to
    it share, as PyTorch's.

        >>> import scriptmod as sm
        >>> sm.median(sm.tensor([3., 1., 2., 5.]))
        tensor(2.)
    """
    if input.dtype is D.bool_ or input.is_complex():
        raise NotImplementedError(f"\"median\" not implemented for '{input.dtype.short}'")
    if dim is None:
        return _evenly(input.reshape(-1), _tensor_ops._median(input))
    return _tensor_ops._median(input, dim, keepdim)


@public(out=False)
def nanmedian(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median of the non-NaN values along ``dim`` (NaN where all are NaN) and its
    index; without ``dim`` the median of all elements, a tensor."""
    if input.dtype is D.bool_ or input.is_complex():
        raise NotImplementedError(f"\"nanmedian\" not implemented for '{input.dtype.short}'")
    if dim is None:
        flat = input.reshape(-1)
        if flat.numel() == 0:
            return input.new_full((), float("nan"))
        return _evenly(flat, nanmedian(flat, 0).values)
    if not input.is_floating_point():            # no NaN: the median
        return nanmedian_t(*input.median(dim, keepdim))
    x = input.reshape(1) if input.ndim == 0 else input
    d = norm_dim(_dim("nanmedian", dim), input.ndim, "nanmedian()")
    if x.shape[d] == 0:
        raise IndexError(f"nanmedian(): Expected reduction dim {d} to have non-zero size.")
    values, indices = x.sort(d)
    count = x.isnan().logical_not().sum(d, keepdim=True)
    pos = where(count > 0, (count - 1) // 2, 0)
    values, indices = values.gather(d, pos), indices.gather(d, pos)
    if input.ndim == 0:
        values, indices = values.reshape(()), indices.reshape(())
    elif not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return nanmedian_t(values, indices)


def _evenly(x: Tensor, value: Tensor) -> Tensor:
    """``value`` (an element of ``x``), with its gradient shared evenly by the finite elements
    equal to it, as PyTorch's median of all elements gives it; the value is unchanged
    (``x - value`` is exactly 0 where they are equal)."""
    if not (grad_mode.is_grad_enabled() and x.requires_grad and x.is_floating_point()):
        return value
    value = value.detach()
    equal = (x == value) & ((x - x) == 0)          # finite: inf - inf would be NaN
    share = equal.to(x.dtype) / equal.sum().clamp(min=1)
    return value + (where(equal, x - value, 0) * share).sum()


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@public()
def quantile(input: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:
    """The ``q``-th quantiles (a number or a 1-D tensor, in [0, 1]) along ``dim`` (all
    elements when None); the first dim of the result runs over a tensor ``q``; NaN where
    the values hold one.

        >>> import scriptmod as sm
        >>> sm.quantile(sm.tensor([0., 1., 2., 3.]), sm.tensor([0.25, 0.5]))
        tensor([0.7500, 1.5000])
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation, ignore_nan=False)


@public()
def nanquantile(input: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *,
                interpolation: str = "linear") -> Tensor:
    """``quantile`` of the non-NaN values (NaN where all are NaN)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, ignore_nan=True)


def _quantile(op: str, x: Tensor, q: Any, dim: Any, keepdim: bool, interpolation: str,
              ignore_nan: bool) -> Tensor:
    """PyTorch's ``quantile_compute``: sort, rank = q * (count - 1), lerp the neighbours."""
    qt = _check_quantile(op, x, q, interpolation)
    if dim is None:
        rows = x.reshape(-1)
    else:
        d = norm_dim(_dim(op, dim), x.ndim, op)
        rows = x.reshape(1) if x.ndim == 0 else x.movedim(d, -1)
    s = rows.sort(-1).values
    k = qt.reshape(-1)
    nan = s.isnan()
    if ignore_nan:
        ranks = k * (nan.logical_not().sum(-1, keepdim=True) - 1)
        ranks = where(ranks < 0, 0, ranks)
    else:
        last = s.shape[-1] - 1
        ranks = where(nan.any(-1, keepdim=True), last, k * last)
    ranks = {"lower": ranks.floor, "higher": ranks.ceil, "nearest": ranks.round}.get(
        interpolation, lambda: ranks)()
    below = ranks.to(D.int64)
    values = s.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        weights = ranks * 0 + 0.5 if interpolation == "midpoint" else ranks - below
        above = s.gather(-1, ranks.ceil().to(D.int64))
        values = where(weights < 0.5, values + weights * (above - values),
                       above - (above - values) * (1 - weights))
    values = values.movedim(-1, 0)
    if keepdim:
        kept = [1] * x.ndim if dim is None else [1 if i == d else n
                                                 for i, n in enumerate(x.shape)]
        values = values.reshape([values.shape[0]] + kept)
    return values.squeeze(0) if qt.ndim == 0 else values


def _check_quantile(op: str, x: Tensor, q: Any, interpolation: str) -> Tensor:
    """PyTorch's checks of quantile's arguments; ``q`` as a tensor of ``x``'s dtype."""
    if x.numel() == 0:
        raise RuntimeError(f"{op}() input tensor must be non-empty")
    if x.dtype not in (D.float32, D.float64):
        raise RuntimeError(f"{op}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{op}() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest. Got {interpolation}")
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise RuntimeError(f"{op}() q must be a scalar or 1D tensor")
        if q.dtype is not x.dtype:
            raise RuntimeError(f"{op}() q tensor must be same dtype as the input tensor")
        if _checking() and q.numel() and not bool(((q >= 0) & (q <= 1)).all()):
            raise RuntimeError(f"{op}() q values must be in the range [0, 1]")
        return q
    if not 0 <= float(q) <= 1:
        raise RuntimeError(f"{op}() q must be in the range [0, 1] but got {q}")
    return tensor(float(q), dtype=x.dtype, device=x.device)


# ---- covariance ---------------------------------------------------------------------------
@public(out=False)
def cov(input: Tensor, *, correction: int = 1, fweights: Any = None,
        aweights: Any = None) -> Tensor:
    """The covariance matrix of the rows of ``input`` (variables; columns are observations),
    with ``fweights`` (integer repeat counts) and ``aweights`` (importance weights)."""
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got "
                           f"an input with {input.ndim} dimensions")
    if input.dtype is D.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    n = x.shape[1]
    w = _cov_weights(fweights, "fweights", n, integral=True)
    aw = _cov_weights(aweights, "aweights", n, integral=False)
    if aw is not None:
        w = aw if w is None else w * aw
    # the number of observations as a tensor made from x: a traced cov follows its size
    w_sum = w.sum() if w is not None else zeros_like(x.sum(0), dtype=D.int64).add(1).sum()
    if _checking() and w is not None and bool(w_sum == 0):
        raise RuntimeError("cov(): weights sum to zero, can't be normalized")
    avg = (x * w if w is not None else x).sum(1) / w_sum
    if w is not None and aw is not None and correction != 0:
        norm = w_sum - correction * (w * aw).sum() / w_sum
    else:
        norm = w_sum - correction
    if _checking() and bool(norm <= 0):
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", UserWarning, stacklevel=3)
    norm = where(norm <= 0, 0, norm)
    centered = x - avg.unsqueeze(1)
    other = (centered * w if w is not None else centered).t()
    c = centered.mm(other.conj() if other.is_complex() else other)
    return (c / norm).squeeze()


def _cov_weights(w: Any, name: str, n: Any, integral: bool) -> Tensor | None:
    if w is None:
        return None
    kind = "integral" if integral else "floating point"
    if w.ndim > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got "
                           f"{name} with {w.ndim} dimensions")
    if (w.dtype.category <= D.INT and w.dtype is not D.bool_) != integral or (
            not integral and w.dtype.category != D.FLOAT):
        raise RuntimeError(f"cov(): expected {name} to have {kind} dtype but got {name} with "
                           f"{w.dtype.short} dtype")
    if w.numel() != n:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                           f"observations in the input but got {w.numel()} != {n}")
    if _checking() and n and not bool((w >= 0).all()):
        raise RuntimeError(f"cov(): {name} cannot be negative")
    return w


@public(out=False)
def corrcoef(input: Tensor) -> Tensor:
    """Pearson correlation coefficients of the rows of ``input``, clipped to [-1, 1]."""
    if input.ndim > 2:
        raise RuntimeError(f"corrcoef(): expected input to have two or fewer dimensions but "
                           f"got an input with {input.ndim} dimensions")
    c = cov(input)
    if c.ndim == 0:
        return c / c
    n = c.shape[0]
    diag = c.gather(1, arange(n, device=c.device).reshape(n, 1)).reshape(n)
    std = (diag.real if diag.is_complex() else diag).sqrt()
    c = c / std.reshape(-1, 1)
    c = c / std.reshape(1, -1)
    if c.is_complex():
        return dispatch("complex", (c.real.clamp(-1, 1), c.imag.clamp(-1, 1)))
    return c.clamp(-1, 1)


from scriptmod import _ops_random  # noqa: E402,F401  (the draws: published on import)
