"""nn.utils.rnn against torch: packing and padding (values, batch sizes, indices, lengths,
gradients, errors), and RNN/LSTM/GRU taking and returning PackedSequences with unsorted
lengths, h0 given or not."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn.utils import rnn as sm_rnn

torch = pytest.importorskip("torch")
from torch.nn.utils import rnn as torch_rnn

LENGTHS = [3, 5, 1, 5, 2]          # unsorted, with a tie


def to_sm(t: torch.Tensor, requires_grad: bool = False) -> sm.Tensor:
    return sm.tensor(t.detach().numpy().copy(), requires_grad=requires_grad)


def assert_same(ours: sm.Tensor | None, theirs: torch.Tensor | None, tol: float = 0) -> None:
    if theirs is None:
        assert ours is None
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol,
                               atol=tol)


def assert_same_packed(ours: sm_rnn.PackedSequence, theirs: object, tol: float = 0) -> None:
    assert isinstance(ours, sm_rnn.PackedSequence) and len(ours) == 4
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b, tol)
    assert ours.batch_sizes.dtype is sm.int64


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_pad_round_trip_as_torch(batch_first: bool, enforce_sorted: bool) -> None:
    lengths = sorted(LENGTHS, reverse=True) if enforce_sorted else LENGTHS
    torch.manual_seed(0)
    shape = (len(lengths), 6, 2) if batch_first else (6, len(lengths), 2)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    xs = to_sm(x, requires_grad=True)
    packed_t = torch_rnn.pack_padded_sequence(x, lengths, batch_first, enforce_sorted)
    packed_s = sm_rnn.pack_padded_sequence(xs, lengths, batch_first, enforce_sorted)
    assert_same_packed(packed_s, packed_t)
    padded_t, len_t = torch_rnn.pad_packed_sequence(packed_t, batch_first, -1.5, total_length=7)
    padded_s, len_s = sm_rnn.pad_packed_sequence(packed_s, batch_first, -1.5, total_length=7)
    assert_same(padded_s, padded_t)
    assert_same(len_s, len_t)
    weight = torch.randn(padded_t.shape, dtype=torch.float64)
    (padded_t * weight).sum().backward()
    (padded_s * to_sm(weight)).sum().backward()
    assert_same(xs.grad, x.grad)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_as_torch(batch_first: bool, padding_side: str) -> None:
    torch.manual_seed(1)
    seqs = [torch.randn(n, 3, requires_grad=True) for n in LENGTHS]
    ours = [to_sm(s, requires_grad=True) for s in seqs]
    padded_t = torch_rnn.pad_sequence(seqs, batch_first, 9.0, padding_side)
    padded_s = sm_rnn.pad_sequence(ours, batch_first, 9.0, padding_side)
    assert_same(padded_s, padded_t)
    padded_t.sum().backward()
    padded_s.sum().backward()
    for a, b in zip(ours, seqs):
        assert_same(a.grad, b.grad)
    assert_same(sm_rnn.pad_sequence(sm.ones(4, 3)), torch_rnn.pad_sequence(torch.ones(4, 3)))


def test_pack_sequence_unpack_and_unpad_as_torch() -> None:
    torch.manual_seed(2)
    seqs = [torch.randn(n, 2) for n in LENGTHS]
    packed_t = torch_rnn.pack_sequence(seqs, enforce_sorted=False)
    packed_s = sm_rnn.pack_sequence([to_sm(s) for s in seqs], enforce_sorted=False)
    assert_same_packed(packed_s, packed_t)
    for a, b in zip(sm_rnn.unpack_sequence(packed_s), torch_rnn.unpack_sequence(packed_t),
                    strict=True):
        assert_same(a, b)
    padded = torch_rnn.pad_sequence(seqs)
    padded_s = to_sm(padded)
    theirs = torch_rnn.unpad_sequence(padded.clone(), torch.tensor(LENGTHS))
    ours = sm_rnn.unpad_sequence(padded_s, sm.tensor(LENGTHS))
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)
    assert tuple(padded_s.shape) == tuple(padded.shape)     # left as it was
    assert_same(sm_rnn.invert_permutation(sm.tensor([2, 0, 1])),
                torch_rnn.invert_permutation(torch.tensor([2, 0, 1])))


def test_packed_sequence_constructor_and_conversions() -> None:
    data, sizes = sm.randn(4, 2), sm.tensor([2, 1, 1])
    packed = sm_rnn.PackedSequence(data, sizes, sm.tensor([1, 0]))
    assert_same(packed.unsorted_indices, torch.tensor([1, 0]))
    assert sm_rnn.PackedSequence((data, sizes)).batch_sizes is sizes
    as64 = packed.double()
    assert as64.data.dtype is sm.float64 and as64.batch_sizes is sizes
    assert packed.float() is packed and not packed.is_cuda
    assert packed.byte().data.dtype is sm.uint8 and packed.long().sorted_indices is not None


def _bad_packing(lib: object, mod: object) -> list:
    x = lib.randn(4, 3, 2)
    return [lambda: mod.pack_padded_sequence(x, [3, 4, 2]),
            lambda: mod.pack_padded_sequence(x, [3, 2, 0]),
            lambda: mod.pack_padded_sequence(x, [3, 2]),
            lambda: mod.pack_padded_sequence(x, [3, 2, -1], enforce_sorted=False),
            lambda: mod.pad_packed_sequence(mod.pack_padded_sequence(x, [4, 2, 1]),
                                            total_length=3),
            lambda: mod.pad_sequence([]),
            lambda: mod.pad_sequence([x[0], x[1]], padding_side="middle")]


def test_packing_errors_as_torch() -> None:
    for ours, theirs in zip(_bad_packing(sm, sm_rnn), _bad_packing(torch, torch_rnn),
                            strict=True):
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(type(expected.value)) as got:
            ours()
        assert str(got.value) == str(expected.value)


def test_length_beyond_the_padded_input_raises() -> None:
    """torch reads past the input here; scriptmod says which length does not fit."""
    with pytest.raises(ValueError, match="length 6 is longer than the padded input's time "
                                         "dimension 4"):
        sm_rnn.pack_padded_sequence(sm.randn(4, 3, 2), [6, 2, 1])


# ---- layers on packed input ----------------------------------------------------------------
PACKED_CASES = [("RNN", {}), ("RNN", {"nonlinearity": "relu", "bidirectional": True}),
                ("GRU", {"num_layers": 2, "bidirectional": True}),
                ("LSTM", {"num_layers": 2, "bidirectional": True}),
                ("LSTM", {"proj_size": 2, "bidirectional": True}), ("GRU", {"bias": False})]


def _layers(cls: str, kwargs: dict) -> tuple[nn.Module, torch.nn.Module]:
    torch.manual_seed(3)
    theirs = getattr(torch.nn, cls)(3, 4, **kwargs).double()
    ours = getattr(nn, cls)(3, 4, dtype=sm.float64, **kwargs)
    ours.load_state_dict({k: to_sm(v) for k, v in theirs.state_dict().items()}, strict=True)
    return ours, theirs


def _hidden(theirs: torch.nn.Module, batch: int) -> tuple:
    layers = theirs.num_layers * (2 if theirs.bidirectional else 1)
    sizes = [theirs.proj_size or theirs.hidden_size]
    if isinstance(theirs, torch.nn.LSTM):
        sizes.append(theirs.hidden_size)
    return tuple(torch.randn(layers, batch, n, dtype=torch.float64, requires_grad=True)
                 for n in sizes)


@pytest.mark.parametrize("cls,kwargs", PACKED_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("with_h0", [False, True])
def test_layer_on_packed_input_as_torch(cls: str, kwargs: dict, with_h0: bool) -> None:
    """Unsorted lengths: the output stays packed in torch's order, h_n comes from each
    sequence's last valid step in the original batch order, and the gradients of the padded
    input, h0 and every parameter agree."""
    ours, theirs = _layers(cls, kwargs)
    torch.manual_seed(4)
    x = torch.randn(len(LENGTHS), max(LENGTHS), 3, dtype=torch.float64, requires_grad=True)
    xs = to_sm(x, requires_grad=True)
    hx_t = _hidden(theirs, len(LENGTHS)) if with_h0 else None
    hx_s = tuple(to_sm(h, requires_grad=True) for h in hx_t) if with_h0 else None
    one = (lambda h: h if cls == "LSTM" else h[0]) if with_h0 else (lambda h: None)
    out_t, state_t = theirs(torch_rnn.pack_padded_sequence(x, LENGTHS, True, False), one(hx_t))
    out_s, state_s = ours(sm_rnn.pack_padded_sequence(xs, LENGTHS, True, False), one(hx_s))
    assert_same_packed(out_s, out_t, 1e-10)
    states_t = state_t if cls == "LSTM" else (state_t,)
    states_s = state_s if cls == "LSTM" else (state_s,)
    for a, b in zip(states_s, states_t, strict=True):
        assert_same(a, b, 1e-10)
    torch.manual_seed(5)
    outs_t = [out_t.data, *states_t]
    weights = [torch.randn(t.shape, dtype=t.dtype) for t in outs_t]
    sum((t * w).sum() for t, w in zip(outs_t, weights)).backward()
    sum((o * to_sm(w)).sum() for o, w in zip([out_s.data, *states_s], weights)).backward()
    assert_same(xs.grad, x.grad, 1e-10)
    for a, b in zip(hx_s or (), hx_t or ()):
        assert_same(a.grad, b.grad, 1e-10)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(),
                                 strict=True):
        assert_same(p.grad, q.grad, 1e-10)


def test_packed_hidden_of_the_wrong_batch_size_is_refused() -> None:
    packed = sm_rnn.pack_sequence([sm.randn(3, 3), sm.randn(2, 3)])
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[1, 3, 4\]"):
        nn.GRU(3, 4)(packed, sm.randn(1, 3, 4))
