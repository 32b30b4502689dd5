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
"""
from __future__ import annotations

from typing import Any, Sequence

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
    placed: list[Buffer] = []
    size = 0
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.start)):
        clashes = sorted((p.offset, p.offset + p.nbytes) for p in placed
                         if p.start <= b.end and b.start <= p.end)
        at = 0
        for lo, hi in clashes:
            if at + b.nbytes <= lo:
                break
            at = max(at, _align(hi))
        b.offset = at
        placed.append(b)
        size = max(size, at + b.nbytes)
    return _align(size)


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
