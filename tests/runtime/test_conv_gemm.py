"""runtime.conv: the implicit-GEMM convolution against a float64 NumPy reference (the
reference kernel's im2col in float64) and torch, at odd channel counts and every window
shape its packing distinguishes (contiguous runs, gathers, padding, rows that end inside a
panel, K blocks that end inside a tap), 1-D to 3-D, groups, bias, both register shapes,
threads, the per-row epilogue, the eager and compiled F.conv paths, and clear errors."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.codegen.gemm import KC, MC
from scriptmod.codegen.microkernel import AVX2, AVX512
from scriptmod.ir import parse
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.runtime import conv
from scriptmod.runtime.fusion import FusedKernel
from scriptmod.runtime.gemm import Epilogue
from scriptmod.runtime.kernels.conv import convolution

# (N, C, O, spatial, kernel, stride, padding, dilation, groups)
CASES = [
    (2, 5, 7, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 1),          # odd channels, 3x3
    (1, 3, 17, (33, 35), (1, 1), (1, 1), (0, 0), (1, 1), 1),        # 1x1, rows cross panels
    (2, 3, 9, (30, 37), (7, 7), (2, 2), (3, 3), (1, 1), 1),         # 7x7 stride 2 (stem)
    (1, 6, 10, (17, 40), (3, 3), (2, 1), (1, 0), (1, 1), 2),        # stride per dim, groups 2
    (3, 8, 12, (20, 33), (3, 3), (1, 1), (2, 2), (2, 2), 4),        # dilation 2, groups 4
    (2, 4, 4, (19, 18), (3, 3), (1, 1), (1, 1), (1, 1), 4),         # depthwise
    (33, 2, 3, (6, 7), (2, 3), (1, 1), (1, 2), (1, 1), 1),          # batch 33, narrow rows
    (3, 4, 5, (8, 12), (3, 3), (1, 1), (1, 1), (1, 1), 1),          # P = 96: blocks span images
    (1, 2 * KC // 9 + 3, MC + 5, (10, 21), (3, 3), (1, 1), (1, 1), (1, 1), 1),  # K, M blocks
    (5, 2 * KC // 9 + 3, 21, (7, 5), (3, 3), (1, 1), (1, 1), (1, 1), 1),  # panels span images
    (2, 2 * KC // 9 + 3, 13, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 1),  # P = 64, K blocks
    (2, 5, 7, (50,), (5,), (1,), (2,), (1,), 1),                     # 1-D
    (2, 7, 5, (70,), (4,), (3,), (1,), (2,), 1),                     # 1-D strided, dilated
    (2, 4, 6, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 2),   # 3-D
    (1, 3, 5, (7, 9, 20), (2, 1, 3), (2, 1, 1), (0, 1, 2), (1, 2, 1), 1),  # 3-D mixed
]


def _case_id(case: tuple) -> str:
    n, c, o, size, k, s, p, d, g = case
    return f"n{n}c{c}o{o}x{'x'.join(map(str, size))}k{''.join(map(str, k))}s{s[-1]}p{p[-1]}" \
           f"d{d[-1]}g{g}"


def _arrays(case: tuple, seed: int = 0, bias: bool = True) -> tuple[np.ndarray, ...]:
    n, c, o, size, k, *_, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *size), dtype=np.float32)
    w = rng.standard_normal((o, c // g, *k), dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32) if bias else None
    return x, w, b


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, case: tuple) -> np.ndarray:
    """The float64 im2col reference, and its float32 error bound."""
    *_, s, p, d, g = case
    return convolution(np, x.astype(np.float64), w.astype(np.float64),
                       None if b is None else b.astype(np.float64), s, p, d, g)


def _assert_close(got: np.ndarray, want: np.ndarray, w: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == want.shape
    k = w[0].size
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * k * 2.0 ** -24 * np.abs(want).max())


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_float64_reference(case):
    x, w, b = _arrays(case)
    *_, s, p, d, g = case
    _assert_close(conv.conv(x, w, b, s, p, d, g), _reference(x, w, b, case), w)


@pytest.mark.parametrize("isa", [AVX2, AVX512], ids=lambda i: i.name)
@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[6], CASES[7]], ids=_case_id)
def test_both_register_shapes_without_bias(isa, case):
    x, w, _ = _arrays(case, seed=1, bias=False)
    *_, s, p, d, g = case
    _assert_close(conv.conv(x, w, None, s, p, d, g, shape=isa), _reference(x, w, None, case), w)


# narrow output rows and stride 2: 1 to MAX_RUNS runs per vector, or more (gathers)
RUN_CASES = [
    (3, 6, 9, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1), 1),         # 14x14: one run per image
    (3, 5, 7, (7, 9), (3, 3), (1, 1), (0, 0), (1, 1), 1),           # OW = 7, no padding: 3-4 runs
    (2, 4, 5, (9, 7), (3, 3), (1, 1), (0, 0), (1, 1), 1),           # OW = 5: 4-5 runs
    (2, 3, 4, (6, 5), (3, 3), (1, 1), (0, 0), (1, 1), 1),           # OW = 3: gathers
    (3, 5, 6, (15, 15), (3, 3), (2, 2), (1, 1), (1, 1), 1),         # stride 2, OW = 8
    (2, 4, 6, (14, 29), (1, 1), (2, 2), (0, 0), (1, 1), 1),         # 1x1 stride 2 to the edge
    (1, 3, 5, (9, 40), (3, 3), (1, 2), (1, 0), (1, 3), 1),          # stride 2, dilation 3
]


@pytest.mark.parametrize("isa", [AVX2, AVX512], ids=lambda i: i.name)
@pytest.mark.parametrize("runs", [True, False], ids=["runs", "gathers"])
@pytest.mark.parametrize("case", RUN_CASES, ids=_case_id)
def test_run_loads_and_gathers(case, runs, isa, monkeypatch):
    """Every packing path on the same windows: the run loads (one masked load per run of
    lanes, stride 1 or 2) and, with them switched off, gathers."""
    if not runs:
        monkeypatch.setattr(conv, "RUN_STRIDES", ())
        conv._plan.cache_clear()
    x, w, b = _arrays(case, seed=3)
    *_, s, p, d, g = case
    try:
        got = conv.conv(x, w, b, s, p, d, g, shape=isa)
    finally:
        conv._plan.cache_clear()
    _assert_close(got, _reference(x, w, b, case), w)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[10], CASES[12]], ids=_case_id)
def test_matches_torch(case):
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(case, seed=2)
    *_, s, p, d, g = case
    fn = (torch.nn.functional.conv1d, torch.nn.functional.conv2d,
          torch.nn.functional.conv3d)[x.ndim - 3]
    want = fn(*(torch.from_numpy(a) for a in (x, w, b)), s, p, d, g).numpy()
    _assert_close(conv.conv(x, w, b, s, p, d, g), want.astype(np.float64), w)


def test_non_contiguous_channels_last_and_unaligned_input():
    case = CASES[4]
    x, w, b = _arrays(case, seed=3)
    *_, s, p, d, g = case
    want = _reference(x, w, b, case)
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), np.float32)
    wide[..., ::2] = x
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    raw = np.empty(x.nbytes + 2, np.uint8)
    unaligned = raw[2:].view(np.float32).reshape(x.shape)
    unaligned[...] = x
    for view in (wide[..., ::2], nhwc, unaligned):
        _assert_close(conv.conv(view, w, b, s, p, d, g), want, w)


def test_threads_give_the_same_bits_and_out_is_written():
    case = (4, 16, 40, (30, 30), (3, 3), (1, 1), (1, 1), (1, 1), 1)
    x, w, b = _arrays(case, seed=4)
    *_, s, p, d, g = case
    alone = conv.conv(x, w, b, s, p, d, g, threads=1)
    out = np.full_like(alone, np.nan)
    assert conv.conv(x, w, b, s, p, d, g, out=out) is out
    np.testing.assert_array_equal(out, alone)


def test_a_batch_past_32_bit_offsets_runs_in_chunks(monkeypatch):
    case = CASES[9]                                 # 5 images, panels that span images
    x, w, b = _arrays(case, seed=8)
    *_, s, p, d, g = case
    monkeypatch.setattr(conv, "MAX_INDEX", 2 * x[0].size)        # 2 images per call
    calls = []
    run = conv._run
    monkeypatch.setattr(conv, "_run", lambda x, *a: calls.append(len(x)) or run(x, *a))
    _assert_close(conv.conv(x, w, b, s, p, d, g), _reference(x, w, b, case), w)
    assert calls == [2, 2, 1]


def _relu_residual(shape: tuple[int, ...]) -> FusedKernel:
    """relu(c + r): an epilogue reading the conv's output and a residual."""
    t = f"Float({', '.join(map(str, shape))})"
    g = fuse_elementwise(parse(f'''graph(%c : {t}, %r : {t}):
  %h : {t} = sm::add(%c, %r)
  %o : {t} = sm::relu(%h)
  return (%o)
'''))
    return FusedKernel(g.nodes[0].attrs["subgraph"], name="epilogue")


