"""The recurrent layers' math: one step function per cell kind, and ``rnn``, which runs a stack
of layers over a padded or packed sequence with it (what torch's ``_VF.lstm``, ``_VF.gru``,
``_VF.rnn_tanh`` and ``_VF.rnn_relu`` compute).

    >>> kind = CELL_KINDS["GRU"]
    >>> w = CellWeights(w_ih=scriptmod.randn(6, 3), w_hh=scriptmod.randn(6, 2))
    >>> output, (h_n,) = rnn(kind, scriptmod.randn(5, 4, 3), (scriptmod.zeros(1, 4, 2),), [w],
    ...                      num_layers=1, dropout=0.0, training=False, bidirectional=False)
    >>> output.shape, h_n.shape
    (scriptmod.Size([5, 4, 2]), scriptmod.Size([1, 4, 2]))

Every layer and cell of ``scriptmod.nn.modules.rnn`` goes through here. A padded sequence runs
each layer and direction as one ``rnn_layer`` op (``run_layer``: the time loop inside one kernel,
its backward one op; a trace holds one node per layer and direction and runs at every
sequence length). A packed sequence, whose rows leave and join step by step, and the cells
run the step functions op by op (a trace unrolls that loop and guards its length). The
input-to-hidden GEMM of all time steps is one ``linear`` before the loop (as torch does on
CPU); a step only does the recurrent GEMM and the gate arithmetic.

A *state* is ``(h,)`` or, for an LSTM, ``(h, c)``; ``state[0]`` is always the step's output.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from scriptmod._creation import zeros
from scriptmod._dispatch import dispatch
from scriptmod._shape_ops import cat, stack
from scriptmod.autograd.function import Function
from scriptmod.autograd.grad_mode import is_grad_enabled
from scriptmod.ir.errors import ShapeError
from scriptmod.nn import functional as F
from scriptmod.nn._functional_activation import _tracing
from scriptmod.tensor import Tensor

__all__ = ["CELL_KINDS", "CellKind", "CellWeights", "gru_step", "lstm_step",
           "recurrent_gemm", "rnn", "rnn_relu_step", "rnn_tanh_step", "run_direction",
           "run_layer", "time_steps"]

State = tuple[Tensor, ...]


class CellWeights(NamedTuple):
    """One layer and direction's weights, named and shaped as torch's (``G`` = gates x
    hidden_size, ``P`` = proj_size or hidden_size): w_ih (G, input), w_hh (G, P), b_ih and
    b_hh (G,) or None, w_hr (P, hidden_size) for an LSTM with projections, else None."""

    w_ih: Tensor
    w_hh: Tensor
    b_ih: Tensor | None = None
    b_hh: Tensor | None = None
    w_hr: Tensor | None = None


StepFn = Callable[[Tensor, State, CellWeights], State]


# ---- one time step per cell kind: (x_t @ w_ih^T + b_ih, state, weights) -> new state --------
def recurrent_gemm(h: Tensor, w: CellWeights) -> Tensor:
    """h @ w_hh^T + b_hh, computed as (w_hh @ h^T)^T: with few rows in h, OpenBLAS multiplies
    the row-major w_hh by the small h^T in 0.44 ms where h @ w_hh^T (a transposed right
    operand) took 0.83 ms, at (16, 512) x (512, 2048) on one thread (torch: 0.52 ms)."""
    gh = w.w_hh.matmul(h.t()).t()
    return gh if w.b_hh is None else gh + w.b_hh


def rnn_tanh_step(gx: Tensor, state: State, w: CellWeights) -> State:
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh)."""
    return (F.tanh(gx + recurrent_gemm(state[0], w)),)


def rnn_relu_step(gx: Tensor, state: State, w: CellWeights) -> State:
    """h' = relu(W_ih x + b_ih + W_hh h + b_hh)."""
    return (F.relu(gx + recurrent_gemm(state[0], w)),)


