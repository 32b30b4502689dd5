"""The static memory plan of a native program: every intermediate that does not escape a call
gets a fixed, aligned byte offset in one arena, and two buffers share bytes only when their
live ranges (node positions, inclusive) do not meet.

    >>> from scriptmod.ir import dtypes as D
    >>> a = Buffer("arena", 256, D.float32, (64,), start=0, end=1)
    >>> b = Buffer("arena", 256, D.float32, (64,), start=1, end=2)   # meets a at node 1
    >>> c = Buffer("arena", 256, D.float32, (64,), start=2, end=3)   # a is dead by then
    >>> assign_offsets([a, b, c]), (a.offset, b.offset, c.offset)
    (512, (0, 256, 0))
    >>> check_plan([a, b, c])

In a symbolic specialization sizes are ``Poly`` of its symbolic dims: its arena buffers are
placed per set of symbol values (``SymbolicArena``: the same first fit on the evaluated
sizes, computed once per set and kept), never per value.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.codegen.sizes import Poly
from scriptmod.ir import dtypes as D

ALIGN = 64                                   # arena offsets and the arena base


class Buffer:
    """One allocation: ``arg`` (a pointer the caller's table holds: an input, a module tensor,
    a constant, a Python step's result), ``arena`` (a fixed offset) or ``fresh`` (``np.empty``
    per call, in a table slot). Mutable (the planner fills ``slot``, ``offset`` and the live
    range) and compared by identity. (A plain class: a dataclass compiles its generated
    methods on import, which a warm start's first call would pay.)"""

    __slots__ = ("kind", "nbytes", "dtype", "shape", "source", "slot", "offset", "start", "end")

    def __init__(self, kind: str, nbytes: int, dtype: D.DType, shape: tuple[int, ...],
                 source: Any = None, slot: int = -1, offset: int = -1, start: int = 0,
                 end: int = 0) -> None:
        self.kind, self.nbytes, self.dtype, self.shape = kind, nbytes, dtype, shape
        self.source = source       # arg: ("input"|"python", Value) / ("state", i) / ("const", array)
        self.slot = slot           # table slot (arg, fresh)
        self.offset = offset       # arena byte offset
        self.start, self.end = start, end                  # live range, in node positions

    def __repr__(self) -> str:
        return (f"Buffer({self.kind!r}, {self.nbytes}, {self.dtype!r}, {self.shape!r}, "
                f"slot={self.slot}, offset={self.offset}, live={self.start}..{self.end})")


class PlanError(AssertionError):
    """The memory plan puts two live buffers on the same bytes (a planner bug)."""


def assign_offsets(buffers: Sequence[Buffer]) -> int:
    """Give every arena buffer an offset: largest first, at the lowest aligned offset that
    overlaps no buffer live at the same time. Returns the arena size in bytes."""
    offsets, size = first_fit([(b.nbytes, b.start, b.end) for b in buffers])
    for b, at in zip(buffers, offsets):
        b.offset = at
    return size


def first_fit(items: Sequence[tuple[int, int, int]]) -> tuple[list[int], int]:
    """``assign_offsets`` on ``(nbytes, start, end)`` triples: their offsets, in order, and
    the arena size."""
    placed: list[tuple[int, int, int, int]] = []          # (offset, nbytes, start, end)
    offsets = [0] * len(items)
    size = 0
    for i in sorted(range(len(items)), key=lambda i: (-items[i][0], items[i][1])):
        nbytes, start, end = items[i]
        clashes = sorted((o, o + n) for o, n, s, e in placed if s <= end and start <= e)
        at = 0
        for lo, hi in clashes:
            if at + nbytes <= lo:
                break
            at = max(at, _align(hi))
        offsets[i] = at
        placed.append((at, nbytes, start, end))
        size = max(size, at + nbytes)
    return offsets, _align(size)


class SymbolicArena:
    """The arena of a plan whose buffer sizes are ``Poly`` of ``symbols``: per tuple of
    symbol values, ``at(values)`` gives ``(sizes table, arena bytes, shapes)``, the table an
    ``int64`` array of the symbol values then each buffer's byte offset (what a native
    program with symbolic sizes reads, ``codegen.native``), ``shapes`` the value of each
    shape registered with ``shape_index`` (what the per-call Python checks and allocates).
    Computed on a set's first call
    and kept (up to ``KEEP`` sets; shared by threads: entries are never changed).
    ``limits``: ``(size, most, what)``, sizes the program hands on (a BLAS integer) that
    must stay at most ``most``: ``ValueError`` naming ``what`` for values that exceed one."""

    KEEP = 256

    def __init__(self, symbols: Sequence[str], buffers: Sequence[Buffer],
                 limits: Sequence[tuple[Poly, int, str]] = ()) -> None:
        self.symbols, self.buffers = tuple(symbols), list(buffers)
        self.limits = list(limits)
        self.shapes: list[tuple] = []
        self.placed: dict[tuple[int, ...], tuple[np.ndarray, int, tuple]] = {}

    def shape_index(self, shape: tuple) -> int:
        """The index of ``shape`` (sizes, ``Poly`` among them) in ``at``'s shapes."""
        if shape not in self.shapes:
            self.shapes.append(shape)
            self.placed.clear()                    # (registered before any call)
        return self.shapes.index(shape)

    def at(self, values: tuple[int, ...]) -> tuple[np.ndarray, int, tuple]:
        hit = self.placed.get(values)
        if hit is None:
            env = dict(zip(self.symbols, values))
            for size, most, what in self.limits:
                if size.evaluate(env) > most:
                    raise ValueError(f"{what} = {size} is {size.evaluate(env)} at "
                                     f"{env}: more than {most}")
            offsets, size = first_fit(self._items(values))
            shapes = tuple(tuple(d.evaluate(env) if isinstance(d, Poly) else d for d in shape)
                           for shape in self.shapes)
            hit = (np.array(list(values) + offsets, np.int64), size, shapes)
            if len(self.placed) >= self.KEEP:
                self.placed.clear()
            self.placed[values] = hit
        return hit

    def _items(self, values: tuple[int, ...]) -> list[tuple[int, int, int]]:
        env = dict(zip(self.symbols, values))
        return [(b.nbytes.evaluate(env) if isinstance(b.nbytes, Poly) else b.nbytes,
                 b.start, b.end) for b in self.buffers]

    def buffers_at(self, values: tuple[int, ...]) -> list[Buffer]:
        """The buffers as placed for ``values`` (for ``check_plan``)."""
        table = self.at(values)[0]
        out = []
        for (nbytes, start, end), b, off in zip(self._items(values), self.buffers,
                                                table[len(values):]):
            out.append(Buffer(b.kind, nbytes, b.dtype, (), offset=int(off), start=start,
                              end=end))
        return out


def check_plan(buffers: Sequence[Buffer]) -> None:
    """Raise ``PlanError`` if two arena buffers live at the same time share a byte, or one
    is unaligned: walks every pair (plans are small)."""
    bufs = list(buffers)
    for b in bufs:
        if b.offset < 0 or b.offset % ALIGN:
            raise PlanError(f"arena buffer at offset {b.offset}: not placed or not aligned")
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            live = a.start <= b.end and b.start <= a.end
            overlap = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
            if live and overlap and a.nbytes and b.nbytes:
                raise PlanError(f"arena buffers live over [{a.start}, {a.end}] and "
                                f"[{b.start}, {b.end}] share bytes [{max(a.offset, b.offset)}, "
                                f"{min(a.offset + a.nbytes, b.offset + b.nbytes)})")


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
