"""The float32 CPU backward of a convolution (and so the forward of a transposed one) on our
GEMM (``runtime.gemm``) and the native window copies of ``codegen.col2im``, split over the
thread pool by blocks that no two threads share.

- ``grad_weight``: per image, group and block of output rows, the patch rows of the input
  (``im2col``, ``C/G*K x L``, in L2) and ``gW_g += gy_g @ patchesᵀ (O/G x L @ L x C/G*K)``:
  A is ``gy``'s rows read in place, and the GEMM reads the patches as a B with unit row
  stride (it packs that by in-register transposes), so no transposed copy is made, and the
  sums are in the weight's own layout (an earlier ``patches @ gy_gᵀ`` left ``gWᵀ``, whose
  transposing copy cost 63 ms of a ResNet-18 training step at batch 8, 64 x 64); each thread
  sums into its own ``gW`` and the sums are added.
- ``grad_input``: at stride 1, the forward convolution (``runtime.conv``) of ``gy`` by the
  flipped, channel-transposed weight; else per image, group and block of input channels,
  ``Wᵀ (cb*K x O/G) @ gy_g`` into a patch block (in L2), added back onto the input gradient
  by ``col2im``; a block's channels belong to one thread, so the adds need no lock.

    >>> rng = np.random.default_rng(0)
    >>> gy = rng.standard_normal((2, 8, 5, 5), dtype=np.float32)
    >>> w = rng.standard_normal((8, 6, 3, 3), dtype=np.float32)
    >>> dx = grad_input(gy, w, (2, 6, 5, 5), (1, 1), (1, 1), (1, 1), 1)
    >>> dx.shape, dx.dtype
    ((2, 6, 5, 5), dtype('float32'))

``taken`` says when these run (float32 NumPy arrays, groups wide enough for a GEMM); the
NumPy kernels of ``runtime.kernels.conv`` take the rest.
"""
from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.col2im import COL2IM, IM2COL, PARAMS, render_col2im, render_im2col
from . import conv as _conv
from . import gemm
from . import threads as _threads
from .llvm_jit import compile_units
from .native import data_ptr

WINDOW_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_void_p)
BLOCK_FLOATS = 1 << 18    # grad_input's patch block (1 MiB) stays in L2 between GEMM and col2im
WEIGHT_BLOCK_FLOATS = 1 << 20  # grad_weight's: a longer GEMM contraction (4 MiB, in L3) paid
                          # off (b8 128->128 28x28, one thread: 41 -> 33 ms)
MIN_WIDTH = 4             # narrower GEMM operands (depthwise: 1) stay with NumPy
MIN_FLOPS = 1 << 20       # smaller products stay with NumPy
MIN_THREAD_FLOPS = 1 << 23  # less work than this runs on the calling thread
GEMM_ROWS = 192           # grad_input's block: about this many patch rows (cb * K)
_UNIT = 64                # ``parallel_for`` chunks at multiples of 64: one unit = 64
_local = threading.local()


@lru_cache(maxsize=None)
def _kernels() -> tuple[Any, Any, tuple]:
    """The compiled ``im2col`` and ``col2im`` (ctypes functions, then the kernels' owners)."""
    i2c, c2i = compile_units([("conv im2col f32", render_im2col, IM2COL),
                              ("conv col2im f32", render_col2im, COL2IM)])
    return WINDOW_TYPE(i2c.address), WINDOW_TYPE(c2i.address), (i2c, c2i)


