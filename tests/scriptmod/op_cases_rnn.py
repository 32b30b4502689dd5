"""``op_cases`` rows of the recurrent layer ops (imported by ``op_cases`` at its end): a plain
float64 NumPy loop as ``rnn_layer``'s reference, and scriptmod's autograd of the op-by-op
layer (``derivatives_rnn._unrolled``) as ``rnn_layer_backward``'s."""
from __future__ import annotations

from typing import Any

import numpy as np

from op_cases import Gen, Sample, case


def _sig(a: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-a))


def _layer_inputs(g: Gen, mode: str, proj: int = 0, bias: bool = True,
                  t: int = 4) -> tuple:
    gates = {"LSTM": 4, "GRU": 3}.get(mode, 1)
    n, i, h = 3, 5, 4
    p = proj or h
    x, hx, cx = g.arr((t, n, i)), g.arr((n, p)), g.arr((n, h)) if mode == "LSTM" else None
    w_ih, w_hh = g.arr((gates * h, i), -0.5, 0.5), g.arr((gates * h, p), -0.5, 0.5)
    b_ih, b_hh = (g.arr((gates * h,)), g.arr((gates * h,))) if bias else (None, None)
    w_hr = g.arr((p, h), -0.5, 0.5) if proj else None
    return x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr


LAYERS = [("LSTM", 0, True, False), ("LSTM", 2, True, True), ("LSTM", 0, False, True),
          ("GRU", 0, True, False), ("GRU", 0, False, True), ("RNN_TANH", 0, True, True),
          ("RNN_RELU", 0, True, False)]


def _layer_samples(g: Gen) -> list[Sample]:
    return [Sample(f"{mode.lower()}{'-proj' if proj else ''}{'' if bias else '-nobias'}"
                   f"{'-rev' if rev else ''}", _layer_inputs(g, mode, proj, bias),
                   {"mode": mode, "reverse": rev}) for mode, proj, bias, rev in LAYERS]


def _layer_ref(x: np.ndarray, hx: np.ndarray, cx: Any, w_ih: np.ndarray, w_hh: np.ndarray,
               b_ih: Any, b_hh: Any, w_hr: Any, mode: str, reverse: bool = False) -> tuple:
    """One step at a time, each gate written out; the reserve in ``runtime.rnn``'s layout,
    ``(T, R, N)``."""
    b_ih = 0 if b_ih is None else b_ih
    b_hh = 0 if b_hh is None else b_hh
    h, c = hx, cx
    outs, saved = [None] * len(x), [None] * len(x)
    for t in (reversed(range(len(x))) if reverse else range(len(x))):
        gx, gh = x[t] @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        if mode == "LSTM":
            i, f, g, o = np.split(gx + gh, 4, axis=-1)
            i, f, g, o = _sig(i), _sig(f), np.tanh(g), _sig(o)
            c = f * c + i * g
            hh = o * np.tanh(c)
            h = hh if w_hr is None else hh @ w_hr.T
            saved[t] = [i, f, g, o, c] + ([] if w_hr is None else [hh])
        elif mode == "GRU":
            (rx, zx, nx), (rh, zh, nh) = np.split(gx, 3, axis=-1), np.split(gh, 3, axis=-1)
            r, z = _sig(rx + rh), _sig(zx + zh)
            n = np.tanh(nx + r * nh)
            h = (1 - z) * n + z * h
            saved[t] = [r, z, n, nh]
        else:
            pre = gx + gh
            h = np.tanh(pre) if mode == "RNN_TANH" else np.maximum(pre, 0)
            saved[t] = [np.zeros((len(h), 0))]
        outs[t] = h
    c_n = c if mode == "LSTM" else np.zeros((0,))
    reserve = np.stack([np.concatenate(s, -1) for s in saved]).transpose(0, 2, 1)
    return np.stack(outs), h, c_n, np.ascontiguousarray(reserve)


case("rnn_layer", _layer_samples, _layer_ref, ("float32", "float64"), grad=False)


def _backward_samples(g: Gen) -> list[Sample]:
    """The forward's output and reserve of a layer without biases (the backward op reads
    the biases only through the reserve, which the reference recomputes)."""
    out = []
    for mode, proj, _, rev in LAYERS:
        x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr = _layer_inputs(g, mode, proj, False)
        y, _, _, reserve = _layer_ref(x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr, mode, rev)
        go, ghn = g.arr(y.shape), g.arr(hx.shape)
        gcn = g.arr(cx.shape) if mode == "LSTM" else None
        out.append(Sample(f"{mode.lower()}{'-proj' if proj else ''}{'-rev' if rev else ''}",
                          (go, ghn, gcn, x, hx, cx, w_ih, w_hh, w_hr, y.astype(x.dtype),
                           reserve.astype(x.dtype)), {"mode": mode, "reverse": rev}))
    return out


def _backward_ref(go: np.ndarray, ghn: Any, gcn: Any, x: np.ndarray, hx: np.ndarray, cx: Any,
                  w_ih: np.ndarray, w_hh: np.ndarray, w_hr: Any, out: np.ndarray,
                  reserve: np.ndarray, mode: str, reverse: bool = False) -> tuple:
    """scriptmod's autograd through the op-by-op layer without biases (their gradients
    are those of biases of zero)."""
    import scriptmod as sm
    from scriptmod.autograd.derivatives_rnn import _unrolled
    gates = w_ih.shape[0]
    ins = [sm.tensor(a, dtype=sm.float64, requires_grad=True) if a is not None else None
           for a in (x, hx, cx, w_ih, w_hh, np.zeros(gates), np.zeros(gates), w_hr)]
    outs = _unrolled(*ins, mode, reverse)
    grads = [go, ghn] + ([gcn] if mode == "LSTM" else [])
    found = sm.autograd.grad(list(outs), [t for t in ins if t is not None],
                             [sm.tensor(gr, dtype=sm.float64) for gr in grads])
    it = iter(found)
    res = [next(it).numpy() if t is not None else np.zeros((0,)) for t in ins]
    return tuple(res)


case("rnn_layer_backward", _backward_samples, _backward_ref, ("float32", "float64"))
