"""Our float32 convolution on the CPU (``codegen.conv``): an implicit GEMM on the register
tiles of our GEMM, the patches packed straight from the input, for 1-D, 2-D and 3-D
convolutions with any stride, padding, dilation and groups, the work split over the thread
pool by blocks of the output, with an optional fusion-group kernel applied to each block
while it is in cache (``runtime.gemm.Epilogue``).

    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((2, 6, 9, 11), dtype=np.float32)
    >>> w = rng.standard_normal((10, 3, 3, 3), dtype=np.float32)
    >>> y = conv(x, w, None, (1, 2), (1, 0), (1, 1), 2)
    >>> y.shape
    (2, 10, 9, 5)

When to use it (``taken``): float32 NumPy arrays on a host with AVX2 or AVX-512, where it
runs several times faster than the reference kernel's im2col copy and one BLAS GEMM per
group. ``SCRIPTMOD_CONV=own|reference`` overrides that choice; ``auto`` (or unset) is the
rule above.

A channels_last (or otherwise strided) input is copied to NCHW first: 3-12% of the call at
ResNet shapes (measured on one core: b8 64x56x56 2.9 ms of 24 ms, b8 256x14x14 0.7 of 26);
the output is NCHW-contiguous, as the reference kernel's.
"""
from __future__ import annotations

import ctypes
import math
from functools import lru_cache, partial
from typing import Any, Sequence

import numpy as np

from scriptmod.codegen.conv import (NC_MAX, PARAMS, RUN_STRIDES, TAP, name, render_conv,
                                    workspace_floats)
from scriptmod.codegen.gemm import KC, MC, NC
from scriptmod.codegen.microkernel import UNROLL, Isa
from scriptmod.ir import env
from . import threads as _threads
from .errors import worded
from .gemm import Epilogue, isa
from .llvm_jit import CompiledKernel, compile_units, host
from .native import data_ptr

CONV_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 10)
CHOICES = ("auto", "own", "reference")
_UNIT = 64                    # ``parallel_for`` chunks at multiples of 64: one unit = 64
MIN_THREAD_FLOPS = 1 << 22    # less work than this runs on the calling thread
UNITS_PER_THREAD = 4          # blocks are split until each thread has this many to pull
MAX_INDEX = 1 << 30           # offsets in the input are 32-bit lanes: a call's images stay
                              # under this many elements (a larger batch runs in chunks)


def choice() -> str:
    """``SCRIPTMOD_CONV``: ``own``, ``reference`` or ``auto`` (default)."""
    return env.choice("SCRIPTMOD_CONV", CHOICES, "auto")


@lru_cache(maxsize=None)
def _vector_host() -> bool:
    features = host()[2].split(",")
    return "+avx512f" in features or ("+avx2" in features and "+fma" in features)


def taken(x: Any, w: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
          dilation: Sequence[int], groups: int) -> bool:
    """Whether ``conv`` takes these arguments (and should: ``choice``): float32 NumPy input
    ``(N, C, *spatial)`` and weight ``(O, C/groups, *kernel)`` of 1 to 3 spatial dims, an
    optional float32 bias ``(O,)``, a non-empty output, sizes within 32-bit offsets."""
    c = choice()
    if c == "reference" or (c == "auto" and not _vector_host()):
        return False
    return _sizes(x, w, bias, stride, padding, dilation, groups) is not None


