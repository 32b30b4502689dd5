"""``scriptmod.fft``: every function of ``torch.fft``, with PyTorch's arguments (``n``/``s``,
``dim``, ``norm``), result dtypes and ``out=``.

Each transform is a decomposition over three registry ops (``fft_c2c``, ``fft_r2c``,
``fft_c2r``, see ``ir/ops/fft.py``): the input is promoted (integers and bool to the default
float dtype, a real input of a complex transform to complex), cropped or zero-padded to the
requested sizes, then transformed. So every function traces, differentiates (the adjoints of
the three ops) and runs on CuPy arrays (cuFFT) as on NumPy's (pocketfft).

    >>> import scriptmod as sm
    >>> sm.fft.rfft(sm.tensor([1., 2., 3., 4.]))
    tensor([10.+0.j, -2.+2.j, -2.+0.j])

float16/bfloat16 are refused (PyTorch computes them on CUDA only). ``fftshift``/``ifftshift``
are rolls; ``fftfreq``/``rfftfreq`` are ``arange`` scaled. The window functions
(``scriptmod.hann_window``, ...) and ``stft``/``istft`` live in ``scriptmod.signal``'s modules
and are published as top-level functions here.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

from scriptmod._dispatch import dispatch
from scriptmod._public import public, with_out
from scriptmod.autograd.derivatives_fft import real_part
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.signal._window_functions import (bartlett_window, blackman_window,  # noqa: F401
                                                hamming_window, hann_window, kaiser_window)
from scriptmod.tensor import Tensor

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
           "rfftn", "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

Dims = Sequence[int] | None


# ---- arguments ---------------------------------------------------------------------------
def _normalization(norm: str | None, forward: bool) -> str:
    """The scale a transform applies: ``norm`` names the direction that is scaled by 1/n
    (``"backward"``, the default: the inverse), or ``"ortho"`` (both by 1/sqrt(n))."""
    if norm is None or norm == "backward":
        return "none" if forward else "by_n"
    if norm == "forward":
        return "by_n" if forward else "none"
    if norm == "ortho":
        return "by_root_n"
    raise ArgumentValueError(f"Invalid normalization mode: \"{norm}\" (expected None, "
                             f"'forward', 'backward' or 'ortho')")


def _floating(x: Tensor, name: str) -> Tensor:
    """``x`` in the dtype the transform computes in: integers and bool to the default float
    dtype (float16/bfloat16 are refused: PyTorch computes them on CUDA only)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    dt = x.dtype
    if dt in (D.float16, D.bfloat16):
        raise DTypeError(f"{name}(): Unsupported dtype {dt.name}: the FFT computes in float32, "
                         f"float64, complex64 or complex128 (convert with .float())")
    if dt.category < D.FLOAT:
        return x.to(D.get_default_dtype())
    return x


def _real_input(x: Tensor, name: str) -> Tensor:
    if isinstance(x, Tensor) and x.is_complex():
        raise DTypeError(f"{name}(): expects a real input tensor, but got {x.dtype.name}")
    return _floating(x, name)


def _wrap_dims(x: Tensor, dims: Sequence[int], name: str) -> list[int]:
    rank = x.dim()
    if rank == 0 and dims:
        raise IndexError(f"{name}(): Dimension specified as {dims[0]} but tensor has no "
                         f"dimensions")
    out = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(f"{name}(): Dimension out of range (expected to be in range of "
                             f"[{-rank}, {rank - 1}], but got {d})")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise ArgumentValueError(f"{name}(): FFT dims must be unique, got {list(dims)}")
    return out


def _signal_dims(x: Tensor, s: Dims, dim: Dims, name: str,
                 default_dim: Sequence[int] | None = None) -> tuple[list[int], list[int | None]]:
    """PyTorch's ``(s, dim)`` pairing: (the transformed dims, the signal size along each,
    None where the input's size stays). ``dim=None`` means every dim, or the last ``len(s)``
    when ``s`` is given; ``-1`` in ``s`` keeps that dim's size."""
    if dim is None and default_dim is not None and s is None:
        dim = default_dim
    if isinstance(dim, int):
        dim = [dim]
    if s is not None and isinstance(s, int):
        s = [s]
    if dim is None:
        n = x.dim() if s is None else len(s)
        if n > x.dim():
            raise ArgumentValueError(f"{name}(): Got shape with {n} values but input tensor "
                                     f"only has {x.dim()} dimensions.")
        dims = list(range(x.dim() - n, x.dim()))
    else:
        dims = _wrap_dims(x, dim, name)
        if s is not None and len(s) != len(dims):
            raise ArgumentValueError(f"{name}(): When given, dim and shape arguments must "
                                     f"have the same length")
    sizes: list[int | None] = [None] * len(dims) if s is None else \
        [None if n == -1 else n for n in s]
    for n in sizes:
        if n is not None and n < 1:
            raise ArgumentValueError(f"{name}(): Invalid number of data points ({n}) specified")
    return dims, sizes


