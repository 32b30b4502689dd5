"""Fused float32 attention on the CPU: ``softmax(q @ kᵀ * scale + mask) @ v`` in one
native call per thread (``codegen.attention``), the score matrix never written to memory.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 3, 37, 16), dtype=np.float32) for _ in range(3))
    >>> s = q @ k.swapaxes(-1, -2) * 0.25
    >>> p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    >>> bool(np.allclose(attention(q, k, v, None, 0.25), p @ v, rtol=1e-5, atol=1e-6))
    True

``supported(q, k, v, mask)`` says whether the native kernel takes the arrays (float32
NumPy arrays of rank 2 to 4, one leading shape, non-empty dims, a float32 mask that
broadcasts to the scores); ``attention`` raises ``ValueError`` naming the argument
otherwise. The executor's ``attention`` step (``runtime.executable``) checks it per call and
runs the reference kernel when it says no.
"""
from __future__ import annotations

import ctypes
import math
from functools import lru_cache, partial
from typing import Any

import numpy as np

from scriptmod.codegen.attention import PARAMS, name, render_attention, workspace_floats
from scriptmod.codegen.microkernel import ISAS, Isa, host_isa
from scriptmod.ir import env
from . import threads as _threads
from .errors import worded
from .llvm_jit import CompiledKernel, compile_units, host

ATTENTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                  *[ctypes.c_void_p] * 6, ctypes.c_float)
ROWS = 48              # query rows per unit (rounded up to whole tiles): an RB x S score
                       # block stays in L2
_UNIT = 64             # ``parallel_for`` chunks at multiples of 64: one unit = 64 indices
MIN_THREAD_FLOPS = 1 << 21     # less work than this runs on the calling thread, and so do
MIN_THREAD_UNITS = 2           # fewer units than this per thread (a head split over threads
                               # is packed by each; one 128 x 128 head: 218 -> 90 us)


def isa() -> Isa:
    """The register shape the kernel is built for: the host's (``microkernel.host_isa``),
    or ``SCRIPTMOD_ATTENTION_ISA=avx2|avx512`` (either runs correctly on any x86-64 host;
    the other one is only slower)."""
    return _isa(env.choice("SCRIPTMOD_ATTENTION_ISA", sorted(ISAS), ""))


@lru_cache(maxsize=None)
def _isa(choice: str) -> Isa:
    return ISAS[choice] if choice else host_isa(host()[2])


@lru_cache(maxsize=None)
def kernel(shape: Isa) -> tuple[Any, CompiledKernel]:
    """The compiled kernel for ``shape`` (``isa()`` picks it): its ctypes function and the
    ``CompiledKernel`` keeping it alive."""
    k, = compile_units([(f"attention f32\0{shape!r}", partial(render_attention, shape),
                         name(shape))])
    return ATTENTION_TYPE(k.address), k


def supported(q: Any, k: Any, v: Any, mask: Any) -> bool:
    """Whether ``attention`` takes these arrays (see the module docstring)."""
    arrays = (q, k, v) if mask is None else (q, k, v, mask)
    if not all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays):
        return False
    if not 2 <= q.ndim <= 4 or not q.ndim == k.ndim == v.ndim:
        return False
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        return False
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or 0 in q.shape + k.shape + v.shape:
        return False
    if mask is not None:
        scores = q.shape[:-1] + (k.shape[-2],)
        if mask.ndim > len(scores) or any(m not in (1, s) for m, s in
                                          zip(mask.shape[::-1], scores[::-1])):
            return False
    return all(s % 4 == 0 for a in arrays for s in a.strides)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
              scale: float, threads: int | None = None) -> np.ndarray:
    """``softmax(q @ kᵀ * scale + mask) @ v`` over the last two dims; q ``(..., L, E)``,
    k ``(..., S, E)``, v ``(..., S, Ev)``, one leading shape (up to two dims), ``mask``
    None or broadcasting to ``(..., L, S)``. Returns a new C-contiguous ``(..., L, Ev)``
    array. ``threads=1``: the calling thread only."""
    if not supported(q, k, v, mask):
        raise worded(ValueError(
            f"attention: expected float32 arrays q (..., L, E), k (..., S, E), v (..., S, Ev) "
            f"of one leading shape, rank 2-4, no empty dim, and a float32 mask broadcasting to "
            f"(..., L, S); got q {_desc(q)}, k {_desc(k)}, v {_desc(v)}, mask {_desc(mask)}"),
            internal=True)                    # the planner only sends what it takes
    return run_checked(q, k, v, mask, scale, threads)