def _sizes(x: Any, w: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int) -> tuple[int, ...] | None:
    """The output's spatial size for arguments ``conv`` takes, else None."""
    if type(x) is not np.ndarray or type(w) is not np.ndarray:
        return None
    r = w.ndim - 2
    if x.dtype != np.float32 or w.dtype != np.float32 or not 1 <= r <= 3 or x.ndim != r + 2:
        return None
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != np.float32
                             or bias.shape != (w.shape[0],)):
        return None
    if not all(len(v) == r for v in (stride, padding, dilation)) or groups < 1 \
            or min(*stride, *dilation) < 1 or min(padding) < 0:
        return None
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups or 0 in x.shape \
            or 0 in w.shape:
        return None
    out = tuple((x.shape[2 + i] + 2 * padding[i] - dilation[i] * (w.shape[2 + i] - 1) - 1)
                // stride[i] + 1 for i in range(r))
    padded = x.shape[1] * math.prod(x.shape[2 + i] + 2 * padding[i] for i in range(r))
    if min(out) <= 0 or max(x[0].size, padded, math.prod(out) + 64) >= MAX_INDEX:
        return None
    return out


@lru_cache(maxsize=None)
def kernel(shape: Isa) -> tuple[Any, CompiledKernel]:
    """The compiled convolution for ``shape``: its ctypes function and the kernel."""
    k, = compile_units([(f"conv f32\0{shape!r}", partial(render_conv, shape), name(shape))])
    return CONV_TYPE(k.address), k


def conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
         padding: Sequence[int], dilation: Sequence[int], groups: int,
         out: np.ndarray | None = None, epilogue: Epilogue | None = None,
         threads: int | None = None, shape: Isa | None = None) -> np.ndarray:
    """The ``(N, O, *out)`` C-contiguous cross-correlation of ``x`` ``(N, C, *spatial)`` with
    ``w`` ``(O, C/groups, *kernel)`` plus ``bias``, into ``out`` (new by default), then
    ``epilogue`` per finished row segment; ``threads=1``: the calling thread only; ``shape``:
    the register shape (default the host's). Raises ``ValueError`` on arguments it does not
    take (``taken``, the choice aside)."""
    spatial = _sizes(x, w, bias, stride, padding, dilation, groups)
    if spatial is None:
        raise worded(ValueError(
            f"conv.conv: expected float32 arrays x (N, C, *spatial) and w (O, C/groups, "
            f"*kernel) of 1 to 3 spatial dims, optional float32 bias (O,), stride, padding "
            f"and dilation of one int per dim, a non-empty output; got x {_desc(x)}, "
            f"w {_desc(w)}, bias {_desc(bias)}, stride {stride}, padding {padding}, "
            f"dilation {dilation}, groups {groups}"), internal=True)
    n, o = x.shape[0], w.shape[0]
    if out is None:
        out = np.empty((n, o, *spatial), np.float32)
    elif out.shape != (n, o, *spatial) or out.dtype != np.float32 \
            or not out.flags.c_contiguous:
        raise worded(ValueError(f"conv.conv: out must be a C-contiguous float32 "
                                f"{(n, o, *spatial)} array, got {_desc(out)}"), internal=True)
    x, w = _dense(x), _dense(w)              # a channels_last input: copied to NCHW here
    bias = None if bias is None else _dense(bias)
    shape = shape or isa()
    per = max(1, MAX_INDEX // max(x[0].size, math.prod(spatial) + 64))
    for n0 in range(0, n, per):
        _run(x[n0:n0 + per], w, bias, (stride, padding, dilation, groups), out[n0:n0 + per],
             epilogue, threads, shape)
    return out


def _run(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, conv_args: tuple,
         out: np.ndarray, epilogue: Epilogue | None, threads: int | None, shape: Isa) -> None:
    """The kernel over images whose input offsets fit its 32-bit lanes."""
    stride, padding, dilation, groups = conv_args
    params, taps, units = _plan(x.shape, w.shape, _in3(stride, 1), _in3(padding, 0),
                                _in3(dilation, 1), groups, shape,
                                1 if threads == 1 else _threads.get_num_threads())
    fn = kernel(shape)[0]
    floats = workspace_floats(shape)
    ep = (None, None, None) if epilogue is None else \
        (epilogue.fn, epilogue.args, epilogue.meta)
    pointers = (data_ptr(params), data_ptr(taps), data_ptr(x), data_ptr(w),
                None if bias is None else data_ptr(bias), data_ptr(out))

    def run(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, *pointers, _threads.scratch(floats), *ep)
    if threads == 1 or 2 * out.size * w[0].size < MIN_THREAD_FLOPS or units < 2:
        run(0, units * _UNIT)
    else:
        _threads.parallel_for(run, units * _UNIT, min_split=0)


def _dense(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous and aligned (a copy only where it is not)."""
    return np.require(a, np.float32, ["C", "A"])


def _in3(v: Sequence[int], fill: int) -> tuple[int, ...]:
    """A 1-D or 2-D convolution's per-dim ints as 3-D ones (leading dims of size 1)."""
    return (fill,) * (3 - len(v)) + tuple(int(i) for i in v)


@lru_cache(maxsize=256)
def _plan(xshape: tuple[int, ...], wshape: tuple[int, ...], stride: tuple[int, ...],
          padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, shape: Isa,
          threads: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The kernel's parameters (``PARAMS``), tap table (``TAP``) and unit count: units are
    blocks of rows (output channels of a group) by columns (positions of the whole batch,
    so a small image's last panel goes on into the next image)."""
    n, c, *size = xshape
    size = [1] * (3 - len(size)) + size
    o, cg, *k = wshape
    k = [1] * (3 - len(k)) + k
    out = [(size[i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1
           for i in range(3)]
    p = math.prod(out)
    mc, nc = _blocks(o // groups, n * p, groups, shape, threads)
    mb, nb = -(-(o // groups) // mc), -(-(n * p) // nc)
    sizes = dict(Cg=cg, ID=size[0], IH=size[1], IW=size[2], OH=out[1], OW=out[2],
                 SD=stride[0], SH=stride[1], SW=stride[2], PD=padding[0], PH=padding[1],
                 PW=padding[2], Og=o // groups, K=cg * math.prod(k), T=math.prod(k), P=p,
                 J=n * p, CS=c * math.prod(size), OP=o * p, MC=mc, NC=nc, MB=mb, NB=nb,
                 RS=stride[2] if stride[2] in RUN_STRIDES else 0,
                 buffered=int(p % shape.nr != 0),
                 ahead=shape.nr * stride[2], KB=_kblock(cg * math.prod(k)))
    params = np.array([sizes[name] for name in PARAMS], np.int64)
    kd, kh, kw = np.meshgrid(*(np.arange(ki) * d for ki, d in zip(k, dilation)), indexing="ij")
    offsets = dict(dd=kd, dh=kh, dw=kw, off=(kd * size[1] + kh) * size[2] + kw)
    taps = np.stack([offsets[f].ravel() for f in TAP], axis=1).astype(np.int64)
    for a in (params, taps):
        a.flags.writeable = False
    return params, np.ascontiguousarray(taps), groups * mb * nb


def _kblock(k: int) -> int:
    """Contraction steps per K block: ``K`` split into equal blocks of at most ``KC`` (a
    multiple of the tile's unroll), so no block is a short tail that loads and stores
    every C tile for a few steps (K = 576: 3 x 192, not 256 + 256 + 64)."""
    size = -(-k // -(-k // KC))
    return min(KC, -(-size // UNROLL) * UNROLL)


def _blocks(m: int, p: int, groups: int, shape: Isa, threads: int) -> tuple[int, int]:
    """Rows and columns of a unit: ``codegen.gemm``'s ``MC x NC`` (fewer past the edges;
    all the columns where they are at most ``NC_MAX``), halved (columns first, whole panels
    and tiles) while the units would give some thread fewer than ``UNITS_PER_THREAD`` of
    them (the pool pulls them dynamically); one thread takes them whole."""
    mc, nc = min(MC, -(-m // shape.mr) * shape.mr), -(-p // shape.nr) * shape.nr
    nc = nc if nc <= NC_MAX else NC
    while threads > 1 and groups * -(-m // mc) * -(-p // nc) < UNITS_PER_THREAD * threads:
        if nc > 2 * shape.nr:
            nc = -(-nc // (2 * shape.nr)) * shape.nr
        elif mc > 4 * shape.mr:
            mc = -(-mc // (2 * shape.mr)) * shape.mr
        else:
            break
    return mc, nc


def _desc(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} {tuple(a.shape)} strides {a.strides}"
    return type(a).__name__
