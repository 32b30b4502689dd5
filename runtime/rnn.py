"""One recurrent layer in one direction as one kernel: the ``rnn_layer`` op and its first-order
backward ``rnn_layer_backward`` (what torch's ``_VF.lstm``/``gru``/``rnn_*`` run per layer).

The state is kept transposed, one column per sequence: ``hᵀ (P, N)``, ``cᵀ (H, N)``, the
gate block ``(G, N)`` of each step ``W_hh @ hᵀ`` (a row-major weight times a few columns:
0.31 ms against 0.57 ms for ``h @ W_hhᵀ`` at 16 x 512 x 2048 in OpenBLAS), so that each
gate is a contiguous row block. The input-to-hidden product of every step is one GEMM
before the loop (``(T, G, N)``, biases in); a step is the recurrent GEMM and one native
elementwise kernel (``_cells``: every gate's activation, the new ``c`` and ``h``, written
where the backward will read them) on float32/float64 CPU arrays, NumPy or CuPy operations
elsewhere. What the backward needs is kept in one ``reserve`` array ``(T, R, N)``:

- ``LSTM``: the activated gates ``i, f, g, o`` then ``c_t`` (``R = 5H``), and with
  projections ``o * tanh(c_t)`` too (``6H``);
- ``GRU``: ``r, z, n`` and the recurrent part of ``n``'s pre-activation, ``W_hn h + b_hn``
  (``4H``);
- ``RNN_TANH``/``RNN_RELU``: nothing (``R = 0``): the outputs are the hidden states.

The backward runs the loop in reverse in the same layout, keeping each step's
pre-activation gate gradients, so that the weight, bias and input gradients are each one GEMM
(or sum) over all steps after it.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((5, 2, 3))
    >>> w_ih, w_hh = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    >>> out, h, c, reserve = forward(np, x, np.zeros((2, 2)), np.zeros((2, 2)), w_ih, w_hh,
    ...                              None, None, None, "LSTM", False)
    >>> out.shape, h.shape, c.shape, reserve.shape, bool((out[-1] == h).all())
    ((5, 2, 2), (2, 2), (2, 2), (5, 10, 2), True)
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rnn import MODES as GATES
from scriptmod.ir.ops.rnn import reserve_width
from . import rnn_drive
from .arrays import transposed
from .rnn_drive import Gemm, Item

_NATIVE = {np.dtype(np.float32): D.float32, np.dtype(np.float64): D.float64}


def _gate(a: Any, k: int, hidden: int) -> Any:
    """Gate ``k``'s ``(H, N)`` row block of a gate-stacked ``(G, N)`` array."""
    return a[k * hidden:(k + 1) * hidden]


def _order(t: int, reverse: bool) -> range:
    return range(t - 1, -1, -1) if reverse else range(t)


# ---- one step's gates as one native kernel -----------------------------------------------
def _cell_spec(mode: str, dt: Any) -> KernelSpec:
    """The elementwise kernel of one step over ``(H, N)`` elements (rank 2; outputs and the
    recurrent blocks contiguous). Inputs: the recurrent gate blocks; the input projection's
    gate blocks, read in place in the ``(G, T*N)`` product (``strided``, unit inner
    stride); ``LSTM`` ``c``, ``GRU`` ``h``; then the biases, one per gate, broadcast along the
    sequences (``strided``, inner stride 0; ``GRU``: ``b_hn`` first, which is inside
    ``r * (W_hn h + b_hn)``). Outputs: ``LSTM`` i, f, g, o, c', o*tanh(c'); ``GRU`` r, z, n,
    W_hn h + b_hn, h'; ``RNN_*`` h'."""
    steps: list[OpStep] = []
    gates = GATES[mode]
    state = 0 if mode.startswith("RNN") else 1
    xw, own, bias = gates, 2 * gates, 2 * gates + state
    n_in = bias + gates + (mode == "GRU")
    kinds = [InputSpec(dt)] * gates + [InputSpec(dt, "strided", inner=1)] * gates + \
        [InputSpec(dt)] * state + [InputSpec(dt, "strided", inner=0)] * (n_in - bias)

    def op(name: str, *args: Any) -> int:
        steps.append(OpStep(name, args, {}, dt))
        return n_in + len(steps) - 1
    if mode == "GRU":
        bhn, bias = bias, bias + 1

    def pre(k: int) -> int:                    # the input side of gate k, biases in
        return op("add", xw + k, bias + k)
    if mode == "LSTM":
        act = [op("add", k, pre(k)) for k in range(4)]
        i, f, o = op("sigmoid", act[0]), op("sigmoid", act[1]), op("sigmoid", act[3])
        g = op("tanh", act[2])
        c = op("add", op("mul", f, own), op("mul", i, g))
        outs = [i, f, g, o, c, op("mul", o, op("tanh", c))]
    elif mode == "GRU":
        r, z = (op("sigmoid", op("add", k, pre(k))) for k in range(2))
        nh = op("add", 2, bhn)
        n = op("tanh", op("add", pre(2), op("mul", r, nh)))
        outs = [r, z, n, nh, op("add", op("mul", op("sub", own, n), z), n)]
    else:
        outs = [op("tanh" if mode == "RNN_TANH" else "relu", op("add", 0, pre(0)))]
    return KernelSpec(kinds, steps, outs, [dt] * len(outs), rank=2)


