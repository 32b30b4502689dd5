"""The time loop of a recurrent layer as native code: ``rnn_drive``, which every thread of the
pool enters and which runs a layer's steps one after another, each step split into chunks of
hidden units that the threads claim (``runtime.rnn`` builds its tables).

A chunk of step ``t`` owns the hidden units ``[r0, r1)``: for each gate block ``k`` it runs
the GEMM ``block[k*H + r0 : k*H + r1] = W_hh[k*H + r0 : k*H + r1] @ hprev_t`` (our GEMM,
called through its function pointer with the chunk's own parameters), then the step's gate
kernel over the flat elements ``[r0*N, r1*N)`` (each of its operands an ``(H, N)`` block), so
the chunk's gates, cell state and new hidden state are written by the thread that computed
its rows, while the rows are in cache.

Chunks are claimed in order from one atomic counter (``ctl[0]``) across all steps; a chunk
of step ``t`` starts once every chunk of the earlier steps is done (``ctl[1]``, a counter of
finished chunks: release on increment, acquire on the wait). No thread waits for a thread
that has not claimed work: it waits only for chunks another running thread is executing, so
any number of threads may enter, late or never (the pool's cancelled workers), and one
thread alone runs every step. A step reads the previous step's hidden state from its own
buffer (``hprev_t``: ``runtime.rnn`` keeps every step's state), so no chunk writes what
another chunk of the same step is still reading.

The exported function (``runtime.rnn.DRIVE_TYPE``)::

    void rnn_drive(i64* ctl, i64* plan, float* ws)

``plan`` holds ``PLAN``'s fields; ``chunks`` is a ``C x 4`` table (the chunk's GEMM
parameters' address, its GEMM units, ``r0``, ``r1``), ``steps`` a ``T x S`` table in step
order (``hprev_t``'s address, then the gate kernel's pointer table); ``w_row`` and
``block_row`` are byte strides; ``ws`` is the calling thread's GEMM workspace.

    >>> text = render_drive(pause=True)
    >>> "atomicrmw add" in text and "llvm.x86.sse2.pause" in text
    True
"""
from __future__ import annotations

from llvmlite import ir

from .gemm import EP_TYPE
from .llvm_emit import I64, PTR, for_range

NAME = "rnn_drive"
PLAN = ("T", "C", "G", "H", "N", "gemm", "cell", "cell_meta", "w", "w_row", "block",
        "block_row", "steps", "S", "chunks")
_P = {name: i for i, name in enumerate(PLAN)}
_GEMM = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR, PTR, PTR,
                                        EP_TYPE.as_pointer(), PTR, PTR])
_CELL = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR])


def render_drive(pause: bool) -> str:
    """LLVM IR text of ``rnn_drive`` (``pause``: spin with x86's ``pause``)."""
    module = ir.Module(name=NAME)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), NAME)
    ctl, plan, ws = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def field(base: ir.Value, i: ir.Value | int) -> ir.Value:
        """``base[i]`` of an int64 table (``base``: a pointer, or an address as an i64)."""
        i = ir.Constant(I64, i) if isinstance(i, int) else i
        base = b.inttoptr(base, PTR) if base.type == I64 else base
        return b.load(b.gep(base, [i], source_etype=I64), typ=I64)
    P = {p: field(plan, i) for p, i in _P.items()}
    one = ir.Constant(I64, 1)
    total = b.mul(P["T"], P["C"])
    gemm = b.inttoptr(P["gemm"], _GEMM.as_pointer())
    cell = b.inttoptr(P["cell"], _CELL.as_pointer())
    done_at = b.gep(ctl, [one], source_etype=I64)
    pause_fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []),
                           "llvm.x86.sse2.pause") if pause else None

    claim = b.append_basic_block("claim")
    wait = b.append_basic_block("wait")
    spin = b.append_basic_block("spin")
    work = b.append_basic_block("work")
    leave = b.append_basic_block("leave")
    b.branch(claim)

    b.position_at_end(claim)
    g = b.atomic_rmw("add", ctl, one, "acq_rel")
    b.cbranch(b.icmp_signed(">=", g, total), leave, wait)

    b.position_at_end(wait)
    t, c = b.sdiv(g, P["C"]), b.srem(g, P["C"])
    need = b.mul(t, P["C"])
    done = b.load_atomic(done_at, "acquire", 8, typ=I64)
    b.cbranch(b.icmp_signed(">=", done, need), work, spin)

    b.position_at_end(spin)
    if pause_fn is not None:
        b.call(pause_fn, [])
    b.branch(wait)

    b.position_at_end(work)
    row = b.mul(c, ir.Constant(I64, 4))
    params, units = field(P["chunks"], row), field(P["chunks"], b.add(row, one))
    r0 = field(P["chunks"], b.add(row, ir.Constant(I64, 2)))
    r1 = field(P["chunks"], b.add(row, ir.Constant(I64, 3)))
    step = b.mul(t, P["S"])
    hprev = b.inttoptr(field(P["steps"], step), PTR)
    null = ir.Constant(PTR, None)
    with for_range(b, ir.Constant(I64, 0), P["G"], name="k", vectorize=False) as k:
        r = b.add(b.mul(k, P["H"]), r0)
        a = b.inttoptr(b.add(P["w"], b.mul(r, P["w_row"])), PTR)
        out = b.inttoptr(b.add(P["block"], b.mul(r, P["block_row"])), PTR)
        b.call(gemm, [ir.Constant(I64, 0), units, b.inttoptr(params, PTR), a, hprev, out, ws,
                      ir.Constant(EP_TYPE.as_pointer(), None), null, null])
    args = b.gep(b.inttoptr(P["steps"], PTR), [b.add(step, one)], source_etype=I64)
    b.call(cell, [b.mul(r0, P["N"]), b.mul(r1, P["N"]), args, b.inttoptr(P["cell_meta"], PTR)])
    b.atomic_rmw("add", done_at, one, "release")
    b.branch(claim)

    b.position_at_end(leave)
    b.ret_void()
    return str(module)
