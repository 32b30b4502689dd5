"""stft/istft and the window functions (``scriptmod.hann_window``, ...,
``scriptmod.signal.windows``) against PyTorch where installed, against their closed forms and
SciPy's windows otherwise; round trips, gradients, tracing and error messages."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import scipy.signal.windows as ssw

import scriptmod as sm
from scriptmod.autograd import gradcheck

RNG = np.random.default_rng(1)
# both libraries warn as PyTorch does: stft without a window, istft padding to ``length``
pytestmark = [pytest.mark.filterwarnings("ignore:A window was not provided"),
              pytest.mark.filterwarnings("ignore:The length of signal is shorter")]
TOP_LEVEL = ("hann_window", "hamming_window", "blackman_window", "bartlett_window",
             "kaiser_window")
WINDOWS = {"bartlett": {}, "blackman": {}, "cosine": {}, "exponential": {"tau": 2.0},
           "gaussian": {"std": 1.5}, "general_cosine": {"a": [0.5, 0.3, 0.2]},
           "general_hamming": {"alpha": 0.6}, "hamming": {}, "hann": {},
           "kaiser": {"beta": 5.0}, "nuttall": {}}


# ---- windows -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", TOP_LEVEL)
@pytest.mark.parametrize("n", [0, 1, 2, 7, 8])
@pytest.mark.parametrize("periodic", [True, False])
def test_top_level_windows_match_torch(name: str, n: int, periodic: bool) -> None:
    torch = pytest.importorskip("torch")
    for sdt, tdt in ((sm.float32, torch.float32), (sm.float64, torch.float64)):
        got = getattr(sm, name)(n, periodic, dtype=sdt)
        want = getattr(torch, name)(n, periodic, dtype=tdt).numpy()
        assert got.dtype == sdt and got.shape == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(WINDOWS))
@pytest.mark.parametrize("n", [0, 1, 7, 8])
@pytest.mark.parametrize("sym", [True, False])
def test_signal_windows_match_torch(name: str, n: int, sym: bool) -> None:
    torch = pytest.importorskip("torch")
    kw = WINDOWS[name]
    got = getattr(sm.signal.windows, name)(n, sym=sym, dtype=sm.float64, **kw)
    want = getattr(torch.signal.windows, name)(n, sym=sym, dtype=torch.float64, **kw).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_signal_windows_are_scipys(name: str) -> None:
    """The same window as SciPy's of the same name (its own keyword names)."""
    kw = WINDOWS[name]
    scipy_kw = {"general_cosine": {"a": kw.get("a")}, "general_hamming": {"alpha": 0.6},
                "gaussian": {"std": 1.5}, "kaiser": {"beta": 5.0}}.get(name, kw)
    for sym in (True, False):
        got = getattr(sm.signal.windows, name)(9, sym=sym, dtype=sm.float64, **kw).numpy()
        np.testing.assert_allclose(got, getattr(ssw, name)(9, sym=sym, **scipy_kw), atol=1e-12)
    assert sm.hann_window(8).dtype == sm.get_default_dtype()
    assert sm.hann_window(8, requires_grad=True).requires_grad


