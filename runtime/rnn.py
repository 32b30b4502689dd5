"""One recurrent layer in one direction as one kernel: the ``rnn_layer`` op and its first-order
backward ``rnn_layer_backward`` (what torch's ``_VF.lstm``/``gru``/``rnn_*`` run per layer).

The input-to-hidden product of every time step is one GEMM before the loop; the loop does
the recurrent GEMM and the gate arithmetic in place on a few preallocated buffers (the
carried ``h``/``c`` and one gate block reused every step), and keeps what the backward needs
in one ``reserve`` array, ``(T, N, R)``:

- ``LSTM``: the activated gates ``i, f, g, o`` then ``c_t`` (``R = 5H``), and with
  projections ``o * tanh(c_t)`` too (``6H``);
- ``GRU``: ``r, z, n`` and the recurrent part of ``n``'s pre-activation, ``W_hn h + b_hn``
  (``4H``);
- ``RNN_TANH``/``RNN_RELU``: nothing (``R = 0``): the outputs are the hidden states.

The backward runs the loop in reverse, keeping each step's pre-activation gate gradients,
so that the weight, bias and input gradients are each one GEMM (or sum) over all steps after
it. ``xp`` is NumPy or CuPy; every array is one floating dtype.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((5, 2, 3))
    >>> w_ih, w_hh = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    >>> out, h, c, reserve = forward(np, x, np.zeros((2, 2)), np.zeros((2, 2)), w_ih, w_hh,
    ...                              None, None, None, "LSTM", False)
    >>> out.shape, h.shape, c.shape, reserve.shape, bool((out[-1] == h).all())
    ((5, 2, 2), (2, 2), (2, 2), (5, 2, 10), True)
"""
from __future__ import annotations

from typing import Any

import numpy as np

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def reserve_width(mode: str, hidden: int, proj: bool) -> int:
    """The reserve's last dim (module docstring)."""
    if mode == "LSTM":
        return (6 if proj else 5) * hidden
    return 4 * hidden if mode == "GRU" else 0


def _sigmoid(xp: Any, a: Any) -> Any:
    """``1 / (1 + exp(-a))`` in place."""
    xp.negative(a, out=a)
    xp.exp(a, out=a)
    a += 1
    return xp.reciprocal(a, out=a)


def _order(t: int, reverse: bool) -> range:
    return range(t - 1, -1, -1) if reverse else range(t)


def forward(xp: Any, x: Any, hx: Any, cx: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any,
            w_hr: Any, mode: str, reverse: bool) -> tuple[Any, Any, Any, Any]:
    """``(output (T, N, P), h_n (N, P), c_n, reserve)`` of one layer over ``x (T, N, I)``
    from ``hx (N, P)`` (and an LSTM's ``cx (N, H)``; ``c_n`` is an empty array for the
    other modes); ``reverse`` runs the steps from the last."""
    t_len, n = x.shape[0], x.shape[1]
    gates = w_ih.shape[0]
    hidden = gates // GATES[mode]
    dt = x.dtype
    xw = xp.matmul(x.reshape(t_len * n, -1), w_ih.T).reshape(t_len, n, gates)
    if b_ih is not None:
        xw += b_ih
    if b_hh is not None and mode != "GRU":     # GRU's b_hn is inside r * (...)
        xw += b_hh
    out = xp.empty((t_len, n, w_hh.shape[1]), dt)
    reserve = xp.empty((t_len, n, reserve_width(mode, hidden, w_hr is not None)), dt)
    h = hx.copy()
    c = cx.copy() if mode == "LSTM" else xp.empty((0,), dt)
    block = xp.empty((n, gates), dt)
    whh_t = w_hh.T
    for t in _order(t_len, reverse):
        xp.matmul(h, whh_t, out=block)
        if mode == "LSTM":
            block += xw[t]
            act = reserve[t, :, :4 * hidden]
            _sigmoid(xp, _into(xp, act, block))
            xp.tanh(block[:, 2 * hidden:3 * hidden], out=act[:, 2 * hidden:3 * hidden])
            i, f, g, o = (act[:, k * hidden:(k + 1) * hidden] for k in range(4))
            c *= f
            c += i * g
            reserve[t, :, 4 * hidden:5 * hidden] = c
            hh = o * xp.tanh(c)
            if w_hr is not None:
                reserve[t, :, 5 * hidden:] = hh
                xp.matmul(hh, w_hr.T, out=h)
            else:
                h[...] = hh
        elif mode == "GRU":
            if b_hh is not None:
                block += b_hh
            r_z = reserve[t, :, :2 * hidden]
            _sigmoid(xp, _into(xp, r_z, block[:, :2 * hidden] + xw[t, :, :2 * hidden]))
            reserve[t, :, 3 * hidden:] = block[:, 2 * hidden:]
            nn = reserve[t, :, 2 * hidden:3 * hidden]
            xp.tanh(xw[t, :, 2 * hidden:] + r_z[:, :hidden] * block[:, 2 * hidden:], out=nn)
            h -= nn
            h *= r_z[:, hidden:]
            h += nn
        else:
            block += xw[t]
            if mode == "RNN_TANH":
                xp.tanh(block, out=h)
            else:
                xp.maximum(block, 0, out=h)
        out[t] = h
    return out, h, c, reserve


