"""``assert_close``: ``torch.testing.assert_close`` for scriptmod tensors.

Tensors and NumPy arrays, Python numbers, and sequences and mappings of them (recursively)
compare element by element: ``|actual - expected| <= atol + rtol * |expected|`` through the
registry's ``isclose``, with PyTorch's default tolerances for the dtype and its messages.

    >>> import scriptmod as sm
    >>> assert_close(sm.tensor([1.0, 2.0]), sm.tensor([1.0, 2.0 + 1e-7]))
    >>> assert_close(sm.tensor([1.0, 5.0]), sm.tensor([1.0, 4.0]))
    Traceback (most recent call last):
        ...
    AssertionError: Tensor-likes are not close!
    <BLANKLINE>
    Mismatched elements: 1 / 2 (50.0%)
    Greatest absolute difference: 1.0 at index (1,) (up to 1e-05 allowed)
    Greatest relative difference: 0.25 at index (1,) (up to 1.3e-06 allowed)
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.runtime import arrays
from scriptmod.tensor import Size, Tensor

__all__ = ["assert_close"]

# (rtol, atol) by dtype, as PyTorch's; integers and bools compare exactly
_TOLERANCES = {D.float16: (1e-3, 1e-5), D.bfloat16: (1.6e-2, 1e-5), D.float32: (1.3e-6, 1e-5),
               D.float64: (1e-7, 1e-7), D.complex64: (1.3e-6, 1e-5), D.complex128: (1e-7, 1e-7)}
_NUMBER_DTYPES = {bool: D.bool_, int: D.int64, float: D.float64, complex: D.complex128}


class _Mismatch(Exception):
    """A failed comparison; ``path`` says where in nested containers (``[1]['a']``)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message, self.path = message, path