@pytest.mark.parametrize("call,error,match", [
    (lambda: sm.hann_window(-1), RuntimeError, "non-negative window_length"),
    (lambda: sm.hann_window(4, dtype=sm.int64), RuntimeError, "floating point dtypes"),
    (lambda: sm.signal.windows.hann(-1), ValueError, "non-negative window length"),
    (lambda: sm.signal.windows.hann(4, dtype=sm.float16), ValueError, "float32 or float64"),
    (lambda: sm.signal.windows.kaiser(4, beta=-1.0), ValueError, "beta must be non-negative"),
    (lambda: sm.signal.windows.exponential(4, center=1.0), ValueError, "Center must be None"),
    (lambda: sm.signal.windows.gaussian(4, std=0.0), ValueError, "Standard deviation"),
    (lambda: sm.signal.windows.general_cosine(4, a=[]), ValueError, "cannot be empty"),
])
def test_window_errors(call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# ---- stft / istft ----------------------------------------------------------------------------
STFT_CASES = [
    dict(n_fft=8), dict(n_fft=8, hop_length=3, win_length=6),
    dict(n_fft=9, center=False), dict(n_fft=8, normalized=True, onesided=False),
    dict(n_fft=8, pad_mode="constant"), dict(n_fft=7, hop_length=2, pad_mode="replicate"),
]


def _window(kw: dict, lib: Any, dtype: Any) -> Any:
    return lib.hann_window(kw.get("win_length", kw["n_fft"]), dtype=dtype)


@pytest.mark.parametrize("kw", STFT_CASES, ids=lambda kw: "-".join(f"{k}{v}" for k, v in
                                                                  kw.items()))
@pytest.mark.parametrize("windowed", [False, True])
def test_stft_matches_torch(kw: dict, windowed: bool) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 37))
    ws = _window(kw, sm, sm.float64) if windowed else None
    wt = _window(kw, torch, torch.float64) if windowed else None
    got = sm.stft(sm.from_numpy(x), window=ws, return_complex=True, **kw)
    want = torch.stft(torch.from_numpy(x), window=wt, return_complex=True, **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)
    one = sm.stft(sm.from_numpy(x[0]), window=ws, return_complex=True, **kw)
    np.testing.assert_allclose(one.numpy(), want[0].numpy(), atol=1e-12)


@pytest.mark.parametrize("kw", [dict(n_fft=8), dict(n_fft=8, hop_length=3, win_length=6),
                                dict(n_fft=8, normalized=True, onesided=False),
                                dict(n_fft=10, hop_length=2, center=False)])
@pytest.mark.parametrize("length", [None, 30, 45])
def test_istft_matches_torch(kw: dict, length: int | None) -> None:
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(RNG.standard_normal((2, 37)))
    wt = _window(kw, torch, torch.float64)
    if kw.get("center") is False:
        wt = wt + 0.1     # a window that does not vanish at the ends (else torch refuses too)
    spec = torch.stft(x, window=wt, return_complex=True, **kw)
    args = (sm.from_numpy(spec.numpy()),)
    kw = dict(kw, window=sm.from_numpy(wt.numpy()), length=length)
    try:
        want = torch.istft(spec, window=wt, length=length, **{k: v for k, v in kw.items()
                                                              if k not in ("window", "length")})
    except RuntimeError as e:       # a window gap at the padded end: both refuse
        assert "window overlap add min" in str(e)
        with pytest.raises(RuntimeError, match="window overlap add min"):
            sm.istft(*args, **kw)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = sm.istft(*args, **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)
    n_fft, hop = kw["n_fft"], kw.get("hop_length", kw["n_fft"] // 4)
    start = n_fft // 2 if kw.get("center", True) else 0
    padded = length is not None and start + length > n_fft + hop * (spec.shape[-1] - 1)
    assert any("padded with zeros" in str(w.message) for w in caught) == padded


def test_stft_istft_round_trip_and_complex_forms() -> None:
    x = sm.from_numpy(RNG.standard_normal((3, 40)))
    w = sm.hann_window(16, dtype=sm.float64)
    spec = sm.stft(x, 16, hop_length=4, window=w, return_complex=True)
    assert spec.dtype == sm.complex128 and tuple(spec.shape) == (3, 9, 11)
    y = sm.istft(spec, 16, hop_length=4, window=w, length=40)
    np.testing.assert_allclose(y.numpy(), x.numpy(), atol=1e-12)
    z = sm.from_numpy(RNG.standard_normal((40,)) + 1j * RNG.standard_normal((40,)))
    zspec = sm.stft(z, 16, hop_length=4, window=w, return_complex=True)
    assert tuple(zspec.shape) == (16, 11)          # complex input: two-sided
    back = sm.istft(zspec, 16, hop_length=4, window=w, length=40, return_complex=True)
    np.testing.assert_allclose(back.numpy(), z.numpy(), atol=1e-12)
    with pytest.warns(UserWarning, match="return_complex=False is deprecated"):
        pairs = sm.stft(x, 16, hop_length=4, window=w, return_complex=False)
    assert tuple(pairs.shape) == (3, 9, 11, 2)
    np.testing.assert_allclose(pairs.numpy()[..., 1], spec.numpy().imag, atol=1e-12)


def test_stft_gradients() -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 20))
    xs, xt = sm.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ws, wt = sm.hann_window(8, dtype=sm.float64), torch.hann_window(8, dtype=torch.float64)
    g = RNG.standard_normal((2, 5, 6)) + 1j * RNG.standard_normal((2, 5, 6))
    (gs,) = sm.autograd.grad([sm.stft(xs, 8, 4, window=ws, return_complex=True)], [xs],
                             [sm.tensor(g)])
    (gt,) = torch.autograd.grad([torch.stft(xt, 8, 4, window=wt, return_complex=True)], [xt],
                                [torch.tensor(g)])
    np.testing.assert_allclose(gs.numpy(), gt.numpy(), atol=1e-12)


