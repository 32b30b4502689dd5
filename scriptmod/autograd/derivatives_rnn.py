"""The derivative of ``rnn_layer`` (a row of ``autograd.derivatives``' table).

A first-order backward is the one ``rnn_layer_backward`` op: backpropagation through time in
one kernel, from the activations the forward kept (``reserve``). Where a graph of the
backward is recorded (``create_graph``, grad mode on), the layer is run again op by op from
its inputs (``_unrolled``: the nn layers' step functions) and differentiated by autograd,
so that higher derivatives reach the inputs as torch's CPU RNNs' do.
"""
from __future__ import annotations

from typing import Any

from scriptmod.autograd.derivative_table import _op, derivative, needs_grad
from scriptmod.autograd.grad_mode import is_grad_enabled
from scriptmod.tensor import Tensor


def _unrolled(x: Tensor, hx: Tensor, cx: Tensor | None, w_ih: Tensor, w_hh: Tensor,
              b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor | None, mode: str,
              reverse: bool) -> tuple[Tensor, ...]:
    """``(output, h_n[, c_n])`` of ``rnn_layer`` as differentiable ops, step by step: the
    nn layers' own step functions (``nn._functional_rnn``) over plain per-step slices."""
    from scriptmod._shape_ops import stack
    from scriptmod.nn._functional_rnn import CELL_KINDS, CellWeights, run_direction
    gx = x.matmul(w_ih.t())
    if b_ih is not None:
        gx = gx + b_ih
    state0 = (hx, cx) if mode == "LSTM" else (hx,)
    steps, state = run_direction(CELL_KINDS[mode].step, gx.unbind(0), state0,
                                 CellWeights(w_ih, w_hh, b_ih, b_hh, w_hr), None, reverse)
    return (stack(steps), *state)


@derivative("rnn_layer", saves="all", output=True)
def _rnn_layer(ctx: Any, gs: list) -> tuple:
    x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr = ctx.inputs
    mode, reverse = ctx.attrs["mode"], bool(ctx.attrs["reverse"])
    g_out, g_hn, g_cn = gs[0], gs[1], gs[2]
    out = ctx.outputs[0]
    if g_out is None:
        g_out = out.new_zeros(list(out.shape))
    lstm = mode == "LSTM"
    if is_grad_enabled():                        # a graph of the backward: op by op
        from scriptmod import autograd
        wanted = [k for k, t in enumerate(ctx.inputs)
                  if isinstance(t, Tensor) and needs_grad(ctx, k)]
        outs = _unrolled(x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr, mode, reverse)
        grads = [g_out, g_hn] + ([g_cn] if lstm else [])
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        found = autograd.grad([o for o, _ in pairs], [ctx.inputs[k] for k in wanted],
                              [g for _, g in pairs], create_graph=True, allow_unused=True)
        result: list[Any] = [None] * 8
        for k, g in zip(wanted, found):
            result[k] = g
        return tuple(result)
    g = _op("rnn_layer_backward", g_out, g_hn, g_cn if lstm else None, x, hx, cx, w_ih, w_hh,
            w_hr, out, ctx.outputs[3], mode=mode, reverse=reverse)
    g_x, g_hx, g_cx, g_wih, g_whh, g_bih, g_bhh, g_whr = g
    return (g_x, g_hx, g_cx if lstm and cx is not None else None, g_wih, g_whh,
            g_bih if b_ih is not None else None, g_bhh if b_hh is not None else None,
            g_whr if w_hr is not None else None)
