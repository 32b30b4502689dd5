"""Tensor methods and their ``scriptmod.*`` function forms, all thin calls into ``dispatch``.

The elementwise vocabulary comes from the registry's flags: an attribute-free op flagged
``UNARY`` (or ``BINARY``) in ``ir.ops`` gives ``Tensor.exp``, ``Tensor.exp_`` and
``scriptmod.exp``.
"""
from __future__ import annotations

import operator
from collections import namedtuple
from typing import Any

import numpy as np

import scriptmod.ir.ops  # noqa: F401  (fills the schema registry)
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import SCALAR_INTS, checked_float, imm_value, scalar_overflow
from scriptmod.ir import schema as S
from scriptmod.ir.errors import ArgumentError, ArgumentValueError, DTypeError, KernelDTypeError
from scriptmod.ir.ops.rules import norm_dim, promote, to_bool
from scriptmod._dispatch import TRACERS, dispatch, unary
from scriptmod._traced_int import TracedInt, fixed
from scriptmod.autograd import grad_mode
from scriptmod.tensor import Tensor, _assign, _check_leaf, _dtype_arg
from scriptmod._creation import tensor

_gstate = grad_mode._state
_NUMBER = (int, float, bool, complex)

# ops with attributes have hand-written methods (clamp; cast is Tensor.to); so do add, sub and
# div (alpha, rounding_mode), which replace the generated ones below
UNARY = tuple(sorted(n for n in S.ops_with(S.UNARY) if not S.get(n).attrs))
BINARY = tuple(sorted(S.ops_with(S.BINARY)))
# unary tests with a bool result (isnan) have no in-place form
_NO_INPLACE = frozenset(n for n in UNARY if S.get(n).dtype_rule is to_bool)
_ALIASES = {"negative": "neg", "absolute": "abs", "multiply": "mul", "subtract": "sub",
            "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
            "not_equal": "ne", "arctan2": "atan2", "arcsin": "asin", "arccos": "acos",
            "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh",
            "fix": "trunc"}


def _operand(x: Any) -> Any:
    """A tensor op's other operand: Tensors and Python numbers; NumPy arrays become tensors."""
    if isinstance(x, (Tensor,) + _NUMBER):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return tensor(x)
    raise TypeError(f"expected a Tensor or a number as operand, got {type(x).__name__}")


def _binary(name: str) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        return dispatch(name, (self, _operand(other)))
    method.__name__ = name
    return method


for _n in UNARY:
    setattr(Tensor, _n, unary(_n))
for _n in BINARY:
    setattr(Tensor, _n, _binary(_n))
for _alias, _n in _ALIASES.items():
    setattr(Tensor, _alias, getattr(Tensor, _n))


def _check_alpha(self: Tensor, other: Any, alpha: Any) -> None:
    """torch refuses a float ``alpha`` when both operands are integral (or bool)."""
    if isinstance(alpha, float) and self.dtype.category < D.FLOAT and not (
            isinstance(other, float) or isinstance(other, Tensor) and other.dtype.category >= D.FLOAT):
        raise DTypeError(f"For integral input tensors, argument alpha must not be a floating "
                         f"point number (got alpha={alpha} for {self.dtype.name})")


def _scaled(op: str, self: Tensor, other: Any, alpha: Any) -> Any:
    """``other * alpha`` for add and sub, as PyTorch's kernels compute it: ``alpha`` converted
    with the overflow check to the common dtype, and meeting a float16/bfloat16 ``other``
    rounded to its dtype (not the unrounded scalar of a ``mul``)."""
    _check_alpha(self, other, alpha)
    if type(alpha) is int and alpha not in SCALAR_INTS:
        raise scalar_overflow(alpha, op)
    if alpha == 1:
        return other
    common = promote([(x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x)
                      for x in (self, other)], {})
    if common.is_floating_point:
        checked_float(alpha, common, op)
    if isinstance(other, Tensor) and other.dtype in (D.float16, D.bfloat16):
        alpha = imm_value(alpha, other.dtype)
    return other * alpha