def _grad_spec(mode: str, dt: Any) -> KernelSpec:
    """The elementwise kernel of one backward step over ``H x N`` elements: the gradients of
    the pre-activation gates from the saved activations. Inputs: ``g`` (the output's
    gradient at this step, or with projections ``W_hrᵀ`` times the whole ``dh``) and ``dhn``
    (the gradient the later step passed back), then ``LSTM`` ``dc``, i, f, g, o, c,
    c_prev; ``GRU`` r, z, n, nh, h_prev; ``RNN_*`` h. Outputs: ``LSTM`` the four gate
    gradients and ``dc`` for the earlier step; ``GRU`` the r, z, n gradients, the n gate's
    recurrent one (``dn * r``) and ``dh * z`` (the earlier step's ``dh`` before the GEMM
    adds ``W_hhᵀ`` times the gates'); ``RNN_*`` the gate gradient."""
    steps: list[OpStep] = []

    def op(name: str, *args: Any) -> int:
        steps.append(OpStep(name, args, {}, D.bool_ if name == "gt" else dt))
        return n_in + len(steps) - 1

    def one_minus(v: int) -> int:
        return op("sub", Imm(1, dt), v)
    n_in = {"LSTM": 9, "GRU": 7}.get(mode, 3)
    dh = op("add", 0, 1)
    if mode == "LSTM":
        i, f, g, o, c, c_prev = 3, 4, 5, 6, 7, 8
        tc = op("tanh", c)
        dc = op("add", 2, op("mul", op("mul", dh, o), one_minus(op("mul", tc, tc))))
        outs = [op("mul", op("mul", op("mul", dc, g), i), one_minus(i)),
                op("mul", op("mul", op("mul", dc, c_prev), f), one_minus(f)),
                op("mul", op("mul", dc, i), one_minus(op("mul", g, g))),
                op("mul", op("mul", op("mul", dh, tc), o), one_minus(o)),
                op("mul", dc, f)]
    elif mode == "GRU":
        r, z, n, nh, h_prev = 2, 3, 4, 5, 6
        dn = op("mul", op("mul", dh, one_minus(z)), one_minus(op("mul", n, n)))
        outs = [op("mul", op("mul", op("mul", dn, nh), r), one_minus(r)),
                op("mul", op("mul", op("mul", dh, op("sub", h_prev, n)), z), one_minus(z)),
                dn, op("mul", dn, r), op("mul", dh, z)]
    elif mode == "RNN_TANH":
        outs = [op("mul", dh, one_minus(op("mul", 2, 2)))]
    else:
        outs = [op("where", op("gt", 2, Imm(0, dt)), dh, Imm(0, dt))]
    return KernelSpec([InputSpec(dt)] * n_in, steps, outs, [dt] * len(outs))


def _sum_spec(dt: Any) -> KernelSpec:
    """``a + b``: a projected LSTM's whole ``dh`` (the output's gradient and the later
    step's)."""
    return KernelSpec([InputSpec(dt)] * 2, [OpStep("add", (0, 1), {}, dt)], [2], [dt])


