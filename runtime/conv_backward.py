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

    def params(self, r0: int, r1: int, ld: int) -> np.ndarray:
        """``codegen.col2im.PARAMS`` for output rows ``[r0, r1)`` of patch rows ``ld``
        floats apart."""
        v = (*self.size, *self.out, *self.k, *self.s, *self.p, *self.d, r0, r1, ld)
        assert len(v) == len(PARAMS)
        return np.array(v, np.int64)

    def units(self, n: int, width: int, floats: int) -> list[list[tuple[int, int]]]:
        """Blocks ``[q0, q1)`` of the batch's output positions (position ``q = image * P +
        row * OW + ow``, ``P`` an image's positions) whose patch blocks of ``width`` rows fit
        ``floats``: whole images side by side while they fit, else an image's rows split
        over blocks. They come in units that share no image (an image split over blocks is
        one unit), so that units on different threads can add into one input gradient
        without a lock."""
        ow, rows = self.out[2], self.rows
        p = rows * ow
        cap = max(1, floats // max(1, width * ow))          # output rows per block
        if cap >= rows:
            per = cap // rows
            return [[(i * p, min(i + per, n) * p)] for i in range(0, n, per)]
        return [[(i * p + r * ow, i * p + min(r + cap, rows) * ow)
                 for r in range(0, rows, cap)] for i in range(n)]

    def segments(self, q0: int, q1: int) -> list[tuple[int, int, int, int]]:
        """Block ``[q0, q1)`` (from ``units``) as ``(image, r0, r1, column)`` pieces: image
        ``image``'s output rows ``[r0, r1)`` at ``column`` of the block."""
        ow, p = self.out[2], self.rows * self.out[2]
        out, q = [], q0
        while q < q1:
            img, r0 = q // p, (q % p) // ow
            end = min(q1, (img + 1) * p)
            out.append((img, r0, r0 + (end - q) // ow, q - q0))
            q = end
        return out


def taken(gy: Any, other: Any, x_shape: Sequence[int], w_shape: Sequence[int],
          stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
          groups: int) -> bool:
    """Whether ``grad_input``/``grad_weight`` run these operands (``other``: the weight or
    the input, whose shape is ``w_shape`` or ``x_shape``): float32 NumPy arrays, shapes
    that agree (``_consistent``: the native loops trust them), the per-group GEMM at least
    ``MIN_WIDTH`` wide each way and ``MIN_FLOPS`` in all."""
    if not _operands(gy, other, x_shape, w_shape, stride, padding, dilation, groups):
        return False
    og, ck = w_shape[0] // groups, math.prod(w_shape[1:])
    flops = 2 * gy.shape[0] * math.prod(gy.shape[2:]) * w_shape[0] * ck
    return min(og, ck) >= MIN_WIDTH and flops >= MIN_FLOPS


def _operands(gy: Any, other: Any, x_shape: Sequence[int], w_shape: Sequence[int],
              stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
              groups: int) -> bool:
    """Whether ``gy`` and ``other`` are float32 NumPy arrays of one convolution
    (``_consistent``), ``other`` the input or the weight."""
    if type(gy) is not np.ndarray or type(other) is not np.ndarray:
        return False
    if gy.dtype != np.float32 or other.dtype != np.float32:
        return False
    if tuple(other.shape) not in (tuple(x_shape), tuple(w_shape)):
        return False
    return _consistent(gy.shape, tuple(x_shape), tuple(w_shape), stride, padding, dilation,
                       groups)


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


def _mm(a: np.ndarray, b: np.ndarray, out: np.ndarray, accumulate: bool = False) -> None:
    """``out = a @ b`` (``accumulate``: ``out += a @ b``) on the calling thread: our GEMM
    unless ``SCRIPTMOD_GEMM=blas``. Not ``gemm.preferred``'s BLAS-or-ours rule: these calls
    run on the pool's threads, where BLAS's own threads would fight them (as in
    ``runtime.attention``), and with a transposed B ours ran ahead of OpenBLAS's SkylakeX
    kernel too (one thread, b8 64->64 56x56's weight gradient block 146 vs 125 GFLOP/s, the
    stem's 138 vs 104)."""
    if gemm.choice() != "blas":
        gemm.matmul(a, b, out=out, threads=1, accumulate=accumulate)
    elif accumulate:
        out += a @ b
    else:
        np.matmul(a, b, out=out)


def _run(items: int, flops: int, fn: Callable[[int], None]) -> None:
    """``fn(i)`` for each item, over the pool when there is work enough."""
    def run(lo: int, hi: int) -> None:
        for i in range(lo // _UNIT, hi // _UNIT):
            fn(i)
    if items < 2 or flops < MIN_THREAD_FLOPS:
        run(0, items * _UNIT)
    else:
        _threads.parallel_for(run, items * _UNIT, min_split=0)


def _by_group(gy: np.ndarray, g: int) -> np.ndarray:
    """``gy (N, O, *out)`` as ``(G, O/G, N*P)``: each group's output channels by the batch's
    positions, the images side by side (``Geometry.units``' positions), so that one GEMM
    contracts over many images (a copy unless ``N`` is 1)."""
    n, o = gy.shape[:2]
    return np.ascontiguousarray(gy.reshape(n, g, o // g, -1).transpose(1, 2, 0, 3)) \
        .reshape(g, o // g, -1)


def _split(total: int, parts: int, align: int = 32) -> list[tuple[int, int]]:
    """``[0, total)`` in about ``parts`` ranges, each a multiple of ``align`` long (the
    microkernel's panel width) but the last."""
    step = -(-max(1, -(-total // max(1, parts))) // align) * align
    return [(i, min(i + step, total)) for i in range(0, total, step)]


def _items() -> int:
    """How many independent items a call should offer the pool: two per thread."""
    return 2 * _threads.get_num_threads()


def grad_input(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], stride: Sequence[int],
               padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray:
    """The input gradient ``(N, C, *spatial)`` of a convolution of weight ``w`` with output
    gradient ``gy`` (``taken`` holds): the patch gradients ``Wᵀ @ gy`` added back onto the
    input by ``col2im`` (``_col2im``), or at stride 1, where the batch has at least as many
    positions as the weight has output channels, the forward convolution of ``gy`` by the
    flipped weight (``_as_conv``)."""
    gy, w = np.ascontiguousarray(gy), np.ascontiguousarray(w)
    positions = gy.shape[0] * math.prod(gy.shape[2:])
    if positions >= w.shape[0]:
        direct = _as_conv(gy, w, x_shape, stride, padding, dilation, groups)
        if direct is not None:
            return direct
    return _col2im(gy, w, x_shape, stride, padding, dilation, groups, positions)


def _col2im(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], stride: Sequence[int],
            padding: Sequence[int], dilation: Sequence[int], groups: int,
            positions: int) -> np.ndarray:
    """``grad_input`` by patch gradients. Per group the patch gradients are ``Wᵀ (C/G*K x
    O/G) @ gy (O/G x NP)``; the GEMM reads A with unit column stride, so either the weight
    is transposed (``O*C*K`` floats moved) or, where the batch has fewer positions ``NP``
    than the weight output channels (ResNet-18's last stage at 64 x 64: 32 against 512),
    the product is formed transposed, ``gyᵀ @ W``, and that is transposed (``NP*C*K``
    floats moved). Items ``(unit, group, channel block)`` then add their blocks onto their
    own channels of their own images (``col2im``), so no two threads add to one element."""
    n, o, k = gy.shape[0], w.shape[0], w.shape[2:]
    c, g = int(x_shape[1]), groups
    cg, og = c // g, o // g
    geo = Geometry.of(x_shape[2:], gy.shape[2:], k, stride, padding, dilation)
    kk = geo.taps
    dx = np.zeros(tuple(x_shape), np.float32)
    col2im = _kernels()[1]
    if positions < o:
        gyt = np.ascontiguousarray(gy.reshape(n, g, og, -1).transpose(1, 0, 3, 2))
        wg = w.reshape(g, og, cg * kk)
        whole = np.empty((g, positions, cg * kk), np.float32)
        for grp in range(g):                                       # gyᵀ @ W, on the pool
            if gemm.choice() == "blas":
                np.matmul(gyt[grp].reshape(positions, og), wg[grp], out=whole[grp])
            else:
                gemm.matmul(gyt[grp].reshape(positions, og), wg[grp], out=whole[grp])
        patches = np.ascontiguousarray(whole.transpose(0, 2, 1))   # (G, CgK, NP)
        units = [[(0, positions)]]
        cb = max(1, -(-cg // max(1, -(-_items() // g))))

        def block(grp: int, c0: int, c1: int, q0: int, q1: int) -> tuple[np.ndarray, int]:
            return patches[grp, c0 * kk:c1 * kk], positions
    else:
        gyg = _by_group(gy, g)                                     # (G, Og, NP)
        wt = np.ascontiguousarray(w.reshape(g, og, cg * kk).transpose(0, 2, 1))  # (G, CgK, Og)
        cb = max(1, min(cg, -(-GEMM_ROWS // kk)))
        units = geo.units(n, cb * kk, BLOCK_FLOATS)

        def block(grp: int, c0: int, c1: int, q0: int, q1: int) -> tuple[np.ndarray, int]:
            rows = (c1 - c0) * kk
            buf = _buffer("cols", rows * (q1 - q0)).reshape(rows, q1 - q0)
            _mm(wt[grp, c0 * kk:c1 * kk], gyg[grp][:, q0:q1], buf)
            return buf, q1 - q0
    blocks = -(-cg // cb)

    def item(i: int) -> None:
        u, rest = divmod(i, g * blocks)
        grp, blk = divmod(rest, blocks)
        c0, c1 = blk * cb, min(cg, (blk + 1) * cb)
        for q0, q1 in units[u]:
            buf, ld = block(grp, c0, c1, q0, q1)
            for img, r0, r1, col in geo.segments(q0, q1):
                params = geo.params(r0, r1, ld)          # held: the kernel reads it
                col2im(c0, c1, data_ptr(buf) + 4 * col, data_ptr(dx[img, grp * cg]),
                       data_ptr(params))
    _run(len(units) * g * blocks, 2 * gy.size * cg * kk, item)
    return dx


def _flipped(w: np.ndarray, groups: int) -> np.ndarray:
    """``w (O, C/G, *k)`` as ``(C, O/G, *k)``: per group its two channel dims swapped and
    its taps reversed. Each channel pair's taps move as one block (a NumPy void element of
    ``K`` floats), then are reversed in place order: 512 x 512 x 3 x 3 in 3.6 ms against
    7.7-9.6 ms for NumPy's copy of the strided, reversed view."""
    o, cg, k = w.shape[0], w.shape[1], w.shape[2:]
    kk, og = math.prod(k), o // groups
    taps = w.reshape(groups, og, cg * kk).view(np.dtype((np.void, 4 * kk)))   # (G, Og, Cg)
    swapped = np.ascontiguousarray(taps.transpose(0, 2, 1)).view(np.float32)
    return np.ascontiguousarray(swapped.reshape(groups * cg, og, kk)[..., ::-1]) \
        .reshape(groups * cg, og, *k)


def _as_conv(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray | None:
    """At stride 1 the input gradient is the forward convolution (``runtime.conv``) of
    ``gy`` with the weight flipped and its two channel dims swapped per group (``_flipped``),
    padded by ``d*(k-1) - p``; None where that padding would be negative, the gradient has
    rows no window reached (a transposed convolution's ``output_padding``), or
    ``runtime.conv`` does not take the arguments."""
    k = w.shape[2:]
    pad = [d * (kk - 1) - p for kk, p, d in zip(k, padding, dilation)]
    if any(s != 1 for s in stride) or min(pad) < 0:
        return None
    if any(gy.shape[2 + i] + 2 * pad[i] - dilation[i] * (k[i] - 1) != x_shape[2 + i]
           for i in range(len(k))):
        return None
    wt = _flipped(w, groups)
    if not _conv.taken(gy, wt, None, stride, pad, dilation, groups):
        return None
    return _conv.conv(gy, wt, None, stride, pad, dilation, groups)


def grad_weight(gy: np.ndarray, x: np.ndarray, w_shape: Sequence[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray:
    """The weight gradient ``w_shape`` of a convolution of input ``x`` with output gradient
    ``gy`` (``taken`` holds): per group ``gW = gy (O/G x NP) @ patchesᵀ (NP x C/G*K)``,
    contracted over the whole batch's positions. An item owns a block of patch rows (so a
    block of ``gW``'s columns) and walks the batch in position blocks: its own rows of the
    patches (``im2col``, several images side by side when they are small) and the GEMM
    adding into its columns of ``gW``, so nothing is summed afterwards and the contraction
    is long even where an image has 4 positions."""
    gy, x = np.ascontiguousarray(gy), np.ascontiguousarray(x)
    n, g = gy.shape[0], groups
    cg, og = x.shape[1] // g, int(w_shape[0]) // g
    geo = Geometry.of(x.shape[2:], gy.shape[2:], w_shape[2:], stride, padding, dilation)
    ck = cg * geo.taps
    gyg = _by_group(gy, g)                                         # (G, Og, NP)
    gw = np.empty((g, og, ck), np.float32)
    spans = _split(ck, -(-_items() // g))
    width = spans[0][1] - spans[0][0]
    blocks = [blk for unit in geo.units(n, width, WEIGHT_BLOCK_FLOATS) for blk in unit]
    im2col = _kernels()[0]

    def patches(grp: int, t0: int, t1: int, q0: int, q1: int) -> np.ndarray:
        """Patch rows ``[t0, t1)`` of group ``grp`` at positions ``[q0, q1)``."""
        pieces = geo.segments(q0, q1)
        if geo.pointwise and len(pieces) == 1:      # the patches are the input's own rows
            img, r0, r1, _ = pieces[0]
            rows = x[img, grp * cg + t0:grp * cg + t1].reshape(t1 - t0, -1)
            return rows[:, r0 * geo.out[2]:r1 * geo.out[2]]
        buf = _buffer("cols", (t1 - t0) * (q1 - q0)).reshape(t1 - t0, q1 - q0)
        for img, r0, r1, col in pieces:
            params = geo.params(r0, r1, q1 - q0)
            im2col(t0, t1, data_ptr(x[img, grp * cg]), data_ptr(buf) + 4 * col,
                   data_ptr(params))
        return buf

    def item(i: int) -> None:
        grp, (t0, t1) = divmod(i, len(spans))[0], spans[i % len(spans)]
        for j, (q0, q1) in enumerate(blocks):
            _mm(gyg[grp][:, q0:q1], patches(grp, t0, t1, q0, q1).T, gw[grp][:, t0:t1],
                accumulate=j > 0)
    _run(g * len(spans), 2 * gy.size * ck, item)
    return gw.reshape(tuple(w_shape))


# ---- narrow groups (depthwise): the direct kernel and per-tap sums --------------------------

def narrow_taken(gy: Any, other: Any, x_shape: Sequence[int], w_shape: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                 groups: int) -> bool:
    """Whether ``narrow_grad_input``/``narrow_grad_weight`` run these operands: float32
    NumPy arrays of one 1-D or 2-D convolution (``_consistent``) whose groups are too
    narrow for ``taken``'s GEMM (depthwise: one channel each way)."""
    if len(w_shape) not in (3, 4) or not _operands(gy, other, x_shape, w_shape, stride,
                                                    padding, dilation, groups):
        return False
    return min(w_shape[0] // groups, math.prod(w_shape[1:])) < MIN_WIDTH


def narrow_grad_input(gy: np.ndarray, w: np.ndarray, x_shape: Sequence[int],
                      stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                      groups: int) -> np.ndarray | None:
    """The input gradient of a narrow-group convolution (``narrow_taken``) as the direct
    kernel's forward (``runtime.conv_direct``): ``gy`` with ``stride - 1`` zeros between
    its positions (and after the last, up to the rows no window reached), convolved with
    the flipped, channel-swapped weight (``_flipped``) padded by ``d*(k-1) - p``. At stride
    2 three quarters of the products are with zeros; a depthwise convolution's work is its
    memory traffic, which this keeps to one pass. None where that padding would be negative
    or the direct kernel does not take the arguments."""
    from . import conv_direct
    r = w.ndim - 2
    k = w.shape[2:]
    pad = [dilation[i] * (k[i] - 1) - padding[i] for i in range(r)]
    if min(pad) < 0:
        return None
    out = gy.shape[2:]
    # rows past the last window's reach: x_shape = (out-1)*s + 1 + d*(k-1) - 2p + extra
    extra = [x_shape[2 + i] - ((out[i] - 1) * stride[i] + 1 + dilation[i] * (k[i] - 1)
                               - 2 * padding[i]) for i in range(r)]
    if min(extra) < 0:
        return None
    if all(s == 1 for s in stride) and not any(extra):
        up = np.ascontiguousarray(gy)
    else:
        up = np.zeros(gy.shape[:2] + tuple((out[i] - 1) * stride[i] + 1 + extra[i]
                                           for i in range(r)), np.float32)
        up[(slice(None), slice(None), *(slice(None, None, s) for s in stride))][
            (slice(None), slice(None), *(slice(0, o) for o in out))] = gy
    wt = _flipped(np.ascontiguousarray(w), groups)
    one = (1,) * r
    if not conv_direct.supported(up, wt, None, one, pad, dilation, groups):
        return None
    return conv_direct.conv(up, wt, None, one, pad, dilation, groups)


def narrow_grad_weight(gy: np.ndarray, x: np.ndarray, w_shape: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                       groups: int) -> np.ndarray:
    """The weight gradient of a narrow-group convolution (``narrow_taken``): per tap, the
    products of ``gy`` with the input window that tap reads (a strided view of the padded
    input, no patch matrix) summed over each image's positions (``einsum``, float32; per
    group a small ``(O/G x P) @ (P x C/G)`` contraction), the images' sums added in float64.
    A depthwise 3x3's patch matrix would be nine times the input; this reads the input nine
    times instead. (8 x 144 x 56 x 56, one thread: 18 ms; torch's two gradients 47 ms.)"""
    r = len(w_shape) - 2
    n, g = gy.shape[0], groups
    o, cg = int(w_shape[0]), int(w_shape[1])
    og, k, out = o // g, tuple(w_shape[2:]), gy.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), *((p, p) for p in padding)))
    gyg = np.ascontiguousarray(gy).reshape(n, g, og, *out)
    space = "hw"[2 - r:]
    rule = f"ngo{space},ngc{space}->ngoc"        # float32 sums per image, then float64
    gw = np.empty((g, og, cg) + (math.prod(k),), np.float64)
    for t, tap in enumerate(np.ndindex(*k)):
        view = xp[(slice(None), slice(None),
                   *(slice(tap[i] * dilation[i], tap[i] * dilation[i]
                           + (out[i] - 1) * stride[i] + 1, stride[i]) for i in range(r)))]
        gw[..., t] = np.einsum(rule, gyg, view.reshape(n, g, cg, *out)).sum(
            axis=0, dtype=np.float64)
    return gw.astype(np.float32).reshape(tuple(w_shape))