def assert_close(actual: Any, expected: Any, *, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_dtype: bool = True,
                 check_device: bool = True, msg: str | Callable[[str], str] | None = None) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close.

    ``rtol``/``atol``: both or neither (then the defaults of the inputs' dtypes: float16
    1e-3/1e-5, bfloat16 1.6e-2/1e-5, float32 1.3e-6/1e-5, float64 1e-7/1e-7, integers and
    bools exact). ``msg`` replaces the message, or (a callable) rewrites it. Unlike PyTorch,
    a Tensor may be compared with a NumPy array (scriptmod tensors are NumPy arrays inside).
    """
    if (rtol is None) != (atol is None):
        missing = "rtol" if rtol is None else "atol"
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {missing}.")
    options = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype,
                   check_device=check_device)
    try:
        _compare(actual, expected, options)
    except _Mismatch as m:
        message = m.message
        if callable(msg):
            message = msg(message)
        elif msg is not None:
            message = msg
        elif m.path:
            message += f"\n\nThe failure occurred for item {m.path}"
        raise AssertionError(message) from None


def _compare(actual: Any, expected: Any, options: dict[str, Any]) -> None:
    if actual is None and expected is None:
        return
    if _is_tensor_like(actual) and _is_tensor_like(expected):
        _compare_tensors(actual, expected, **options)
    elif _is_number(actual) and _is_number(expected):
        _compare_numbers(actual, expected, **options)
    elif isinstance(actual, Mapping) and isinstance(expected, Mapping):
        _compare_mappings(actual, expected, options)
    elif _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            raise _Mismatch(f"The length of the sequences mismatch: {len(actual)} != "
                            f"{len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _item(f"[{i}]", a, e, options)
    else:
        raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} "
                        f"and {type(expected)}.")


def _compare_mappings(actual: Mapping, expected: Mapping, options: dict[str, Any]) -> None:
    if set(actual) != set(expected):
        missing = sorted(set(expected) - set(actual), key=repr)
        extra = sorted(set(actual) - set(expected), key=repr)
        raise _Mismatch(f"The keys of the mappings do not match:\nMissing keys in the actual "
                        f"mapping: {missing}\nAdditional keys in the actual mapping: {extra}")
    for key in expected:
        _item(f"[{key!r}]", actual[key], expected[key], options)


def _item(where: str, actual: Any, expected: Any, options: dict[str, Any]) -> None:
    try:
        _compare(actual, expected, options)
    except _Mismatch as m:
        raise _Mismatch(m.message, where + m.path) from None


def _is_tensor_like(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray)) or arrays.is_cupy(x)


def _is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex, np.number, np.bool_))


def _is_sequence(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


# ---- tensors -----------------------------------------------------------------------------
def _facts(x: Any) -> tuple[np.ndarray, D.DType, str]:
    """(host array, dtype, device) of a Tensor or array."""
    if isinstance(x, Tensor):
        return x.numpy(force=True), x.dtype, str(x.device)
    return arrays.to_device(x, "cpu"), arrays.from_np_dtype(x.dtype), arrays.device_of(x)


def _compare_tensors(actual: Any, expected: Any, *, rtol: float | None, atol: float | None,
                     equal_nan: bool, check_dtype: bool, check_device: bool) -> None:
    a, a_dt, a_dev = _facts(actual)
    e, e_dt, e_dev = _facts(expected)
    if a.shape != e.shape:
        _attribute("shape", Size(a.shape), Size(e.shape))
    if check_device and a_dev != e_dev:
        _attribute("device", a_dev, e_dev)
    if check_dtype and a_dt is not e_dt:
        _attribute("dtype", a_dt, e_dt)
    if rtol is None or atol is None:
        rtol, atol = (max(p) for p in zip(_tolerance(a_dt), _tolerance(e_dt)))
    dt = D.promote_types(a_dt, e_dt)
    a, e = (x.astype(arrays.NP_DTYPE[dt], copy=False) for x in (a, e))
    scalar = a.ndim == 0
    _check_values(a, e, dt, rtol, atol, equal_nan, "Scalars" if scalar else "Tensor-likes",
                  (actual.item(), expected.item()) if scalar else None)


def _attribute(name: str, got: Any, want: Any) -> None:
    raise _Mismatch(f"The values for attribute '{name}' do not match: {got} != {want}.")


def _tolerance(dt: D.DType) -> tuple[float, float]:
    return _TOLERANCES.get(dt, (0.0, 0.0))


# ---- numbers -----------------------------------------------------------------------------
def _compare_numbers(actual: Any, expected: Any, *, rtol: float | None, atol: float | None,
                     equal_nan: bool, check_dtype: bool, check_device: bool) -> None:
    actual, expected = (x.item() if isinstance(x, (np.number, np.bool_)) else x
                        for x in (actual, expected))
    if isinstance(actual, bool) and isinstance(expected, bool):
        if actual is not expected:
            raise _Mismatch(f"Booleans mismatch: {actual} is not {expected}")
        return
    if check_dtype and type(actual) is not type(expected):
        raise _Mismatch(f"The (d)types do not match: {type(actual)} != {type(expected)}.")
    dt = D.promote_types(_NUMBER_DTYPES[type(actual)], _NUMBER_DTYPES[type(expected)])
    if rtol is None or atol is None:
        rtol, atol = _tolerance(dt)
    a, e = (np.asarray(x, dtype=arrays.NP_DTYPE[dt]) for x in (actual, expected))
    _check_values(a, e, dt, rtol, atol, equal_nan, "Scalars", (actual, expected))


# ---- the comparison and its message ----------------------------------------------------------
def _check_values(a: np.ndarray, e: np.ndarray, dt: D.DType, rtol: float, atol: float,
                  equal_nan: bool, what: str, scalars: tuple[Any, Any] | None) -> None:
    from scriptmod._creation import as_tensor
    close = as_tensor(a).isclose(as_tensor(e), rtol=rtol, atol=atol, equal_nan=equal_nan)
    if bool(close.all()):
        return
    exact = rtol == 0 and atol == 0
    head = f"{what} are not {'equal' if exact else 'close'}!\n\n"
    if scalars is not None:
        got, want = scalars
        diff = abs(got - want)
        rel = diff / abs(want) if want != 0 else math.inf
        lines = [f"Expected {want} but got {got}.", f"Absolute difference: {diff}",
                 f"Relative difference: {rel}"]
    else:
        diff, rel = _differences(a, e, dt, close.numpy())
        bad = a.size - int(close.sum())
        lines = [f"Mismatched elements: {bad} / {a.size} ({100.0 * bad / a.size:.1f}%)",
                 f"Greatest absolute difference: {_greatest(diff)}",
                 f"Greatest relative difference: {_greatest(rel)}"]
    if not exact:
        lines[-2] += f" (up to {atol} allowed)"
        lines[-1] += f" (up to {rtol} allowed)"
    raise _Mismatch(head + "\n".join(lines))


def _differences(a: np.ndarray, e: np.ndarray, dt: D.DType,
                 close: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|a - e| and |a - e| / |e| where not close (0 elsewhere), as PyTorch: half types in
    float32; integers and bools in int64, their ratio in the default float dtype."""
    if dt.category < D.FLOAT:
        a, e = a.astype(np.int64), e.astype(np.int64)
    elif dt in (D.float16, D.bfloat16):
        a, e = a.astype(np.float32), e.astype(np.float32)
    with np.errstate(all="ignore"):
        diff = np.where(close, 0, np.abs(a - e))
        ratio = arrays.NP_DTYPE[D.get_default_dtype()] if dt.category < D.FLOAT else diff.dtype
        return diff, np.where(close, 0, diff.astype(ratio) / np.abs(e).astype(ratio))


def _greatest(x: np.ndarray) -> str:
    """The largest value (NaN first, as ``torch.max``) and where it is."""
    k = int(np.argmax(x.reshape(-1)))
    where = tuple(int(i) for i in np.unravel_index(k, x.shape))
    return f"{x.reshape(-1)[k].item()} at index {where}"
