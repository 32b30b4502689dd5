"""Recurrent layers as ONNX's own nodes: ``rnn_layer`` (one layer and direction) becomes
``LSTM``, ``GRU`` or ``RNN`` with ``direction`` forward or reverse.

ONNX orders the gates differently from torch: an LSTM's ``i, o, f, c`` (torch: ``i, f, g,
o``), a GRU's ``z, r, h`` (torch: ``r, z, n``; torch's GRU is ONNX's
``linear_before_reset=1``), so the exported graph splits the weights and biases into their
gate blocks and concatenates them in ONNX's order (``Split``/``Concat`` nodes, folded where the
weights are constants). ONNX's ``LSTM`` has no projection: an LSTM with ``proj_size`` is
refused with an ``ExportError``. The fourth output (the activations the backward reads) is
not produced: an inference graph never reads it."""
from __future__ import annotations

from typing import Any

import numpy as np

from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType

from ._context import Context, Sym, numpy_dtype
from ._table import emits, out_dtype

# (ONNX op, its gate order as indices into torch's blocks)
_ONNX = {"LSTM": ("LSTM", (0, 3, 1, 2)), "GRU": ("GRU", (1, 0, 2)),
         "RNN_TANH": ("RNN", (0,)), "RNN_RELU": ("RNN", (0,))}


def _reordered(cx: Context, value: str, order: tuple[int, ...]) -> str:
    """``value``'s gate blocks (along dim 0) in ``order``."""
    if order == tuple(range(len(order))):
        return value
    parts = cx.op("Split", [value], outputs=len(order), axis=0,
                  **({"num_outputs": len(order)} if cx.opset >= 18 else {}))
    parts = parts if isinstance(parts, list) else [parts]
    return cx.op("Concat", [parts[k] for k in order], axis=0)


def _leading(cx: Context, value: str) -> str:
    """``value`` with a new leading dim of 1 (ONNX's ``num_directions``)."""
    return cx.op("Unsqueeze", [value, cx.ints([0])])


@emits("rnn_layer")
def _rnn_layer(cx: Context, node: Node, ins: list) -> list:
    x, hx, cx_in, w_ih, w_hh, b_ih, b_hh, w_hr = ins
    mode, reverse = node.attrs["mode"], bool(node.attrs.get("reverse", False))
    if w_hr is not None:
        raise cx.error("rnn_layer: ONNX's LSTM has no projection (proj_size); an LSTM with "
                       "proj_size cannot be exported")
    d = out_dtype(node)
    w_type = node.inputs[3].type
    if not (isinstance(w_type, TensorType) and w_type.shape is not None
            and isinstance(w_type.shape[0], int)):
        raise cx.error(f"rnn_layer: the weight's size must be known at export, got {w_type}")
    gates = int(w_type.shape[0])
    op_type, order = _ONNX[mode]
    hidden = gates // len(order)
    w = _leading(cx, _reordered(cx, cx.tensor(w_ih, d), order))
    r = _leading(cx, _reordered(cx, cx.tensor(w_hh, d), order))
    zeros = cx.const(np.zeros(gates, numpy_dtype(d)))
    biases = [zeros if b is None else _reordered(cx, cx.tensor(b, d), order)
              for b in (b_ih, b_hh)]
    b = _leading(cx, cx.op("Concat", biases, axis=0))
    inputs = [cx.tensor(x, d), w, r, b, "", _leading(cx, cx.tensor(hx, d))]
    kw: dict[str, Any] = {"hidden_size": hidden,
                          "direction": "reverse" if reverse else "forward"}
    if mode == "LSTM":
        inputs.append(_leading(cx, cx.tensor(cx_in, d)))
    elif mode == "GRU":
        kw["linear_before_reset"] = 1
    else:
        kw["activations"] = ["Tanh" if mode == "RNN_TANH" else "Relu"]
    outs = cx.op(op_type, inputs, outputs=3 if mode == "LSTM" else 2, **kw)
    y = cx.op("Squeeze", [outs[0], cx.ints([1])])           # (T, 1, N, H) -> (T, N, H)
    h_n = cx.op("Squeeze", [outs[1], cx.ints([0])])
    c_n = cx.op("Squeeze", [outs[2], cx.ints([0])]) if mode == "LSTM" else \
        cx.const(np.zeros(0, numpy_dtype(d)))
    unread = cx.const(np.zeros(0, numpy_dtype(d)))
    return [Sym(y, d, 3), Sym(h_n, d, 2), Sym(c_n, d, 2 if mode == "LSTM" else 1),
            Sym(unread, d, 1)]

