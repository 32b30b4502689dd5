"""Recurrent layers: ``RNN`` (tanh or relu), ``LSTM`` (with ``proj_size``), ``GRU`` and their
one-step cells, with PyTorch's constructors, parameter names and shapes, gate order,
initialization, input forms (batched or not, batch-first or not, ``PackedSequence``) and
error messages, so that a torch ``state_dict`` loads with ``strict=True`` and the outputs and
gradients agree with torch's.

    >>> lstm = nn.LSTM(10, 20, num_layers=2, batch_first=True)
    >>> output, (h_n, c_n) = lstm(scriptmod.randn(3, 5, 10))
    >>> output.shape, h_n.shape
    (scriptmod.Size([3, 5, 20]), scriptmod.Size([2, 3, 20]))

The math lives in ``nn._functional_rnn`` (one step function per cell kind and the time loop);
this file handles the arguments and the module state.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from scriptmod._creation import empty, zeros
from scriptmod.ir.errors import ShapeError
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.nn._functional_rnn import CELL_KINDS, CellWeights, State, rnn
from scriptmod.nn.module import Module
from scriptmod.nn.parameter import Parameter
from scriptmod.nn.utils.rnn import PackedSequence
from scriptmod.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

# torch's parameter name (before "_l{layer}") -> the CellWeights field it fills
_CELL_FIELDS = {"weight_ih": "w_ih", "weight_hh": "w_hh", "bias_ih": "b_ih", "bias_hh": "b_hh",
                "weight_hr": "w_hr"}


def _uniform_by_hidden_size(module: Module, hidden_size: int) -> None:
    """torch's ``reset_parameters`` for recurrent layers: every parameter ~ U(-k, k),
    k = 1/sqrt(hidden_size)."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
    for weight in module.parameters():
        init.uniform_(weight, -bound, bound)


def _check_sizes(input_size: Any, hidden_size: Any, num_layers: int, dropout: Any,
                 bias: Any, batch_first: Any, proj_size: int) -> None:
    """torch's constructor checks, in torch's order and words."""
    if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) \
            or not 0 <= dropout <= 1:
        raise ValueError("dropout should be a number in range [0, 1] representing the "
                         "probability of an element being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                      f"non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}", stacklevel=4)
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                              ("input_size", input_size, int), ("hidden_size", hidden_size, int)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                            f"{type(value).__name__}")
        if kind is int and value <= 0:
            raise ValueError(f"{name} must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")


