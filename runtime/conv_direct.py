"""Direct float32 convolution on the CPU (``codegen.conv_direct``), for the shapes where
im2col or an implicit GEMM has too short a contraction: depthwise convolutions (groups ==
C, any channel multiplier) and few input channels per group (the 1 -> 32 stem). 1-D and
2-D, any stride, padding, dilation; the work split over the thread pool by (image, group,
block of output rows), an optional epilogue per finished block of rows.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((2, 3, 9, 11), dtype=np.float32)
    >>> w = rng.standard_normal((6, 1, 3, 3), dtype=np.float32)
    >>> y = conv(x, w, None, (2, 1), (1, 1), (1, 2), 3)
    >>> y.shape
    (2, 6, 5, 9)
    >>> from scriptmod.runtime.kernels.conv import convolution
    >>> ref = convolution(np, x, w, None, (2, 1), (1, 1), (1, 2), 3)
    >>> bool(np.allclose(y, ref, rtol=1e-5, atol=1e-5))
    True

``prefers`` says where the direct kernel beats a GEMM; ``taken`` whether it takes the
arrays and prefers the shape (the step that routes ``conv1d``/``conv2d`` asks it);
``conv`` raises ``ValueError`` naming what it does not take (``supported``).
``plan`` is shared with ``runtime.pooling_native``: pooling is the same loop nest with a
max or a sum in place of the FMA.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scriptmod.codegen.conv_direct import (PARAMS, ROWS, Stencil, name, render,
                                           scratch_elements)
from scriptmod.codegen.microkernel import host_isa
from scriptmod.ir.ops.conv import _out_size
from . import threads as _threads
from .errors import worded
from .llvm_jit import CompiledKernel, compile_units, host

if TYPE_CHECKING:        # (runtime.gemm imports runtime.native, which imports the kernels
    from .gemm import Epilogue      # that route here: no module-level import)

STENCIL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 10)
_UNIT = 64                      # ``parallel_for`` chunks at multiples of 64: one unit = 64
SCRATCH_BYTES = 32 << 10        # a unit's padded input rows stay in L1 over its channels
UNITS_PER_THREAD = 8            # row blocks are cut smaller until each thread has this many
MIN_THREAD_FLOPS = 1 << 21      # less work than this runs on the calling thread
MAX_COLUMN = 7                  # kernels up to this tall load each input row once per column
MAX_WIDTH = 1 << 30             # input rows narrower than this: the kernel's column
                                # masks are int32
MAX_TAPS = 18                   # C/groups * prod(kernel) up to this: direct beats a GEMM
                                # (1 thread, 8 x C x 56 x 56 -> 32: C = 2 ran at 0.95x
                                # oneDNN, 3 at 0.77x, 8 at 0.5x)


def stencil(mode: str, dtype: str, kernel_size: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int]) -> Stencil:
    """The kernel for a 2-D stencil: at unit row stride, one table entry per kernel column
    (its taps' rows loaded once for all the output rows they feed; the weights then in
    (O, C, KW, KH) order, ``column_major``); else one per tap (always for ``argmax``,
    whose ties are broken by the taps' row-major order)."""
    kh = kernel_size[0]
    rows = tuple(i * dilation[0] for i in range(kh)) \
        if stride[0] == 1 and 1 < kh <= MAX_COLUMN and mode != "argmax" else (0,)
    return Stencil(mode, dtype, lanes(dtype), rows)


def column_major(spec: Stencil, w: np.ndarray) -> np.ndarray:
    """A 2-D (O, C, KH, KW) weight in the order ``spec``'s table reads it."""
    return w if spec.rows == (0,) else np.ascontiguousarray(w.swapaxes(-1, -2))


def lanes(dtype: str = "f32") -> int:
    """Elements per vector on this host (16 float32 on AVX-512, 8 on AVX2)."""
    n = host_isa(host()[2]).lanes
    return n if dtype == "f32" else n // 2


@lru_cache(maxsize=None)
def kernel(spec: Stencil) -> tuple[Any, CompiledKernel]:
    """The compiled kernel for ``spec``: its ctypes function and the ``CompiledKernel``."""
    k, = compile_units([(f"stencil\0{spec!r}", partial(render, spec), name(spec))])
    return STENCIL_TYPE(k.address), k


@dataclass(frozen=True)
class Plan:
    """One call's sizes: ``params`` (``codegen.conv_direct.PARAMS`` and the column ranges
    after them), the tap offsets into the scratch, the output's spatial size, units and
    scratch elements per thread."""
    params: np.ndarray
    taps: np.ndarray
    out: tuple[int, int]
    units: int
    scratch: int


def out_size(size: tuple[int, int], kernel_size: tuple[int, int], stride: tuple[int, int],
             padding: tuple[int, int], dilation: tuple[int, int],
             ceil_mode: bool = False) -> tuple[int, int]:
    """The output's (OH, OW) (either may be <= 0: then there is nothing to plan)."""
    return tuple(_out_size(size[i], kernel_size[i], stride[i], padding[i], dilation[i],
                           ceil_mode) for i in range(2))       # type: ignore[return-value]


def plan(batch: int, groups: int, cg: int, og: int, size: tuple[int, int],
         kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
         dilation: tuple[int, int], ceil_mode: bool, spec: Stencil) -> Plan:
    """The layout of a 2-D stencil over ``batch * groups`` groups of ``cg`` input planes of
    ``size``, ``og`` output channels per group (see ``codegen.conv_direct``); the output
    (``out_size``) must not be empty."""
    return _plan(batch, groups, cg, og, size, kernel_size, stride, padding, dilation,
                 ceil_mode, spec, _threads.get_num_threads())


@lru_cache(maxsize=256)
def _plan(batch: int, groups: int, cg: int, og: int, size: tuple[int, int],
          kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
          dilation: tuple[int, int], ceil_mode: bool, spec: Stencil, threads: int) -> Plan:
    (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = size, kernel_size, stride, padding, dilation
    oh, ow = out_size(size, kernel_size, stride, padding, dilation, ceil_mode)
    assert oh > 0 and ow > 0, "conv_direct.plan: empty output (callers check out_size)"
    khx, kwx = (kh - 1) * dh // sh, (kw - 1) * dw // sw
    pc = ow + kwx
    itemsize = 4 if spec.dtype == "f32" else 8
    per_row = cg * sh * sw * pc * itemsize
    rb = max(ROWS, SCRATCH_BYTES // per_row // ROWS * ROWS)
    want = UNITS_PER_THREAD * threads
    if batch * groups * -(-oh // rb) < want:
        rb = max(ROWS, -(-oh // -(-want // (batch * groups)) // ROWS) * ROWS)
    rb = min(rb, oh)
    nrb = -(-oh // rb)
    # spare rows of at least a vector: a row's last store (and the last rows' reads) may
    # pass the sub-plane's rows, but never into the next sub-plane
    sub = (rb + khx + -(-spec.lanes // pc)) * pc
    column = 1 if spec.rows == (0,) else kh       # taps per table entry (``Stencil.rows``)
    taps = [c * sh * sw * sub + ((i * dh) % sh * sw + (j * dw) % sw) * sub
            + (i * dh // sh) * pc + j * dw // sw
            for c in range(cg) for i in range(0, kh, column) for j in range(kw)]
    sizes = dict(G=groups, Cg=cg, Og=og, H=h, W=w, OH=oh, OW=ow, SH=sh, SW=sw, PH=ph, PW=pw,
                 RB=rb, NRB=nrb, PC=pc, SUB=sub, T=len(taps), KHX=khx, WT=cg * kh * kw)
    if spec.mode == "argmax":           # then each tap's offset in the input plane
        taps += [i * dh * w + j * dw for i in range(kh) for j in range(kw)]
    starts = [min(max(-(-(pw - b) // sw), 0), pc) for b in range(sw)]
    columns = [(lo, max(lo, min(-(-(w + pw - b) // sw), pc))) for b, lo in enumerate(starts)]
    params = [sizes[p] for p in PARAMS] + [j for pair in columns for j in pair]
    return Plan(_frozen(np.array(params, np.int64)),
                _frozen(np.array(taps, np.int64)), (oh, ow), batch * groups * nrb,
                scratch_elements(spec, cg, sh, sw, sub))


def data_ptr(a: np.ndarray) -> int:
    """The array's data address (``runtime.native.data_ptr``'s slow path: see the import
    note above)."""
    return a.__array_interface__["data"][0]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def run(spec: Stencil, p: Plan, x: np.ndarray, w: np.ndarray | None, aux: np.ndarray | None,
        out: np.ndarray, parallel: bool, epilogue: Epilogue | None = None,
        threads: int | None = None) -> np.ndarray:
    """Call ``spec``'s kernel on checked, C-contiguous arrays laid out by ``p``; over the
    thread pool if ``parallel`` (enough work to pay for the hand-off) and not ``threads=1``."""
    fn = kernel(spec)[0]
    ep = (None, None, None) if epilogue is None else (epilogue.fn, epilogue.args, epilogue.meta)
    pointers = (data_ptr(p.params), data_ptr(x), None if w is None else data_ptr(w),
                None if aux is None else data_ptr(aux), data_ptr(out))
    floats = p.scratch * (2 if spec.dtype == "f64" else 1) + 16

    def chunk(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, *pointers, _threads.scratch(floats), data_ptr(p.taps), *ep)
    if threads == 1 or not parallel or p.units < 2:
        chunk(0, p.units * _UNIT)
    else:
        _threads.parallel_for(chunk, p.units * _UNIT, min_split=0)
    return out


# ---- convolution ---------------------------------------------------------------------------

def prefers(x_shape: Sequence[int], w_shape: Sequence[int], stride: Sequence[int],
            padding: Sequence[int], dilation: Sequence[int], groups: int) -> bool:
    """Whether the direct kernel beats a GEMM for this convolution: a 1-D or 2-D one that
    is depthwise (one input channel per group), or whose patches are short
    (``C/groups * prod(kernel) <= MAX_TAPS``: the stem's 1 x 3 x 3)."""
    if len(w_shape) not in (3, 4) or len(x_shape) != len(w_shape):
        return False
    return w_shape[1] == 1 or w_shape[1] * math.prod(w_shape[2:]) <= MAX_TAPS


def supported(x: Any, w: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], groups: int) -> bool:
    """Whether ``conv`` takes these: float32 NumPy arrays, an (N, C, [H,] W) input and an
    (O, C/groups, [KH,] KW) weight, bias None or (O,), sizes that give a non-empty output."""
    arrays = (x, w) if bias is None else (x, w, bias)
    if not all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays):
        return False
    r = w.ndim - 2
    if r not in (1, 2) or x.ndim != w.ndim or 0 in x.shape or 0 in w.shape:
        return False
    if not (len(stride) == len(padding) == len(dilation) == r) or groups < 1:
        return False
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        return False
    if bias is not None and bias.shape != (w.shape[0],):
        return False
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        return False
    if x.shape[-1] + 2 * padding[-1] >= MAX_WIDTH:
        return False
    return all(_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], dilation[i]) > 0
               for i in range(r))


def taken(x: Any, w: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
          dilation: Sequence[int], groups: int) -> bool:
    """Whether ``conv`` takes the arrays (``supported``) and ``prefers`` the shape."""
    return supported(x, w, bias, stride, padding, dilation, groups) and \
        prefers(x.shape, w.shape, stride, padding, dilation, groups)


def conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
         padding: Sequence[int], dilation: Sequence[int], groups: int,
         out: np.ndarray | None = None, epilogue: Epilogue | None = None,
         threads: int | None = None) -> np.ndarray:
    """The (N, O, *out) C-contiguous float32 cross-correlation of ``x`` with ``w`` (plus
    ``bias``), then ``epilogue`` over each finished block of output rows (flat indices into
    the output); ``threads=1``: the calling thread only."""
    if not supported(x, w, bias, stride, padding, dilation, groups):
        raise worded(ValueError(
            f"conv_direct.conv: expected float32 arrays x (N, C, [H,] W), w (O, C/groups, "
            f"[KH,] KW), bias None or (O,), stride/dilation >= 1, padding >= 0 and a "
            f"non-empty output; got x {_desc(x)}, w {_desc(w)}, bias {_desc(bias)}, "
            f"stride {tuple(stride)}, padding {tuple(padding)}, dilation {tuple(dilation)}, "
            f"groups {groups}"), internal=True)
    one_d = w.ndim == 3
    two = (lambda v, fill: (fill, *v)) if one_d else (lambda v, fill: tuple(v))
    n, c, o = x.shape[0], x.shape[1], w.shape[0]
    size, k, s, d = two(x.shape[2:], 1), two(w.shape[2:], 1), two(stride, 1), two(dilation, 1)
    spec = stencil("conv", "f32", k, s, d)
    p = plan(n, groups, c // groups, o // groups, size, k, s, two(padding, 0), d, False, spec)
    shape = (n, o, *p.out[1 if one_d else 0:])
    if out is None:
        out = np.empty(shape, np.float32)
    elif out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise worded(ValueError(f"conv_direct.conv: out must be a C-contiguous float32 {shape} "
                                f"array, got {_desc(out)}"), internal=True)
    b = np.zeros(o, np.float32) if bias is None else np.ascontiguousarray(bias)
    parallel = 2 * out.size * w[0].size >= MIN_THREAD_FLOPS
    w4 = column_major(spec, np.ascontiguousarray(w).reshape(o, c // groups, *k))
    return run(spec, p, np.ascontiguousarray(x), w4, b, out, parallel, epilogue, threads)


def _desc(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} {tuple(a.shape)}"
    return type(a).__name__
