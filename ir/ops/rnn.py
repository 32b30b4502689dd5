"""One recurrent layer in one direction as one op (``runtime.rnn``): an RNN's time loop is
inside the op, not unrolled into the graph, so a trace of an LSTM at one sequence length runs
at another (the length is the input's first dim, symbolic like any other), and the loop runs
as one kernel. ``rnn_layer_backward`` is its first-order backward (backpropagation through
time in one op).

``mode`` is torch's: ``LSTM``, ``GRU``, ``RNN_TANH`` or ``RNN_RELU``. The input is
time-major ``(T, N, I)``; ``hx`` is ``(N, P)`` (``P``: ``proj_size`` or ``hidden_size``),
``cx`` an LSTM's ``(N, H)``; the weights are torch's one layer and direction's. The outputs
are the hidden state of every step ``(T, N, P)``, the last ones ``h_n`` and ``c_n`` (an empty
tensor but for an LSTM) and the saved activations the backward reads (``reserve``, ``(T, R,
N)``: ``runtime.rnn.reserve_width``, one column per sequence).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import symdims as SD
from ..errors import ShapeError
from ..schema import NONDIFF, op
from ..types import Shape

MODES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _shape(ops: Sequence[Any], k: int) -> Shape | None:
    """Input ``k``'s shape; None for an absent optional input or an unknown shape."""
    o = ops[k] if k < len(ops) else None
    return o[1] if isinstance(o, tuple) else None


def _hidden(mode: str, w_ih: Shape) -> Any:
    if mode not in MODES:
        raise ShapeError(f"rnn_layer: mode must be one of {sorted(MODES)}, got {mode!r}")
    return SD.floordiv(w_ih[0], MODES[mode])


def reserve_width(mode: str, hidden: Any, proj: bool) -> Any:
    """The reserve's middle dim ``R`` for ``hidden`` (an int or a symbolic dim): an LSTM's
    activated gates and ``c`` (and ``o * tanh(c)`` with projections), a GRU's ``r, z, n``
    and ``W_hn h + b_hn``, nothing for the plain RNNs (``runtime.rnn``)."""
    if mode == "LSTM":
        return SD.mul(hidden, 6 if proj else 5)
    return SD.mul(hidden, 4) if mode == "GRU" else 0


def _layer_shapes(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple | None:
    x, w_ih, w_hh, w_hr = (_shape(ops, k) for k in (0, 3, 4, 7))
    if x is None or w_ih is None or w_hh is None:
        return None
    if len(x) != 3 or len(w_ih) != 2 or len(w_hh) != 2:
        raise ShapeError(f"rnn_layer: expected a (T, N, input) input and 2-D weights, got "
                         f"input {tuple(x)}, w_ih {tuple(w_ih)}, w_hh {tuple(w_hh)}")
    mode = attrs["mode"]
    hidden = _hidden(mode, w_ih)
    t, n, p = x[0], x[1], w_hh[1]
    c = (n, hidden) if mode == "LSTM" else (0,)
    return (t, n, p), (n, p), c, (t, reserve_width(mode, hidden, w_hr is not None), n)


op("rnn_layer(Tensor input, Tensor hx, Tensor? cx, Tensor w_ih, Tensor w_hh, Tensor? b_ih, "
   "Tensor? b_hh, Tensor? w_hr, *, str mode, bool reverse=False) "
   "-> (Tensor, Tensor, Tensor, Tensor)",
   lambda ops, attrs: (ops[0][0],) * 4, _layer_shapes,
   doc="(output, h_n, c_n, reserve) of one recurrent layer in one direction.")


def _backward_shapes(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple | None:
    x, hx, cx, w_ih, w_hh, w_hr = (_shape(ops, k) for k in (3, 4, 5, 6, 7, 8))
    if x is None or hx is None or w_ih is None or w_hh is None:
        return None
    g = w_ih[0]
    return (tuple(x), tuple(hx), tuple(cx) if attrs["mode"] == "LSTM" and cx else (0,),
            tuple(w_ih), tuple(w_hh), (g,), (g,), tuple(w_hr) if w_hr is not None else (0,))


op("rnn_layer_backward(Tensor grad_output, Tensor? grad_hn, Tensor? grad_cn, Tensor input, "
   "Tensor hx, Tensor? cx, Tensor w_ih, Tensor w_hh, Tensor? w_hr, Tensor output, "
   "Tensor reserve, *, str mode, bool reverse=False) "
   "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
   lambda ops, attrs: (ops[3][0],) * 8, _backward_shapes, NONDIFF,
   doc="(grad input, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr) of rnn_layer; the ones of "
       "inputs the layer lacks are empty.")