def test_stft_istft_gradcheck() -> None:
    """Through both transforms with different windows (not the identity), and with respect to
    istft's window (the overlap-added frames and the squared-window envelope)."""
    hann = sm.hann_window(8, dtype=sm.float64)
    ramp = sm.tensor(np.linspace(0.5, 1.5, 8), dtype=sm.float64)

    def through(x: sm.Tensor) -> sm.Tensor:
        spec = sm.stft(x, 8, 2, window=hann, return_complex=True)
        return sm.istft(spec, 8, 2, window=ramp, length=20)
    x = sm.tensor(RNG.standard_normal((1, 20)), requires_grad=True)
    assert gradcheck(through, (x,), atol=1e-6, rtol=1e-5)
    spec = sm.stft(sm.from_numpy(RNG.standard_normal((1, 20))), 8, 2, window=hann,
                   return_complex=True)
    w = sm.tensor(np.linspace(0.5, 1.5, 8), dtype=sm.float64, requires_grad=True)
    assert gradcheck(lambda w: sm.istft(spec, 8, 2, window=w), (w,), atol=1e-6, rtol=1e-5)


class _Spectrogram(sm.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", sm.hann_window(16))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        spec = sm.stft(x, 16, hop_length=4, window=self.window, return_complex=True)
        return spec.abs() ** 2


def test_traced_spectrogram_equals_eager_at_two_batch_sizes() -> None:
    model = _Spectrogram()
    traced = sm.jit.trace(model, sm.randn(2, 64))
    for batch in (2, 3):
        x = sm.randn(batch, 64)
        np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call,error,match", [
    (lambda x: sm.stft(x, 8), RuntimeError, "requires the return_complex parameter"),
    (lambda x: sm.stft(x, 64, return_complex=True, center=False), RuntimeError,
     "expected 0 < n_fft"),
    (lambda x: sm.stft(x, 8, hop_length=0, return_complex=True), RuntimeError, "hop_length > 0"),
    (lambda x: sm.stft(x, 8, window=sm.ones(5), return_complex=True), RuntimeError,
     "window tensor of size equal to win_length=8"),
    (lambda x: sm.stft(x.reshape(1, 2, 20), 8, return_complex=True), RuntimeError,
     "1D or 2D tensor"),
    (lambda x: sm.istft(x, 8), RuntimeError, "complex-valued input"),
    (lambda x: sm.istft(sm.stft(x, 8, return_complex=True), 10), RuntimeError,
     "match n_fft / 2 \\+ 1"),
    (lambda x: sm.istft(sm.stft(x, 8, return_complex=True), 8, window=sm.zeros(8)),
     RuntimeError, "window overlap add min"),
])
def test_stft_errors(call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call(sm.randn(2, 20))