class RNNBase(Module):
    """What ``RNN``, ``LSTM`` and ``GRU`` share: the parameters of every layer and direction
    (``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``,
    ``weight_hr_l{k}``, with ``_reverse`` for the backward direction) and the forward pass.
    ``mode`` is torch's: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        _check_sizes(input_size, hidden_size, num_layers, dropout, bias, batch_first, proj_size)
        if mode not in CELL_KINDS:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gate_size = CELL_KINDS[mode].gates * hidden_size
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        directions = 2 if bidirectional else 1
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            layer_input_size = input_size if layer == 0 else real_hidden_size * directions
            shapes = {"weight_ih": (gate_size, layer_input_size),
                      "weight_hh": (gate_size, real_hidden_size),
                      "bias_ih": (gate_size,) if bias else None,
                      "bias_hh": (gate_size,) if bias else None,
                      "weight_hr": (proj_size, hidden_size) if proj_size > 0 else None}
            for suffix in ("", "_reverse")[:directions]:
                names = []
                for kind, shape in shapes.items():
                    if shape is not None:
                        names.append(f"{kind}_l{layer}{suffix}")
                        setattr(self, names[-1],
                                Parameter(empty(*shape, device=device, dtype=dtype)))
                self._flat_weights_names.extend(names)
        self.reset_parameters()

    @property
    def _flat_weights(self) -> list[Parameter | None]:
        """The parameters in torch's flat order (layer, direction, then ih, hh, biases, hr)."""
        return [getattr(self, name, None) for name in self._flat_weights_names]

    @property
    def _all_weights(self) -> list[list[str]]:
        """The parameter names grouped per layer and direction (a flat list of names is the
        only state kept: a scripted model rebuilds the layer from plain attributes)."""
        groups: dict[str, list[str]] = {}
        for name in self._flat_weights_names:
            groups.setdefault(name.partition("_l")[2], []).append(name)
        return list(groups.values())

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters grouped per layer and direction, as torch's ``all_weights``."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """Accepted for torch compatibility: torch packs the weights into one buffer for cuDNN;
        scriptmod's parameters need no repacking, so this does nothing."""

    def reset_parameters(self) -> None:
        _uniform_by_hidden_size(self, self.hidden_size)

    def _cell_weights(self) -> list[CellWeights]:
        """One ``CellWeights`` per layer and direction, in ``rnn``'s order."""
        return [CellWeights(**{_CELL_FIELDS[name.partition("_l")[0]]: getattr(self, name)
                               for name in names})
                for names in self._all_weights]

    # ---- checks (torch's methods and messages) -----------------------------------------------
    def check_input(self, input: Tensor, batch_sizes: Any) -> None:
        weight_dtype = self.weight_ih_l0.dtype
        if input.dtype is not weight_dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({weight_dtype}). Convert input: input.to({weight_dtype}), or "
                             f"convert model: model.to({input.dtype})")
        expected_input_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_input_dim:
            raise ShapeError(f"input must have {expected_input_dim} dimensions, got "
                             f"{input.dim()}")
        if self.input_size != input.shape[-1]:
            raise ShapeError(f"input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {input.shape[-1]}")

    def get_expected_hidden_size(self, input: Tensor, batch_sizes: Any) -> tuple[int, int, int]:
        return (self.num_layers * (2 if self.bidirectional else 1),
                self._batch_size(input, batch_sizes), self.proj_size or self.hidden_size)

    def _batch_size(self, input: Tensor, batch_sizes: Any) -> int:
        if batch_sizes is not None:
            return int(batch_sizes[0])
        return input.shape[0] if self.batch_first else input.shape[1]

    def check_hidden_size(self, hx: Tensor, expected_hidden_size: tuple[int, int, int],
                          msg: str = "Expected hidden size {}, got {}") -> None:
        if tuple(hx.shape) != tuple(expected_hidden_size):
            raise ShapeError(msg.format(tuple(expected_hidden_size), list(hx.shape)))

    def check_forward_args(self, input: Tensor, hidden: Any, batch_sizes: Any) -> None:
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx: Any, permutation: Tensor | None) -> Any:
        """The hidden state with its batch dim (1) reordered by ``permutation``."""
        if permutation is None:
            return hx
        return hx.index_select(1, permutation)

    # ---- the hidden state as a tuple: (h,), or (h, c) for an LSTM ----------------------------
    def _state_sizes(self) -> tuple[int, ...]:
        return (self.hidden_size,)

    def _to_state(self, hx: Any) -> State:
        return (hx,)

    def _from_state(self, state: State) -> Any:
        return state[0]

    def _check_hx_rank(self, hx: Any, rank: int) -> None:
        if hx.dim() != rank:
            kind = "batched 3-D" if rank == 3 else "unbatched 2-D"
            raise ShapeError(f"For {kind} input, hx should also be {rank}-D but got "
                             f"{hx.dim()}-D tensor")

    def _rank_error(self, rank: int) -> str:
        return f"{type(self).__name__}: Expected input to be 2D or 3D, got {rank}D instead"

    # ---- forward --------------------------------------------------------------------------------
    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(output, h_n) — (output, (h_n, c_n)) for an LSTM — for a (T, B, input_size) input
        ((B, T, input_size) with ``batch_first``), an unbatched (T, input_size) one or a
        ``PackedSequence`` (then the output is packed the same way). The annotations are
        torch's tensor overload: ``jit.script`` reads them (it traces the layer for each
        input signature, so a scripted model runs at every sequence length)."""
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        if input.dim() not in (2, 3):
            raise ShapeError(self._rank_error(input.dim()))
        batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not batched:
            input = input.unsqueeze(batch_dim)
        if hx is not None:
            self._check_hx_rank(hx, 3 if batched else 2)
            if not batched:
                hx = self._from_state(tuple(s.unsqueeze(1) for s in self._to_state(hx)))
        state = self._initial_state(input, hx, None)
        time_major = input.transpose(0, 1) if self.batch_first else input
        output, state = self._run(time_major, state, None)
        if self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output, state = output.squeeze(batch_dim), tuple(s.squeeze(1) for s in state)
        return output, self._from_state(state)

    def _forward_packed(self, input: PackedSequence, hx: Any) -> tuple[PackedSequence, Any]:
        data, batch_sizes, sorted_indices, unsorted_indices = input
        sizes = [int(n) for n in batch_sizes.tolist()]
        state = self._initial_state(data, hx, sizes)
        if hx is not None:
            state = self._to_state(self.permute_hidden(self._from_state(state), sorted_indices))
        output, state = self._run(data, state, sizes)
        packed = PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
        return packed, self.permute_hidden(self._from_state(state), unsorted_indices)

    def _initial_state(self, input: Tensor, hx: Any, batch_sizes: Any) -> State:
        """``hx`` as a state tuple after torch's checks, or zeros when it is None."""
        if hx is None:
            self.check_input(input, batch_sizes)
            shape = self.get_expected_hidden_size(input, batch_sizes)
            hx = self._from_state(tuple(zeros(*shape[:2], size, dtype=input.dtype,
                                              device=input.device)
                                        for size in self._state_sizes()))
        self.check_forward_args(input, hx, batch_sizes)
        return self._to_state(hx)

    def _run(self, input: Tensor, state: State, batch_sizes: Any) -> tuple[Tensor, State]:
        return rnn(CELL_KINDS[self.mode], input, state, self._cell_weights(), self.num_layers,
                   self.dropout, self.training, self.bidirectional, batch_sizes)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        for name, default in (("proj_size", 0), ("num_layers", 1), ("bias", True),
                              ("batch_first", False), ("dropout", 0), ("bidirectional", False)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s


def _no_proj_size(proj_size: Any) -> None:
    if proj_size is not None:
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh) (``nonlinearity="relu"``:
    relu), stacked ``num_layers`` deep.

        >>> nn.RNN(4, 8, nonlinearity="relu")(scriptmod.randn(5, 2, 4))[0].shape
        scriptmod.Size([5, 2, 8])
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device: Any = None,
                 dtype: Any = None, *, proj_size: Any = None) -> None:
        _no_proj_size(proj_size)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity

    def _rank_error(self, rank: int) -> str:
        return f"RNN: Expected input to be 2D or 3D, got {rank}D tensor instead"


