"""Kernels of the recurrent layer ops (``ir.ops.rnn``): ``runtime.rnn`` on NumPy or CuPy,
every tensor cast to the input's dtype, after checking the shapes the loop trusts."""
from __future__ import annotations

from typing import Any

from scriptmod.ir.errors import ShapeError
from scriptmod.ir.ops.rnn import MODES
from .. import rnn
from . import kernel


def _check(x: Any, hx: Any, cx: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, w_hr: Any,
           mode: str) -> None:
    """Raise ``ShapeError`` naming the argument whose shape disagrees with the others."""
    if mode not in MODES:
        raise ShapeError(f"rnn_layer: mode must be one of {sorted(MODES)}, got {mode!r}")
    if x.ndim != 3 or w_ih.ndim != 2 or w_hh.ndim != 2:
        raise ShapeError(f"rnn_layer: expected a (T, N, input) input and 2-D weights, got "
                         f"input {tuple(x.shape)}, w_ih {tuple(w_ih.shape)}, "
                         f"w_hh {tuple(w_hh.shape)}")
    if x.shape[0] == 0:
        raise ShapeError(f"rnn_layer: expected a sequence length larger than 0 (as torch's "
                         f"RNNs), got input {tuple(x.shape)}")
    gates = w_ih.shape[0]
    if gates % MODES[mode] or w_hh.shape[0] != gates:
        raise ShapeError(f"rnn_layer: {mode} expects w_ih and w_hh of {MODES[mode]} x hidden "
                         f"rows, got w_ih {tuple(w_ih.shape)}, w_hh {tuple(w_hh.shape)}")
    hidden, proj = gates // MODES[mode], w_hh.shape[1]
    want = {"input": (x.shape[2], w_ih.shape[1]), "hx": (tuple(hx.shape), (x.shape[1], proj))}
    if mode == "LSTM":
        want["cx"] = (None if cx is None else tuple(cx.shape), (x.shape[1], hidden))
    for name, b in (("b_ih", b_ih), ("b_hh", b_hh)):
        if b is not None:
            want[name] = (tuple(b.shape), (gates,))
    if w_hr is not None or proj != hidden:
        want["w_hr"] = (None if w_hr is None else tuple(w_hr.shape), (proj, hidden))
    for name, (got, expected) in want.items():
        if got != expected:
            raise ShapeError(f"rnn_layer: expected {name} {expected}, got {got}")


@kernel("rnn_layer")
def _rnn_layer(xp: Any, x: Any, hx: Any, cx: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any,
               w_hr: Any, mode: str, reverse: bool = False) -> tuple:
    _check(x, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr, mode)
    cast = _caster(x.dtype)
    return rnn.forward(xp, x, *map(cast, (hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr)), mode,
                       bool(reverse))


@kernel("rnn_layer_backward")
def _rnn_layer_backward(xp: Any, g_out: Any, g_hn: Any, g_cn: Any, x: Any, hx: Any, cx: Any,
                        w_ih: Any, w_hh: Any, w_hr: Any, out: Any, reserve: Any, mode: str,
                        reverse: bool = False) -> tuple:
    _check(x, hx, cx, w_ih, w_hh, None, None, w_hr, mode)
    if tuple(g_out.shape) != tuple(out.shape) or reserve.ndim != 3 \
            or (reserve.shape[0], reserve.shape[2]) != x.shape[:2]:
        raise ShapeError(f"rnn_layer_backward: expected grad_output {tuple(out.shape)} and a "
                         f"reserve of the input's steps, got {tuple(g_out.shape)}, "
                         f"{tuple(reserve.shape)}")
    cast = _caster(x.dtype)
    return rnn.backward(xp, *map(cast, (g_out, g_hn, g_cn)), x,
                        *map(cast, (hx, cx, w_ih, w_hh, w_hr, out, reserve)), mode,
                        bool(reverse))


def _caster(dtype: Any) -> Any:
    return lambda a: None if a is None else a.astype(dtype, copy=False)