def lstm_step(gx: Tensor, state: State, w: CellWeights) -> State:
    """Gates in torch's order (i, f, g, o): c' = f*c + i*g, h' = o*tanh(c'), then h' @ W_hr^T
    when the LSTM has projections."""
    h, c = state
    i, f, g, o = (gx + recurrent_gemm(h, w)).chunk(4, -1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    h = F.sigmoid(o) * F.tanh(c)
    if w.w_hr is not None:
        h = F.linear(h, w.w_hr)
    return h, c


def gru_step(gx: Tensor, state: State, w: CellWeights) -> State:
    """Gates in torch's order (r, z, n): n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
    h' = (1 - z) * n + z * h, computed as torch does: n + z * (h - n)."""
    h = state[0]
    r_x, z_x, n_x = gx.chunk(3, -1)
    r_h, z_h, n_h = recurrent_gemm(h, w).chunk(3, -1)
    r = F.sigmoid(r_x + r_h)
    z = F.sigmoid(z_x + z_h)
    n = F.tanh(n_x + r * n_h)
    return ((h - n) * z + n,)


@dataclass(frozen=True)
class CellKind:
    """A recurrent cell: torch's mode name, how many gate blocks its weights stack, its step."""

    mode: str
    gates: int
    step: StepFn


CELL_KINDS = {kind.mode: kind for kind in (CellKind("RNN_TANH", 1, rnn_tanh_step),
                                           CellKind("RNN_RELU", 1, rnn_relu_step),
                                           CellKind("LSTM", 4, lstm_step),
                                           CellKind("GRU", 3, gru_step))}


# ---- the time loop ----------------------------------------------------------------------------
class _StepRows(Function):
    """The rows of each time step of a 2-D ``gx`` (``sizes[t]`` rows for step t) as views,
    whose gradients come back as one concatenation. Sliced op by op, each step's backward
    would write its gradient into a zero tensor of gx's full size and the T of them would be
    summed: O(T^2) traffic (2-layer LSTM(256 -> 512), T=35, batch 16, forward + backward on
    one thread: 497 ms that way, 331 ms this way)."""

    @staticmethod
    def forward(ctx: Any, gx: Tensor, sizes: list[int]) -> tuple[Tensor, ...]:
        ctx.sizes, ctx.row_shape, ctx.dtype = sizes, tuple(gx.shape[1:]), gx.dtype
        return gx.split(sizes)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor, None]:
        return cat([g if g is not None else zeros(n, *ctx.row_shape, dtype=ctx.dtype)
                    for g, n in zip(grads, ctx.sizes)]), None


def time_steps(gx: Tensor, batch_sizes: Sequence[int] | None) -> Sequence[Tensor]:
    """The input projection of each time step: (B, G) slices of a (T, B, G) ``gx``, or the
    rows of each step of a packed (N, G) one. A trace records plain slices (its unbind guards
    the sequence length)."""
    if _tracing() or not (gx.requires_grad and is_grad_enabled()):
        return gx.unbind(0) if batch_sizes is None else gx.split(list(batch_sizes))
    if batch_sizes is None:
        return _StepRows.apply(gx.flatten(0, 1), [gx.shape[1]] * gx.shape[0])
    return _StepRows.apply(gx, list(batch_sizes))


def run_direction(step: StepFn, gx_steps: Sequence[Tensor], state0: State, w: CellWeights,
                  batch_sizes: Sequence[int] | None, reverse: bool) -> tuple[list[Tensor], State]:
    """One layer in one direction: the outputs of every step (in time order) and the final
    state. ``batch_sizes`` (a packed sequence, sorted by decreasing length) says how many rows
    step t has; a row's final state is taken at its last valid step. None: all rows, all steps."""
    if reverse:
        return _run_backward(step, gx_steps, state0, w, batch_sizes)
    state, outputs, finished = state0, [], []
    for t, gx in enumerate(gx_steps):
        if batch_sizes is not None and batch_sizes[t] < state[0].shape[0]:
            finished.append(tuple(s[batch_sizes[t]:] for s in state))
            state = tuple(s[:batch_sizes[t]] for s in state)
        state = step(gx, state, w)
        outputs.append(state[0])
    if not finished:
        return outputs, state
    parts = [state] + finished[::-1]           # rows 0.. of the longest sequences first
    return outputs, tuple(cat([p[k] for p in parts]) for k in range(len(state)))