def test_epilogue_per_row_equals_the_separate_group():
    """The group's kernel runs on each finished row segment (flat starts that are not
    vector-aligned: 23 x 29 positions), reading the conv's output and a residual."""
    case = (3, 6, MC + 3, (23, 29), (3, 3), (1, 1), (1, 1), (1, 1), 1)
    x, w, b = _arrays(case, seed=5)
    *_, s, p, d, g = case
    plain = conv.conv(x, w, b, s, p, d, g)
    res = np.random.default_rng(6).standard_normal(plain.shape, dtype=np.float32)
    fk = _relu_residual(plain.shape)
    c = np.empty_like(plain)
    launch, arrays = fk.launch_for([c, res])
    out, = launch.outputs()
    table = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays],
                                                     out.ctypes.data)
    meta = (ctypes.c_int64 * max(1, len(launch.meta)))(*launch.meta)
    conv.conv(x, w, b, s, p, d, g, out=c,
              epilogue=Epilogue(launch.kernel.address, ctypes.addressof(table),
                                ctypes.addressof(meta)))
    np.testing.assert_array_equal(c, plain)
    np.testing.assert_array_equal(out, np.maximum(plain + res, 0))


def test_taken_and_clear_errors(monkeypatch):
    x, w, b = _arrays(CASES[0])
    args = ((1, 1), (1, 1), (1, 1), 1)
    assert conv.taken(x, w, b, *args) == conv._vector_host()
    assert not conv.taken(x.astype(np.float64), w, b, *args)
    assert not conv.taken(x, w, b.astype(np.float64), *args)
    assert not conv.taken(x[:, :4], w, b, *args)                       # channels
    assert not conv.taken(x, w, b, (1, 1), (0, 0), (9, 9), 1)           # empty output
    monkeypatch.setenv("SCRIPTMOD_CONV", "reference")
    assert not conv.taken(x, w, b, *args)
    monkeypatch.setenv("SCRIPTMOD_CONV", "own")
    assert conv.taken(x, w, b, *args)
    with pytest.raises(ValueError, match=r"conv.conv: expected float32 arrays"):
        conv.conv(x[:, :4], w, b, *args)
    with pytest.raises(ValueError, match=r"out must be a C-contiguous float32 \(2, 7, 9, 11\)"):
        conv.conv(x, w, b, *args, out=np.empty((2, 7, 9, 10), np.float32))
    monkeypatch.setenv("SCRIPTMOD_CONV", "fast")
    with pytest.raises(ValueError, match=r"SCRIPTMOD_CONV: expected one of"):
        conv.taken(x, w, b, *args)


