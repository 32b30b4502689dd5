"""Schemas of torch.fft's three transform families (pocketfft through SciPy, cuFFT through
CuPy), as ATen's ``_fft_c2c``/``_fft_r2c``/``_fft_c2r``: every ``scriptmod.fft`` function, stft
and istft are decompositions over these three ops.

- ``fft_c2c``: complex to complex over ``dim`` (a real input is read as complex);
  ``forward`` picks the sign of the exponent (fft/ifft).
- ``fft_r2c``: real to the one-sided complex spectrum (the last of ``dim`` keeps ``n // 2 + 1``
  entries); ``forward=False`` gives its conjugate (ihfft).
- ``fft_c2r``: one-sided spectrum (last of ``dim`` holding ``last_dim_size // 2 + 1`` entries;
  a real input is read as complex) to a real signal of ``last_dim_size``; ``forward=True``
  transforms the conjugate (hfft).

``normalization`` is the scale alone, not tied to a direction (so an op's adjoint is the
same op with ``forward`` flipped and the same scale): ``"none"``, ``"by_root_n"`` (1/sqrt(n))
or ``"by_n"`` (1/n), n the product of the signal's sizes over ``dim``. ``dim`` holds distinct
dims, negative ones counting from the end.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError, ShapeError
from ..schema import op
from ..types import Shape

NORMALIZATIONS = ("none", "by_root_n", "by_n")


def _checked(ops: Sequence[Any], attrs: dict, name: str, real_ok: bool) -> D.DType:
    """The input's dtype after checking its kind and the normalization: float32/float64 (a
    real signal; for ``fft_c2c``/``fft_c2r`` read as complex with zero imaginary part, as
    torch.fft reads a real input) or, unless ``fft_r2c``, complex64/complex128."""
    dt = R.tensors(ops)[0][0]
    if attrs["normalization"] not in NORMALIZATIONS:
        raise ValueError(f"{name}: normalization must be one of {NORMALIZATIONS}, got "
                         f"{attrs['normalization']!r}")
    allowed = (D.float32, D.float64) + ((D.complex64, D.complex128) if real_ok else ())
    if dt not in allowed:
        raise DTypeError(f"{name}: expected a {' or '.join(d.name for d in allowed)} input, "
                         f"got {dt.name}")
    return dt


def _dims(shape: Shape, dim: Sequence[int], name: str) -> list[int]:
    """``dim`` wrapped into ``range(len(shape))``: distinct and in range, or ShapeError."""
    rank = len(shape)
    if not dim:
        raise ShapeError(f"{name}: expected at least one dim to transform")
    out = []
    for d in dim:
        if not -rank <= d < rank:
            raise ShapeError(f"{name}: Dimension out of range (expected to be in range of "
                             f"[{-rank}, {rank - 1}], but got {d})")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"{name}: dims must be unique, got {list(dim)}")
    return out


def _c2c_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x = ops[0][1]
    if x is not None:
        _dims(x, attrs["dim"], "fft_c2c")
    return x


def _r2c_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x = ops[0][1]
    if x is None:
        return None
    last = _dims(x, attrs["dim"], "fft_r2c")[-1]
    out = list(x)
    out[last] = SD.add(SD.floordiv(x[last], 2), 1) if x[last] is not None else None
    return tuple(out)


def _c2r_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    x = ops[0][1]
    if x is None:
        return None
    last = _dims(x, attrs["dim"], "fft_c2r")[-1]
    n = attrs["last_dim_size"]
    if n < 1:
        raise ShapeError(f"fft_c2r: Invalid number of data points ({n}) specified")
    if isinstance(x[last], int) and x[last] != n // 2 + 1:
        raise ShapeError(f"fft_c2r: expected {n // 2 + 1} entries (last_dim_size // 2 + 1) "
                         f"along dim {last}, got {x[last]}")
    out = list(x)
    out[last] = n
    return tuple(out)


_ATTRS = "int[] dim, str normalization, bool forward"
op(f"fft_c2c(Tensor self, *, {_ATTRS}) -> Tensor",
   lambda ops, attrs: D._complex_of(D.to_real(_checked(ops, attrs, "fft_c2c", True))),
   _c2c_shape)
op(f"fft_r2c(Tensor self, *, {_ATTRS}) -> Tensor",
   lambda ops, attrs: D._complex_of(_checked(ops, attrs, "fft_r2c", False)), _r2c_shape)
op(f"fft_c2r(Tensor self, *, {_ATTRS}, int last_dim_size) -> Tensor",
   lambda ops, attrs: D.to_real(_checked(ops, attrs, "fft_c2r", True)), _c2r_shape)