def _resized(x: Tensor, dims: Sequence[int], sizes: Sequence[int | None]) -> Tensor:
    """``x`` cropped or zero-padded at the end of each dim to its size (None: unchanged)."""
    for d, n in zip(dims, sizes):
        if n is None or n == x.shape[d]:
            continue
        if n < x.shape[d]:
            x = x.narrow(d, 0, n)
        else:
            from scriptmod.nn.functional import pad
            x = pad(x, [0, 0] * (x.dim() - 1 - d) + [0, n - x.shape[d]])
    return x


def _check_sizes(x: Tensor, dims: Sequence[int], name: str) -> None:
    for d in dims:
        if x.shape[d] == 0:
            raise ArgumentValueError(f"{name}(): Invalid number of data points (0) specified")


# ---- the three families ------------------------------------------------------------------
def _c2c(input: Tensor, s: Dims, dim: Dims, norm: str | None, forward: bool, name: str,
         default_dim: Sequence[int] | None = None) -> Tensor:
    """fft and ifft: the op reads a real input as complex (no cast of its own)."""
    x = _floating(input, name)
    dims, sizes = _signal_dims(x, s, dim, name, default_dim)
    x = _resized(x, dims, sizes)
    if not dims:    # nothing to transform: the input as complex
        x = x.to(D._complex_of(D.to_real(x.dtype)))
        return x.clone() if x is input else x
    _check_sizes(x, dims, name)
    return dispatch("fft_c2c", (x,), {"dim": dims, "normalization":
                                      _normalization(norm, forward), "forward": forward})


def _r2c(input: Tensor, s: Dims, dim: Dims, norm: str | None, forward: bool, name: str,
         default_dim: Sequence[int] | None = None) -> Tensor:
    """rfft (``forward``) and ihfft: a real signal to its one-sided spectrum (conjugated)."""
    x = _real_input(input, name)
    dims, sizes = _signal_dims(x, s, dim, name, default_dim)
    if not dims:
        raise ArgumentValueError(f"{name}(): must transform at least one axis")
    x = _resized(x, dims, sizes)
    _check_sizes(x, dims, name)
    return dispatch("fft_r2c", (x,), {"dim": dims, "normalization":
                                      _normalization(norm, forward), "forward": forward})


def _c2r(input: Tensor, s: Dims, dim: Dims, norm: str | None, forward: bool, name: str,
         default_dim: Sequence[int] | None = None) -> Tensor:
    """irfft and hfft (``forward``): a one-sided spectrum to a real signal; the last dim's
    signal size defaults to ``2 * (m - 1)`` for ``m`` entries given."""
    x = _floating(input, name)
    dims, sizes = _signal_dims(x, s, dim, name, default_dim)
    if not dims:
        raise ArgumentValueError(f"{name}(): must transform at least one axis")
    # the signal's length is an attribute of the op: a traced size is read (and guarded) here
    last = int(sizes[-1] if sizes[-1] is not None else 2 * (x.shape[dims[-1]] - 1))
    if last < 1:
        raise ArgumentValueError(f"{name}(): Invalid number of data points ({last}) specified")
    x = _resized(x, dims, list(sizes[:-1]) + [last // 2 + 1])
    _check_sizes(x, dims, name)
    return dispatch("fft_c2r", (x,), {"dim": dims, "normalization":
                                      _normalization(norm, forward), "forward": forward,
                                      "last_dim_size": last})


def _one(n: int | None) -> list[int] | None:
    return None if n is None else [n]


# ---- the public transforms -------------------------------------------------------------
def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """One-dimensional discrete Fourier transform of ``input`` (``torch.fft.fft``)."""
    return _c2c(input, _one(n), [dim], norm, True, "fft_fft")


def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """One-dimensional inverse discrete Fourier transform (``torch.fft.ifft``)."""
    return _c2c(input, _one(n), [dim], norm, False, "fft_ifft")


def fft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1), norm: str | None = None) -> Tensor:
    """Two-dimensional DFT over ``dim`` (``torch.fft.fft2``)."""
    return _c2c(input, s, dim, norm, True, "fft_fft2", (-2, -1))