_SPECS = {"step": _cell_spec, "grad": _grad_spec, "sum": lambda mode, dt: _sum_spec(dt)}


@lru_cache(maxsize=32)
def _spec(kind: str, mode: str, dtype: np.dtype) -> KernelSpec:
    """``_SPECS[kind]`` for ``mode`` over a NumPy float dtype."""
    return _SPECS[kind](mode, _NATIVE[dtype])


@lru_cache(maxsize=32)
def _cell_kernel(kind: str, mode: str, dtype: np.dtype) -> tuple[Any, Any]:
    """The compiled kernel of ``_SPECS[kind]`` and the spec (``runtime.targets``' LLVM
    target)."""
    from .targets.llvm import LLVM
    spec = _spec(kind, mode, dtype)
    return LLVM.compile(spec), spec


@lru_cache(maxsize=64)
def _cell_runner(kind: str, mode: str, dtype: np.dtype,
                 meta: tuple[int, ...]) -> Callable[[list, list], None]:
    """``run(inputs, outputs)`` of ``_SPECS[kind]`` with ``meta`` (``_meta``: the LLVM
    target's caller, native code that trusts the arrays ``_cells`` hands it)."""
    from .targets.llvm import LLVM
    kernel, spec = _cell_kernel(kind, mode, dtype)
    return LLVM.caller(kernel, spec, meta, int(np.prod(meta[:spec.rank])), None)