@dataclass(frozen=True)
class Geometry:
    """A convolution as 3-D: ``size`` the input's spatial size, ``out`` the output's,
    ``k``/``s``/``p``/``d`` kernel, stride, padding and dilation (leading dims of a 1-D
    or 2-D one: size 1, kernel 1, stride 1, no padding)."""
    size: tuple[int, ...]
    out: tuple[int, ...]
    k: tuple[int, ...]
    s: tuple[int, ...]
    p: tuple[int, ...]
    d: tuple[int, ...]

    @staticmethod
    def of(size: Sequence[int], out: Sequence[int], k: Sequence[int], s: Sequence[int],
           p: Sequence[int], d: Sequence[int]) -> "Geometry":
        def lift(v: Sequence[int], fill: int) -> tuple[int, ...]:
            return (fill,) * (3 - len(v)) + tuple(int(i) for i in v)
        return Geometry(lift(size, 1), lift(out, 1), lift(k, 1), lift(s, 1), lift(p, 0),
                        lift(d, 1))

    @property
    def taps(self) -> int:
        return math.prod(self.k)

    @property
    def rows(self) -> int:
        """Output rows (one per ``(od, oh)``), each of ``out[2]`` positions."""
        return self.out[0] * self.out[1]

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel at stride 1 without padding over all of the input (a transposed
        convolution's ``output_padding`` adds rows): each patch is one input element."""
        return self.taps == 1 and self.s == (1, 1, 1) and self.p == (0, 0, 0) \
            and self.out == self.size

    def params(self, r0: int, r1: int) -> np.ndarray:
        """``codegen.col2im.PARAMS`` for output rows ``[r0, r1)``."""
        v = (*self.size, *self.out, *self.k, *self.s, *self.p, *self.d, r0, r1)
        assert len(v) == len(PARAMS)
        return np.array(v, np.int64)

    def chunks(self, width: int, floats: int) -> list[tuple[int, int]]:
        """Output-row ranges whose patch blocks of ``width`` rows fit ``floats``."""
        step = max(1, floats // max(1, width * self.out[2]))
        return [(r, min(r + step, self.rows)) for r in range(0, self.rows, step)]


def taken(gy: Any, other: Any, x_shape: Sequence[int], w_shape: Sequence[int],
          stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
          groups: int) -> bool:
    """Whether ``grad_input``/``grad_weight`` run these operands (``other``: the weight or
    the input, whose shape is ``w_shape`` or ``x_shape``): float32 NumPy arrays, shapes
    that agree (``_consistent``: the native loops trust them), the per-group GEMM at least
    ``MIN_WIDTH`` wide each way and ``MIN_FLOPS`` in all."""
    if type(gy) is not np.ndarray or type(other) is not np.ndarray:
        return False
    if gy.dtype != np.float32 or other.dtype != np.float32:
        return False
    if tuple(other.shape) not in (tuple(x_shape), tuple(w_shape)):
        return False
    if not _consistent(gy.shape, tuple(x_shape), tuple(w_shape), stride, padding, dilation,
                       groups):
        return False
    og, ck = w_shape[0] // groups, math.prod(w_shape[1:])
    flops = 2 * gy.shape[0] * math.prod(gy.shape[2:]) * w_shape[0] * ck
    return min(og, ck) >= MIN_WIDTH and flops >= MIN_FLOPS


def _consistent(gy: tuple, x: tuple, w: tuple, stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], groups: int) -> bool:
    """Whether ``gy (N, O, *out)``, ``x (N, C, *size)`` and ``w (O, C/G, *k)`` are one
    convolution's: 1 to 3 spatial dims, no empty dim, channels that match, and an ``out`` no
    larger than the windows of ``x`` (smaller: a transposed convolution's
    ``output_padding``)."""
    r = len(w) - 2
    if not 1 <= r <= 3 or len(gy) != r + 2 or len(x) != r + 2 or 0 in gy + x + w:
        return False
    if not all(len(v) == r for v in (stride, padding, dilation)) or groups < 1:
        return False
    if min(*stride, *dilation) < 1 or min(padding) < 0 or w[0] % groups \
            or x[1] != w[1] * groups or gy[1] != w[0] or gy[0] != x[0]:
        return False
    reach = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
             for i in range(r)]
    return all(1 <= gy[2 + i] <= reach[i] for i in range(r))


def _buffer(name: str, floats: int) -> np.ndarray:
    """This thread's float32 buffer ``name`` of ``floats`` (kept between calls)."""
    buf = getattr(_local, name, None)
    if buf is None or buf.size < floats:
        buf = np.empty(max(floats, 1 << 12), np.float32)
        setattr(_local, name, buf)
    return buf[:floats]