def ifft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1),
          norm: str | None = None) -> Tensor:
    """Two-dimensional inverse DFT over ``dim`` (``torch.fft.ifft2``)."""
    return _c2c(input, s, dim, norm, False, "fft_ifft2", (-2, -1))


def fftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """N-dimensional DFT (``torch.fft.fftn``): over ``dim``, or the last ``len(s)`` dims, or
    all of them."""
    return _c2c(input, s, dim, norm, True, "fft_fftn")


def ifftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """N-dimensional inverse DFT (``torch.fft.ifftn``)."""
    return _c2c(input, s, dim, norm, False, "fft_ifftn")


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """DFT of a real signal, its ``n // 2 + 1`` non-negative frequencies (``torch.fft.rfft``)."""
    return _r2c(input, _one(n), [dim], norm, True, "fft_rfft")


def irfft(input: Tensor, n: int | None = None, dim: int = -1,
          norm: str | None = None) -> Tensor:
    """Inverse of ``rfft``: a real signal of length ``n`` (default ``2 * (m - 1)``)."""
    return _c2r(input, _one(n), [dim], norm, False, "fft_irfft")


def rfft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1),
          norm: str | None = None) -> Tensor:
    """Two-dimensional ``rfftn`` (``torch.fft.rfft2``)."""
    return _r2c(input, s, dim, norm, True, "fft_rfft2", (-2, -1))


def irfft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1),
           norm: str | None = None) -> Tensor:
    """Two-dimensional ``irfftn`` (``torch.fft.irfft2``)."""
    return _c2r(input, s, dim, norm, False, "fft_irfft2", (-2, -1))


def rfftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """N-dimensional DFT of a real signal, one-sided in the last of ``dim``."""
    return _r2c(input, s, dim, norm, True, "fft_rfftn")


def irfftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """Inverse of ``rfftn``; the last dim's size defaults to ``2 * (m - 1)``."""
    return _c2r(input, s, dim, norm, False, "fft_irfftn")


def hfft(input: Tensor, n: int | None = None, dim: int = -1,
         norm: str | None = None) -> Tensor:
    """DFT of a Hermitian-symmetric signal given by its first half: a real spectrum of
    length ``n`` (``torch.fft.hfft``; ``irfft`` of the conjugate, scaled as a forward
    transform)."""
    return _c2r(input, _one(n), [dim], norm, True, "fft_hfft")


def ihfft(input: Tensor, n: int | None = None, dim: int = -1,
          norm: str | None = None) -> Tensor:
    """Inverse of ``hfft``: the conjugate of ``rfft`` scaled as an inverse transform."""
    return _r2c(input, _one(n), [dim], norm, False, "fft_ihfft")


def hfft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1),
          norm: str | None = None) -> Tensor:
    """Two-dimensional ``hfftn`` (``torch.fft.hfft2``)."""
    return _c2r(input, s, dim, norm, True, "fft_hfft2", (-2, -1))


def ihfft2(input: Tensor, s: Dims = None, dim: Dims = (-2, -1),
           norm: str | None = None) -> Tensor:
    """Two-dimensional ``ihfftn`` (``torch.fft.ihfft2``)."""
    return _r2c(input, s, dim, norm, False, "fft_ihfft2", (-2, -1))


def hfftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """N-dimensional ``hfft``: one-sided (Hermitian) in the last of ``dim``."""
    return _c2r(input, s, dim, norm, True, "fft_hfftn")


