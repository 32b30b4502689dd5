"""``scriptmod.special``: PyTorch's ``torch.special``, and the top-level gamma/erfinv/Bessel
functions (``scriptmod.lgamma``, ``Tensor.lgamma``, ``Tensor.lgamma_``, ``digamma``,
``polygamma``, ``mvlgamma``, ``erfinv``, ``i0``, ``igamma``, ``igammac``).

Bessel and Airy functions, the gamma family, ``erfcx``/``erfinv``/``ndtri``/``log_ndtr``,
``zeta``, the incomplete gamma functions and the orthogonal polynomials are registry ops
computed by SciPy's ``special`` (``ir.ops.special``), and so is ``entr``; ``ndtr``,
``xlog1py`` and ``multigammaln`` are decompositions over existing ops, and the rest are PyTorch's aliases
(``expit`` is ``sigmoid``, ``gammaln`` is ``lgamma``, ...). Dtypes follow PyTorch: integer
inputs give the default float, float16/bfloat16 compute in float32 where PyTorch has a half
kernel and are refused where it has none, complex inputs are refused. Every function takes
``out=`` where PyTorch's does.

    >>> import scriptmod as sm
    >>> sm.special.ndtr(sm.tensor([0.0, 1.0]))
    tensor([0.5000, 0.8413])
    >>> sm.special.chebyshev_polynomial_t(sm.tensor([0.5, 2.0]), 3)
    tensor([-1., 26.])
"""
from __future__ import annotations

import math
from typing import Any, Callable

from scriptmod._dispatch import dispatch
from scriptmod._public import public, with_out
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.special import POLYNOMIALS
from scriptmod.tensor import Tensor

_NUMBER = (int, float, bool)


def _tensor(x: Any, name: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not {type(x).__name__}")
    return x


def _operands(x: Any, y: Any, name: str, args: tuple[str, str]) -> tuple[Any, Any]:
    """Two operands of a binary special function: tensors, or one Python number."""
    for v, arg in zip((x, y), args):
        if not isinstance(v, (Tensor,) + _NUMBER):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor or Number, "
                            f"not {type(v).__name__}")
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        raise TypeError(f"{name}(): expected at least one Tensor argument, got two numbers")
    return x, y


def _unary_op(name: str, doc: str) -> Callable[..., Tensor]:
    """``scriptmod.special.<name>(input, *, out=None)``: registry op ``name``."""
    def fn(input: Tensor) -> Tensor:
        return dispatch(name, (_tensor(input, name),))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return with_out(fn, name)


airy_ai = _unary_op("airy_ai", "The Airy function Ai(x). Not differentiable (as in PyTorch).")
bessel_j0 = _unary_op("bessel_j0", "The Bessel function of the first kind of order 0.")
bessel_j1 = _unary_op("bessel_j1", "The Bessel function of the first kind of order 1.")
bessel_y0 = _unary_op("bessel_y0", "The Bessel function of the second kind of order 0.")
bessel_y1 = _unary_op("bessel_y1", "The Bessel function of the second kind of order 1.")
modified_bessel_i0 = _unary_op("modified_bessel_i0", "The modified Bessel function I0.")
modified_bessel_i1 = _unary_op("modified_bessel_i1", "The modified Bessel function I1.")
modified_bessel_k0 = _unary_op("modified_bessel_k0", "The modified Bessel function K0.")
modified_bessel_k1 = _unary_op("modified_bessel_k1", "The modified Bessel function K1.")
scaled_modified_bessel_k0 = _unary_op("scaled_modified_bessel_k0", "``exp(x) * K0(x)``.")
scaled_modified_bessel_k1 = _unary_op("scaled_modified_bessel_k1", "``exp(x) * K1(x)``.")
spherical_bessel_j0 = _unary_op("spherical_bessel_j0",
                                "The spherical Bessel function j0(x) = sin(x) / x (1 at 0).")
