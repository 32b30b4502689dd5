"""The time loop of a recurrent layer as native code: ``rnn_drive``, which every thread of the
pool enters and which runs a list of work items in dependency order (``runtime.rnn`` builds
the list: the forward's and the backward's steps).

An item is up to ``MAX_GEMMS`` calls of our GEMM (``codegen.gemm``, through its function
pointer: each call its own parameters, A, B and C) and then, optionally, one elementwise
kernel (``codegen.llvm_ir``'s ABI ``fn(start, end, args, meta)``) over a range of flat
indices. The forward's step is one stage of items, one per chunk of hidden units: the
chunk's rows of ``W_hh @ hᵀ`` for each gate, then the gate kernel on its units; the
backward's step is two stages: the gate gradients per chunk of units, then per chunk of
rows ``W_hhᵀ @ dgates``.

Items are claimed in order from one atomic counter (``ctl[0]``); an item waits until
``ctl[1]``, the count of finished items (release on increment, acquire on the wait),
reaches its ``need``: the index of the first item of its stage, so a stage starts once
every earlier item is done. No thread ever waits for a thread that has not claimed work:
it waits only for items other running threads are executing, so any number of threads may
enter, late or never (the pool's cancelled workers), and one thread alone runs the list.

The exported function (``runtime.rnn.DRIVE_TYPE``)::

    void rnn_drive(i64* ctl, i64* plan, float* ws)

``plan`` is ``(count, gemm, items)``: the number of items, the GEMM's address, and the
address of the ``count x WIDTH`` table of items (``ITEM`` names each column's role; a
GEMM call's ``params`` and ``units`` as ``runtime.gemm.plan`` makes them); ``ws`` is the
calling thread's GEMM workspace.

    >>> text = render_drive(pause=True)
    >>> "atomicrmw add" in text and "llvm.x86.sse2.pause" in text
    True
"""
from __future__ import annotations

from llvmlite import ir

from .gemm import EP_TYPE
from .llvm_emit import I64, PTR, for_range

NAME = "rnn_drive"
MAX_GEMMS = 4                    # an LSTM chunk's four gates
GEMM_FIELDS = ("params", "units", "a", "b", "c")
ITEM = ("need", "gemms", *(f"{f}{j}" for j in range(MAX_GEMMS) for f in GEMM_FIELDS),
        "cell", "start", "end", "args", "meta")
WIDTH = len(ITEM)
_I = {name: i for i, name in enumerate(ITEM)}
_GEMM = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR, PTR, PTR,
                                        EP_TYPE.as_pointer(), PTR, PTR])
_CELL = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR])


def render_drive(pause: bool) -> str:
    """LLVM IR text of ``rnn_drive`` (``pause``: spin with x86's ``pause``)."""
    module = ir.Module(name=NAME)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), NAME)
    fn.attributes.add("nounwind")
    ctl, plan, ws = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def field(base: ir.Value, i: ir.Value | int) -> ir.Value:
        """``base[i]`` of an int64 table."""
        i = ir.Constant(I64, i) if isinstance(i, int) else i
        return b.load(b.gep(base, [i], source_etype=I64), typ=I64)

    def ptr(v: ir.Value) -> ir.Value:
        return b.inttoptr(v, PTR)
    one, zero = ir.Constant(I64, 1), ir.Constant(I64, 0)
    count, items = field(plan, 0), ptr(field(plan, 2))
    gemm = b.inttoptr(field(plan, 1), _GEMM.as_pointer())
    done_at = b.gep(ctl, [one], source_etype=I64)
    pause_fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []),
                           "llvm.x86.sse2.pause") if pause else None

    claim, wait, spin, work, leave = (b.append_basic_block(name) for name in
                                      ("claim", "wait", "spin", "work", "leave"))
    b.branch(claim)

    b.position_at_end(claim)
    g = b.atomic_rmw("add", ctl, one, "acq_rel")
    b.cbranch(b.icmp_signed(">=", g, count), leave, wait)

    b.position_at_end(wait)
    row = b.gep(items, [b.mul(g, ir.Constant(I64, WIDTH))], source_etype=I64)
    done = b.load_atomic(done_at, "acquire", 8, typ=I64)
    b.cbranch(b.icmp_signed(">=", done, field(row, _I["need"])), work, spin)

    b.position_at_end(spin)
    if pause_fn is not None:
        b.call(pause_fn, [])
    b.branch(wait)

    b.position_at_end(work)
    null = ir.Constant(PTR, None)
    with for_range(b, zero, field(row, _I["gemms"]), name="j", vectorize=False) as j:
        call = b.gep(row, [b.add(b.mul(j, ir.Constant(I64, len(GEMM_FIELDS))),
                                 ir.Constant(I64, _I["params0"]))], source_etype=I64)
        params, units, a, bm, c = (field(call, k) for k in range(len(GEMM_FIELDS)))
        b.call(gemm, [zero, units, ptr(params), ptr(a), ptr(bm), ptr(c), ws,
                      ir.Constant(EP_TYPE.as_pointer(), None), null, null])
    cell = field(row, _I["cell"])
    with b.if_then(b.icmp_unsigned("!=", cell, zero)):
        b.call(b.inttoptr(cell, _CELL.as_pointer()),
               [field(row, _I["start"]), field(row, _I["end"]), ptr(field(row, _I["args"])),
                ptr(field(row, _I["meta"]))])
    b.atomic_rmw("add", done_at, one, "release")
    b.branch(claim)

    b.position_at_end(leave)
    b.ret_void()
    return str(module)
