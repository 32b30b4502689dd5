"""Random draws of the scans family: ``bernoulli``, ``multinomial``, ``normal``, ``poisson`` and
the in-place fills ``Tensor.uniform_``/``normal_``/``bernoulli_``/``cauchy_``/``exponential_``/
``geometric_``/``log_normal_``/``random_``, each published once with ``@public``.

Each is a formula of a uniform or standard normal draw (the impure ``rand``/``randn`` ops),
so a traced model draws anew on every call; ``multinomial`` and ``poisson`` are ops of their
own. ``generator=`` draws from a user's ``scriptmod.Generator``.

    >>> import scriptmod as sm
    >>> _ = sm.manual_seed(0)
    >>> sm.bernoulli(sm.ones(3))
    tensor([1., 1., 1.])
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from scriptmod._creation import Generator, default_generator, rand, randint, randn, zeros_like
from scriptmod._dispatch import TRACERS, dispatch
from scriptmod._public import public
from scriptmod._tensor_ops import where
from scriptmod.autograd import grad_mode
from scriptmod.ir import dtypes as D
from scriptmod.runtime.arrays import NP_DTYPE
from scriptmod.tensor import Tensor, _assign, _check_leaf


def _drawing(generator: Any, device: str) -> Any:
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"argument 'generator' must be a scriptmod.Generator, got "
                        f"{type(generator).__name__}")
    return (generator or default_generator)._drawing(device)


def _compute(dtype: D.DType) -> D.DType:
    """The dtype a draw is computed in: float64 for float64 results, else float32."""
    return D.float64 if dtype is D.float64 else D.float32


def _uniform(like: Tensor, dtype: D.DType) -> Tensor:
    """Uniform draws in [0, 1) of ``like``'s shape (symbolic while tracing)."""
    return rand(list(like.shape), dtype=dtype, device=like.device)


def _eager() -> bool:
    """Whether checks that read values may run (not while tracing: they would bake)."""
    return not TRACERS


def _zero_gradient_to(value: Tensor, *sources: Any) -> Tensor:
    """``value`` joined to the graph of the ``sources`` that require grad, with a zero
    gradient: PyTorch's derivative of a draw in its parameters (it does not reparameterize)."""
    for src in sources:
        if isinstance(src, Tensor) and src.requires_grad:
            never = zeros_like(value, dtype=D.bool_)
            value = where(never, src, value).to(value.dtype)
    return value


def _probability(op: str, p: Any) -> None:
    if isinstance(p, Tensor):
        if _eager() and p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
            raise RuntimeError(f"{op}: expected all probabilities in [0, 1] (p_in >= 0 && "
                               f"p_in <= 1)")
    elif not 0 <= float(p) <= 1:
        raise RuntimeError(f"{op} expects p to be in [0, 1], but got p={p}")


# ---- draws that make a tensor ---------------------------------------------------------------
@public()
def bernoulli(input: Tensor, p: Any = None, *, generator: Any = None) -> Tensor:
    """1 with probability ``input`` (or ``p``), else 0, per element, in ``input``'s dtype.

        >>> import scriptmod as sm
        >>> sm.bernoulli(sm.zeros(2))
        tensor([0., 0.])
    """
    if not input.is_floating_point():
        raise NotImplementedError(f"\"bernoulli\" not implemented for '{input.dtype.short}': "
                                  f"the probabilities must be a floating point tensor")
    probs = input if p is None else p
    _probability("bernoulli", probs)
    with _drawing(generator, input.device):
        u = _uniform(input, _compute(input.dtype))
    return _zero_gradient_to((u < probs).to(input.dtype), probs)


def _bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """Fill ``self`` with 1 at probability ``p`` (a number or a broadcastable tensor), else 0."""
    _check_leaf(self)
    _probability("bernoulli_", p)
    with _drawing(generator, self.device):
        u = _uniform(self, D.float64 if getattr(p, "dtype", None) is D.float64 else D.float32)
    return _assign(self, (u < p).to(self.dtype))


Tensor.bernoulli_ = _bernoulli_


@public()
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Any = None) -> Tensor:
    """``num_samples`` category indices per row of weights ``input`` (1-D or 2-D), drawn
    with or without replacement.

        >>> import scriptmod as sm
        >>> sm.multinomial(sm.tensor([0., 1., 0.]), 2, replacement=True)
        tensor([1, 1])
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not "
                        f"{type(num_samples).__name__}")
    with _drawing(generator, input.device):
        return dispatch("multinomial", (input,), {"num_samples": int(num_samples),
                                                  "replacement": bool(replacement)})


@public(method=False)
def poisson(input: Tensor, generator: Any = None) -> Tensor:
    """A Poisson draw per element, with the element as its rate."""
    with _drawing(generator, input.device):
        return dispatch("poisson", (input,))


@public(method=False)
def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None,
           dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Normal draws: ``mean`` and ``std`` tensors or numbers (broadcast together), or, both
    numbers, a tensor of ``size``. As in PyTorch, the gradient in ``mean`` and ``std`` is 0.

        >>> import scriptmod as sm
        >>> sm.normal(2.0, 0.0, (2,))
        tensor([2., 2.])
    """
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if not isinstance(std, Tensor) and float(std) < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if isinstance(std, Tensor) and _eager() and std.numel() and not bool((std >= 0).all()):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    if not tensors:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: two "
                            "numbers need a size")
        with _drawing(generator, device or "cpu"):
            eps = randn(*_size(size), dtype=dtype, device=device)
        out = eps * std + mean
        return out.requires_grad_() if requires_grad else out
    if size is not None:
        raise TypeError("normal(): size= is only for a number mean and std")
    shape = tensors[0].shape if len(tensors) == 1 else \
        (tensors[0] + tensors[1]).shape
    out_dtype = tensors[0].dtype if len(tensors) == 1 else \
        D.promote_types(tensors[0].dtype, tensors[1].dtype)
    if not out_dtype.is_floating_point:
        raise NotImplementedError(f"\"normal\" not implemented for '{out_dtype.short}'")
    with _drawing(generator, tensors[0].device):
        eps = randn(list(shape), dtype=out_dtype, device=tensors[0].device)
    with grad_mode.no_grad():
        value = mean + std * eps
    return _zero_gradient_to(value, mean, std)


