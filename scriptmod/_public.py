"""How an op family publishes its Python API: one decorator per op.

``@public()`` on ``def hypot(input, other)`` gives ``scriptmod.hypot(input, other, out=None)``,
``Tensor.hypot(other)`` and, with ``inplace=True``, ``Tensor.hypot_(other)``: the function is
written once, with its input first, and every form calls it. ``out=`` follows PyTorch:

- the result is written into ``out`` (a tensor, or a tuple of them for an op with several
  results), converted to ``out``'s dtype when that does not leave the result's kind (a float
  result into an integer ``out`` is refused, as ``RuntimeError: result type Float can't be cast
  to the desired output type Long``);
- an ``out`` of another shape is resized (with PyTorch's ``UserWarning`` when it had elements);
- under autograd, ``out=`` is refused when an argument requires grad (PyTorch's message);
- ``out`` is returned.

The family modules (``scriptmod/_ops_<family>.py``, ``scriptmod.special``, ``scriptmod.fft``)
are imported by ``scriptmod/__init__.py``, which installs ``FUNCTIONS`` as ``scriptmod.<name>``.

    >>> import scriptmod as sm
    >>> out = sm.empty(2)
    >>> _ = sm.add(sm.ones(2), 1, out=out)
    >>> out
    tensor([2., 2.])
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Sequence

from scriptmod.autograd import grad_mode
from scriptmod.tensor import Tensor, _assign, _check_leaf

# name -> the function form (``scriptmod.<name>``); filled by ``@public`` at import
FUNCTIONS: dict[str, Callable[..., Any]] = {}


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _resize(out: Tensor, shape: tuple[int, ...], name: str) -> None:
    """Give ``out`` a fresh buffer of ``shape`` (its dtype and device), as PyTorch's out= does."""
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape "
            f"{list(shape)}. This behavior is deprecated, and in a future PyTorch release "
            f"outputs will not be resized unless they have zero elements. You can explicitly "
            f"reuse an out tensor t by resizing it, inplace, to zero elements with "
            f"t.resize_(0).", UserWarning, stacklevel=4)
    xp = out._xp()
    out._data = xp.empty(shape, dtype=out._data.dtype)
    out._vc[0] += 1


def write_out(out: Any, result: Any, name: str) -> Any:
    """Write ``result`` (a tensor or a tuple of tensors) into ``out``; return ``out``."""
    if isinstance(result, Tensor):
        if not isinstance(out, Tensor):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
        results, outs = [result], [out]
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(result) or not all(
                isinstance(o, Tensor) for o in out):
            raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(result)} "
                            f"Tensors, got {type(out).__name__}")
        results, outs = list(result), list(out)
    for r, o in zip(results, outs):
        if not isinstance(r, Tensor):
            raise TypeError(f"{name}(): has no out= form for a result of type "
                            f"{type(r).__name__}")
        if r.device != o.device:
            raise RuntimeError(f"{name}(): expected out tensor to be on device {r.device}, "
                               f"but got {o.device}")
        _check_leaf(o)
        if tuple(o.shape) != tuple(r.shape):
            _resize(o, tuple(r.shape), name)
        _assign(o, r.detach())
    if isinstance(result, tuple) and hasattr(result, "_fields"):   # values, indices
        return type(result)(*outs)
    return out


def with_out(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` with a keyword ``out=`` (None: ``fn`` itself)."""
    @functools.wraps(fn)
    def function(*args: Any, out: Any = None, **kwargs: Any) -> Any:
        if out is None:
            return fn(*args, **kwargs)
        if grad_mode.is_grad_enabled() and any(
                t.requires_grad for t in _tensors((args, kwargs)) + _tensors(out)):
            raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                               f"automatic differentiation, but one of the arguments requires "
                               f"grad.")
        return write_out(out, fn(*args, **kwargs), name)
    return function


def inplace_of(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``Tensor.<name>_``: ``fn``'s result written into ``self`` (its shape and dtype)."""
    def inplace(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        _check_leaf(self)
        return _assign(self, fn(self, *args, **kwargs))
    inplace.__name__ = name + "_"
    inplace.__doc__ = f"In-place ``Tensor.{name}``."
    return inplace


def public(name: str | None = None, *, function: bool = True, method: bool = True,
           inplace: bool = False, out: bool = True,
           aliases: Sequence[str] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Publish ``fn(input, ...)`` as ``scriptmod.<name>`` (with ``out=`` unless ``out=False``),
    ``Tensor.<name>`` (``method``) and ``Tensor.<name>_`` (``inplace``); ``aliases`` get the
    same forms. Returns ``fn`` unchanged."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in (name or fn.__name__, *aliases):
            if function:
                FUNCTIONS[n] = with_out(fn, n) if out else fn
            if method:
                setattr(Tensor, n, fn)
            if inplace:
                setattr(Tensor, n + "_", inplace_of(fn, n))
        return fn
    return deco