i0e = _unary_op("i0e", "The exponentially scaled I0: ``exp(-|x|) * i0(x)``.")
i1 = _unary_op("i1", "The modified Bessel function of the first kind of order 1.")
i1e = _unary_op("i1e", "The exponentially scaled I1: ``exp(-|x|) * i1(x)``.")
erfcx = _unary_op("erfcx", "The scaled complementary error function ``exp(x^2) erfc(x)``.")
log_ndtr = _unary_op("log_ndtr", "``log(ndtr(x))``, accurate far into the left tail.")
ndtri = _unary_op("ndtri", "The inverse of ``ndtr``: the standard normal quantile of p.")
entr = _unary_op("entr", "Elementwise entropy ``-x log(x)``: 0 at 0, -inf below 0.")


# ---- top-level functions: scriptmod.<name>, Tensor.<name>, Tensor.<name>_ ----------------
@public(inplace=True)
def lgamma(input: Tensor) -> Tensor:
    """``log|Gamma(x)|`` (inf at the poles).

        >>> scriptmod.lgamma(scriptmod.tensor([0.5, 3.0]))
        tensor([0.5724, 0.6931])
    """
    return dispatch("lgamma", (_tensor(input, "lgamma"),))


@public(inplace=True)
def digamma(input: Tensor) -> Tensor:
    """``Gamma'(x) / Gamma(x)``: -inf at +0, inf at -0, NaN at the negative integers."""
    return dispatch("digamma", (_tensor(input, "digamma"),))


@public(inplace=True)
def erfinv(input: Tensor) -> Tensor:
    """The inverse error function on [-1, 1] (+-inf at +-1, NaN outside)."""
    return dispatch("erfinv", (_tensor(input, "erfinv"),))


@public(inplace=True)
def i0(input: Tensor) -> Tensor:
    """The modified Bessel function of the first kind of order 0 (differentiable)."""
    return dispatch("i0", (_tensor(input, "i0"),))


def _polygamma_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"polygamma(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return n


@public("polygamma", function=False, inplace=True)
def _polygamma_method(self: Tensor, n: int) -> Tensor:
    """``Tensor.polygamma(n)``: ``scriptmod.polygamma(n, self)``."""
    return dispatch("polygamma", (_tensor(self, "polygamma"),), {"n": _polygamma_n(n)})


@public(method=False)
def polygamma(n: int, input: Tensor) -> Tensor:
    """The ``n``-th derivative of digamma (``n = 0``: digamma itself).

        >>> scriptmod.polygamma(1, scriptmod.tensor([1.0]))
        tensor([1.6449])
    """
    return _polygamma_method(input, n)


@public(inplace=True)
def mvlgamma(input: Tensor, p: int) -> Tensor:
    """The multivariate log-gamma function of dimension ``p``:
    ``sum_{i<p} lgamma(x - i/2) + p (p - 1) / 4 log(pi)`` (PyTorch's sum, in the input's
    floating dtype)."""
    x = _tensor(input, "mvlgamma")
    if isinstance(p, bool) or not isinstance(p, int):
        raise TypeError(f"mvlgamma(): argument 'p' must be int, not {type(p).__name__}")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if x.dtype.category < D.FLOAT:
        x = x.to(D.get_default_dtype())
    from scriptmod._creation import arange
    shifts = arange(-p * 0.5 + 0.5, 0.5, 0.5, dtype=x.dtype, device=x.device)
    return lgamma(x.unsqueeze(-1) + shifts).sum(-1) + p * (p - 1) / 4 * math.log(math.pi)


@public(inplace=True)
def igamma(input: Any, other: Any) -> Tensor:
    """The regularized lower incomplete gamma function ``P(input, other)``; differentiable in
    ``other`` only, as in PyTorch."""
    return dispatch("igamma", _operands(input, other, "igamma", ("input", "other")))


@public(inplace=True)
def igammac(input: Any, other: Any) -> Tensor:
    """The regularized upper incomplete gamma function ``Q(input, other) = 1 - P``."""
    return dispatch("igammac", _operands(input, other, "igammac", ("input", "other")))


# ---- binary functions and polynomials ----------------------------------------------------
def zeta(input: Any, other: Any) -> Tensor:
    """Hurwitz's zeta ``sum_k (k + other)^-input``; differentiable in ``other`` only."""
    return dispatch("zeta", _operands(input, other, "zeta", ("input", "other")))


zeta = with_out(zeta, "zeta")


