"""Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict (PyTorch semantics)."""
from collections import OrderedDict

import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import Parameter


class Add(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x + self.k

    def extra_repr(self):
        return f"k={self.k}"


def seq(*ks):
    return nn.Sequential(*[Add(k) for k in ks])


# ---- Sequential -------------------------------------------------------------------------------
def test_sequential_forward_index_slice_len_iter():
    s = seq(1, 2, 3)
    assert float(s(sm.tensor(0.0))) == 6.0
    assert s[0].k == 1 and s[-1].k == 3 and len(s) == 3
    sub = s[1:]
    assert isinstance(sub, nn.Sequential) and [m.k for m in sub] == [2, 3]
    assert list(sub._modules) == ["1", "2"]          # slicing keeps the keys, like PyTorch
    with pytest.raises(IndexError, match="index 3 is out of range"):
        s[3]


def test_sequential_ordered_dict_constructor():
    s = nn.Sequential(OrderedDict([("first", Add(1)), ("second", Add(2))]))
    assert s.first.k == 1 and list(s._modules) == ["first", "second"]
    assert s[1] is s.second


def test_sequential_mutation():
    s = seq(1, 2, 3)
    s.append(Add(4))
    s.insert(0, Add(0))
    s.extend([Add(5)])
    assert [m.k for m in s] == [0, 1, 2, 3, 4, 5]
    assert s.pop(1).k == 1
    del s[0]
    assert [m.k for m in s] == [2, 3, 4, 5] and list(s._modules) == ["0", "1", "2", "3"]
    del s[1:3]
    assert [m.k for m in s] == [2, 5]
    s[1] = Add(9)
    assert s[1].k == 9
    with pytest.raises(IndexError):
        s.insert(5, Add(0))
    with pytest.raises(AssertionError):
        s.insert(0, 3)


def test_sequential_operators():
    a, b = seq(1), seq(2, 3)
    assert [m.k for m in a + b] == [1, 2, 3]
    a += b
    assert [m.k for m in a] == [1, 2, 3]
    assert [m.k for m in seq(1, 2) * 2] == [1, 2, 1, 2]
    assert [m.k for m in 2 * seq(1)] == [1, 1]
    c = seq(1, 2)
    c *= 2
    assert [m.k for m in c] == [1, 2, 1, 2]
    with pytest.raises(ValueError, match="add operator supports only objects of Sequential"):
        seq(1) + [Add(1)]
    with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
        seq(1) * 0


def test_sequential_repr():
    assert repr(seq(1, 2)) == "Sequential(\n  (0): Add(k=1)\n  (1): Add(k=2)\n)"
    assert repr(nn.Sequential()) == "Sequential()"


# ---- ModuleList ---------------------------------------------------------------------------------
def test_module_list():
    ml = nn.ModuleList([Add(1), Add(2)])
    ml.append(Add(3))
    ml.extend([Add(4)])
    ml += [Add(5)]
    ml.insert(1, Add(9))
    assert [m.k for m in ml] == [1, 9, 2, 3, 4, 5]
    assert isinstance(ml[1:3], nn.ModuleList) and [m.k for m in ml[1:3]] == [9, 2]
    assert ml.pop(1).k == 9
    del ml[0]
    assert [m.k for m in ml] == [2, 3, 4, 5] and list(ml._modules) == ["0", "1", "2", "3"]
    ml[-1] = Add(7)
    assert ml[3].k == 7
    assert [m.k for m in ml + nn.ModuleList([Add(8)])] == [2, 3, 4, 7, 8]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        ml[4]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(3)
    with pytest.raises(NotImplementedError):
        ml(1)


def test_module_list_repr_compresses_repeats():
    ml = nn.ModuleList([Add(1), Add(1), Add(1), Add(2)])
    assert repr(ml) == "ModuleList(\n  (0-2): 3 x Add(k=1)\n  (3): Add(k=2)\n)"
    assert repr(nn.ModuleList()) == "ModuleList()"


def test_module_list_repr_matches_torch():
    torch = pytest.importorskip("torch")

    def make(lib):
        return lib.nn.ModuleList([lib.nn.Linear(2, 2)] * 3 + [lib.nn.ReLU(), lib.nn.Sequential(
            lib.nn.Linear(2, 3), lib.nn.Linear(2, 3))])
    assert repr(make(sm)) == repr(make(torch))


# ---- ModuleDict ---------------------------------------------------------------------------------
def test_module_dict():
    md = nn.ModuleDict({"b": Add(2), "a": Add(1)})
    assert list(md) == ["b", "a"]                      # insertion order, even for a dict
    md["c"] = Add(3)
    md.update([("d", Add(4))])
    assert "c" in md and len(md) == 4 and md["d"].k == 4
    assert list(md.keys()) == ["b", "a", "c", "d"]
    assert [m.k for m in md.values()] == [2, 1, 3, 4]
    assert md.pop("b").k == 2
    del md["a"]
    assert list(md) == ["c", "d"]
    md.clear()
    assert len(md) == 0
    with pytest.raises(TypeError, match="should be called with an iterable"):
        md.update(3)
    with pytest.raises(ValueError, match="has length 1; 2 is required"):
        md.update([("x",)])


# ---- ParameterList / ParameterDict --------------------------------------------------------------
def test_parameter_list():
    pl = nn.ParameterList([sm.ones(2), Parameter(sm.zeros(3))])
    assert all(isinstance(p, Parameter) for p in pl) and len(pl) == 2
    pl.append(sm.ones(1))
    pl.extend([sm.ones(4)])
    assert [tuple(p.shape) for p in pl] == [(2,), (3,), (1,), (4,)]
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2", "3"]
    pl[0] = sm.zeros(5)
    assert pl[0].shape == (5,) and isinstance(pl[0], Parameter)
    assert len(pl[1:3]) == 2
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        pl(1)
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an iterable"):
        pl.extend(sm.ones(2))


def test_parameter_dict():
    pd = nn.ParameterDict({"b": sm.ones(2), "a": sm.zeros(1)})
    assert list(pd) == ["a", "b"]                      # a plain dict is sorted, like PyTorch
    pd["c"] = sm.ones(3)
    assert isinstance(pd["c"], Parameter) and "c" in pd and len(pd) == 3
    assert [n for n, _ in pd.named_parameters()] == ["a", "b", "c"]
    assert pd.get("zz") is None and pd.setdefault("d", sm.ones(1)).shape == (1,)
    assert pd.pop("d").shape == (1,)
    assert pd.popitem()[0] == "c"
    merged = pd | nn.ParameterDict({"z": sm.ones(1)})
    assert list(merged) == ["a", "b", "z"]
    with pytest.raises(TypeError, match="not a string"):
        pd[1]
    with pytest.raises(RuntimeError, match="ParameterDict should not be called"):
        pd()
    pd.clear()
    assert len(pd) == 0


def test_parameter_containers_repr_match_torch():
    torch = pytest.importorskip("torch")

    def make(lib):
        pl = lib.nn.ParameterList([lib.ones(2, 3), lib.zeros(4)])
        pd = lib.nn.ParameterDict({"w": lib.ones(2), "b": lib.zeros(3, 1)})
        return lib.nn.ModuleDict({"pl": pl, "pd": pd})
    assert repr(make(sm)) == repr(make(torch)).replace("torch.", "scriptmod.")
