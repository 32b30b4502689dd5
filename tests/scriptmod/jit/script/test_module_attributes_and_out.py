"""More constructs public TorchScript code uses (issue 42's corpus): a list of constants and
a function held as module attributes, ``len`` of a ModuleList, ``out=`` of a library call,
``OrderedDict``/``dict`` of pairs, and PyTorch's limited-support unsigned dtypes as names
(compared, annotated, held as a default through save and load)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
import scriptmod.nn.functional as F


class _Permute(nn.Module):                    # torchvision's ops.misc.Permute
    def __init__(self, dims: List[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return sm.permute(x, self.dims)


class _Activation(nn.Module):                 # transformers' GELUActivation / Mish
    def __init__(self, method: bool) -> None:
        super().__init__()
        self.act = self._halved if method else F.gelu

    def _halved(self, x: sm.Tensor) -> sm.Tensor:
        return x * 0.5

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.act(x)


class _Blocks(nn.Module):                     # torchvision's FeaturePyramidNetwork
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])

    def forward(self, x: sm.Tensor) -> Dict[str, sm.Tensor]:
        names: List[str] = []
        outs: List[sm.Tensor] = []
        for i in range(len(self.blocks)):
            names.append(f"p{i}")
            outs.append(x * i)
        return OrderedDict([(k, v) for k, v in zip(names, outs)])


@pytest.mark.parametrize("make", [lambda: _Permute([1, 0, 2]), lambda: _Activation(True),
                                  lambda: _Activation(False), _Blocks],
                         ids=["list-attribute", "method-attribute", "function-attribute",
                              "len-modulelist-and-ordereddict"])
def test_module_attributes_script_as_eager(make) -> None:
    m = make().eval()
    s = sm.jit.script(m)
    x = sm.randn(2, 3, 3)
    with sm.no_grad():
        want, got = m(x), s(x)
    if isinstance(want, dict):
        assert list(got) == list(want)
        want, got = list(want.values()), list(got.values())
    else:
        want, got = [want], [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def _arange_into(n: int) -> sm.Tensor:
    buffered = sm.empty(0).long()
    alias = buffered
    sm.arange(n, out=buffered)
    return buffered + alias


def _arange_into_argument(n: int, out: sm.Tensor) -> sm.Tensor:
    sm.arange(n, out=out)
    return out


def test_out_writes_every_name_of_a_fresh_tensor() -> None:
    """``torch.arange(n, out=b)`` (fairseq's ``convert_padding_direction``): ``b`` holds the
    result, under every name; into an argument, which the caller would see resized, it is
    refused with the line."""
    np.testing.assert_array_equal(sm.jit.script(_arange_into)(4).numpy(), [0, 2, 4, 6])
    with pytest.raises(sm.jit.FrontendError, match="out= into an argument"):
        sm.jit.script(_arange_into_argument)


def _max_value(dtype: sm.dtype = sm.float32) -> int:
    if dtype == sm.uint8:
        return 255
    elif dtype == sm.uint16:
        return 65535
    elif dtype == sm.int16:
        return 32767
    return 1


def test_unsigned_dtypes_are_names_and_dtype_defaults_save(tmp_path) -> None:
    """``scriptmod.uint16/uint32/uint64`` compare and annotate (torchvision's ``_max_value``)
    but make no tensors (a TypeError saying so); a dtype default survives save and load."""
    s = sm.jit.script(_max_value)
    assert [s(d) for d in (sm.uint8, sm.uint16, sm.int16, sm.float64)] == [255, 65535, 32767, 1]
    assert s() == 1
    sm.jit.save(s, tmp_path / "f.smod")
    again = sm.jit.load(tmp_path / "f.smod")
    assert again() == 1 and again(sm.uint16) == 65535
    for make in (lambda: sm.zeros(2, dtype=sm.uint16), lambda: sm.ones(2).to(sm.uint32)):
        with pytest.raises(TypeError, match="no uint"):
            make()


class _Cached(nn.Module):                     # fairseq's rotary embedding keeps its cache so
    def __init__(self) -> None:
        super().__init__()
        self.cached = sm.zeros(2, 2)          # a plain tensor attribute, not a buffer
        self.scale = sm.tensor(3.0)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        if float(x.sum()) > 5:
            self.cached = x * 2
        return self.cached * self.scale + x


def test_plain_tensor_attributes_are_read_and_written(tmp_path) -> None:
    """A tensor attribute that is no parameter or buffer is a TorchScript attribute: read,
    written in ``forward`` (the write persists across calls, as in eager) and saved, and
    not in the ``state_dict`` (as eager's)."""
    m, s = _Cached(), sm.jit.script(_Cached())
    for k in (1.0, 2.0, 1.0):
        x = sm.full((2, 2), k)
        np.testing.assert_array_equal(s(x).numpy(), m(x).numpy())
    assert list(s.state_dict()) == list(m.state_dict()) == []
    sm.jit.save(s, tmp_path / "c.smod")
    np.testing.assert_array_equal(sm.jit.load(tmp_path / "c.smod")(sm.ones(2, 2)).numpy(),
                                  m(sm.ones(2, 2)).numpy())


class _Rewrites(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cached", sm.zeros(2, 2))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        self.cached = x * 2
        return self.cached + 1


def test_a_tensor_attribute_write_of_another_shape_is_an_error_not_a_broadcast() -> None:
    """Compiled code writes a tensor attribute in place; a value of another shape raised
    nothing and was broadcast into the old one ((1, 2) into (2, 2)): now it names the
    attribute and both shapes."""
    s = sm.jit.script(_Rewrites())
    np.testing.assert_array_equal(s(sm.ones(2, 2)).numpy(), np.full((2, 2), 3.0))
    with pytest.raises(RuntimeError, match=r"attribute 'cached'.*keep its shape \(2, 2\)"):
        s(sm.ones(1, 2))
