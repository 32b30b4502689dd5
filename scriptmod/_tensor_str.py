"""PyTorch's tensor repr: ``tensor([[0.1000, 2.0000]], requires_grad=True)``."""
from __future__ import annotations

from typing import Any

import numpy as np

from ir import dtypes as D

_DEFAULT_SHOWN = {D.int64, D.bool_}
_SUMMARIZE_OVER = 1000
_EDGE = 3


def _float_formatter(values: np.ndarray) -> Any:
    finite = values[np.isfinite(values)].astype(np.float64)
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.4f}"
    absf = np.abs(finite)
    nz = absf[absf > 0]
    is_int = bool(np.all(np.floor(finite) == finite))
    big, small = (nz.max(), nz.min()) if nz.size else (0.0, 0.0)
    if is_int:
        if big >= 1e8:
            return lambda v: _special(v) or f"{v:.4e}"
        width = max(len(f"{v:.0f}.") for v in finite)
        return lambda v: (_special(v) or f"{v:.0f}.").rjust(width)
    if nz.size and (big / small > 1000.0 or big > 1e8 or small < 1e-4):
        return lambda v: _special(v) or f"{v:.4e}"
    width = max(len(f"{v:.4f}") for v in finite)
    return lambda v: (_special(v) or f"{v:.4f}").rjust(width)


def _special(v: float) -> str | None:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


def _formatter(arr: np.ndarray, dtype: D.DType) -> Any:
    if dtype is D.bool_:
        return lambda v: "True" if v else "False"
    if dtype.category == D.INT:
        width = max((len(str(int(v))) for v in arr.reshape(-1)), default=1)
        return lambda v: str(int(v)).rjust(width)
    if dtype.category == D.COMPLEX:
        rf = _float_formatter(np.concatenate([arr.real.reshape(-1), arr.imag.reshape(-1)]))
        return lambda v: f"{rf(v.real).strip()}{'+' if v.imag >= 0 else '-'}{rf(abs(v.imag)).strip()}j"
    return _float_formatter(arr.astype(np.float64).reshape(-1))


def _sample(arr: np.ndarray) -> np.ndarray:
    """The elements a summarized repr shows: the edges of each dim."""
    if arr.size <= _SUMMARIZE_OVER:
        return arr
    idx = tuple(np.r_[0:_EDGE, s - _EDGE:s] if s > 2 * _EDGE else slice(None) for s in arr.shape)
    return arr[np.ix_(*[np.arange(s)[i] for s, i in zip(arr.shape, idx)])]


def _render(arr: np.ndarray, fmt: Any, indent: int, summarize: bool) -> str:
    if arr.ndim == 0:
        return fmt(arr.item())
    n = arr.shape[0]
    if summarize and n > 2 * _EDGE:
        idx: list[Any] = list(range(_EDGE)) + ["..."] + list(range(n - _EDGE, n))
    else:
        idx = list(range(n))
    if arr.ndim == 1:
        per_line = max(1, (80 - indent) // (len(fmt(arr.reshape(-1)[0])) + 2)) if n else 1
        items = ["..." if i == "..." else fmt(arr[i]) for i in idx]
        lines = [", ".join(items[k:k + per_line]) for k in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    sep = "," + "\n" * (arr.ndim - 1) + " " * (indent + 1)
    parts = ["..." if i == "..." else _render(arr[i], fmt, indent + 1, summarize) for i in idx]
    return "[" + sep.join(parts) + "]"


def tensor_repr(t: Any, prefix: str = "tensor(") -> str:
    arr = t.numpy(force=True) if hasattr(t, "numpy") else np.asarray(t)
    dtype = t.dtype
    if dtype in (D.bfloat16, D.float16):
        arr = arr.astype(np.float32)
    suffix = []
    summarize = arr.size > _SUMMARIZE_OVER
    if arr.size == 0:
        body = "[]"
        if arr.ndim != 1:
            suffix.append(f"size={tuple(arr.shape)}")
    else:
        fmt = _formatter(_sample(arr), dtype)
        body = _render(arr, fmt, len(prefix), summarize)
    if str(t.device) != "cpu":
        suffix.append(f"device='{t.device}'")
    if dtype is not D.get_default_dtype() and dtype not in _DEFAULT_SHOWN and not (
            dtype is D.complex64 and D.get_default_dtype() is D.float32):
        suffix.append(f"dtype=scriptmod.{dtype.name}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffix.append("requires_grad=True")
    return prefix + body + "".join(", " + s for s in suffix) + ")"