class _ConvRelu(sm.nn.Module):
    def forward(self, x, w, b):
        return F.relu(F.conv2d(x, w, b, (1, 2), 1, 1, 2))


@pytest.mark.parametrize("choice", ["own", "reference"])
def test_eager_and_compiled_conv2d_use_it(monkeypatch, choice):
    """F.conv2d eagerly and in a traced graph (conv -> relu) agree with torch whichever
    kernel ``SCRIPTMOD_CONV`` picks."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("SCRIPTMOD_CONV", choice)
    x, w, b = _arrays((3, 6, 10, (13, 17), (3, 3), None, None, None, 2), seed=7)
    want = torch.relu(torch.nn.functional.conv2d(
        *(torch.from_numpy(a) for a in (x, w, b)), (1, 2), 1, 1, 2)).numpy()
    calls = []
    ours = conv.conv
    monkeypatch.setattr(conv, "conv", lambda *a, **k: calls.append(1) or ours(*a, **k))
    sx, sw, sb = (sm.from_numpy(a) for a in (x, w, b))
    with sm.no_grad():
        eager = F.relu(F.conv2d(sx, sw, sb, (1, 2), 1, 1, 2)).numpy()
        assert len(calls) == (choice == "own")
        traced = sm.jit.trace(_ConvRelu(), (sx, sw, sb))
        calls.clear()
        compiled = traced(sx, sw, sb).numpy()
        assert len(calls) == (choice == "own")
    for got in (eager, compiled):
        _assert_close(got, want.astype(np.float64), w)
