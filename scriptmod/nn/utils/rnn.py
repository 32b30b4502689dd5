"""Variable-length sequences for the recurrent layers (torch's ``nn.utils.rnn``).

A ``PackedSequence`` stores a batch of sequences time step by time step, without padding:
``data`` holds the rows of step 0 for every sequence, then those of step 1 for the sequences
at least 2 long, and so on; ``batch_sizes[t]`` says how many rows step t has. The sequences
are sorted by decreasing length; ``sorted_indices`` gives the original batch position of
each sorted one (None when the input was already sorted) and ``unsorted_indices`` is its
inverse.

    >>> from scriptmod.nn.utils.rnn import pack_sequence, pad_packed_sequence
    >>> packed = pack_sequence([scriptmod.tensor([1., 2.]), scriptmod.tensor([3., 4., 5.])],
    ...                        enforce_sorted=False)
    >>> packed.data, packed.batch_sizes
    (tensor([3., 1., 4., 2., 5.]), tensor([2, 2, 1]))
    >>> pad_packed_sequence(packed, batch_first=True)
    (tensor([[1., 2., 0.],
            [3., 4., 5.]]), tensor([2, 3]))

Packing and padding are index gathers (``index_select``), so gradients flow through both.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

from scriptmod._creation import arange, as_tensor, empty_like, full, tensor
from scriptmod._shape_ops import cat, stack
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.tensor import Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pack_sequence",
           "pad_packed_sequence", "pad_sequence", "unpack_sequence", "unpad_sequence"]


class _PackedFields(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedFields):
    """Sequences of different lengths packed step by step (see the module docstring). Built by
    ``pack_padded_sequence`` and ``pack_sequence``, accepted and returned by ``RNN``, ``LSTM``
    and ``GRU``. ``PackedSequence(data, batch_sizes, sorted_indices)`` fills in
    ``unsorted_indices`` as the inverse of ``sorted_indices``."""

    def __new__(cls, data: Any, batch_sizes: Tensor | None = None,
                sorted_indices: Tensor | None = None,
                unsorted_indices: Tensor | None = None) -> PackedSequence:
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:         # PackedSequence((data, batch_sizes), ...)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        elif batch_sizes.device.type != "cpu":
            raise ValueError("batch_sizes should always be on CPU. Instances of PackedSequence "
                             "should never be created manually. They should be instantiated by "
                             "functions like pack_sequence and pack_padded_sequences in "
                             "nn.utils.rnn.")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """``data.to(...)``; the indices follow data to its device, batch_sizes stay on CPU."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        moved = [None if t is None else t.to(data.device)
                 for t in (self.sorted_indices, self.unsorted_indices)]
        return type(self)(data, self.batch_sizes, *moved)

    def cpu(self) -> PackedSequence:
        return self.to("cpu")

    def cuda(self, device: Any = None) -> PackedSequence:
        return self.to("cuda" if device is None else device)

    @property
    def is_cuda(self) -> bool:
        """Whether ``data`` is on a CUDA device."""
        return self.data.is_cuda


def _converter(dtype: D.DType) -> Any:
    def convert(self: PackedSequence) -> PackedSequence:
        return self.to(dtype=dtype)
    convert.__doc__ = f"``data`` as {dtype}."
    return convert


# torch's dtype shorthands: packed.double() converts data and keeps the indices
for _name, _dtype in (("double", D.float64), ("float", D.float32), ("half", D.float16),
                      ("long", D.int64), ("int", D.int32), ("short", D.int16),
                      ("char", D.int8), ("byte", D.uint8)):
    setattr(PackedSequence, _name, _converter(_dtype))


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation q with q[p[i]] = i (None stays None)."""
    if permutation is None:
        return None
    output = empty_like(permutation)
    output.scatter_(0, permutation, arange(permutation.numel(), device=permutation.device))
    return output


def _as_lengths(lengths: Any) -> list[int]:
    if isinstance(lengths, Tensor):
        if lengths.dim() != 1:
            raise ShapeError(f"'lengths' argument should be a 1D tensor, got a "
                             f"{lengths.dim()}D tensor")
        return [int(n) for n in lengths.tolist()]
    return [int(n) for n in lengths]


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (T, B, *) — (B, T, *) with ``batch_first`` — whose sequence b is
    ``lengths[b]`` long. With ``enforce_sorted`` the lengths must be decreasing; otherwise the
    batch is sorted here and ``sorted_indices`` records the order.

        >>> pack_padded_sequence(scriptmod.ones(3, 2), [3, 1]).batch_sizes
        tensor([2, 1, 1])
    """
    sizes = _as_lengths(lengths)
    _check_lengths(sizes, input, batch_first, enforce_sorted)
    sorted_indices = None
    if not enforce_sorted:
        order = sorted(range(len(sizes)), key=lambda b: -sizes[b])   # stable, as torch's sort
        sizes = [sizes[b] for b in order]
        sorted_indices = tensor(order, dtype=D.int64, device=input.device)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    time_major = input.transpose(0, 1) if batch_first else input
    batch_sizes = [sum(1 for n in sizes if n > t) for t in range(sizes[0])]
    rows = np.concatenate([t * len(sizes) + np.arange(bs) for t, bs in enumerate(batch_sizes)])
    rows_t = tensor(rows, dtype=D.int64, device=input.device)
    data = time_major.flatten(0, 1).index_select(0, rows_t)
    return PackedSequence(data, tensor(batch_sizes, dtype=D.int64), sorted_indices, None)