def run_checked(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                scale: float, threads: int | None = None) -> np.ndarray:
    """``attention`` for arrays ``supported`` has accepted (the executor's step checks once
    per call and comes here)."""
    if q.strides[-1] != 4:
        q = np.ascontiguousarray(q)
    shape = isa()
    key = (q.shape, q.strides, k.shape, k.strides, v.shape, v.strides,
           None if mask is None else (mask.shape, mask.strides), shape)
    params, out_shape, units, floats, split = _plan(key)
    out = np.empty(out_shape, np.float32)
    fn = kernel(shape)[0]
    pointers = (params.ctypes.data, q.ctypes.data, k.ctypes.data, v.ctypes.data,
                None if mask is None else mask.ctypes.data, out.ctypes.data)

    def run(lo: int, hi: int) -> None:
        fn(lo // _UNIT, hi // _UNIT, *pointers, _threads.scratch(floats), scale)
    if threads == 1 or not split or units < MIN_THREAD_UNITS * _threads.get_num_threads():
        run(0, units * _UNIT)
    else:
        _threads.parallel_for(run, units * _UNIT, min_split=0)
    return out


@lru_cache(maxsize=256)
def _plan(key: tuple) -> tuple[np.ndarray, tuple, int, int, bool]:
    """Per layout (shapes and strides of q, k, v and the mask; the Python work of a call
    was ~27 us before this cache): the kernel's ``params``, the output's shape, the units,
    the workspace floats, and whether the work is worth splitting over threads."""
    (qs, qst, ks, kst, vs, vst, ms, shape) = key
    L, E, S, Ev = qs[-2], qs[-1], ks[-2], vs[-1]
    out_shape = qs[:-1] + (Ev,)

    def strides4(shape: tuple, elements: Any) -> tuple:
        """Element strides padded to rank 4 (a missing leading dim repeats: stride 0)."""
        return (0,) * (4 - len(shape)) + tuple(elements)
    B, H = ((1,) * (4 - len(qs)) + qs)[:2]
    arrays = {name: strides4(shape, (s // 4 for s in strides))
              for name, shape, strides in (("q", qs, qst), ("k", ks, kst), ("v", vs, vst))}
    arrays["o"] = strides4(out_shape, (math.prod(out_shape[i + 1:]) for i in range(len(out_shape))))
    arrays["m"] = (0, 0, 0, 0)
    if ms is not None:          # as broadcast to the scores: stride 0 where the mask repeats
        mshape, mstrides = ms
        arrays["m"] = strides4(mshape, (0 if n == 1 else s // 4 for n, s in zip(mshape, mstrides)))
    st: dict[str, int] = {}
    for name, strides in arrays.items():
        st.update({f"{name}sb": strides[0], f"{name}sh": strides[1]})
        st.update(dict(zip({"q": ("qsl",), "o": ("osl",), "k": ("kss", "kse"),
                            "v": ("vss", "vse"), "m": ("msl", "mss")}[name], strides[2:])))
    rb = -(-ROWS // shape.mr) * shape.mr
    nb = -(-L // rb)
    sizes = dict(H=H, L=L, S=S, E=E, Ev=Ev, NB=nb, RB=rb, **st)
    params = np.array([sizes[p] for p in PARAMS], np.int64)
    params.flags.writeable = False
    split = 2 * B * H * L * S * (E + Ev) >= MIN_THREAD_FLOPS
    return params, out_shape, B * H * nb, workspace_floats(S, E, Ev, rb, shape), split


def _desc(a: Any) -> str:
    if a is None:
        return "None"
    if isinstance(a, np.ndarray):
        return f"{a.dtype} {tuple(a.shape)}"
    return type(a).__name__