def _into(xp: Any, dst: Any, src: Any) -> Any:
    dst[...] = src
    return dst


def backward(xp: Any, g_out: Any, g_hn: Any, g_cn: Any, x: Any, hx: Any, cx: Any, w_ih: Any,
             w_hh: Any, w_hr: Any, out: Any, reserve: Any, mode: str,
             reverse: bool) -> tuple[Any, ...]:
    """``(g_input, g_hx, g_cx, g_w_ih, g_w_hh, g_b_ih, g_b_hh, g_w_hr)`` of ``forward`` at
    the gradients of its outputs (``g_hn``/``g_cn`` None for zero); ``g_cx`` and ``g_w_hr``
    are empty arrays where the layer has no ``cx`` or projection."""
    t_len, n = x.shape[0], x.shape[1]
    gates = w_ih.shape[0]
    hidden = gates // GATES[mode]
    dt = x.dtype
    dgx = xp.empty((t_len, n, gates), dt)          # pre-activation gradients, input side
    dgh = dgx if mode != "GRU" else xp.empty((t_len, n, gates), dt)   # recurrent side
    dh_next = xp.zeros(hx.shape, dt) if g_hn is None else g_hn.astype(dt, copy=True)
    dc_next = None
    if mode == "LSTM":
        dc_next = xp.zeros(cx.shape, dt) if g_cn is None else g_cn.astype(dt, copy=True)
    dhh_all = xp.empty((t_len, n, out.shape[2]), dt) if w_hr is not None else None
    order = list(_order(t_len, reverse))
    prev = {t: (order[k - 1] if k else None) for k, t in enumerate(order)}

    def h_prev(t: int) -> Any:
        return hx if prev[t] is None else out[prev[t]]
    for t in reversed(order):
        dh = g_out[t] + dh_next
        if mode == "LSTM":
            act = reserve[t]
            i, f, g, o = (act[:, k * hidden:(k + 1) * hidden] for k in range(4))
            c = act[:, 4 * hidden:5 * hidden]
            c_prev = cx if prev[t] is None else reserve[prev[t], :, 4 * hidden:5 * hidden]
            if w_hr is not None:
                dhh_all[t] = dh
                dh = dh @ w_hr
            tc = xp.tanh(c)
            dc = dc_next + dh * o * (1 - tc * tc)
            d = dgx[t]
            d[:, :hidden] = dc * g * i * (1 - i)
            d[:, hidden:2 * hidden] = dc * c_prev * f * (1 - f)
            d[:, 2 * hidden:3 * hidden] = dc * i * (1 - g * g)
            d[:, 3 * hidden:] = dh * tc * o * (1 - o)
            dc_next = dc * f
            dh_next = d @ w_hh
        elif mode == "GRU":
            act = reserve[t]
            r, z, nn, nh = (act[:, k * hidden:(k + 1) * hidden] for k in range(4))
            hp = h_prev(t)
            dn = dh * (1 - z) * (1 - nn * nn)
            dz = dh * (hp - nn) * z * (1 - z)
            dr = dn * nh * r * (1 - r)
            dgx[t, :, :hidden], dgx[t, :, hidden:2 * hidden] = dr, dz
            dgx[t, :, 2 * hidden:] = dn
            dgh[t, :, :2 * hidden] = dgx[t, :, :2 * hidden]
            dgh[t, :, 2 * hidden:] = dn * r
            dh_next = dh * z + dgh[t] @ w_hh
        else:
            h = out[t]
            dgx[t] = dh * (1 - h * h) if mode == "RNN_TANH" else dh * (h > 0)
            dh_next = dgx[t] @ w_hh
    flat_x, flat_gx = x.reshape(t_len * n, -1), dgx.reshape(t_len * n, gates)
    flat_gh = dgh.reshape(t_len * n, gates)
    h_prevs = xp.stack([h_prev(t) for t in range(t_len)]).reshape(t_len * n, -1)
    g_input = (flat_gx @ w_ih).reshape(x.shape)
    g_w_ih = flat_gx.T @ flat_x
    g_w_hh = flat_gh.T @ h_prevs
    g_b_ih, g_b_hh = flat_gx.sum(axis=0), flat_gh.sum(axis=0)
    g_w_hr = xp.empty((0,), dt)
    if w_hr is not None:
        hh = reserve[:, :, 5 * hidden:].reshape(t_len * n, hidden)
        g_w_hr = dhh_all.reshape(t_len * n, -1).T @ hh
    g_cx = dc_next if mode == "LSTM" else xp.empty((0,), dt)
    return g_input, dh_next, g_cx, g_w_ih, g_w_hh, g_b_ih, g_b_hh, g_w_hr
