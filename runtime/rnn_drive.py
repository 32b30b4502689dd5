"""A recurrent layer's time loop in native code: the work list ``codegen.recurrence``'s
``rnn_drive`` runs on the pool's threads, built here from one layer call's arrays.

A list is ``T`` steps of the same stages. ``runtime.rnn`` describes a step ``k`` with
``Stage``s whose items hold views of that step's arrays; the table is then arithmetic: the
rows of steps 0 to 2 and the last two are built from views, and every row in between is
step 2's row plus a multiple of the distance from step 1 to step 2 (verified on the one
before last: a call whose operands do not move by one stride runs its steps one by one
instead). The first and the last step may differ from the rest (the initial state is its
own array).

    >>> spans(37, 2)
    [(0, 16), (16, 32), (32, 37)]
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.recurrence import GEMM_FIELDS, ITEM, MAX_GEMMS, NAME, WIDTH, render_drive

DRIVE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
CHUNKS_PER_THREAD = 2     # a stage's rows in 2 chunks per thread (1, 2 or 4 ran alike: 9.2-9.6
                          # ms for 35 forward steps of 2048 x 512 x 16 on 2 threads)
_COL = {name: i for i, name in enumerate(ITEM)}


@dataclass
class Gemm:
    """``c = a @ b`` (``accumulate``: ``c += a @ b``): float32 arrays our GEMM takes
    (``runtime.gemm.supported``), ``c`` with unit column stride."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    accumulate: bool = False


@dataclass
class Item:
    """Some GEMMs, then the elementwise kernel ``cell`` (a key the runner compiles: ``run``'s
    ``compiled``) over flat output indices ``[start, end)`` of ``operands`` (its ``n_in``
    inputs then its outputs), laid out as its ``meta`` (``codegen.kernel``'s ABI) says: the
    caller checked them against it (an item without one does not run natively)."""
    gemms: list[Gemm] = field(default_factory=list)
    cell: Any = None
    operands: Sequence[Any] = ()
    n_in: int = 0
    start: int = 0
    end: int = 0
    meta: tuple[int, ...] | None = None