def _polynomial(name: str) -> Callable[..., Tensor]:
    """``scriptmod.special.<name>(input, n, *, out=None)``: PyTorch's recurrence (registry op)."""
    def fn(input: Any, n: Any) -> Tensor:
        return dispatch(name, _operands(input, n, name, ("input", "n")))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"PyTorch's ``{name}(input, n)``: the polynomial of degree ``n`` (a tensor "
                  f"or a number, truncated to an integer; 0 for n < 0) at ``input``, by "
                  f"PyTorch's recurrence. Not differentiable.")
    return with_out(fn, name)


for _name in POLYNOMIALS:
    globals()[_name] = _polynomial(_name)


def _float_operands(x: Any, y: Any, name: str) -> tuple[Tensor, Tensor]:
    """Both operands as tensors of their promoted floating dtype (a number joins the other's)."""
    x, y = _operands(x, y, name, ("input", "other"))
    tensors = [v for v in (x, y) if isinstance(v, Tensor)]
    dims = [v.dtype for v in tensors if v.dim() > 0]
    zero = [v.dtype for v in tensors if v.dim() == 0]
    dt = D.to_float(D.result_type(dims, zero, [type(v) for v in (x, y) if isinstance(v, _NUMBER)]))
    if dt.category >= D.COMPLEX:
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{dt.short}'")
    device = tensors[0].device
    from scriptmod._creation import tensor
    return tuple(v.to(dt) if isinstance(v, Tensor) else tensor(float(v), dtype=dt, device=device)
                 for v in (x, y))


def xlog1py(input: Any, other: Any) -> Tensor:
    """``input * log1p(other)``, 0 where ``input`` is 0 (NaN where ``other`` is). The
    gradients are PyTorch's, ``log1p(other)`` for ``input`` also where ``input`` is 0."""
    x, y = _float_operands(input, other, "xlog1py")
    from scriptmod._tensor_ops import where
    return x * where((x == 0) & ((y <= -1) | y.isinf()), 0.0, y.log1p())


xlog1py = with_out(xlog1py, "xlog1py")


def ndtr(input: Tensor) -> Tensor:
    """The standard normal CDF as PyTorch computes it: ``(1 + erf(x / sqrt(2))) / 2``."""
    x = _tensor(input, "ndtr")
    _real(x, "erf_vml")
    return (1 + (x * math.sqrt(0.5)).erf()) * 0.5


ndtr = with_out(ndtr, "ndtr")


def _real(x: Tensor, name: str) -> None:
    if x.dtype.category >= D.COMPLEX:
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{x.dtype.short}'")


# ---- PyTorch's aliases -------------------------------------------------------------------
def _alias(name: str, target: str) -> Callable[..., Any]:
    """``scriptmod.special.<name>``: ``scriptmod.<target>`` (looked up when called, so that
    every family has published its functions)."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        import scriptmod
        return getattr(scriptmod, target)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Alias of ``scriptmod.{target}``."
    return fn


_ALIASES = {"erf": "erf", "erfc": "erfc", "erfinv": "erfinv", "expit": "sigmoid",
            "exp2": "exp2", "expm1": "expm1", "log1p": "log1p", "logit": "logit",
            "sinc": "sinc", "round": "round", "gammaln": "lgamma", "digamma": "digamma",
            "psi": "digamma", "multigammaln": "mvlgamma", "i0": "i0", "xlogy": "xlogy",
            "gammainc": "igamma", "gammaincc": "igammac", "polygamma": "polygamma",
            "logsumexp": "logsumexp"}
for _name, _target in _ALIASES.items():
    globals()[_name] = _alias(_name, _target)


def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """``scriptmod.softmax`` (no ``out=``, as in PyTorch)."""
    import scriptmod
    return scriptmod.softmax(input, dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """``scriptmod.log_softmax`` (no ``out=``, as in PyTorch)."""
    import scriptmod
    return scriptmod.log_softmax(input, dim, dtype=dtype)


__all__ = sorted(
    ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
     "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
     "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "i0e",
     "i1", "i1e", "erfcx", "log_ndtr", "ndtri", "ndtr", "entr", "xlog1py", "zeta",
     "softmax", "log_softmax", *POLYNOMIALS, *_ALIASES])