def _check_lengths(sizes: list[int], input: Tensor, batch_first: bool,
                   enforce_sorted: bool) -> None:
    if input.dim() < 2:
        raise ShapeError(f"pack_padded_sequence: expected input of at least 2 dimensions "
                         f"(time and batch), got {input.dim()}")
    steps, batch = input.shape[1::-1] if batch_first else input.shape[:2]
    if len(sizes) != batch:
        raise ShapeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                         f"{len(sizes)} (batch_size={batch})")
    if not sizes:
        raise ShapeError("pack_padded_sequence: expected at least one sequence, got a batch "
                         "of 0")
    if enforce_sorted and any(a < b for a, b in pairwise(sizes)):
        raise ArgumentValueError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
            "to sidestep this requirement if you do not need ONNX exportability.")
    if min(sizes) <= 0:
        raise ArgumentValueError("Length of all samples has to be greater than 0, but found "
                                 "an element in 'lengths' that is <= 0")
    if max(sizes) > steps:
        raise ShapeError(f"pack_padded_sequence: a sequence length {max(sizes)} is longer "
                         f"than the padded input's time dimension {steps}")


def _packed_lengths(batch_sizes: Sequence[int]) -> list[int]:
    """Each sorted sequence's length: the number of steps with a row for it."""
    return [sum(1 for bs in batch_sizes if bs > b) for b in range(batch_sizes[0])]


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Undo ``pack_padded_sequence``: the padded batch (T, B, *) — (B, T, *) with
    ``batch_first``, T = ``total_length`` or the longest length — in the original batch
    order, and the lengths (int64)."""
    batch_sizes = [int(n) for n in sequence.batch_sizes.tolist()]
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    data, batch = sequence.data, batch_sizes[0]
    pad_row = full((1, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    starts = np.cumsum([0] + batch_sizes)
    rows = np.full((steps, batch), data.shape[0], dtype=np.int64)       # the padding row
    for t, bs in enumerate(batch_sizes):
        rows[t, :bs] = starts[t] + np.arange(bs)
    padded = cat([data, pad_row]).index_select(0, tensor(rows.reshape(-1), device=data.device))
    padded = padded.reshape(steps, batch, *data.shape[1:])
    if batch_first:
        padded = padded.transpose(0, 1)
    lengths = tensor(_packed_lengths(batch_sizes), dtype=D.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.cpu()]
    return padded, lengths


def pad_sequence(sequences: Any, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of shapes (L_i, *) into (max L, B, *) — (B, max L, *) with
    ``batch_first`` — filling with ``padding_value`` on ``padding_side`` ("right" or "left").

        >>> pad_sequence([scriptmod.ones(2), scriptmod.ones(1)], batch_first=True)
        tensor([[1., 1.],
                [1., 0.]])
    """
    if not isinstance(sequences, (Iterable, Tensor)):
        raise TypeError(f"pad_sequence: Expected iterable for input sequences, but got arg of "
                        f"type: {type(sequences)}")
    sequences = list(sequences.unbind(0) if isinstance(sequences, Tensor) else sequences)
    if not sequences:
        raise ArgumentValueError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise ArgumentValueError(f"Expected padding_side to be one of left or right, but got "
                                 f"{padding_side}.")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for seq in sequences:
        missing = longest - seq.shape[0]
        if missing:
            pad = full((missing, *seq.shape[1:]), padding_value, dtype=seq.dtype,
                       device=seq.device)
            seq = cat([seq, pad] if padding_side == "right" else [pad, seq])
        padded.append(seq)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Any,
                   batch_first: bool = False) -> list[Tensor]:
    """The sequences of a padded batch, sequence b cut to ``lengths[b]`` steps. (torch
    transposes a time-major input in place here; scriptmod leaves the input as it is.)"""
    batch_major = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [seq[:n] for seq, n in zip(batch_major.unbind(0), _as_lengths(lengths))]


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences (L_i, *): ``pack_padded_sequence(pad_sequence(...))``."""
    lengths = as_tensor([s.shape[0] for s in sequences], dtype=D.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences a ``PackedSequence`` holds, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
