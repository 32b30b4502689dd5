"""TensorDataset's argument errors are PyTorch's (issue 35)."""
from __future__ import annotations

import pytest

import scriptmod as sm
from scriptmod.utils.data import TensorDataset


def test_size_mismatch_is_torchs_assertion_error() -> None:
    with pytest.raises(AssertionError, match=r"Size mismatch between tensors.*\(3,\), \(4,\)"):
        TensorDataset(sm.zeros(3), sm.zeros(4))
    with pytest.raises(ValueError):                   # what earlier releases raised
        TensorDataset(sm.zeros(3, 2), sm.zeros(2, 3))


def test_a_zero_dim_tensor_is_torchs_index_error() -> None:
    with pytest.raises(IndexError, match="Dimension specified as 0 but tensor has no dimensions"):
        TensorDataset(sm.zeros(3), sm.tensor(1.0))


def test_matching_first_sizes_are_accepted() -> None:
    ds = TensorDataset(sm.zeros(3), sm.ones(3, 2))
    assert len(ds) == 3 and tuple(ds[1][1].shape) == (2,)


@pytest.mark.parametrize("args", [((3,), (4,)), ((3,), ())])
def test_torch_raises_the_same_classes(args: tuple) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset as TorchTensorDataset
    with pytest.raises(Exception) as want:
        TorchTensorDataset(*(torch.zeros(s) for s in args))
    with pytest.raises(type(want.value)):
        TensorDataset(*(sm.zeros(*s) for s in args))