def _add(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    other = _operand(other)
    return dispatch("add", (self, _scaled("add", self, other, alpha)))


def _sub(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    other = _operand(other)
    return dispatch("sub", (self, _scaled("sub", self, other, alpha)))


def _div(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    other = _operand(other)
    if rounding_mode is None:
        return dispatch("div", (self, other))
    if rounding_mode == "floor":
        return dispatch("floor_divide", (self, other))
    if rounding_mode == "trunc":
        if self.dtype in (D.float16, D.bfloat16) and _within(other, self.dtype):
            # PyTorch truncates the float32 quotient, then rounds once (65504 / 65519.9: 0)
            wide = other.float() if isinstance(other, Tensor) else other
            return dispatch("div", (self.float(), wide)).trunc().to(self.dtype)
        result = _result_dtype(self, other)
        if result.is_complex:
            raise KernelDTypeError(f"\"div_trunc_cpu\" not implemented for '{result.short}'")
        if result.category <= D.INT:
            return _int_trunc_divide(self, other)
        return dispatch("div", (self, other)).trunc()
    raise ValueError(f"div: expected rounding_mode to be None, 'trunc' or 'floor', got {rounding_mode!r}")


def _result_dtype(self: Tensor, other: Any) -> D.DType:
    return promote([(x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x)
                    for x in (self, other)], {})


def _int_trunc_divide(self: Tensor, other: Any) -> Tensor:
    """The integer quotient rounded toward zero, exactly (no float round trip, so all of
    int64): the floor quotient plus one where the division is inexact and the signs differ.
    A zero divisor raises, as in PyTorch."""
    q = dispatch("floor_divide", (self, other))
    inexact = dispatch("remainder", (self, other)) != 0
    return q + (inexact & ((self < 0) != (other < 0))).to(q.dtype)


def _within(other: Any, half: D.DType) -> bool:
    """Whether ``other`` leaves a ``half`` tensor's division in ``half``: a number, a 0-d
    tensor, or a tensor of ``half`` itself."""
    return not isinstance(other, Tensor) or other.ndim == 0 or other.dtype is half


Tensor.add, Tensor.sub, Tensor.div = _add, _sub, _div
Tensor.subtract = _sub
Tensor.divide = Tensor.true_divide = _div


_OPERANDS = (Tensor, np.ndarray) + _NUMBER


def _reflect(name: str) -> Any:
    """``other <op> self`` as PyTorch's reflected dunders compute it: a commutative op keeps
    the tensor first (``2.5 * t`` is ``mul(t, 2.5)``), and ``other / self`` is
    ``self.reciprocal() * other``; the scalar is then ``other`` (see ``SCALAR_OPMATH``)."""
    commutative = S.get(name).has(S.COMMUTATIVE)

    def method(self: Tensor, other: Any) -> Any:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        if type(other) is int and other not in SCALAR_INTS:
            raise scalar_overflow(other, name)
        if commutative:
            return dispatch(name, (self, _operand(other)))
        if name == "div":
            return dispatch("mul", (dispatch("reciprocal", (self,)), _operand(other)))
        return dispatch(name, (_operand(other), self))
    return method


def _forward(name: str) -> Any:
    def method(self: Tensor, other: Any) -> Any:
        if type(other) is Tensor:
            return dispatch(name, (self, other))
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return dispatch(name, (self, _operand(other)))
    return method


for _dunder, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                     ("floordiv", "floor_divide"), ("mod", "remainder"), ("pow", "pow"),
                     ("matmul", "matmul"), ("and", "bitwise_and"), ("or", "bitwise_or"),
                     ("xor", "bitwise_xor"), ("lshift", "bitwise_left_shift"),
                     ("rshift", "bitwise_right_shift")):
    setattr(Tensor, f"__{_dunder}__", _forward(_op))
    setattr(Tensor, f"__r{_dunder}__", _reflect(_op))
for _dunder, _op in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge")):
    setattr(Tensor, f"__{_dunder}__", _forward(_op))
Tensor.__rdiv__ = Tensor.__rtruediv__
Tensor.__neg__ = unary("neg")
Tensor.__abs__ = unary("abs")
Tensor.__invert__ = unary("bitwise_not")
Tensor.__pos__ = lambda self: self


# ---- in-place forms ------------------------------------------------------------------
def _inplace_of(method_name: str) -> Any:
    method = getattr(Tensor, method_name)

    def inplace(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        _check_leaf(self)
        return _assign(self, method(self, *args, **kwargs))
    inplace.__name__ = method_name + "_"
    return inplace


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    _check_leaf(self)
    src = _operand(src)
    if not isinstance(src, Tensor):
        src = tensor(src, dtype=self.dtype, device=self.device)
    out = src.to(device=self.device, dtype=self.dtype)
    if TRACERS and out._data is not self._data:
        out = where(True, out, self)   # src broadcast to self's shape by an elementwise op,
        # which follows another rank of self as eager's copy_ does (an expand records the sizes)
    elif tuple(out.shape) != tuple(self.shape):
        out = out.expand(self.shape)
    if out._data is self._data:
        self._vc[0] += 1   # torch counts a copy onto itself (load_state_dict of its own state)
        if TRACERS and out is not self:   # same storage (eval dropout): the graph still
            TRACERS[-1].on_inplace(self, out)   # writes the op's result back
        return self
    if out.grad_fn is None and self.grad_fn is not None and grad_mode.is_grad_enabled():
        # a value that needs no gradient overwrites one in a graph: self keeps requiring grad,
        # and its old value's gradient is 0, as PyTorch's FillBackward/CopyBackwards give
        out = where(True, out, self)
    return _assign(self, out if out.grad_fn is not None or not self._requires_grad else out.detach())


def fill_(self: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    return copy_(self, value)


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


Tensor.copy_, Tensor.fill_, Tensor.zero_ = copy_, fill_, zero_

# ---- reductions ----------------------------------------------------------------------


def _dim_attr(dim: Any) -> Any:
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        return [int(d) for d in dim]
    return [int(dim)]


def _sum(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return dispatch("sum", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim,
                                     "dtype": None if dtype is None else _dtype_arg(dtype)})


def _mean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return dispatch("mean", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim,
                                      "dtype": None if dtype is None else _dtype_arg(dtype)})


def _prod(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return dispatch("prod", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim,
                                      "dtype": None if dtype is None else _dtype_arg(dtype)})


def _var_args(dim: Any, unbiased: Any, keepdim: bool, correction: Any) -> dict[str, Any]:
    if isinstance(dim, bool):           # var(unbiased) legacy form
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return {"dim": _dim_attr(dim), "keepdim": keepdim, "correction": float(correction)}


def _var(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
         correction: Any = None) -> Tensor:
    return dispatch("var", (self,), _var_args(dim, unbiased, keepdim, correction))


def _std(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
         correction: Any = None) -> Tensor:
    return _var(self, dim, unbiased, keepdim, correction=correction).sqrt()


def _extreme(name: str) -> Any:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
        if isinstance(dim, Tensor):
            return dispatch("maximum" if name == "max" else "minimum", (self, dim))
        if dim is None:
            return dispatch("a" + name, (self,))
        values, indices = dispatch(name + "_dim", (self,), {"dim": int(dim), "keepdim": keepdim})
        return RETURN_TYPES[name](values, indices)
    method.__name__ = name
    return method


def _amax(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return dispatch("amax", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim})


def _amin(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return dispatch("amin", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim})


def _arg(name: str) -> Any:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return dispatch(name, (self,), {"dim": None if dim is None else int(dim), "keepdim": keepdim})
    return method


def _bool_reduce(name: str) -> Any:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return dispatch(name, (self,), {"dim": _dim_attr(dim), "keepdim": keepdim})
    return method


def _logsumexp(self: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    return dispatch("logsumexp", (self,), {"dim": _dim_attr(dim), "keepdim": keepdim})


def _along(name: str) -> Any:
    def method(self: Tensor, dim: int, dtype: Any = None) -> Tensor:
        return dispatch(name, (self,), {"dim": int(dim), "dtype": None if dtype is None else _dtype_arg(dtype)})
    method.__name__ = name
    return method


Tensor.sum, Tensor.mean, Tensor.prod, Tensor.var, Tensor.std = _sum, _mean, _prod, _var, _std
Tensor.max, Tensor.min = _extreme("max"), _extreme("min")
Tensor.amax, Tensor.amin = _amax, _amin
Tensor.argmax, Tensor.argmin = _arg("argmax"), _arg("argmin")
Tensor.any, Tensor.all = _bool_reduce("any"), _bool_reduce("all")
Tensor.logsumexp = _logsumexp
Tensor.softmax, Tensor.log_softmax, Tensor.cumsum = _along("softmax"), _along("log_softmax"), _along("cumsum")


def _norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
          dtype: Any = None) -> Tensor:
    """torch.norm's dispatch to ``scriptmod.linalg``: a number (None: 2) is a vector norm
    over ``dim``; ``'fro'`` over at most two dims the 2-norm; another string a matrix norm."""
    from scriptmod import linalg   # a lazy submodule of scriptmod: imported on first use
    dims = None if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if not isinstance(p, str):
        return linalg.vector_norm(self, 2 if p is None else p, dims, keepdim, dtype=dtype)
    if p == "fro" and (dims is None or len(dims) <= 2):
        return linalg.vector_norm(self, 2, dims, keepdim, dtype=dtype)
    return linalg.matrix_norm(self, p, list(range(self.ndim)) if dims is None else dims,
                              keepdim, dtype=dtype)


Tensor.norm = _norm

# ---- sorting and closeness -------------------------------------------------------------
# torch.return_types: each op's (values, indices) a namedtuple named for the op, indexable,
# unpackable and read by name (``x.topk(k).indices``)
RETURN_TYPES = {name: namedtuple(name, ["values", "indices"])
                for name in ("max", "min", "sort", "topk", "kthvalue", "median")}


def _int_arg(op: str, name: str, v: Any) -> int:
    """An int attribute of an op: a traced size is guarded to keep its value (the attribute
    cannot follow it; ``x.topk(x.size(0) - 1)`` at another size raises TraceGuardError)."""
    try:
        return operator.index(fixed(v, f"{op}()'s {name}"))
    except TypeError:
        raise TypeError(f"{op}(): argument '{name}' must be int, got {type(v).__name__}") from None


def _sort(self: Tensor, dim: Any = -1, descending: bool = False, stable: bool = False) -> Any:
    """Always stable: equal values keep their order, so ``stable`` changes nothing."""
    values, indices = dispatch("sort", (self,), {"dim": _int_arg("sort", "dim", dim),
                                                 "descending": bool(descending)})
    return RETURN_TYPES["sort"](values, indices)


def _argsort(self: Tensor, dim: Any = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return _sort(self, dim, descending, stable).indices


def _topk(self: Tensor, k: Any, dim: Any = -1, largest: bool = True, sorted: bool = True) -> Any:
    """The values come sorted whatever ``sorted`` says (PyTorch leaves the order open)."""
    values, indices = dispatch("topk", (self,), {
        "k": _int_arg("topk", "k", k), "dim": _int_arg("topk", "dim", dim),
        "largest": bool(largest), "sorted": bool(sorted)})
    return RETURN_TYPES["topk"](values, indices)


def _kthvalue(self: Tensor, k: Any, dim: Any = -1, keepdim: bool = False) -> Any:
    """The ``k``-th smallest along ``dim`` (NaN counts as the largest) and its index, from a
    stable sort: of equal values, the first in index order (PyTorch leaves which one open)."""
    k = k if type(k) is TracedInt else _int_arg("kthvalue", "k", k)   # a traced k follows
    d, n = _sorted_dim("kthvalue", self, dim)
    if not 1 <= k <= n:
        raise ArgumentValueError(f"kthvalue(): selected number k out of range for dimension "
                                 f"{d} (k={k}, its size is {n})")
    return _nth_smallest(self, "kthvalue", d, k - 1, keepdim)


def _median(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median along ``dim`` and its index (NaN, at a NaN's index, where the row
    holds one); without ``dim`` the lower median of all elements, a tensor."""
    if dim is None:
        flat = self.reshape(-1)
        if flat.numel() == 0 and self.is_floating_point():
            return self.new_full((), float("nan"))              # as torch
        return _median(flat, 0).values
    d, n = _sorted_dim("median", self, dim)
    pos: Any = (n - 1) // 2
    if self.is_floating_point():             # NaN sorts last: pick the first of them
        nans = (self.reshape(1) if self.ndim == 0 else self).isnan().sum(d, keepdim=True)
        pos = dispatch("where", (nans > 0, nans.neg() + n, nans * 0 + pos))
    return _nth_smallest(self, "median", d, pos, keepdim)


def _sorted_dim(op: str, x: Tensor, dim: Any) -> tuple[int, Any]:
    """``dim`` normalized, and its size (a 0-d tensor has one element along dim 0 or -1);
    a dim of no elements refused as torch does."""
    d = norm_dim(_int_arg(op, "dim", dim), x.ndim, f"{op}()")
    n = x.shape[d] if x.ndim else 1
    if n == 0:
        raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
    return d, n


def _nth_smallest(self: Tensor, op: str, d: int, pos: Any, keepdim: bool) -> Any:
    """(values, indices) at position ``pos`` (an int, or an int64 tensor of one element along
    ``d``) of ``self`` sorted along ``d``, as ``RETURN_TYPES[op]``."""
    x = self.reshape(1) if self.ndim == 0 else self
    values, indices = dispatch("sort", (x,), {"dim": d, "descending": False})
    if isinstance(pos, Tensor):
        values, indices = values.gather(d, pos), indices.gather(d, pos)
    else:
        values, indices = values.narrow(d, pos, 1), indices.narrow(d, pos, 1)
    if self.ndim == 0:
        values, indices = values.reshape(()), indices.reshape(())
    elif not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return RETURN_TYPES[op](values, indices)


def _isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Tensor:
    # As torch: ``other`` is a Tensor of the input's dtype (no promotion; torch raises
    # "Float did not match Double").
    if not isinstance(other, Tensor):
        raise ArgumentError(f"isclose(): argument 'other' (position 2) must be Tensor, not "
                            f"{type(other).__name__}")
    if other.dtype != self.dtype:
        raise DTypeError(f"isclose(): expected both inputs to have the same dtype, but input "
                         f"is {self.dtype} and other is {other.dtype}")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if not tol >= 0:
            raise ArgumentValueError(f"isclose(): {name} must be greater than or equal to "
                                     f"zero, but got {tol}")
    return dispatch("isclose", (self, _operand(other)), {
        "rtol": float(rtol), "atol": float(atol), "equal_nan": bool(equal_nan)})


def _allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
              equal_nan: bool = False) -> bool:
    """``isclose(...).all()`` as a Python bool."""
    return bool(_isclose(self, other, rtol, atol, equal_nan).all())


Tensor.sort, Tensor.argsort, Tensor.topk = _sort, _argsort, _topk
Tensor.kthvalue, Tensor.median = _kthvalue, _median
Tensor.isclose, Tensor.allclose = _isclose, _allclose

# ---- elementwise with attributes ------------------------------------------------------


def _clamp(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    if self.is_complex():
        raise RuntimeError("clamp is not supported for complex types")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = self
        if min is not None:
            out = dispatch("maximum", (out, _operand(min)))
        if max is not None:
            out = dispatch("minimum", (out, _operand(max)))
        return out
    # Python numbers as given: the op promotes with them (int.clamp(1.5) is float) and an int
    # bound stays exact (int64 beyond 2**53); a float tensor's bounds are converted to its
    # dtype as PyTorch converts them, with the overflow check (float16 clamp(-0.0, min=1e-8)
    # is -0.0, max=70000 raises)
    lo, hi = _bound(min), _bound(max)
    if self.dtype.is_floating_point:
        lo, hi = (b if b is None else imm_value(checked_float(b, self.dtype, "clamp"), self.dtype)
                  for b in (lo, hi))
    return dispatch("clamp", (self,), {"min": lo, "max": hi})


def _bound(b: Any) -> int | float | None:
    if type(b) is int and b not in SCALAR_INTS:
        raise scalar_overflow(b, "clamp")
    return b if b is None or type(b) in (int, float) else \
        int(b) if isinstance(b, (int, np.integer)) else float(b)


def _where(self: Tensor, condition: Any, other: Any) -> Tensor:
    return where(condition, self, other)


def _masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        value = value.to(self.dtype)
    elif self.dtype.category < D.FLOAT and isinstance(value, float):
        value = type(self._data.dtype.type(0).item())(value)
    out = where(mask, value, self)
    return out if out.dtype is self.dtype else out.to(self.dtype)


def _round(self: Tensor, *, decimals: int = 0) -> Tensor:
    """Round half to even; with ``decimals``, at that decimal place as PyTorch computes it:
    round(x * 10**d) / 10**d, or round(x / 10**-d) * 10**-d for negative ``d``."""
    if type(decimals) is not int:
        raise TypeError(f"round(): argument 'decimals' must be int, not {type(decimals).__name__}")
    if decimals == 0:
        return dispatch("round", (self,))
    if self.dtype.category != D.FLOAT:
        raise KernelDTypeError(f"\"round_cpu\" not implemented for '{self.dtype.short}'")
    if self.dtype in (D.float16, D.bfloat16):       # PyTorch scales in float32 (no overflow)
        return _round(self.float(), decimals=decimals).to(self.dtype)
    scale = 10.0 ** abs(decimals)
    if decimals > 0:
        return dispatch("round", (self * scale,)) / scale
    return dispatch("round", (self / scale,)) * scale


Tensor.round = _round
Tensor.clamp = Tensor.clip = _clamp
Tensor.clamp_min = lambda self, min: _clamp(self, min=min)
Tensor.clamp_max = lambda self, max: _clamp(self, max=max)
Tensor.where = _where
Tensor.masked_fill = _masked_fill
Tensor.square = lambda self: self.long() * self.long() if self.dtype is D.bool_ \
    else self * self    # PyTorch's pow(self, 2): int64 for bool

for _n in UNARY + BINARY + ("clamp", "clip", "clamp_min", "clamp_max", "masked_fill", "square"):
    if _n not in _NO_INPLACE:
        setattr(Tensor, _n + "_", _inplace_of(_n))
for _alias, _n in _ALIASES.items():     # arcsin_, multiply_, greater_, ... as their ops'
    if hasattr(Tensor, _n + "_"):
        setattr(Tensor, _alias + "_", getattr(Tensor, _n + "_"))
Tensor.divide_ = Tensor.true_divide_ = _inplace_of("div")
Tensor.__iadd__ = lambda self, o: _inplace_of("add")(self, o)
Tensor.__isub__ = lambda self, o: _inplace_of("sub")(self, o)
Tensor.__imul__ = lambda self, o: _inplace_of("mul")(self, o)
Tensor.__itruediv__ = lambda self, o: _inplace_of("div")(self, o)
Tensor.__ipow__ = lambda self, o: _inplace_of("pow")(self, o)
Tensor.__iand__ = lambda self, o: _inplace_of("bitwise_and")(self, o)
Tensor.__ior__ = lambda self, o: _inplace_of("bitwise_or")(self, o)
Tensor.__ixor__ = lambda self, o: _inplace_of("bitwise_xor")(self, o)
Tensor.__ilshift__ = lambda self, o: _inplace_of("bitwise_left_shift")(self, o)
Tensor.__irshift__ = lambda self, o: _inplace_of("bitwise_right_shift")(self, o)


# ---- function forms (scriptmod.exp(x), scriptmod.add(a, b), ...) --------------------
def _as_tensor(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return tensor(x)


def where(condition: Any, input: Any = None, other: Any = None) -> Any:
    """``where(cond, x, y)``: x where cond else y; ``where(cond)``: the indices of True,
    ``nonzero(cond, as_tuple=True)`` (a data-dependent shape: eager only, refused by
    ``jit.trace`` as ``nonzero`` is)."""
    if input is None and other is None:
        from scriptmod._ops_indexing import nonzero
        return nonzero(_as_tensor(condition), as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() expects either one argument (condition) or three "
                        "(condition, input, other)")
    return dispatch("where", (_as_tensor(condition), _operand(input), _operand(other)))


def floor_divide(input: Any, other: Any) -> Tensor:
    return dispatch("floor_divide", (_operand(input), _operand(other)))


def _function(name: str) -> Any:
    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(input, _NUMBER) and name in BINARY and args:
            return dispatch(name, (input, _operand(args[0])))
        return getattr(_as_tensor(input), name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"Function form of ``Tensor.{name}``."
    return fn


FUNCTIONS = (UNARY + BINARY + tuple(_ALIASES) +
             ("add", "div", "true_divide", "divide", "clamp", "clip", "sum", "mean", "prod",
              "var", "std", "max", "min", "amax", "amin", "argmax", "argmin", "any", "all",
              "logsumexp", "softmax", "log_softmax", "cumsum", "masked_fill", "square", "norm",
              "clamp_min", "clamp_max",
              "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "flatten",
              "narrow", "split", "chunk", "gather", "index_select", "matmul", "mm", "bmm",
              "clone", "numel", "select", "movedim", "unflatten", "tile", "flip",
              "tril", "triu", "outer", "dot", "addmm", "unbind", "detach",
              "relu_", "sigmoid_", "tanh_", "exp_", "zero_", "fill_", "abs_", "neg_"))
_FN_TABLE = {n: _function(n) for n in FUNCTIONS}
_FN_TABLE.update({n: _function(n) for n in ("sort", "argsort", "topk", "kthvalue", "median",
                                             "isclose", "allclose")})
