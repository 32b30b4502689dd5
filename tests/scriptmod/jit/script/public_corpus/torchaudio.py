"""Entries of the public corpus from torchaudio's ``functional`` and ``transforms``
(``sources/torchaudio_*.py``): torchaudio documents these as TorchScript-able and its tests
script every one of them."""
from __future__ import annotations

import numpy as np

from . import Entry

_SHA = "455331b1b3bb4aabfe3228f6f911fc3f11ae93b1"  # torchaudio 2.11.1
FN = f"pytorch/audio src/torchaudio/functional/functional.py@{_SHA}"
FILT = f"pytorch/audio src/torchaudio/functional/filtering.py@{_SHA}"
TR = f"pytorch/audio src/torchaudio/transforms/_transforms.py@{_SHA}"


def _f(rng: np.random.Generator, *shape: int, dtype: type = np.float32, lo: float = -1.0,
       hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(dtype)


def _c(rng: np.random.Generator, *shape: int, dtype: type = np.complex64) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _wave(rng: np.random.Generator, n: int, length: int, sr: int, hz: float,
          dtype: type = np.float32) -> np.ndarray:
    """``n`` noisy sines of ``hz`` Hz sampled at ``sr``."""
    t = np.arange(length) / sr
    w = np.sin(2 * np.pi * hz * t)[None, :] * rng.uniform(0.5, 1.0, (n, 1))
    return (w + 0.05 * rng.standard_normal((n, length))).astype(dtype)


def _hann(n: int, dtype: type = np.float32) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(dtype)


def _spec_inputs(rng: np.random.Generator) -> list[tuple]:
    w, win = _wave(rng, 2, 64, 8000, 700.0), _hann(16)
    return [(w, 0, win, 16, 4, 16, 2.0, False),
            (w[0], 3, win, 16, 8, 16, 1.0, True),
            (w, 0, win, 16, 4, 16, None, "frame_length"),
            (_wave(rng, 3, 48, 8000, 300.0, np.float64), 0, _hann(16, np.float64), 16, 4, 16,
             2.0, "window", False),
            (w, 0, win, 16, 4, 16, 2.0, "bad")]


FUNCTIONS: list[Entry] = [
    Entry("ta_amplitude_to_DB", FN, "torchaudio_functional.py", "amplitude_to_DB",
          lambda rng: [(_f(rng, 3, 4, 5, lo=0.0, hi=4.0), 10.0, 1e-10, 0.0, None),
                       (_f(rng, 2, 2, 4, 5, lo=0.0, hi=4.0), 20.0, 1e-5, 0.0, 6.0),
                       (_f(rng, 4, 5, dtype=np.float64, lo=0.0), 10.0, 1e-10, 0.5, 3.0)]),
    Entry("ta_DB_to_amplitude", FN, "torchaudio_functional.py", "DB_to_amplitude",
          lambda rng: [(_f(rng, 3, 4, lo=-20.0, hi=10.0), 1.0, 1.0),
                       (_f(rng, 5, dtype=np.float64, lo=-20.0, hi=10.0), 2.0, 0.5)]),
    Entry("ta_hz_to_mel", FN, "torchaudio_functional.py", "_hz_to_mel",
          lambda rng: [(440.0,), (440.0, "slaney"), (2500.0, "slaney"), (100.0, "mel")]),
    Entry("ta_mel_to_hz", FN, "torchaudio_functional.py", "_mel_to_hz",
          lambda rng: [(_f(rng, 7, lo=0.0, hi=3000.0),),
                       (_f(rng, 9, lo=0.0, hi=40.0), "slaney"),
                       (_f(rng, 3, 4, dtype=np.float64, lo=0.0, hi=40.0), "slaney"),
                       (_f(rng, 2), "mel")]),
    Entry("ta_melscale_fbanks", FN, "torchaudio_functional.py", "melscale_fbanks",
          lambda rng: [(17, 0.0, 4000.0, 6, 8000),
                       (17, 50.0, 4000.0, 6, 8000, "slaney", "slaney"),
                       (5, 0.0, 8000.0, 10, 16000),
                       (9, 0.0, 4000.0, 4, 8000, "area")]),
    Entry("ta_linear_fbanks", FN, "torchaudio_functional.py", "linear_fbanks",
          lambda rng: [(17, 0.0, 4000.0, 6, 8000), (9, 100.0, 2000.0, 3, 4000)]),
    Entry("ta_create_dct", FN, "torchaudio_functional.py", "create_dct",
          lambda rng: [(4, 6, None), (4, 6, "ortho"), (3, 3, "dct")]),
    Entry("ta_mu_law_encoding", FN, "torchaudio_functional.py", "mu_law_encoding",
          lambda rng: [(_f(rng, 2, 6), 256), (_f(rng, 7, dtype=np.float64), 16),
                       (rng.integers(-1, 2, (5,)), 8)]),
    Entry("ta_mu_law_decoding", FN, "torchaudio_functional.py", "mu_law_decoding",
          lambda rng: [(rng.integers(0, 256, (2, 6)), 256),
                       (_f(rng, 7, lo=0.0, hi=15.0), 16),
                       (_f(rng, 4, dtype=np.float64, lo=0.0, hi=7.0), 8)]),
    Entry("ta_phase_vocoder", FN, "torchaudio_functional.py", "phase_vocoder",
          lambda rng: [(_c(rng, 2, 5, 7), 1.3, np.linspace(0, np.pi * 4, 5, dtype=np.float32)[:, None]),
                       (_c(rng, 5, 6, dtype=np.complex128), 0.8,
                        np.linspace(0, np.pi * 4, 5)[:, None]),
                       (_c(rng, 3, 4), 1.0, np.zeros((3, 1), np.float32))]),
    Entry("ta_compute_deltas", FN, "torchaudio_functional.py", "compute_deltas",
          lambda rng: [(_f(rng, 2, 3, 10),), (_f(rng, 3, 10), 3, "reflect"),
                       (_f(rng, 4, 8, dtype=np.float64), 7), (_f(rng, 2, 5), 2)]),
    Entry("ta_detect_pitch_frequency", FN, "torchaudio_functional.py", "detect_pitch_frequency",
          lambda rng: [(_wave(rng, 2, 400, 4000, 500.0), 4000, 0.01, 3, 400, 1600),
                       (_wave(rng, 1, 300, 4000, 250.0)[0], 4000, 0.02, 5, 200, 1000)]),
    Entry("ta_sliding_window_cmn", FN, "torchaudio_functional.py", "sliding_window_cmn",
          lambda rng: [(_f(rng, 2, 12, 3), 5, 3, False, False),
                       (_f(rng, 2, 12, 3), 5, 3, True, True),
                       (_f(rng, 10, 4, dtype=np.float64), 600, 100, False, True),
                       (_f(rng, 1, 9, 2), 4, 6, False, True)]),
    Entry("ta_spectrogram", FN, "torchaudio_functional.py", "spectrogram", _spec_inputs),
    Entry("ta_spectral_centroid", FN, "torchaudio_functional.py", "spectral_centroid",
          lambda rng: [(_wave(rng, 2, 64, 8000, 700.0), 8000, 0, _hann(16), 16, 4, 16),
                       (_wave(rng, 1, 40, 8000, 1500.0)[0], 8000, 2, _hann(8), 8, 2, 8)]),
    Entry("ta_resample", FN, "torchaudio_functional.py", "resample",
          lambda rng: [(_f(rng, 2, 30), 4, 3),
                       (_f(rng, 25, dtype=np.float64), 2, 3, 4, 0.9, "sinc_interp_kaiser"),
                       (_f(rng, 2, 12), 5, 5),
                       (_f(rng, 1, 2, 20), 3, 2, 3, 0.99, "kaiser_window", 8.0),
                       (_f(rng, 10), 3, 2, 6, 0.99, "linear")]),
    Entry("ta_psd", FN, "torchaudio_functional.py", "psd",
          lambda rng: [(_c(rng, 3, 4, 5),),
                       (_c(rng, 3, 4, 5), _f(rng, 4, 5, lo=0.0)),
                       (_c(rng, 2, 3, 4, 5, dtype=np.complex128),
                        _f(rng, 2, 4, 5, dtype=np.float64, lo=0.0), False, 1e-6),
                       (_c(rng, 3, 4, 5), _f(rng, 3, 5))]),
    Entry("ta_apply_beamforming", FN, "torchaudio_functional.py", "apply_beamforming",
          lambda rng: [(_c(rng, 4, 3), _c(rng, 3, 4, 5)),
                       (_c(rng, 2, 4, 3), _c(rng, 2, 3, 4, 5)),
                       (_f(rng, 4, 3), _f(rng, 3, 4, 5))]),
    Entry("ta_fftconvolve", FN, "torchaudio_functional.py", "fftconvolve",
          lambda rng: [(_f(rng, 2, 10), _f(rng, 2, 4)),
                       (_f(rng, 2, 10), _f(rng, 1, 4), "valid"),
                       (_f(rng, 3, 9, dtype=np.float64), _f(rng, 3, 5, dtype=np.float64), "same"),
                       (_f(rng, 2, 10), _f(rng, 3, 4)),
                       (_f(rng, 2, 10), _f(rng, 2, 4), "circular")],
          xfail="shape propagation rejects the call before the program's own check (input 3, x (2, 10) and y (3, 4)): Python raises _check_shape_compatible's ValueError, scripted raises ShapePropagationError: fftconvolve.forward(): argument 'x' (position 0): expected a tensor as traced, got a float32 tensor of shape (2, 10), which mul at <file>:1302 refuses: shapes (2, 7), (3, 7) do not broadcast (dim -2: 2 vs 3)"),
    Entry("ta_convolve", FN, "torchaudio_functional.py", "convolve",
          lambda rng: [(_f(rng, 2, 10), _f(rng, 2, 4)),
                       (_f(rng, 2, 4), _f(rng, 2, 10), "valid"),
                       (_f(rng, 2, 1, 10), _f(rng, 1, 3, 4), "same"),
                       (_f(rng, 3, 9, dtype=np.float64), _f(rng, 3, 5, dtype=np.float64), "same"),
                       (_f(rng, 2, 10), _f(rng, 10), "full")]),
    Entry("ta_add_noise", FN, "torchaudio_functional.py", "add_noise",
          lambda rng: [(_f(rng, 2, 3, 10), _f(rng, 2, 3, 10), _f(rng, 2, 3, lo=0.0, hi=20.0)),
                       (_f(rng, 2, 10), _f(rng, 2, 10), _f(rng, 2, lo=0.0, hi=20.0),
                        np.array([6, 10])),
                       (_f(rng, 2, 10), _f(rng, 2, 9), _f(rng, 2))]),
    Entry("ta_speed", FN, "torchaudio_functional.py", "speed",
          lambda rng: [(_f(rng, 2, 40), 10, 1.5, np.array([40, 31])),
                       (_f(rng, 30), 10, 0.8),
                       (_f(rng, 1, 20, dtype=np.float64), 8, 1.0, np.array([17]))]),
    Entry("ta_tik_reg", FN, "torchaudio_functional.py", "_tik_reg",
          lambda rng: [(_c(rng, 4, 3, 3),), (_c(rng, 2, 2, dtype=np.complex128), 1e-3, 1e-6),
                       (_c(rng, 3),)]),
    Entry("ta_preemphasis", FN, "torchaudio_functional.py", "preemphasis",
          lambda rng: [(_f(rng, 2, 10),), (_f(rng, 3, 2, 7, dtype=np.float64), 0.5)]),
    Entry("ta_contrast", FILT, "torchaudio_filtering.py", "contrast",
          lambda rng: [(_f(rng, 2, 10),), (_f(rng, 9, dtype=np.float64), 0.0),
                       (_f(rng, 3), 150.0)]),
    Entry("ta_dcshift", FILT, "torchaudio_filtering.py", "dcshift",
          lambda rng: [(_f(rng, 2, 10), 0.3), (_f(rng, 2, 10), 0.3, 0.05),
                       (_f(rng, 12, dtype=np.float64), -0.4, 0.02), (_f(rng, 5), 0.0, 0.05)]),
    Entry("ta_gain", FILT, "torchaudio_filtering.py", "gain",
          lambda rng: [(_f(rng, 2, 10),), (_f(rng, 6, dtype=np.float64), -6.5),
                       (_f(rng, 4), 0.0)]),
    Entry("ta_overdrive", FILT, "torchaudio_filtering.py", "overdrive",
          lambda rng: [(_f(rng, 2, 12),), (_f(rng, 3, 1, 8, dtype=np.float64), 5.0, 60.0),
                       (_f(rng, 10) * 0.01, 0.0, 0.0)]),
]

MODULES: list[Entry] = [
    Entry("ta_AmplitudeToDB", TR, "torchaudio_transforms.py", "AmplitudeToDB",
          lambda rng: [(_f(rng, 2, 4, 5, lo=0.0, hi=3.0),), (_f(rng, 3, 2, 4, 5, lo=0.0),)],
          build=lambda ns: ns.AmplitudeToDB("magnitude", top_db=20.0)),
    Entry("ta_MelScale", TR, "torchaudio_transforms.py", "MelScale",
          lambda rng: [(_f(rng, 17, 5, lo=0.0),), (_f(rng, 2, 17, 3, lo=0.0),)],
          build=lambda ns: ns.MelScale(n_mels=6, sample_rate=8000, n_stft=17, norm="slaney")),
    Entry("ta_MuLawEncoding", TR, "torchaudio_transforms.py", "MuLawEncoding",
          lambda rng: [(_f(rng, 2, 8),), (_f(rng, 5, dtype=np.float64),)],
          build=lambda ns: ns.MuLawEncoding(16)),
    Entry("ta_MuLawDecoding", TR, "torchaudio_transforms.py", "MuLawDecoding",
          lambda rng: [(rng.integers(0, 64, (2, 8)),), (_f(rng, 5, lo=0.0, hi=63.0),)],
          build=lambda ns: ns.MuLawDecoding(64)),
    Entry("ta_ComputeDeltas", TR, "torchaudio_transforms.py", "ComputeDeltas",
          lambda rng: [(_f(rng, 2, 3, 10),), (_f(rng, 4, 6, dtype=np.float64),)],
          build=lambda ns: ns.ComputeDeltas(win_length=3)),
    Entry("ta_TimeStretch", TR, "torchaudio_transforms.py", "TimeStretch",
          lambda rng: [(_c(rng, 2, 5, 7),), (_c(rng, 5, 6), 0.8), (_c(rng, 3, 5, 4), 1.0)],
          build=lambda ns: ns.TimeStretch(hop_length=4, n_freq=5, fixed_rate=1.3)),
    Entry("ta_Fade", TR, "torchaudio_transforms.py", "Fade",
          lambda rng: [(_f(rng, 2, 12),), (_f(rng, 9),)],
          build=lambda ns: ns.Fade(fade_in_len=3, fade_out_len=4, fade_shape="half_sine")),
    Entry("ta_Vol", TR, "torchaudio_transforms.py", "Vol",
          lambda rng: [(_f(rng, 2, 12),), (_f(rng, 9, dtype=np.float64),)],
          build=lambda ns: ns.Vol(6.0, "db")),
    Entry("ta_SlidingWindowCmn", TR, "torchaudio_transforms.py", "SlidingWindowCmn",
          lambda rng: [(_f(rng, 2, 12, 3),), (_f(rng, 9, 2, dtype=np.float64),)],
          build=lambda ns: ns.SlidingWindowCmn(cmn_window=5, min_cmn_window=3, center=True,
                                               norm_vars=True)),
    Entry("ta_Convolve", TR, "torchaudio_transforms.py", "Convolve",
          lambda rng: [(_f(rng, 2, 10), _f(rng, 2, 4)), (_f(rng, 2, 1, 6), _f(rng, 1, 3, 8))],
          build=lambda ns: ns.Convolve("same")),
    Entry("ta_FFTConvolve", TR, "torchaudio_transforms.py", "FFTConvolve",
          lambda rng: [(_f(rng, 2, 10), _f(rng, 2, 4)), (_f(rng, 2, 1, 6), _f(rng, 1, 3, 8))],
          build=lambda ns: ns.FFTConvolve("valid")),
    Entry("ta_Preemphasis", TR, "torchaudio_transforms.py", "Preemphasis",
          lambda rng: [(_f(rng, 2, 10),), (_f(rng, 3, 7, dtype=np.float64),)],
          build=lambda ns: ns.Preemphasis(0.5)),
]

ENTRIES: list[Entry] = [*FUNCTIONS, *MODULES]
