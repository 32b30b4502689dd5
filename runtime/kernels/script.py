"""Reference kernels of the Python-value ops (``ir.ops.script``): Python's own operators on
Python values, PyTorch's conversions on tensors (arrays here: ``int(t)``, ``bool(t)``,
``str(t)``), and lists and dicts changed in place.

    >>> from scriptmod.runtime.kernels import run_kernel
    >>> run_kernel("py_floordiv", [-7, 2], {}), run_kernel("py_truediv", [True, 4], {})
    (-4, 0.25)
    >>> run_kernel("py_format", ["{} has {:.1f}", np.ones(2, np.float32), 2.0], {})
    'tensor([1., 1.]) has 2.0'

A tensor prints as eager ``str(tensor)`` does once ``scriptmod`` has installed its tensor
text with ``set_tensor_text`` (the runtime cannot import ``scriptmod``); before that, as a
plain ``tensor([...])`` from NumPy's printer.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from scriptmod.ir.dtypes import BY_NAME
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.ops.pyfuncs import call as call_named
from scriptmod.ir.ops.script import PY_ARITH, PY_COMPARE
from . import kernel
from ..arrays import is_cupy
from ..trees import is_namedtuple, rebuilt

TensorText = Callable[[Any], str]


def _plain_text(a: Any) -> str:
    arr = a.get() if is_cupy(a) else np.asarray(a)
    return "tensor(" + np.array2string(arr, separator=", ", prefix="tensor(") + ")"


_TENSOR_TEXT: list[TensorText] = [_plain_text]


def set_tensor_text(fn: TensorText) -> None:
    """Make ``py_str``/``py_format`` print an array as ``fn(array)``: the frontend passes
    eager ``Tensor``'s ``str``, so scripted code prints tensors exactly as eager code does."""
    _TENSOR_TEXT[0] = fn


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


# ---- numbers, strings, None ----------------------------------------------------------------

def _number_kernel(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda xp, a, b: fn(a, b)


for _name, _fn in PY_ARITH.items():
    if _name != "py_pow":
        kernel(_name)(_number_kernel(_fn))
for _name, _fn in PY_COMPARE.items():
    kernel(_name)(_number_kernel(lambda a, b, fn=_fn: bool(fn(a, b))))


@kernel("py_pow")
def _pow(xp: Any, a: Any, b: Any) -> Any:
    out = a ** b
    if type(out) is complex and type(a) is not complex and type(b) is not complex:
        raise ValueError(f"py_pow: {a!r} ** {b!r} is a complex number, which a float result "
                         "cannot hold (a negative base with a fractional exponent)")
    return out


def _common(out: Any, a: Any, b: Any) -> Any:
    """``min``/``max``'s result in its operands' common type (``min(1, 2.5)`` is ``1.0``)."""
    for t in (float, int):
        if type(out) is not t and t in (type(a), type(b)) and type(out) in (bool, int):
            return t(out)
    return out


kernel("py_min")(lambda xp, a, b: _common(min(a, b), a, b))
kernel("py_max")(lambda xp, a, b: _common(max(a, b), a, b))
kernel("py_neg")(lambda xp, a: -a)
kernel("py_abs")(lambda xp, a: abs(a))
kernel("py_is_none")(lambda xp, x: x is None)


def _one_value(a: Any) -> Any:
    """The one element of an array, as ``Tensor.item()`` reads it."""
    if a.size != 1:
        raise ShapeError(f"a Tensor with {a.size} elements cannot be converted to Scalar")
    return a.reshape(()).item()


def _truth(x: Any) -> bool:
    if not _is_array(x):
        return bool(x)
    if x.size != 1:
        amount = "no values" if x.size == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {amount} is ambiguous")
    return bool(x.reshape(()).item())


kernel("py_not")(lambda xp, x: not _truth(x))
kernel("py_bool")(lambda xp, x: _truth(x))
kernel("py_int")(lambda xp, x: int(_one_value(x)) if _is_array(x) else int(x))
kernel("py_float")(lambda xp, x: float(_one_value(x)) if _is_array(x) else float(x))


class _TensorText:
    """Stands for an array in ``str``/``format``: prints as eager ``Tensor`` does
    (``Tensor.__format__``: a format spec applies to a 0-dim tensor's value only)."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def __repr__(self) -> str:
        return _TENSOR_TEXT[0](self.array)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if spec and self.array.ndim == 0:
            return format(self.array.item(), spec)
        return repr(self)


def _printable(x: Any) -> Any:
    """``x`` with every array, also inside lists, tuples and dicts, standing as a tensor."""
    if _is_array(x):
        return _TensorText(x)
    if type(x) in (list, tuple) or is_namedtuple(x):
        return rebuilt(x, (_printable(v) for v in x))
    if type(x) is dict:
        return {k: _printable(v) for k, v in x.items()}
    return x


kernel("py_str")(lambda xp, x: str(_printable(x)))
kernel("py_format")(lambda xp, fmt, *args: fmt.format(*(_printable(a) for a in args)))
kernel("item")(lambda xp, a: _one_value(a))
kernel("tensor_dtype")(lambda xp, a: BY_NAME[a.dtype.name])
kernel("tensor_device")(lambda xp, a: f"cuda:{a.device.id}" if is_cupy(a) else "cpu")
kernel("dim")(lambda xp, a: int(a.ndim))
kernel("numel")(lambda xp, a: int(a.size))
kernel("shape")(lambda xp, a: [int(d) for d in a.shape])


# ---- lists and dicts -----------------------------------------------------------------------

@kernel("list_set")
def _list_set(xp: Any, lst: list, i: int, v: Any) -> list:
    lst[i] = v
    return lst


@kernel("list_append")
def _list_append(xp: Any, lst: list, v: Any) -> list:
    lst.append(v)
    return lst


@kernel("dict_construct")
def _dict_construct(xp: Any, *keys_and_values: Any, type: str | None = None) -> dict:
    if len(keys_and_values) % 2:
        raise ValueError(f"dict_construct: keys and values alternate, got "
                         f"{len(keys_and_values)} inputs")
    return dict(zip(keys_and_values[0::2], keys_and_values[1::2]))


@kernel("dict_set")
def _dict_set(xp: Any, d: dict, k: Any, v: Any) -> dict:
    d[k] = v
    return d


kernel("list_len")(lambda xp, lst: len(lst))
kernel("list_get")(lambda xp, lst, i: lst[i])
kernel("list_slice")(lambda xp, lst, start, end, step: lst[start:end:step])
kernel("list_concat")(lambda xp, a, b: a + b)
kernel("list_contains")(lambda xp, lst, v: v in lst)
kernel("list_eq")(lambda xp, a, b: a == b)
kernel("list_min")(lambda xp, lst: min(lst))
kernel("list_max")(lambda xp, lst: max(lst))
kernel("str_len")(lambda xp, s: len(s))
kernel("py_call")(lambda xp, *args, fn: call_named(fn, args))
kernel("dict_get")(lambda xp, d, k: d[k])
kernel("dict_contains")(lambda xp, d, k: k in d)
kernel("dict_len")(lambda xp, d: len(d))
kernel("dict_keys")(lambda xp, d: list(d.keys()))
kernel("dict_values")(lambda xp, d: list(d.values()))
kernel("dict_items")(lambda xp, d: list(d.items()))

__all__ = ["set_tensor_text"]