def spans(n: int, threads: int) -> list[tuple[int, int]]:
    """``[0, n)`` in chunks of a multiple of 8 rows, ``CHUNKS_PER_THREAD`` per thread (one
    chunk on one thread)."""
    per = -(-n // (CHUNKS_PER_THREAD * threads if threads > 1 else 1))
    per = max(8, -(-per // 8) * 8)
    return [(r0, min(r0 + per, n)) for r0 in range(0, n, per)]


@cache
def _kernel() -> Any:
    """``rnn_drive`` compiled: its ctypes function and kernel."""
    from .llvm_jit import compile_units, host
    pause = host()[0].startswith(("x86_64", "i686", "i386"))
    k, = compile_units([(f"rnn drive\0{pause}", partial(render_drive, pause), NAME)])
    return DRIVE_TYPE(k.address), k


def usable(*arrays: np.ndarray) -> bool:
    """Whether ``rnn_drive`` takes these arrays: float32 NumPy arrays."""
    return all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays)


def run(t_len: int, step: Callable[[int], list[list[Item]]], shape: Any,
        compiled: Callable[[Any], Any]) -> bool:
    """Run ``t_len`` steps, ``step(k)`` giving step ``k``'s stages (lists of items; every
    step the same count of each), in order, on the pool's threads with GEMM register shape
    ``shape``, ``compiled(cell)`` an item's kernel; False (nothing ran) where the operands
    do not move by one stride per step or an operand is not what the kernels take."""
    from . import gemm
    from . import threads as pool
    built = {k: step(k) for k in sorted({0, 1, 2, t_len - 2, t_len - 1}) if 0 <= k < t_len}
    first = built[0]
    per_step = sum(len(st) for st in first)
    if not all(_fits(it) and sum(len(st) for st in stages) == per_step
               for stages in built.values() for st in stages for it in st):
        return False              # (every step built from views is checked, not the first)
    arg_width = max([len(it.operands) for st in first for it in st] + [1])
    keep: dict[Any, Any] = {}     # GEMM parameters and kernel metas, one array per value
    args = np.zeros((t_len, per_step, arg_width), np.int64)
    items = np.zeros((t_len, per_step, WIDTH), np.int64)
    rows = {k: _rows(k, stages, per_step, args, keep, compiled)
            for k, stages in built.items()}
    for k, (item_rows, arg_rows) in rows.items():
        items[k], args[k] = item_rows, arg_rows
    if t_len > 5:
        span = np.arange(1, t_len - 4, dtype=np.int64)[:, None, None]
        for table, part in ((items, 0), (args, 1)):
            one, two = rows[1][part], rows[2][part]
            table[3:t_len - 2] = two + span * (two - one)
        if not (np.array_equal(items[t_len - 3] + items[2] - items[1], rows[t_len - 2][0])
                and np.array_equal(args[t_len - 3] + args[2] - args[1], rows[t_len - 2][1])):
            return False                 # (not one stride: the caller runs the steps)
    plan = np.array([t_len * per_step, gemm.kernel(shape)[1].address, items.ctypes.data],
                    np.int64)
    ctl = np.zeros(2, np.int64)
    fn = _kernel()[0]
    floats = gemm.workspace_floats(shape)

    def enter(lo: int, hi: int) -> None:
        fn(ctl.ctypes.data, plan.ctypes.data, pool.scratch(floats))
    threads = pool.get_num_threads()
    if threads > 1 and max(len(st) for st in first) > 1:
        pool.parallel_for(enter, threads * pool.ALIGN, min_split=0)   # one entry a thread
    else:
        enter(0, 1)
    return True


def _fits(item: Item) -> bool:
    from . import gemm
    if len(item.gemms) > MAX_GEMMS or not usable(*item.operands):
        return False
    if item.cell is not None and item.meta is None:
        return False
    return all(gemm.supported(g.a, g.b) and usable(g.c) and g.c.shape == (g.a.shape[0],
               g.b.shape[1]) and g.c.strides[1] == 4 for g in item.gemms)


def _rows(k: int, stages: list[list[Item]], per_step: int, args: np.ndarray,
          keep: dict, compiled: Callable[[Any], Any]) -> tuple[np.ndarray, np.ndarray]:
    """Step ``k``'s item rows and kernel pointer tables (``args[k]``'s addresses); ``keep``
    holds the GEMM parameter and kernel meta arrays the rows point to (one per distinct
    value, so that they are at the same address in every step)."""
    from . import gemm
    items = np.zeros((per_step, WIDTH), np.int64)
    table = np.zeros(args.shape[1:], np.int64)
    index = 0
    for stage in stages:
        need = k * per_step + index
        for item in stage:
            row = items[index]
            row[_COL["need"]], row[_COL["gemms"]] = need, len(item.gemms)
            for j, g in enumerate(item.gemms):
                key = (g.a.shape[0], g.c.shape[1], g.a.shape[1], g.a.strides[0] // 4,
                       g.b.strides[0] // 4, g.b.strides[1] // 4, g.c.strides[0] // 4,
                       g.accumulate)
                if key not in keep:
                    keep[key] = gemm.plan(*key)
                params, units = keep[key]
                for f, v in zip(GEMM_FIELDS, (params.ctypes.data, units, g.a.ctypes.data,
                                              g.b.ctypes.data, g.c.ctypes.data)):
                    row[_COL[f"{f}{j}"]] = v
            if item.cell is not None:
                meta = keep.setdefault(("meta", item.meta), np.array(item.meta, np.int64))
                table[index, :len(item.operands)] = [v.ctypes.data for v in item.operands]
                row[_COL["cell"]] = compiled(item.cell).address
                row[_COL["start"]], row[_COL["end"]] = item.start, item.end
                row[_COL["args"]] = args.ctypes.data + (k * args.shape[1] + index) * \
                    args.shape[2] * 8
                row[_COL["meta"]] = meta.ctypes.data
            index += 1
    return items, table
