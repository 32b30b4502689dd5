"""``scriptmod.fft``: every transform against PyTorch (where installed) and against the DFT
written as a matrix product; norm modes, odd and even sizes, ``n``/``s`` crops and pads,
dtypes, non-contiguous inputs, negative dims, ``out=``, error messages; gradients against
PyTorch's (complex gradients included), gradcheck and double backward of real chains through
each op; a traced model equal to eager at two batch sizes."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import fft
from scriptmod.autograd import gradcheck
from scriptmod.autograd.derivatives_fft import real_part
from op_cases_fft import dft

RNG = np.random.default_rng(0)
ONE_SIDED_INPUT = ("irfft", "irfft2", "irfftn", "hfft", "hfft2", "hfftn")
REAL_ONLY = ("rfft", "rfft2", "rfftn", "ihfft", "ihfft2", "ihfftn")
ONE_D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
N_D = ("fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2", "rfftn", "irfftn", "hfft2",
       "ihfft2", "hfftn", "ihfftn")


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = RNG.standard_normal(shape)
    if dtype.startswith("complex"):
        x = x + 1j * RNG.standard_normal(shape)
    if dtype == "int64":
        return np.round(x * 3).astype(np.int64)
    return x.astype(dtype)


def _input(name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if name in REAL_ONLY and dtype.startswith("complex"):
        dtype = {"complex64": "float32", "complex128": "float64"}[dtype]
    return _data(shape, dtype)


def _close(got: sm.Tensor, want: Any, tol: float) -> None:
    want = want.resolve_conj().numpy() if hasattr(want, "resolve_conj") else np.asarray(want)
    got = got.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


# ---- values against PyTorch -------------------------------------------------------------
@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("n", [None, 5, 12])
@pytest.mark.parametrize("norm", [None, "forward", "ortho"])
def test_one_dimensional_transforms_match_torch(name: str, n: int | None, norm: str) -> None:
    torch = pytest.importorskip("torch")
    x = _input(name, (3, 7), "complex128")
    got = getattr(fft, name)(sm.from_numpy(x), n=n, norm=norm)
    _close(got, getattr(torch.fft, name)(torch.from_numpy(x), n=n, norm=norm), 1e-12)


SIZES_AND_DIMS = [(None, None), ((4, 6), None), (None, (0, 2)), ((3, -1), (2, 0)),
                  ((5,), (-2,))]


def _two_dims(s: Any, dim: Any) -> bool:
    return len(s if dim is None else dim) == 2 if (s, dim) != (None, None) else False


@pytest.mark.parametrize("name,s,dim", [(name, s, dim) for name in N_D
                                        for s, dim in SIZES_AND_DIMS
                                        if not name.endswith("2") or _two_dims(s, dim)])
def test_n_dimensional_transforms_match_torch(name: str, s: Any, dim: Any) -> None:
    torch = pytest.importorskip("torch")
    x = _input(name, (3, 4, 5), "complex128")
    kw = {k: v for k, v in (("s", s), ("dim", dim)) if v is not None}
    got = getattr(fft, name)(sm.from_numpy(x), **kw, norm="ortho")
    _close(got, getattr(torch.fft, name)(torch.from_numpy(x), **kw, norm="ortho"), 1e-12)


@pytest.mark.parametrize("name", ONE_D + ("fft2", "rfftn", "irfft2", "hfftn"))
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "int64"])
def test_result_dtypes_match_torch(name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    x = _input(name, (4, 6), dtype)
    if name in REAL_ONLY and dtype.startswith("complex"):
        return
    got = getattr(fft, name)(sm.from_numpy(x))
    want = getattr(torch.fft, name)(torch.from_numpy(x))
    _close(got, want, 1e-12 if want.dtype in (torch.float64, torch.complex128) else 2e-5)


def test_non_contiguous_inputs_and_negative_dims() -> None:
    torch = pytest.importorskip("torch")
    x = _data((6, 5, 4), "float64")
    xs, xt = sm.from_numpy(x).transpose(0, 2), torch.from_numpy(x).transpose(0, 2)
    _close(fft.rfft(xs, dim=-2), torch.fft.rfft(xt, dim=-2), 1e-12)
    _close(fft.fftn(xs[:, ::2], dim=(-1, 0)), torch.fft.fftn(xt[:, ::2], dim=(-1, 0)), 1e-12)
    _close(fft.irfftn(xs, s=(3, 7)), torch.fft.irfftn(xt, s=(3, 7)), 1e-12)


# ---- values against the DFT matrix (no torch needed) -----------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_fft_and_rfft_are_the_dft(n: int) -> None:
    x = _data((2, n), "float64")
    full = dft(x, 1, True)
    np.testing.assert_allclose(fft.fft(sm.from_numpy(x)).numpy(), full, atol=1e-12)
    np.testing.assert_allclose(fft.ifft(sm.from_numpy(x), norm="forward").numpy(),
                               dft(x, 1, False), atol=1e-12)
    np.testing.assert_allclose(fft.rfft(sm.from_numpy(x)).numpy(), full[:, :n // 2 + 1],
                               atol=1e-12)
    back = fft.irfft(fft.rfft(sm.from_numpy(x)), n=n)
    np.testing.assert_allclose(back.numpy(), x, atol=1e-12)


def test_hfft_is_the_dft_of_a_hermitian_signal() -> None:
    half = _data((5,), "complex128")
    half[0], half[-1] = half[0].real, half[-1].real    # DC and Nyquist of a real spectrum
    full = np.concatenate([half, np.conj(half[1:-1][::-1])])     # length 8, Hermitian
    want = dft(full, 0, True).real
    np.testing.assert_allclose(fft.hfft(sm.from_numpy(half), n=8).numpy(), want, atol=1e-12)
    np.testing.assert_allclose(fft.ihfft(sm.from_numpy(want)).numpy(), half, atol=1e-12)


@pytest.mark.filterwarnings("ignore:invalid value encountered")   # 0 * inf at d=0
def test_frequencies_and_shifts() -> None:
    for n, d in ((1, 1.0), (4, 1.0), (5, 0.1), (8, 2.5)):
        np.testing.assert_allclose(fft.fftfreq(n, d).numpy(), np.fft.fftfreq(n, d), rtol=1e-6)
        np.testing.assert_allclose(fft.rfftfreq(n, d, dtype=sm.float64).numpy(),
                                   np.fft.rfftfreq(n, d), rtol=1e-15)
    x = np.arange(30).reshape(5, 6)
    for dim in (None, 0, -1, (0, 1)):
        np.testing.assert_array_equal(fft.fftshift(sm.from_numpy(x), dim).numpy(),
                                      np.fft.fftshift(x, dim))
        np.testing.assert_array_equal(fft.ifftshift(sm.from_numpy(x), dim).numpy(),
                                      np.fft.ifftshift(x, dim))
    assert fft.fftfreq(3, dtype=sm.float64).dtype == sm.float64
    assert fft.rfftfreq(4, requires_grad=True).requires_grad
    assert tuple(fft.fftfreq(0).shape) == (0,)
    np.testing.assert_array_equal(fft.fftfreq(3, 0.0).numpy(), [np.nan, np.inf, -np.inf])
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        fft.fftfreq(-1)


def test_empty_batches_and_scripting() -> None:
    """An empty batch transforms to an empty result (PyTorch's MKL build refuses it); a
    scripted model calls the namespace as eager does."""
    assert tuple(fft.rfft(sm.ones(0, 8)).shape) == (0, 5)
    assert tuple(fft.irfft(sm.ones(0, 5, dtype=sm.complex64)).shape) == (0, 8)
    scripted = sm.jit.script(_SpectralFilter())
    x = sm.randn(3, 16)
    np.testing.assert_allclose(scripted(x).numpy(), _SpectralFilter()(x).numpy(), atol=1e-6)


def test_out_and_empty_transform_list() -> None:
    x = sm.from_numpy(_data((3, 8), "float64"))
    out = sm.empty(0, dtype=sm.complex128)
    assert fft.rfft(x, out=out) is out and tuple(out.shape) == (3, 5)
    np.testing.assert_allclose(out.numpy(), fft.rfft(x).numpy())
    real_out = sm.empty(3, 8, dtype=sm.float64)
    fft.irfft(fft.rfft(x), n=8, out=real_out)
    np.testing.assert_allclose(real_out.numpy(), x.numpy(), atol=1e-12)
    assert fft.fftn(x, dim=[]).dtype == sm.complex128


@pytest.mark.parametrize("call,error,match", [
    (lambda x: fft.fft(x, norm="bad"), RuntimeError, "Invalid normalization mode"),
    (lambda x: fft.rfft(x.to(sm.complex64)), RuntimeError, "expects a real input"),
    (lambda x: fft.fft(x.half()), RuntimeError, "Unsupported dtype float16"),
    (lambda x: fft.fft(x, n=0), RuntimeError, r"Invalid number of data points \(0\)"),
    (lambda x: fft.irfft(x[:, :1]), RuntimeError, r"Invalid number of data points \(0\)"),
    (lambda x: fft.fft(x, dim=2), IndexError, "Dimension out of range"),
    (lambda x: fft.fftn(x, dim=(0, -2)), RuntimeError, "dims must be unique"),
    (lambda x: fft.fftn(x, s=(2, 3), dim=(0,)), RuntimeError, "same length"),
    (lambda x: fft.fft2(x, s=(1, 2, 3)), RuntimeError, "same length"),
    (lambda x: fft.fft(x[:, :0]), RuntimeError, r"Invalid number of data points \(0\)"),
])
def test_errors(call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call(sm.randn(3, 4))


# ---- gradients ---------------------------------------------------------------------------------
GRADIENT_CASES = [
    ("fft", (3, 8), {}), ("ifft", (2, 7), {"norm": "ortho"}), ("rfft", (3, 8), {}),
    ("rfft", (2, 7), {"norm": "forward"}), ("irfft", (3, 5), {}), ("irfft", (3, 5), {"n": 9}),
    ("irfft", (3, 5), {"n": 6}), ("hfft", (3, 5), {}), ("hfft", (2, 4), {"n": 7}),
    ("ihfft", (3, 7), {}), ("ihfft", (2, 8), {"norm": "forward"}), ("rfft2", (4, 6), {}),
    ("irfft2", (4, 4), {"norm": "ortho"}), ("hfftn", (3, 4, 4), {}), ("ihfftn", (3, 4, 5), {}),
    ("fftn", (2, 3, 4), {"s": (4, 2)}), ("irfftn", (3, 5), {}), ("hfft2", (3, 4), {}),
    ("ifftn", (3, 3), {"norm": "forward"}), ("fftshift", (3, 5), {}), ("ifftshift", (4, 5), {}),
]


@pytest.mark.parametrize("name,shape,kw,complex_input", [
    (name, shape, kw, complex_input) for name, shape, kw in GRADIENT_CASES
    for complex_input in (False, True) if not (complex_input and name in REAL_ONLY)])
def test_gradients_match_torch(name: str, shape: tuple, kw: dict, complex_input: bool) -> None:
    """Complex gradients follow PyTorch's convention (the conjugate Wirtinger derivative):
    the adjoint of each transform, with the one-sided halves' mirror terms."""
    torch = pytest.importorskip("torch")
    x = _data(shape, "complex128" if complex_input else "float64")
    xs, xt = sm.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys, yt = getattr(fft, name)(xs, **kw), getattr(torch.fft, name)(xt, **kw)
    g = _data(tuple(yt.shape), "complex128" if yt.is_complex() else "float64")
    (gs,) = sm.autograd.grad([ys], [xs], [sm.tensor(g)])
    (gt,) = torch.autograd.grad([yt], [xt], [torch.tensor(g)])
    _close(gs, gt, 1e-11)


def test_c2c_gradient_is_the_conjugate_transpose() -> None:
    """Without torch: the gradient of fft is the conjugate-transposed DFT matrix applied to
    the output's gradient."""
    x = sm.tensor(_data((5,), "complex128"), requires_grad=True)
    g = _data((5,), "complex128")
    m = dft(np.eye(5), 0, True)
    (gx,) = sm.autograd.grad([fft.fft(x, norm="ortho")], [x], [sm.tensor(g)])
    np.testing.assert_allclose(gx.numpy(), m.conj().T @ g / np.sqrt(5), atol=1e-12)


def _w(n: int) -> sm.Tensor:
    return sm.tensor(np.linspace(0.5, 1.5, n), dtype=sm.float64)


GRADCHECKED = {
    "rfft-irfft": lambda x: fft.irfft(fft.rfft(x) * _w(4), n=5),
    "rfft-irfft-odd": lambda x: fft.irfft(fft.rfft(x, norm="ortho") * _w(4), n=7, norm="ortho"),
    "ihfft-hfft": lambda x: fft.hfft(fft.ihfft(x) * _w(4), n=6),
    "fft-real": lambda x: real_part(fft.fft(x * x, n=9) * _w(9)),
    "fftn-irfftn": lambda x: fft.irfftn(fft.fftn(x, norm="forward")[:, :3] * _w(3), s=(2, 5)),
    "rfft2-hfft2": lambda x: fft.hfft2(fft.rfft2(x) * _w(4), s=(3, 4)),
    "ifft-shift": lambda x: real_part(fft.fftshift(fft.ifft(x))) * x,
}


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("label", sorted(GRADCHECKED))
def test_gradcheck_of_real_chains(label: str) -> None:
    fn = GRADCHECKED[label]
    x = sm.tensor(_data((2, 6), "float64"), requires_grad=True)
    assert gradcheck(fn, (x,), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("label", ["rfft-irfft", "ihfft-hfft", "fft-real"])
def test_double_backward(label: str) -> None:
    fn = GRADCHECKED[label]

    def first(x: sm.Tensor) -> sm.Tensor:
        (g,) = sm.autograd.grad([(fn(x) ** 2).sum()], [x], create_graph=True)
        return g
    x = sm.tensor(_data((2, 6), "float64"), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert gradcheck(first, (x,), atol=1e-6, rtol=1e-5)


# ---- tracing --------------------------------------------------------------------------------
class _SpectralFilter(sm.nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        spectrum = fft.rfft(x, norm="ortho")
        return fft.irfft(spectrum.abs(), n=x.shape[-1], norm="ortho") + fft.fftshift(x, -1)


def test_traced_spectral_model_equals_eager_at_two_batch_sizes() -> None:
    model = _SpectralFilter()
    traced = sm.jit.trace(model, sm.randn(2, 16))
    assert "fft_r2c" in str(traced.graph) and "fft_c2r" in str(traced.graph)
    for batch in (2, 5):
        x = sm.randn(batch, 16)
        np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
    x = sm.randn(3, 16, dtype=sm.float64, requires_grad=True)
    (g_traced,) = sm.autograd.grad([traced(x).sum()], [x])
    (g_eager,) = sm.autograd.grad([model(x).sum()], [x])
    np.testing.assert_allclose(g_traced.numpy(), g_eager.numpy(), atol=1e-12)