def _mm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` on the calling thread: our GEMM unless ``SCRIPTMOD_GEMM=blas``. Not
    ``gemm.preferred``'s BLAS-or-ours rule: these calls run on the pool's threads, where
    BLAS's own threads would fight them (as in ``runtime.attention``), and with a transposed
    B ours ran ahead of OpenBLAS's SkylakeX kernel too (one thread, b8 64->64 56x56's weight
    gradient block 146 vs 125 GFLOP/s, the stem's 138 vs 104)."""
    if gemm.choice() == "blas":
        np.matmul(a, b, out=out)
    else:
        gemm.matmul(a, b, out=out, threads=1)


def _run(items: int, flops: int, fn: Callable[[int], None]) -> None:
    """``fn(i)`` for each item, over the pool when there is work enough."""
    def run(lo: int, hi: int) -> None:
        for i in range(lo // _UNIT, hi // _UNIT):
            fn(i)
    if items < 2 or flops < MIN_THREAD_FLOPS:
        run(0, items * _UNIT)
    else:
        _threads.parallel_for(run, items * _UNIT, min_split=0)


def _gy_rows(gy: np.ndarray, n: int, g: int, og: int) -> np.ndarray:
    """``gy[n]``'s group ``g`` as an ``(O/G, P)`` matrix (a view)."""
    return gy[n, g * og:(g + 1) * og].reshape(og, -1)


def grad_input(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], stride: Sequence[int],
               padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray:
    """The input gradient ``(N, C, *spatial)`` of a convolution of weight ``w`` with output
    gradient ``gy`` (``taken`` holds): at stride 1 a forward convolution (``_as_conv``),
    else GEMM blocks and ``col2im``."""
    direct = _as_conv(gy, w, x_shape, stride, padding, dilation, groups)
    if direct is not None:
        return direct
    gy = np.ascontiguousarray(gy)
    n, o, k = gy.shape[0], w.shape[0], w.shape[2:]
    c, g = int(x_shape[1]), groups
    cg, og = c // g, o // g
    geo = Geometry.of(x_shape[2:], gy.shape[2:], k, stride, padding, dilation)
    kk = geo.taps
    wt = np.ascontiguousarray(w.reshape(g, og, cg * kk).transpose(0, 2, 1))   # (G, CgK, Og)
    dx = np.zeros(tuple(x_shape), np.float32)
    cb = max(1, min(cg, -(-GEMM_ROWS // kk)))
    blocks = -(-cg // cb)
    col2im = _kernels()[1]

    def item(i: int) -> None:
        img, rest = divmod(i, g * blocks)
        grp, blk = divmod(rest, blocks)
        c0, c1 = blk * cb, min(cg, (blk + 1) * cb)
        a = wt[grp, c0 * kk:c1 * kk]
        target = dx[img, grp * cg + c0]
        gyg = _gy_rows(gy, img, grp, og)
        for r0, r1 in geo.chunks((c1 - c0) * kk, BLOCK_FLOATS):
            cols = geo.out[2] * (r1 - r0)
            buf = _buffer("cols", a.shape[0] * cols).reshape(a.shape[0], cols)
            _mm(a, gyg[:, r0 * geo.out[2]:r1 * geo.out[2]], buf)
            params = geo.params(r0, r1)          # held: the kernel reads it
            col2im(0, c1 - c0, data_ptr(buf), data_ptr(target), data_ptr(params))
    _run(n * g * blocks, 2 * gy.size * cg * kk, item)
    return dx


def _as_conv(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray | None:
    """At stride 1 the input gradient is the forward convolution (``runtime.conv``) of
    ``gy`` with the weight flipped and its two channel dims swapped per group, padded by
    ``d*(k-1) - p``; None where that padding would be negative, the gradient has rows no
    window reached (a transposed convolution's ``output_padding``), or ``runtime.conv``
    does not take the arguments."""
    k = w.shape[2:]
    pad = [d * (kk - 1) - p for kk, p, d in zip(k, padding, dilation)]
    if any(s != 1 for s in stride) or min(pad) < 0:
        return None
    if any(gy.shape[2 + i] + 2 * pad[i] - dilation[i] * (k[i] - 1) != x_shape[2 + i]
           for i in range(len(k))):
        return None
    o, cg, g = w.shape[0], w.shape[1], groups
    flipped = w[(slice(None), slice(None), *(slice(None, None, -1),) * len(k))]
    wt = flipped.reshape(g, o // g, cg, *k).swapaxes(1, 2).reshape(g * cg, o // g, *k)
    wt = np.ascontiguousarray(wt)
    if not _conv.taken(gy, wt, None, stride, pad, dilation, groups):
        return None
    return _conv.conv(gy, wt, None, stride, pad, dilation, groups)


def grad_weight(gy: np.ndarray, x: np.ndarray, w_shape: Sequence[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray:
    """The weight gradient ``w_shape`` of a convolution of input ``x`` with output gradient
    ``gy`` (``taken`` holds)."""
    gy, x = np.ascontiguousarray(gy), np.ascontiguousarray(x)
    n, o, g = gy.shape[0], int(w_shape[0]), groups
    cg, og = x.shape[1] // g, o // g
    geo = Geometry.of(x.shape[2:], gy.shape[2:], w_shape[2:], stride, padding, dilation)
    ck = cg * geo.taps
    chunks = geo.chunks(ck, WEIGHT_BLOCK_FLOATS)
    sums: dict[int, np.ndarray] = {}         # each thread's own sum, by thread id
    im2col = _kernels()[0]

    def item(i: int) -> None:
        acc = sums.get(threading.get_ident())
        if acc is None:
            acc = sums[threading.get_ident()] = np.zeros((g, og, ck), np.float32)
        img, (r0, r1) = divmod(i, len(chunks))[0], chunks[i % len(chunks)]
        cols = geo.out[2] * (r1 - r0)
        params = geo.params(r0, r1)
        part = _buffer("part", og * ck).reshape(og, ck)
        span = slice(r0 * geo.out[2], r1 * geo.out[2])
        for grp in range(g):
            if geo.pointwise:                   # the patches are the input's own rows
                buf = x[img, grp * cg:(grp + 1) * cg].reshape(cg, -1)[:, span]
            else:
                buf = _buffer("cols", ck * cols).reshape(ck, cols)
                im2col(0, ck, data_ptr(x[img, grp * cg]), data_ptr(buf), data_ptr(params))
            _mm(_gy_rows(gy, img, grp, og)[:, span], buf.T, part)
            acc[grp] += part
    _run(n * len(chunks), 2 * gy.size * ck, item)
    total, *rest = sums.values()
    for s in rest:
        total += s
    return total.reshape(tuple(w_shape))