def _run_backward(step: StepFn, gx_steps: Sequence[Tensor], state0: State, w: CellWeights,
                  batch_sizes: Sequence[int] | None) -> tuple[list[Tensor], State]:
    """The reverse direction: a row joins (with its initial state) at its last valid step."""
    state = state0
    if batch_sizes is not None:
        state = tuple(s[:batch_sizes[-1]] for s in state0)
    outputs: list[Tensor] = [None] * len(gx_steps)   # type: ignore[list-item]
    for t in reversed(range(len(gx_steps))):
        have = state[0].shape[0]
        if batch_sizes is not None and batch_sizes[t] > have:
            state = tuple(cat([s, s0[have:batch_sizes[t]]]) for s, s0 in zip(state, state0))
        state = step(gx_steps[t], state, w)
        outputs[t] = state[0]
    return outputs, state


def run_layer(kind: CellKind, input: Tensor, state0: State, w: CellWeights,
          reverse: bool) -> tuple[Tensor, State]:
    """One layer in one direction over a padded (T, B, features) ``input``: the ``rnn_layer``
    op (``runtime.rnn``: the time loop in one kernel, backpropagation through time in one
    op; traced, one node whose length is the input's, so the trace runs at every length).
    Returns every step's output (T, B, P) and the final state."""
    lstm = kind.mode == "LSTM"
    out, h, c, _ = dispatch("rnn_layer", (input, state0[0], state0[1] if lstm else None,
                                          w.w_ih, w.w_hh, w.b_ih, w.b_hh, w.w_hr),
                            {"mode": kind.mode, "reverse": reverse})
    return out, ((h, c) if lstm else (h,))


def rnn(kind: CellKind, input: Tensor, hx: State, weights: Sequence[CellWeights],
        num_layers: int, dropout: float, training: bool, bidirectional: bool,
        batch_sizes: Sequence[int] | None = None) -> tuple[Tensor, State]:
    """A stack of recurrent layers (torch's ``_VF`` kernels, time-major).

    ``input`` is (T, B, input_size), or a packed sequence's data (N, input_size) with its
    ``batch_sizes``; each of ``hx`` is (num_layers * directions, B, size); ``weights`` holds
    one ``CellWeights`` per layer and direction (layer-major, forward first). Dropout with
    probability ``dropout`` is applied to every layer's output but the last when ``training``.
    Returns the last layer's output (as ``input``, features = directions * hidden) and each
    state component's final values stacked as ``hx``."""
    if batch_sizes is None and input.shape[0] == 0:
        raise ShapeError("Expected sequence length to be larger than 0 in RNN")
    directions = 2 if bidirectional else 1
    finals: list[list[Tensor]] = [[] for _ in hx]
    layer_input = input
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            w = weights[index]
            state0 = tuple(s[index] for s in hx)
            if batch_sizes is None:                # padded: the layer as one op
                out, state = run_layer(kind, layer_input, state0, w, reverse=direction == 1)
                outputs.append(out)
            else:                                  # packed: rows leave and join by step
                gx = F.linear(layer_input, w.w_ih, w.b_ih)
                steps, state = run_direction(kind.step, time_steps(gx, batch_sizes), state0, w,
                                             batch_sizes, reverse=direction == 1)
                outputs.append(cat(steps))
            for final, s in zip(finals, state):
                final.append(s)
        layer_input = outputs[0] if directions == 1 else cat(outputs, -1)
        if dropout > 0 and training and layer < num_layers - 1:
            layer_input = F.dropout(layer_input, dropout, True)
    return layer_input, tuple(stack(final) for final in finals)