def ihfftn(input: Tensor, s: Dims = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """N-dimensional ``ihfft``: one-sided in the last of ``dim``."""
    return _r2c(input, s, dim, norm, False, "fft_ihfftn")


# ---- frequencies and shifts --------------------------------------------------------------
def _freq_dtype(dtype: Any, n: int, name: str) -> Any:
    if n < 0:
        raise ArgumentValueError(f"{name}(): Trying to create tensor with negative dimension "
                                 f"{n}: [{n}]")
    dtype = dtype or D.get_default_dtype()
    if dtype.category < D.FLOAT:
        raise DTypeError(f"{name}(): expected a floating point or complex dtype, got {dtype}")
    return dtype


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, layout: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:
    """The sample frequencies of an ``fft`` of length ``n`` with sample spacing ``d``:
    ``[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n)``.

        >>> fftfreq(4)
        tensor([ 0.0000,  0.2500, -0.5000, -0.2500])
    """
    from scriptmod._creation import arange
    from scriptmod._shape_ops import cat
    dtype = _freq_dtype(dtype, n, "fft_fftfreq")
    half = (n + 1) // 2
    k = cat([arange(half, dtype=dtype, device=device),
             arange(half - n, 0, dtype=dtype, device=device)])
    return _freq_result(k * _spacing(n, d), requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    """The sample frequencies of an ``rfft`` of length ``n``: ``[0, ..., n // 2] / (d * n)``."""
    from scriptmod._creation import arange
    dtype = _freq_dtype(dtype, n, "fft_rfftfreq")
    k = arange(n // 2 + 1, dtype=dtype, device=device)
    return _freq_result(k * _spacing(n, d), requires_grad)


def _spacing(n: int, d: float) -> float:
    """``1 / (n * d)`` in double precision, infinite (as in PyTorch) where ``n * d`` is 0."""
    return math.copysign(math.inf, d) if n * d == 0 else 1.0 / (n * d)


def _freq_result(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_(True) if requires_grad else t


def _rolled(x: Tensor, dim: Dims, half: bool, name: str) -> Tensor:
    """``x`` rolled along each of ``dim`` (all dims if None) by ``n // 2`` (fftshift) or
    ``(n + 1) // 2`` (ifftshift): two slices swapped, so traced sizes stay symbolic."""
    from scriptmod._shape_ops import cat
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    dims = list(range(x.dim())) if dim is None else \
        _wrap_dims(x, [dim] if isinstance(dim, int) else dim, name)
    for d in dims:
        n = x.shape[d]
        shift = n // 2 if half else (n + 1) // 2
        if n > 1 and shift:
            x = cat([x.narrow(d, n - shift, shift), x.narrow(d, 0, n - shift)], dim=d)
    return x


def fftshift(input: Tensor, dim: Dims = None) -> Tensor:
    """Move the zero frequency of an ``fftn`` result to the centre (``torch.fft.fftshift``).

        >>> fftshift(fftfreq(4))
        tensor([-0.5000, -0.2500,  0.0000,  0.2500])
    """
    return _rolled(input, dim, True, "fft_fftshift")


def ifftshift(input: Tensor, dim: Dims = None) -> Tensor:
    """The inverse of ``fftshift`` (``torch.fft.ifftshift``)."""
    return _rolled(input, dim, False, "fft_ifftshift")


# ---- short-time transforms (torch.stft / torch.istft) ---------------------------------------
def _padded_window(window: Tensor | None, win_length: int, n_fft: int, like: Tensor,
                   name: str) -> Tensor | None:
    """``window`` (None: none, or ones when it must be padded) zero-padded on both sides to
    ``n_fft``, centred as PyTorch centres it."""
    if window is not None and (window.dim() != 1 or window.shape[0] != win_length):
        raise ShapeError(f"{name}: expected a 1D window tensor of size equal to win_length="
                         f"{win_length}, but got window with size {list(window.shape)}")
    if win_length == n_fft:
        return window
    if window is None:
        from scriptmod._creation import ones
        window = ones(win_length, dtype=D.to_real(like.dtype), device=like.device)
    left = (n_fft - win_length) // 2
    from scriptmod.nn.functional import pad
    return pad(window, [left, n_fft - win_length - left])


def _frames(x: Tensor, n_fft: int, hop: int) -> Tensor:
    """(B, L) -> (B, n_frames, n_fft): frame ``f`` is ``x[:, f * hop : f * hop + n_fft]``."""
    from scriptmod._creation import arange
    n_frames = 1 + (x.shape[-1] - n_fft) // hop
    starts = arange(n_frames, device=x.device).unsqueeze(1) * hop
    return x[:, starts + arange(n_fft, device=x.device)]


@public(out=False)
def stft(input: Tensor, n_fft: int, hop_length: int | None = None,
         win_length: int | None = None, window: Tensor | None = None, center: bool = True,
         pad_mode: str = "reflect", normalized: bool = False, onesided: bool | None = None,
         return_complex: bool | None = None, align_to_window: bool | None = None) -> Tensor:
    """Short-time Fourier transform (``torch.stft``): the DFT of each ``n_fft``-long frame,
    ``hop_length`` apart, times ``window``; (B?, n_freq, n_frames), complex.

        >>> import scriptmod
        >>> stft(scriptmod.ones(16), 8, window=hann_window(8), return_complex=True).shape
        scriptmod.Size([5, 9])
    """
    from scriptmod.nn.functional import pad
    is_complex = input.is_complex() or window is not None and window.is_complex()
    if return_complex is None and not is_complex:
        raise ArgumentValueError("stft requires the return_complex parameter be given for real "
                                 "inputs, and will further require that return_complex=True "
                                 "in a future PyTorch release.")
    if return_complex is False:
        warnings.warn("stft with return_complex=False is deprecated. In a future pytorch "
                      "release, stft will return complex tensors for all inputs, and "
                      "return_complex=False will raise an error.\nNote: you can still call "
                      "torch.view_as_real on the complex output to recover the old return "
                      "format.", UserWarning, stacklevel=2)
    if align_to_window:
        raise ArgumentValueError("stft(): align_to_window=True is not supported")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if input.dim() not in (1, 2):
        raise ShapeError(f"stft: expected a 1D or 2D tensor, but got {input.dim()}D tensor")
    if not (input.is_floating_point() or input.is_complex()):
        raise DTypeError(f"stft(): expected a tensor of floating point or complex values, got "
                         f"{input.dtype.name}")
    x = _floating(input, "stft")
    x = x.unsqueeze(0) if x.dim() == 1 else x
    if center:
        x = pad(x.unsqueeze(0), [n_fft // 2, n_fft // 2], mode=pad_mode).squeeze(0)
    length = x.shape[-1]
    if not 0 < n_fft <= length:
        raise ArgumentValueError(f"stft: expected 0 < n_fft <= {length}, but got n_fft={n_fft}")
    if hop <= 0:
        raise ArgumentValueError(f"stft: expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise ArgumentValueError(f"stft: expected 0 < win_length <= n_fft, but got "
                                 f"win_length={win}")
    frames = _frames(x, n_fft, hop)
    if window is None:
        warnings.warn("A window was not provided. A rectangular window will be applied,which "
                      "is known to cause spectral leakage. Other windows such as "
                      "torch.hann_window or torch.hamming_window are recommended to reduce "
                      "spectral leakage.To suppress this warning and use a rectangular window, "
                      "explicitly set `window=torch.ones(n_fft, device=<device>)`.",
                      UserWarning, stacklevel=2)
    w = _padded_window(window, win, n_fft, x, "stft")
    if w is not None:
        frames = frames * w
    onesided = not frames.is_complex() if onesided is None else onesided
    norm = "ortho" if normalized else "backward"
    if frames.is_complex():
        if onesided:
            raise ArgumentValueError("Cannot have onesided output if window or input is complex")
        out = _c2c(frames, None, [-1], norm, True, "stft")
    else:
        out = (_r2c if onesided else _c2c)(frames, None, [-1], norm, True, "stft")
    out = out.transpose(1, 2)
    out = out.squeeze(0) if input.dim() == 1 else out
    if return_complex is False:     # the real (..., 2) pairs of view_as_real
        from scriptmod._shape_ops import stack
        return stack(list(_parts(out)), dim=-1)
    return out


@public(out=False)
def istft(input: Tensor, n_fft: int, hop_length: int | None = None,
          win_length: int | None = None, window: Tensor | None = None, center: bool = True,
          normalized: bool = False, onesided: bool | None = None, length: int | None = None,
          return_complex: bool = False) -> Tensor:
    """Inverse short-time Fourier transform (``torch.istft``): the inverse DFT of each frame,
    times ``window``, overlap-added and divided by the overlap-added squared window.

        >>> import scriptmod
        >>> w = hann_window(8)
        >>> x = scriptmod.arange(16.)
        >>> y = istft(stft(x, 8, window=w, return_complex=True), 8, window=w, length=16)
        >>> bool((y - x).abs().max() < 1e-4)
        True
    """
    from scriptmod._creation import ones
    from scriptmod.nn.functional import fold, pad
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if not isinstance(input, Tensor) or not input.is_complex():
        raise DTypeError("istft requires a complex-valued input tensor matching the output "
                         "from stft with return_complex=True.")
    if input.numel() == 0:
        raise ShapeError("istft input tensor cannot be empty")
    if input.dim() not in (2, 3):
        raise ShapeError(f"istft: expected a 2-D (n_freq, n_frames) or 3-D (B, n_freq, "
                         f"n_frames) input, got shape {list(input.shape)}")
    spec = (input.unsqueeze(0) if input.dim() == 2 else input).transpose(1, 2)
    n_frames, fft_size = spec.shape[1], spec.shape[2]
    onesided = fft_size != n_fft if onesided is None else onesided
    if onesided and fft_size != n_fft // 2 + 1:
        raise ShapeError(f"istft expected the frequency dimension (3rd to the last) of the "
                         f"input tensor to match n_fft / 2 + 1 when onesided=True, but got "
                         f"{fft_size}")
    if not onesided and fft_size != n_fft:
        raise ShapeError(f"istft expected the frequency dimension (3rd to the last) of the "
                         f"input tensor to match n_fft when onesided=False, but got {fft_size}")
    if not (0 < hop <= win and 0 < win <= n_fft):
        raise ArgumentValueError(f"istft expected 0 < hop_length <= win_length <= n_fft, got "
                                 f"hop_length={hop}, win_length={win}, n_fft={n_fft}")
    norm = "ortho" if normalized else "backward"
    if return_complex:
        if onesided:
            raise ArgumentValueError("Cannot have onesided output if window or input is complex")
        frames = _c2c(spec, None, [-1], norm, False, "istft")
    else:
        if window is not None and window.is_complex():
            raise DTypeError("Complex windows are incompatible with return_complex=False")
        frames = _c2r(spec.narrow(-1, 0, n_fft // 2 + 1), [n_fft], [-1], norm, False, "istft")
    w = _padded_window(window, win, n_fft, frames, "istft")
    if w is None:
        w = ones(n_fft, dtype=D.to_real(frames.dtype), device=frames.device)
    total = n_fft + hop * (n_frames - 1)
    y = _overlap_add(frames * w, total, hop, fold)
    envelope = _overlap_add((w * w).expand(1, n_frames, n_fft), total, hop, fold)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else total - n_fft // 2 if center else total
    y, envelope = y[:, start:min(end, total)], envelope[:, start:min(end, total)]
    _check_envelope(envelope)
    y = y / envelope
    if end > total:
        warnings.warn("The length of signal is shorter than the length parameter. Result is "
                      "being padded with zeros in the tail. Please check your center and "
                      "hop_length settings.", UserWarning, stacklevel=2)
        y = pad(y, [0, end - total])
    return y.squeeze(0) if input.dim() == 2 else y


def _overlap_add(frames: Tensor, total: int, hop: int, fold: Any) -> Tensor:
    """(B, n_frames, n_fft) -> (B, total): each frame added in at ``f * hop`` (``F.fold``, the
    adjoint of taking frames; real and imaginary parts apart for complex frames)."""
    n_fft = frames.shape[-1]
    if frames.is_complex():
        re, im = _parts(frames)
        return _overlap_add(re, total, hop, fold) + _overlap_add(im, total, hop, fold) * 1j
    out = fold(frames.transpose(1, 2), (1, total), (1, n_fft), stride=(1, hop))
    return out.squeeze(2).squeeze(1)


def _parts(z: Tensor) -> tuple[Tensor, Tensor]:
    """The real and imaginary parts of ``z`` as real tensors."""
    if hasattr(Tensor, "imag"):
        return z.real, z.imag
    return real_part(z), real_part(z * -1j)


def _check_envelope(envelope: Tensor) -> None:
    """PyTorch refuses a window whose overlap-added square nearly vanishes somewhere (the
    division would blow up); checked on the values at hand, also while tracing."""
    lowest = float(envelope.detach().abs().numpy(force=True).min()) if envelope.numel() else 1.0
    if lowest < 1e-11:
        raise ArgumentValueError(f"istft(): window overlap add min: {lowest} (expected > "
                                 f"1e-11): the window's hops leave a gap")


# every transform takes PyTorch's ``out=``; the frequencies do too
for _name in __all__:
    if _name not in ("fftshift", "ifftshift"):
        globals()[_name] = with_out(globals()[_name], "fft_" + _name)
del _name