class GRU(RNNBase):
    """Gated recurrent unit, gates (r, z, n) stacked in that order in the weights:
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.

        >>> nn.GRU(4, 8, bidirectional=True)(scriptmod.randn(5, 2, 4))[1].shape
        scriptmod.Size([2, 2, 8])
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device: Any = None, dtype: Any = None, *,
                 proj_size: Any = None) -> None:
        _no_proj_size(proj_size)
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory, gates (i, f, g, o) stacked in that order in the weights; with
    ``proj_size`` > 0 the hidden state is projected by ``weight_hr_l{k}`` to proj_size.

        >>> output, (h, c) = nn.LSTM(4, 8, proj_size=3)(scriptmod.randn(5, 2, 4))
        >>> output.shape, h.shape, c.shape
        (scriptmod.Size([5, 2, 3]), scriptmod.Size([1, 2, 3]), scriptmod.Size([1, 2, 8]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)

    def forward(self, input: Tensor,  # type: ignore[override]
                hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        return RNNBase.forward(self, input, hx)

    def get_expected_cell_size(self, input: Tensor, batch_sizes: Any) -> tuple[int, int, int]:
        return (self.num_layers * (2 if self.bidirectional else 1),
                self._batch_size(input, batch_sizes), self.hidden_size)

    def check_forward_args(self, input: Tensor, hidden: Any, batch_sizes: Any) -> None:
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def permute_hidden(self, hx: Any, permutation: Tensor | None) -> Any:
        if permutation is None:
            return hx
        return hx[0].index_select(1, permutation), hx[1].index_select(1, permutation)

    def _state_sizes(self) -> tuple[int, ...]:
        return (self.proj_size or self.hidden_size, self.hidden_size)

    def _to_state(self, hx: Any) -> State:
        return tuple(hx)

    def _from_state(self, state: State) -> Any:
        return tuple(state)

    def _check_hx_rank(self, hx: Any, rank: int) -> None:
        if hx[0].dim() != rank or hx[1].dim() != rank:
            kind = "batched 3-D" if rank == 3 else "unbatched 2-D"
            raise ShapeError(f"For {kind} input, hx and cx should also be {rank}-D but got "
                             f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")


# ---- cells: one time step -----------------------------------------------------------------------
class RNNCellBase(Module):
    """What the cells share: ``weight_ih`` (chunks x hidden, input), ``weight_hh`` (chunks x
    hidden, hidden), optional ``bias_ih``/``bias_hh``, and the step through ``mode``'s step
    function."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows = num_chunks * hidden_size
        self.weight_ih = Parameter(empty(rows, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(empty(rows, hidden_size, device=device, dtype=dtype))
        for name in ("bias_ih", "bias_hh"):
            if bias:
                setattr(self, name, Parameter(empty(rows, device=device, dtype=dtype)))
            else:
                self.register_parameter(name, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_by_hidden_size(self, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _step(self, mode: str, input: Tensor, state: State | None) -> State:
        """One step of ``mode``'s cell for a (B, input_size) or unbatched (input_size,) input,
        from ``state`` (zeros when None)."""
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ShapeError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for k, s in enumerate(state or ()):
            if s.dim() not in (1, 2):
                label = f"hx[{k}]" if mode == "LSTM" else "hidden"
                raise ShapeError(f"{name}: Expected {label} to be 1D or 2D, got {s.dim()}D "
                                 f"instead")
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if state is None:
            h = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            state = (h,) * (2 if mode == "LSTM" else 1)
        elif not batched:
            state = tuple(s.unsqueeze(0) for s in state)
        self._check_step_sizes(x, state)
        w = CellWeights(self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        state = CELL_KINDS[mode].step(F.linear(x, w.w_ih, w.b_ih), state, w)
        return state if batched else tuple(s.squeeze(0) for s in state)

    def _check_step_sizes(self, x: Tensor, state: State) -> None:
        """torch's ``check_rnn_cell_forward_input``/``_hidden`` messages."""
        if x.shape[1] != self.input_size:
            raise ShapeError(f"input has inconsistent input_size: got {x.shape[1]} expected "
                             f"{self.input_size}")
        for k, s in enumerate(state):
            if s.dim() != 2 or s.shape[0] != x.shape[0]:
                raise ShapeError(f"Input batch size {x.shape[0]} doesn't match hidden{k} batch "
                                 f"size {s.shape[0]}")
            if s.shape[1] != self.hidden_size:
                raise ShapeError(f"hidden{k} has inconsistent hidden_size: got {s.shape[1]}, "
                                 f"expected {self.hidden_size}")


class RNNCell(RNNCellBase):
    """One Elman step: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu).

        >>> nn.RNNCell(4, 8)(scriptmod.randn(2, 4)).shape
        scriptmod.Size([2, 8])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        mode = f"RNN_{self.nonlinearity.upper()}"
        return self._step(mode, input, None if hx is None else (hx,))[0]


class LSTMCell(RNNCellBase):
    """One LSTM step, gates (i, f, g, o): returns (h', c').

        >>> h, c = nn.LSTMCell(4, 8)(scriptmod.randn(2, 4)); h.shape
        scriptmod.Size([2, 8])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor,
                hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        h, c = self._step("LSTM", input, None if hx is None else tuple(hx))
        return h, c


class GRUCell(RNNCellBase):
    """One GRU step, gates (r, z, n).

        >>> nn.GRUCell(4, 8)(scriptmod.randn(4)).shape
        scriptmod.Size([8])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._step("GRU", input, None if hx is None else (hx,))[0]