def _size(size: Any) -> list[Any]:
    return list(size) if isinstance(size, (list, tuple)) or hasattr(size, "__iter__") else [size]


# ---- in-place fills -------------------------------------------------------------------------
def _fill(name: str, floating: bool, draw: Callable[..., Tensor],
          complex_scale: float | None = None) -> Callable[..., Tensor]:
    """``Tensor.<name>``: ``self`` filled with ``draw(self, *args)`` (a float64/float32
    tensor of ``self``'s shape), converted to ``self``'s dtype. ``complex_scale``: a complex
    ``self`` takes independent real and imaginary draws, their spread times this (PyTorch's
    complex normal has variance std ** 2 in all, half in each part); None: refused."""
    def method(self: Tensor, *args: Any, generator: Any = None, **kwargs: Any) -> Tensor:
        _check_leaf(self)
        if self.is_complex() and complex_scale is None or floating and not (
                self.is_floating_point() or self.is_complex()):
            raise NotImplementedError(f"\"{name[:-1]}\" not implemented for "
                                      f"'{self.dtype.short}'")
        if "from" in kwargs:                   # PyTorch's keyword (a Python keyword too)
            kwargs["start"] = kwargs.pop("from")
        with _drawing(generator, self.device):
            if self.is_complex():
                real = D.to_real(self.dtype)
                value = dispatch("complex", tuple(
                    draw(self, _compute(real), *args, _scale=complex_scale, **kwargs)
                    for _ in range(2)))
            else:
                value = draw(self, _compute(self.dtype), *args, **kwargs)
        return _assign(self, value.to(self.dtype))
    method.__name__ = name
    method.__doc__ = draw.__doc__
    return method


def _uniform_draw(self: Tensor, dt: D.DType, start: float = 0.0, to: float = 1.0, *,
                  _scale: float = 1.0) -> Tensor:
    """Uniform in [from, to)."""
    if start > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                           f"from={start} > to={to}")
    return _uniform(self, dt) * (to - start) + start


def _normal_draw(self: Tensor, dt: D.DType, mean: float = 0.0, std: float = 1.0, *,
                 _scale: float = 1.0) -> Tensor:
    """Normal with ``mean`` and ``std``."""
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return randn(list(self.shape), dtype=dt, device=self.device) * (std * _scale) + mean


def _cauchy_draw(self: Tensor, dt: D.DType, median: float = 0.0, sigma: float = 1.0) -> Tensor:
    """Cauchy: ``median + sigma * tan(pi * (u - 1/2))``."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    angle = (_uniform(self, dt) - 0.5) * math.pi
    return angle.sin() / angle.cos() * sigma + median


def _exponential_draw(self: Tensor, dt: D.DType, lambd: float = 1.0) -> Tensor:
    """Exponential with rate ``lambd``: ``-log(1 - u) / lambd``."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return (-_uniform(self, dt)).log1p() * (-1.0 / lambd)


def _geometric_draw(self: Tensor, dt: D.DType, p: float) -> Tensor:
    """Trials until the first success at probability ``p``: ``ceil(log(1 - u) / log(1 - p))``."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    trials = ((-_uniform(self, D.float64)).log1p() / math.log1p(-p)).ceil()
    return trials.clamp(min=1)


def _log_normal_draw(self: Tensor, dt: D.DType, mean: float = 1.0, std: float = 2.0) -> Tensor:
    """``exp`` of a normal with ``mean`` and ``std``."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return _normal_draw(self, dt, mean, std).exp()


def _random_draw(self: Tensor, dt: D.DType, start: Any = None, to: Any = None) -> Tensor:
    """Integers in [from, to); ``random_(to)`` from 0; ``random_()`` from 0 to the largest
    integer the dtype holds exactly (floats: 2 ** mantissa digits)."""
    if to is None and start is not None:
        start, to = 0, start
    start = 0 if start is None else int(start)
    if to is None:
        to = _random_top(self.dtype)
    if start >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                           f"from={start} >= to={to}")
    return randint(start, int(to), list(self.shape), dtype=D.int64, device=self.device)


def _random_top(dtype: D.DType) -> int:
    digits = {D.float16: 11, D.bfloat16: 8, D.float32: 24, D.float64: 53}
    if dtype in digits:
        return 2 ** digits[dtype] + 1
    if dtype is D.bool_:
        return 2
    return int(min(np.iinfo(NP_DTYPE[dtype]).max, 2 ** 63 - 2)) + 1


Tensor.uniform_ = _fill("uniform_", True, _uniform_draw, complex_scale=1.0)
Tensor.normal_ = _fill("normal_", True, _normal_draw, complex_scale=math.sqrt(0.5))
Tensor.cauchy_ = _fill("cauchy_", True, _cauchy_draw)
Tensor.exponential_ = _fill("exponential_", True, _exponential_draw)
Tensor.geometric_ = _fill("geometric_", False, _geometric_draw)
Tensor.log_normal_ = _fill("log_normal_", True, _log_normal_draw)
Tensor.random_ = _fill("random_", False, _random_draw)

__all__ = ["bernoulli", "multinomial", "normal", "poisson"]
