"""Where values live in a native segment, and the layouts views and GEMMs see.

A ``Layout`` is a tensor value over a ``Buffer`` (``runtime.memory_plan``): byte offset,
shape, element strides. A view op (transpose, permute, reshape of a contiguous tensor,
unsqueeze, squeeze, expand, narrow, basic indexing) gets its result's layout by running its
reference kernel on a stand-in array of the source's layout (``view_layout``); a ``matmul``
gets the BLAS fields of its ``GemmStep`` from its operands' layouts (``gemm_shape``).
Used by the planner (``runtime.native.plan``).
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from scriptmod.codegen.record import Record
from scriptmod.codegen.sizes import Poly, SizeDependent, dim, lift
from scriptmod.ir.graph import Node, Prim, Value
from scriptmod.ir.passes.effects import is_view
from scriptmod.ir.types import TensorType
from ..arrays import NP_DTYPE
from ..kernels import KERNELS
from ..memory_plan import Buffer
from ..targets import target_type


class Layout(Record):
    """A tensor value over a buffer: byte offset, shape, element strides (each an ``int``,
    or a ``Poly`` in a symbolic specialization's dims)."""

    buf: Buffer
    offset: int | Poly
    shape: tuple[int | Poly, ...]
    strides: tuple[int | Poly, ...]

    @property
    def contiguous(self) -> bool:
        return self.strides == c_strides(self.shape) or numel(self.shape) <= 1


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def static_type(v: Value) -> TensorType | None:
    """``v``'s type if it is a tensor of known rank and dtype, every dim an int or a
    symbolic dim ``sizes`` reads, on a device whose target runs native programs
    (``Target.native_program``: the CPU)."""
    t = v.type
    if isinstance(t, TensorType) and t.dtype is not None and t.shape is not None \
            and t.dtype in NP_DTYPE and _native_program(t.device) \
            and (t.is_concrete or _readable(tuple(t.shape))):
        return t
    return None


def sizes(t: TensorType) -> tuple[int | Poly, ...]:
    """The shape of a ``static_type`` as sizes (symbolic dims as ``Poly``)."""
    return _sizes(tuple(t.shape))                                  # type: ignore[arg-type]


@functools.lru_cache(maxsize=4096)
def _sizes(shape: tuple) -> tuple[int | Poly, ...]:
    return tuple(dim(d) for d in shape)


def _readable(shape: tuple) -> bool:
    try:
        _sizes(shape)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def _native_program(device: str) -> bool:
    """Whether the target of ``device`` runs whole-program native segments."""
    try:
        return bool(target_type({device}).native_program)
    except NotImplementedError:
        return False



def is_view_op(node: Node) -> bool:
    """Ops whose result is a view of their first input (basic indexing too: its probe
    decides whether this layout gives a view; ``copy_`` returns its written input, which
    native code holds already)."""
    if node.op_name == "index":
        return all(e[0] != "tensor" for e in node.attrs["spec"])
    return is_view(node) and node.op_name != "copy_"


def view_layout(node: Node, src: Layout) -> Layout | str:
    """The layout of view op ``node``'s (static) result over ``src``, or why it has none:
    its other operands must be constants, and the probe must give a view of the declared
    shape."""
    declared = sizes(node.output.type)                              # type: ignore[arg-type]
    symbolic = any(isinstance(d, Poly) for d in declared + src.shape)
    if node.op_name == "reshape" and symbolic:
        if not src.contiguous:
            return "reshape of a non-contiguous tensor (a copy)"
        # the type rule fixed the shape: a contiguous tensor reshaped is C-ordered over it
        return Layout(src.buf, src.offset, declared, c_strides(declared))
    operands = []
    for v in node.inputs[1:]:
        if v.node.kind != Prim.CONSTANT:
            return f"{node.op_name} with a size computed at run time"
        operands.append(v.node.attrs.get("value"))
    if node.op_name == "reshape" and not src.contiguous:
        return "reshape of a non-contiguous tensor (a copy)"
    try:
        out = lift(probe_view, node, src, operands)
    except SizeDependent as e:
        return f"{node.op_name}: its layout depends on the sizes ({e})"
    if out is None or tuple(out[0]) != declared:
        return f"{node.op_name} is not a view of this layout"
    shape, strides, offset = out
    return Layout(src.buf, src.offset + offset, shape, strides)


def inline_max() -> int:
    from scriptmod.codegen.native import INLINE_GEMM_MAX
    return INLINE_GEMM_MAX



def _matrix(shape: tuple, strides: tuple) -> tuple[bool, int] | None:
    """(transposed, leading dim) of a (rows, cols) matrix with these element strides, in
    BLAS terms; None without a unit stride."""
    (r, c), (sr, sc) = shape, strides
    if (c == 1 or sc == 1) and (r == 1 or sr >= max(1, c)):      # row-major
        return False, sr if r > 1 else max(1, c)
    if (r == 1 or sr == 1) and (c == 1 or sc >= max(1, r)):      # column-major: A^T stored
        return True, sc if c > 1 else max(1, r)
    return None


def _collapse(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int] | None:
    """Dims that walk memory as one: (count, stride), ignoring size-1 dims; else None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 1, 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return numel(shape), dims[-1][1]


def rows_and_batch(shape: Sequence[int], a_strides: Sequence[int], n: int, k: int,
                   outer_rows: bool = False
                   ) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """For ``a @ b`` with a 2D ``b``: every row of ``a`` (dims ``shape``, element strides
    ``a_strides``, unit stride along ``k``) maps to a row of the contiguous result (``n``
    per row), so the dims may be split into the GEMM's rows and its batch any way that
    leaves each a single stride in ``a`` and in the result. The split with the most rows
    (fewest, largest GEMMs), as ``((rows, lda, ldc), (batch, stride_a, stride_c))``; None
    when there is none. ``outer_rows``: the split with the outer run as rows instead (a
    choice that does not depend on the sizes, for symbolic ones).

    A ``(T, B, C)`` view of a contiguous ``(B, T, C)`` tensor (attention's input
    projections) is ``B`` GEMMs of ``T`` rows, not ``T`` GEMMs of ``B`` rows:

    >>> rows_and_batch((128, 8), (256, 32768), 256, 256)
    ((128, 256, 2048), (8, 32768, 256))
    """
    if 0 in shape:
        return (0, max(1, k), max(1, n)), (1, 0, 0)
    out_strides = [n * numel(shape[i + 1:]) for i in range(len(shape))]
    runs: list[tuple[int, int, int]] = []     # maximal runs of dims that walk both as one
    for d, sa, sc in zip(shape, a_strides, out_strides):
        if d == 1:
            continue
        if runs and runs[-1][1] == sa * d and runs[-1][2] == sc * d:
            runs[-1] = (runs[-1][0] * d, sa, sc)
        else:
            runs.append((d, sa, sc))
    if not runs:
        return (1, max(1, k), max(1, n)), (1, 0, 0)
    if len(runs) > 2:      # the result's strides never join two runs around a third
        return None
    split = [(r, runs[1 - i] if len(runs) == 2 else (1, 0, 0)) for i, r in enumerate(runs)
             if r[0] == 1 or r[1] >= max(1, k)]                 # BLAS wants lda >= k
    if not split:
        return None
    (rows, lda, ldc), batch = split[0] if outer_rows else max(split, key=lambda rb: rb[0][0])
    return (rows, lda if rows > 1 else max(1, k), ldc if rows > 1 else max(1, n)), batch


def gemm_shape(a: Layout, b: Layout, outer_rows: bool = False) -> dict | None:
    """``GemmStep`` fields (without refs) for ``a @ b`` into a contiguous result
    (``outer_rows``: see ``rows_and_batch``)."""
    ash, ast = a.shape, a.strides
    bsh, bst = b.shape, b.strides
    if len(ash) == 1:
        ash, ast = (1,) + ash, (0,) + ast
    if len(bsh) == 1:
        bsh, bst = bsh + (1,), bst + (0,)
    m, k = ash[-2:]
    k2, n = bsh[-2:]
    if k != k2:
        return None
    abatch, bbatch = ash[:-2], bsh[:-2]
    ma = _matrix((m, k), ast[-2:])
    mb = _matrix((k, n), bst[-2:])
    if ma is None or mb is None:
        return None
    out = {"m": m, "n": n, "k": k, "trans_a": ma[0], "lda": ma[1], "trans_b": mb[0],
           "ldb": mb[1], "ldc": max(1, n), "batch": 1, "stride_a": 0, "stride_b": 0,
           "stride_c": 0, "a_off": 0, "b_off": 0}
    if not bbatch:
        if not abatch:
            return out
        if not ma[0] and (ast[-1] == 1 or k == 1):
            split = rows_and_batch(abatch + (m,), ast[:-2] + (ast[-2],), n, k, outer_rows)
            if split is not None:
                (rows, lda, ldc), (nb, sa, sc) = split
                out.update(m=rows, lda=lda, ldc=ldc, batch=nb, stride_a=sa, stride_c=sc)
                return out
        batch = _collapse(abatch, ast[:-2])
        if batch is None:
            return None
        out.update(batch=batch[0], stride_a=batch[1], stride_c=m * n)
        return out
    nb = numel(bbatch)
    full = tuple(np.broadcast_shapes(abatch, bbatch))
    if numel(full) != nb or len(bbatch) != len(full):
        return None                                   # a broadcast ``b``: not yet
    bb = _collapse(bbatch, bst[:-2])
    if bb is None:
        return None
    if abatch and numel(abatch) != 1:
        if tuple(abatch) != tuple(bbatch[-len(abatch):]) or len(abatch) != len(bbatch):
            return None
        ab = _collapse(abatch, ast[:-2])
        if ab is None:
            return None
        sa = ab[1]
    else:
        sa = 0
    out.update(batch=nb, stride_a=sa, stride_b=bb[1], stride_c=m * n)
    return out


def probe_view(node: Node, src: Layout, operands: list) -> tuple | None:
    """(shape, element strides, byte offset) of ``node``'s result over ``src``'s layout,
    by running its reference kernel on a stand-in array that has that layout (view kernels
    never read data; reshape is only probed on a contiguous input, where it is a view)."""
    dt = NP_DTYPE[src.buf.dtype]
    base = np.zeros(1, dt)
    fake = np.lib.stride_tricks.as_strided(base, src.shape,
                                           [s * dt.itemsize for s in src.strides])
    try:
        out = KERNELS[node.op_name](np, fake, *operands, **node.attrs)
    except Exception:
        return None
    if not isinstance(out, np.ndarray) or any(s % dt.itemsize for s in out.strides):
        return None
    if out.base is None:                      # the kernel copied: not a view
        return None
    offset = out.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return tuple(out.shape), tuple(s // dt.itemsize for s in out.strides), offset