def _meta(kind: str, mode: str, operands: Sequence[Any], n_in: int) -> tuple[int, ...] | None:
    """The kernel ``meta`` of ``_SPECS[kind]`` over these NumPy ``operands`` (inputs then
    outputs), or None where they are not laid out as the spec reads them: outputs and
    ``contiguous`` inputs C-contiguous and of one shape, ``strided`` inputs of that shape
    with the spec's inner stride."""
    if type(operands[0]) is not np.ndarray or operands[0].dtype not in _NATIVE:
        return None
    spec = _spec(kind, mode, operands[0].dtype)
    if spec.rank == 1:              # flat: every operand C-contiguous, of one size
        size = operands[0].size
        ok = all(v.flags.c_contiguous and v.size == size and v.dtype == operands[0].dtype
                 for v in operands)
        return (size,) if ok else None
    shape = operands[n_in].shape
    if len(shape) != spec.rank:
        return None
    in_strides: list[tuple[int, ...] | None] = []
    for k, v in enumerate(operands):
        if v.shape != shape or v.dtype != operands[0].dtype:
            return None
        strided = k < n_in and spec.inputs[k].kind == "strided"
        if strided and not any(s % v.itemsize for s in v.strides) and \
                v.strides[-1] // v.itemsize == spec.inputs[k].inner:
            in_strides.append(tuple(s // v.itemsize for s in v.strides))
        elif strided or not v.flags.c_contiguous:
            return None
        elif k < n_in:
            in_strides.append(None)
    return tuple(spec.meta(shape, in_strides))


def _cells(xp: Any, kind: str, mode: str, ins: list, outs: list) -> None:
    """One step's ``_SPECS[kind]`` arithmetic into ``outs``: the native kernel on
    float32/float64 NumPy arrays laid out as it reads them (``_meta``), NumPy or CuPy
    operations otherwise."""
    meta = _meta(kind, mode, ins + outs, len(ins))     # (None for CuPy arrays)
    if meta is not None:
        _cell_runner(kind, mode, ins[0].dtype, meta)(ins, outs)
    elif kind == "step":
        _step_ops(xp, mode, ins, outs)
    elif kind == "grad":
        _grad_ops(xp, mode, ins, outs)
    else:
        outs[0][...] = ins[0] + ins[1]


def _step_ops(xp: Any, mode: str, ins: list, outs: list) -> None:
    """``_cell_spec`` as array operations."""
    gates = GATES[mode]
    pre = [ins[gates + k] + ins[-gates + k] for k in range(gates)]   # input side, biased
    if mode == "LSTM":
        i, f, g, o = (ins[k] + pre[k] for k in range(4))
        for dst, v in zip(outs, (_sig(xp, i), _sig(xp, f), xp.tanh(g), _sig(xp, o))):
            dst[...] = v
        outs[4][...] = outs[1] * ins[8] + outs[0] * outs[2]
        outs[5][...] = outs[3] * xp.tanh(outs[4])
    elif mode == "GRU":
        outs[0][...] = _sig(xp, ins[0] + pre[0])
        outs[1][...] = _sig(xp, ins[1] + pre[1])
        outs[3][...] = ins[2] + ins[7]
        outs[2][...] = xp.tanh(pre[2] + outs[0] * outs[3])
        outs[4][...] = (ins[6] - outs[2]) * outs[1] + outs[2]
    else:
        v = ins[0] + pre[0]
        outs[0][...] = xp.tanh(v) if mode == "RNN_TANH" else xp.maximum(v, 0)


def _grad_ops(xp: Any, mode: str, ins: list, outs: list) -> None:
    """``_grad_spec`` as array operations (every input read before an output that may be
    the same array is written)."""
    dh = ins[0] + ins[1]
    if mode == "LSTM":
        dcn, i, f, g, o, c, c_prev = ins[2:]
        tc = xp.tanh(c)
        dc = dcn + dh * o * (1 - tc * tc)
        grads = (dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g),
                 dh * tc * o * (1 - o), dc * f)
    elif mode == "GRU":
        r, z, n, nh, h_prev = ins[2:]
        dn = dh * (1 - z) * (1 - n * n)
        grads = (dn * nh * r * (1 - r), dh * (h_prev - n) * z * (1 - z), dn, dn * r, dh * z)
    elif mode == "RNN_TANH":
        grads = (dh * (1 - ins[2] * ins[2]),)
    else:
        grads = (xp.where(ins[2] > 0, dh, 0),)
    for dst, v in zip(outs, grads):
        dst[...] = v


def _sig(xp: Any, a: Any) -> Any:
    return 1 / (1 + xp.exp(-a))


def _step_mm(xp: Any, a: Any, b: Any, out: Any, accumulate: bool = False) -> Any:
    """``out = a @ b`` (``accumulate``: ``out += a @ b``) for one step (``b``: a few
    columns, one per sequence): our GEMM for float32 NumPy arrays, as ``rnn_drive`` runs it
    (the same bits), in its narrow register shape on the calling thread for at most 16
    columns (W_hh @ hᵀ at 2048 x 512 x 16: 0.34 ms against OpenBLAS's 0.46 ms on one
    thread, 0.39 ms on two); BLAS (or CuPy) else."""
    from . import gemm          # here: gemm's imports lead back to the kernels, which import us
    if xp is np and gemm.supported(a, b) and out.flags.c_contiguous:
        narrow = b.shape[1] <= 16
        return gemm.matmul(a, b, out=out, threads=1 if narrow else None,
                           shape=gemm.narrow_isa() if narrow else gemm.isa(),
                           accumulate=accumulate)
    if accumulate:
        out += a @ b
        return out
    return xp.matmul(a, b, out=out)


# ---- forward --------------------------------------------------------------------------------
def forward(xp: Any, x: Any, hx: Any, cx: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any,
            w_hr: Any, mode: str, reverse: bool) -> tuple[Any, Any, Any, Any]:
    """``(output (T, N, P), h_n (N, P), c_n, reserve)`` of one layer over ``x (T, N, I)``
    from ``hx (N, P)`` (and an LSTM's ``cx (N, H)``; ``c_n`` is an empty array for the
    other modes); ``reverse`` runs the steps from the last.

    Every step's hidden state is kept, transposed, in ``hs (T, P, N)`` (step ``t`` reads the
    previous step's slot and writes its own, so no chunk of a step writes what another chunk
    of it reads), and the output is one transpose of it at the end."""
    t_len, n = x.shape[0], x.shape[1]
    gates, p = w_ih.shape[0], w_hh.shape[1]
    hidden = gates // GATES[mode]
    dt = x.dtype
    xw = xp.ascontiguousarray(xp.matmul(w_ih, x.reshape(t_len * n, x.shape[2]).T))  # (G, T*N)
    bias = _input_bias(xp, b_ih, b_hh, mode, hidden)      # read by the gate kernel, broadcast
    bias = xp.zeros(gates, dt) if bias is None else bias.astype(dt, copy=False)
    biases = [xp.broadcast_to(bias[q:q + hidden, None], (hidden, n))
              for q in range(0, gates, hidden)]
    if mode == "GRU":
        b_hn = b_hh[2 * hidden:] if b_hh is not None else xp.zeros(hidden, dt)
        biases.insert(0, xp.broadcast_to(b_hn.astype(dt, copy=False)[:, None], (hidden, n)))
    reserve = xp.empty((t_len, reserve_width(mode, hidden, w_hr is not None), n), dt)
    hs = xp.empty((t_len, p, n), dt)
    h0 = xp.array(hx.T, order="C", copy=True)
    c0 = xp.array(cx.T, order="C", copy=True) if mode == "LSTM" else None   # (a transpose
    # of one column is already contiguous: ascontiguousarray would hand back the caller's)
    block = xp.empty((gates, n), dt)
    order = list(_order(t_len, reverse))

    def step(k: int, split: Callable[[int], list]) -> list[list[Item]]:
        """Step ``k`` (in step order): ``W_hh @ hᵀ`` by chunks of rows (each one GEMM), the
        gates by chunks of hidden units (and with projections, ``W_hr`` times
        ``o * tanh(c)`` by chunks of rows)."""
        t, before = order[k], (order[k - 1] if k else None)
        h_prev = h0 if before is None else hs[before]
        c_prev = c0 if before is None else rows_of(reserve[before], 4, hidden)
        ins, outs = _step_operands(mode, hidden, xw[:, t * n:(t + 1) * n], reserve[t], h_prev,
                                   c_prev, hs[t], block, biases, w_hr is not None)
        meta = _meta("step", mode, ins + outs, len(ins))
        stages = [[Item([Gemm(w_hh[r0:r1], h_prev, block[r0:r1])]) for r0, r1 in split(gates)],
                  [Item([], ("step", mode), ins + outs, len(ins), r0 * n, r1 * n, meta)
                   for r0, r1 in split(hidden)]]
        if w_hr is not None:
            stages.append([Item([Gemm(w_hr[r0:r1], outs[5], hs[t][r0:r1])])
                           for r0, r1 in split(p)])
        return stages
    _run_steps(xp, t_len, n, step)
    out = xp.ascontiguousarray(hs.transpose(0, 2, 1))
    last = order[-1]
    c_n = xp.ascontiguousarray(rows_of(reserve[last], 4, hidden).T) if mode == "LSTM" \
        else xp.empty((0,), dt)
    return out, xp.ascontiguousarray(out[last]), c_n, reserve


def _input_bias(xp: Any, b_ih: Any, b_hh: Any, mode: str, hidden: int) -> Any:
    """The bias added to every step's input projection (None for none): ``b_ih + b_hh``,
    but for a GRU's ``b_hn``, which is inside ``r * (W_hn h + b_hn)`` (its own input)."""
    if b_hh is not None and mode == "GRU":
        b_hh = xp.concatenate([b_hh[:2 * hidden], xp.zeros(hidden, b_hh.dtype)])
    if b_ih is None or b_hh is None:
        return b_ih if b_hh is None else b_hh
    return b_ih + b_hh


def rows_of(a: Any, k: int, hidden: int) -> Any:
    """Gate ``k``'s ``(H, N)`` row block (``_gate``; None for None)."""
    return None if a is None else _gate(a, k, hidden)


def _step_operands(mode: str, hidden: int, xw: Any, res: Any, h_prev: Any, c_prev: Any,
                   h_out: Any, block: Any, biases: list, proj: bool) -> tuple[list, list]:
    """One step's gate kernel operands (``_cell_spec``'s inputs and outputs): the gates
    from ``block`` and ``xw`` (this step's ``(G, N)`` columns of the input projection) and
    ``biases`` (per gate, broadcast; a GRU's ``b_hn`` first), the activations into the
    reserve ``res``, the new hidden state into ``h_out`` (an LSTM with projections:
    ``o * tanh(c)`` into the reserve, then ``W_hr`` times it into ``h_out``)."""
    def rows(a: Any, k: int) -> Any:
        return _gate(a, k, hidden)
    gates = GATES[mode]
    ins = [rows(block, k) for k in range(gates)] + [rows(xw, k) for k in range(gates)]
    if mode == "LSTM":
        return (ins + [c_prev] + biases, [rows(res, k) for k in range(5)]
                + [rows(res, 5) if proj else h_out])
    if mode == "GRU":
        return ins + [h_prev] + biases, [rows(res, k) for k in range(4)] + [h_out]
    return ins + biases, [h_out]


# ---- running the steps ---------------------------------------------------------------------------
def _whole(size: int) -> list[tuple[int, int]]:
    return [(0, size)]


def _run_steps(xp: Any, t_len: int, n: int,
               step: Callable[[int, Callable[[int], list]], list[list[Item]]]) -> None:
    """Run ``step(k, split)``'s stages for every ``k`` in order (``split(size)``: the chunks
    of ``range(size)`` a stage is cut into): through ``rnn_drive`` on the pool's threads for
    float32 NumPy arrays (``rnn_drive.spans``), else item by item on this thread, each stage
    one item (the same arithmetic: the same bits)."""
    if xp is np and np.dtype(np.float32) in _NATIVE and \
            rnn_drive.usable(*_operands(step(0, _whole))):
        from . import gemm
        from . import threads as pool
        threads = pool.get_num_threads()
        shape = gemm.narrow_isa() if n <= 16 else gemm.isa()
        split = lru_cache(maxsize=None)(lambda size: rnn_drive.spans(size, threads))
        if rnn_drive.run(t_len, lambda k: step(k, split), shape, _compiled):
            return
    for k in range(t_len):
        for stage in step(k, _whole):
            for item in stage:
                for g in item.gemms:
                    _step_mm(xp, g.a, g.b, g.c, g.accumulate)
                if item.cell is not None:
                    kind, mode = item.cell
                    _cells(xp, kind, mode, list(item.operands[:item.n_in]),
                           list(item.operands[item.n_in:]))


def _operands(stages: list[list[Item]]) -> list[Any]:
    return [v for st in stages for it in st
            for v in (*it.operands, *(a for g in it.gemms for a in (g.a, g.b, g.c)))]


def _compiled(cell: tuple[str, str]) -> Any:
    """The float32 kernel of ``cell`` (``(kind, mode)``) for ``rnn_drive``."""
    return _cell_kernel(*cell, np.dtype(np.float32))[0]


# ---- backward -------------------------------------------------------------------------------
def backward(xp: Any, g_out: Any, g_hn: Any, g_cn: Any, x: Any, hx: Any, cx: Any, w_ih: Any,
             w_hh: Any, w_hr: Any, out: Any, reserve: Any, mode: str,
             reverse: bool) -> tuple[Any, ...]:
    """``(g_input, g_hx, g_cx, g_w_ih, g_w_hh, g_b_ih, g_b_hh, g_w_hr)`` of ``forward`` at
    the gradients of its outputs (``g_hn``/``g_cn`` None for zero); ``g_cx`` and ``g_w_hr``
    are empty arrays where the layer has no ``cx`` or projection.

    A step (from the last) is two stages: the gate gradients by chunks of hidden units
    (``_grad_spec``), then ``dh`` for the step before, ``W_hhᵀ @ dgates``, by chunks of rows
    (a projected LSTM first forms its whole ``dh`` and ``W_hrᵀ`` times it). The gate
    gradients of every step are kept, so the weight, bias and input gradients are each one
    GEMM (or sum) over all steps afterwards."""
    t_len, n = x.shape[0], x.shape[1]
    gates, p = w_ih.shape[0], w_hh.shape[1]
    hidden = gates // GATES[mode]
    dt = x.dtype
    proj = w_hr is not None
    go = xp.ascontiguousarray(g_out.transpose(0, 2, 1), dt)          # (T, P, N)
    dg = xp.empty((t_len, gates, n), dt)       # pre-activation gradients (input side)
    dghn = xp.empty((t_len, hidden, n), dt) if mode == "GRU" else None   # n's recurrent one
    dhn = xp.zeros((p, n), dt) if g_hn is None else xp.array(g_hn.T, dt, order="C", copy=True)
    dcn = None
    if mode == "LSTM":
        dcn = xp.zeros((hidden, n), dt) if g_cn is None else \
            xp.array(g_cn.T, dt, order="C", copy=True)
    hs = xp.ascontiguousarray(out.transpose(0, 2, 1)) if mode != "LSTM" else None
    h0 = xp.array(hx.T, order="C", copy=True)
    c0 = xp.array(cx.T, order="C", copy=True) if mode == "LSTM" else None
    dhh = xp.empty((t_len, p, n), dt) if proj else None
    dh_h = xp.empty((hidden, n), dt) if proj else None
    zeros = xp.zeros((hidden, n), dt) if proj else None
    w_hh_t = transposed(w_hh)      # row-major: 0.74 vs 0.93 ms per step's GEMM
    w_hr_t = transposed(w_hr) if proj else None
    order = list(_order(t_len, reverse))

    def rows(a: Any, k: int) -> Any:
        return _gate(a, k, hidden)

    def step(k: int, split: Callable[[int], list]) -> list[list[Item]]:
        units, chunks = split(hidden), split(p)
        j = t_len - 1 - k                       # the k-th step from the last
        t, before = order[j], (order[j - 1] if j else None)
        act, d = reserve[t], dg[t]
        stages = []
        g_in, dhn_in = go[t], dhn
        if proj:
            total = [go[t], dhn, dhh[t]]
            stages += [[Item([], ("sum", mode), total, 2, r0 * n, r1 * n,
                              _meta("sum", mode, total, 2)) for r0, r1 in chunks],
                       [Item([Gemm(w_hr_t[r0:r1], dhh[t], dh_h[r0:r1])]) for r0, r1 in units]]
            g_in, dhn_in = dh_h, zeros
        if mode == "LSTM":
            c_prev = c0 if before is None else rows(reserve[before], 4)
            ins = [g_in, dhn_in, dcn] + [rows(act, q) for q in range(5)] + [c_prev]
            outs = [rows(d, q) for q in range(4)] + [dcn]
        elif mode == "GRU":
            ins = [g_in, dhn] + [rows(act, q) for q in range(4)] + \
                [h0 if before is None else hs[before]]
            outs = [rows(d, q) for q in range(3)] + [dghn[t], dhn]
        else:
            ins, outs = [g_in, dhn, hs[t]], [d]
        meta = _meta("grad", mode, ins + outs, len(ins))
        stages.append([Item([], ("grad", mode), ins + outs, len(ins), r0 * n, r1 * n, meta)
                       for r0, r1 in units])
        if mode == "GRU":
            two = 2 * hidden
            stages.append([Item([Gemm(w_hh_t[r0:r1, :two], d[:two], dhn[r0:r1], True),
                                 Gemm(w_hh_t[r0:r1, two:], dghn[t], dhn[r0:r1], True)])
                           for r0, r1 in chunks])
        else:
            stages.append([Item([Gemm(w_hh_t[r0:r1], d, dhn[r0:r1])]) for r0, r1 in chunks])
        return stages
    _run_steps(xp, t_len, n, step)
    flat_x = x.reshape(t_len * n, x.shape[2])
    flat_gx = xp.ascontiguousarray(dg.transpose(1, 0, 2)).reshape(gates, t_len * n)
    flat_gh = flat_gx
    if mode == "GRU":
        flat_gh = flat_gx.copy()
        flat_gh[2 * hidden:] = dghn.transpose(1, 0, 2).reshape(hidden, t_len * n)
    firsts = hx[None]
    h_prevs = xp.concatenate([out[1:], firsts] if reverse else [firsts, out[:-1]])
    g_input = (flat_gx.T @ w_ih).reshape(x.shape)
    g_w_ih = flat_gx @ flat_x
    g_w_hh = flat_gh @ h_prevs.reshape(t_len * n, p)
    g_b_ih, g_b_hh = flat_gx.sum(axis=1), flat_gh.sum(axis=1)
    g_w_hr = xp.empty((0,), dt)
    if proj:
        hh = reserve[:, 5 * hidden:].transpose(0, 2, 1).reshape(t_len * n, hidden)
        g_w_hr = dhh.transpose(1, 0, 2).reshape(p, t_len * n) @ hh
    g_cx = xp.ascontiguousarray(dcn.T) if mode == "LSTM" else xp.empty((0,), dt)
    return g_input, xp.ascontiguousarray(dhn.T), g_cx, g_w_ih, g_w_hh, g_b_ih, g_b_hh, g_w_hr
