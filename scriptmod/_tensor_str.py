"""PyTorch's tensor repr: ``tensor([[0.1000, 2.0000]], requires_grad=True)``.

Follows ``torch/_tensor_str.py`` (precision 4, threshold 1000, edgeitems 3, linewidth 80):
one formatter per tensor (int mode, fixed or scientific), complex numbers formatted with a
real and an imaginary formatter, long rows wrapped, big tensors summarized with ``...``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D

_DEFAULT_SHOWN = {D.int64, D.bool_}
_THRESHOLD = 1000
_EDGE = 3
_LINEWIDTH = 80
_PRECISION = 4


class _Formatter:
    """Decides int/fixed/scientific mode and the common width from the values shown."""

    def __init__(self, values: np.ndarray, floating: bool) -> None:
        self.floating, self.int_mode, self.sci_mode, self.max_width = floating, True, False, 1
        flat = values.reshape(-1)
        if not floating:
            self.max_width = max((len(str(v)) for v in flat.tolist()), default=1)
            return
        flat = flat.astype(np.float64)
        nz = flat[np.isfinite(flat) & (flat != 0)]
        if nz.size == 0:
            return
        absv = np.abs(nz)
        lo, hi = absv.min(), absv.max()
        self.int_mode = bool(np.all(nz == np.ceil(nz)))
        self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4)
        if self.sci_mode:
            self.max_width = max(len(f"{v:.{_PRECISION}e}") for v in nz.tolist())
        elif self.int_mode:
            self.max_width = max(len(f"{v:.0f}") + 1 for v in nz.tolist())
        else:
            self.max_width = max(len(f"{v:.{_PRECISION}f}") for v in nz.tolist())

    def width(self) -> int:
        return self.max_width

    def format(self, value: Any) -> str:
        if not self.floating:
            ret = str(value)
        elif self.sci_mode:
            ret = f"{value:{self.max_width}.{_PRECISION}e}"
        elif self.int_mode:
            ret = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            ret = f"{value:.{_PRECISION}f}"
        return (self.max_width - len(ret)) * " " + ret


def _val_str(val: Any, f1: _Formatter, f2: _Formatter | None) -> str:
    if f2 is None:
        return f1.format(val)
    real, imag = f1.format(val.real), (f2.format(val.imag) + "j").lstrip()
    return real + imag if imag[0] in "+-" else real + "+" + imag


def _vector_str(arr: np.ndarray, indent: int, summarize: bool, f1: _Formatter,
                f2: _Formatter | None) -> str:
    element_length = f1.width() + 2 + (f2.width() + 1 if f2 is not None else 0)
    per_line = max(1, math.floor((_LINEWIDTH - indent) / element_length))
    vals = arr.tolist()
    if summarize and len(vals) > 2 * _EDGE:
        data = ([_val_str(v, f1, f2) for v in vals[:_EDGE]] + [" ..."]
                + [_val_str(v, f1, f2) for v in vals[-_EDGE:]])
    else:
        data = [_val_str(v, f1, f2) for v in vals]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _render(arr: np.ndarray, indent: int, summarize: bool, f1: _Formatter,
            f2: _Formatter | None) -> str:
    if arr.ndim == 0:
        return _val_str(arr.item(), f1, f2)
    if arr.ndim == 1:
        return _vector_str(arr, indent, summarize, f1, f2)
    n = arr.shape[0]
    rows = (list(range(_EDGE)) + [None] + list(range(n - _EDGE, n))
            if summarize and n > 2 * _EDGE else list(range(n)))
    parts = ["..." if i is None else _render(arr[i], indent + 1, summarize, f1, f2) for i in rows]
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _summarized(arr: np.ndarray) -> np.ndarray:
    """The elements a summarized repr shows (the edges of every dim), for the formatter."""
    if arr.ndim == 0:
        return arr
    idx = [np.r_[0:_EDGE, s - _EDGE:s] if s > 2 * _EDGE else np.arange(s) for s in arr.shape]
    return arr[np.ix_(*idx)]


def _body(arr: np.ndarray, dtype: D.DType, indent: int) -> str:
    if arr.size == 0:
        return "[]"
    summarize = arr.size > _THRESHOLD
    shown = _summarized(arr) if summarize else arr
    if dtype.category == D.COMPLEX:
        f1, f2 = _Formatter(shown.real, True), _Formatter(shown.imag, True)
        return _render(arr, indent, summarize, f1, f2)
    return _render(arr, indent, summarize, _Formatter(shown, dtype.category == D.FLOAT), None)


def tensor_repr(t: Any, prefix: str = "tensor(") -> str:
    arr = t.numpy(force=True) if hasattr(t, "numpy") else np.asarray(t)
    dtype = t.dtype
    if dtype in (D.bfloat16, D.float16):
        arr = arr.astype(np.float32)
    suffix = []
    body = _body(arr, dtype, len(prefix))
    if arr.size == 0 and arr.ndim != 1:
        suffix.append(f"size={tuple(arr.shape)}")
    if str(t.device) != "cpu":
        suffix.append(f"device='{t.device}'")
    implied = arr.size > 0 and (dtype in _DEFAULT_SHOWN or dtype is D._complex_of(D.get_default_dtype()))
    if dtype is not D.get_default_dtype() and not implied:   # empty: nothing implies a dtype
        suffix.append(f"dtype=scriptmod.{dtype.name}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffix.append("requires_grad=True")
    return prefix + body + "".join(", " + s for s in suffix) + ")"
