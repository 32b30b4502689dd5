"""Container outputs: dicts and namedtuples come back as themselves with ``strict=False``
(also after save/load), ``strict=True`` raises PyTorch's error for a dict and warns for a
list; submodules may return dicts inside a trace."""
from __future__ import annotations

import collections
import io
import json
import warnings
import zipfile

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn

Pair = collections.namedtuple("Pair", "low high")
DICT_ERROR = ("Encountering a dict at the output of the tracer might cause the trace to be "
              "incorrect, this is only valid if the container structure does not change based "
              "on the module's inputs. Consider using a constant container instead (e.g. for "
              "`list`, use a `tuple` instead. for `dict`, use a `NamedTuple` instead). If you "
              "absolutely need this and know the side effects, pass strict=False to trace() to "
              "allow this behavior.")


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return {"logits": h * 2.0, "aux": {"mean": h.mean(dim=1), "pair": (h, h - 1.0)},
                "list": [h.relu(), x]}


class Named(nn.Module):
    def forward(self, x):
        return Pair(x - 1.0, {"k": x + 1.0})


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)


def _same(got, want):
    """Same containers (types, dict key order) and close tensors."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        _close(got, want)


@pytest.mark.parametrize("batch", [2, 5])
def test_dict_output_with_strict_false(batch):
    m = Heads().eval()
    traced = jit.trace(m, sm.randn(2, 4), strict=False)
    x = sm.randn(batch, 4)
    with sm.no_grad():
        _same(traced(x), m(x))


def test_dict_output_under_strict_raises_torchs_error():
    with pytest.raises(RuntimeError) as info:
        jit.trace(Heads(), sm.randn(2, 4))
    assert str(info.value) == DICT_ERROR
    assert "cannot type a dict" not in str(info.value)


def test_torch_raises_the_same_dict_error():
    torch = pytest.importorskip("torch")

    def f(x):
        return {"a": x + 1}

    with pytest.raises(RuntimeError) as info:
        torch.jit.trace(f, torch.randn(2))
    assert str(info.value) == DICT_ERROR
    with pytest.raises(RuntimeError) as ours:
        jit.trace(lambda x: {"a": x + 1}, sm.randn(2))
    assert str(ours.value) == str(info.value)


def test_list_output_under_strict_warns_like_torch():
    torch = pytest.importorskip("torch")
    with pytest.warns(torch.jit.TracerWarning) as theirs:
        torch.jit.trace(lambda x: [x + 1, x * 2], torch.randn(2))
    with pytest.warns(jit.TracerWarning) as ours:
        traced = jit.trace(lambda x: [x + 1, x * 2], sm.randn(2))
    msg = lambda rec: [str(w.message) for w in rec if "Encountering a list" in str(w.message)]  # noqa: E731
    assert set(msg(ours)) == set(msg(theirs)) and msg(ours)
    out = traced(sm.ones(2))
    assert isinstance(out, list) and len(out) == 2


def test_list_output_with_strict_false_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        out = jit.trace(lambda x: [x + 1], sm.randn(2), strict=False)(sm.ones(2))
    assert isinstance(out, list)


def test_namedtuple_output_is_its_type():
    m = Named()
    traced = jit.trace(m, sm.randn(3, 2), strict=False)
    x = sm.randn(4, 2)
    out = traced(x)
    assert type(out) is Pair and out._fields == ("low", "high")
    _same(out, m(x))


def test_namedtuple_of_tensors_under_strict_is_fine():
    traced = jit.trace(lambda x: Pair(x, x * 2), sm.randn(2))
    out = traced(sm.ones(2))
    assert type(out) is Pair
    _close(out.high, sm.ones(2) * 2)


def test_function_dict_output():
    def f(x):
        return {"z": x * 3, "a": x + 1}

    traced = jit.trace(f, sm.randn(2, 2), strict=False)
    x = sm.randn(2, 2)
    _same(traced(x), f(x))


def test_submodule_returning_a_dict_inside_a_trace():
    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return {"h": self.fc(x), "p": Pair(x, x * 3)}

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = Enc()

        def forward(self, x):
            d = self.enc(x)
            return d["h"] * d["p"].high

    m = Top().eval()
    traced = jit.trace(m, sm.randn(2, 3))                    # the top output is a tensor
    x = sm.randn(6, 3)
    with sm.no_grad():
        _close(traced(x), m(x))
        _same(traced.enc(x), m.enc(x))                       # the submodule keeps its dict
    assert 'prim::CallMethod[name="forward"]' in str(traced.graph)


def test_gradients_through_a_dict_output():
    m = Heads()
    traced = jit.trace(m, sm.randn(2, 4), strict=False)
    x = sm.randn(3, 4, requires_grad=True)
    out = traced(x)
    (out["logits"].sum() + out["aux"]["pair"][1].sum()).backward()
    assert x.grad is not None and m.fc.weight.grad is not None


def _roundtrip(traced) -> tuple[jit.ScriptModule, dict]:
    buf = io.BytesIO()
    traced.save(buf)
    man = json.loads(zipfile.ZipFile(io.BytesIO(buf.getvalue())).read("manifest.json"))
    return jit.load(io.BytesIO(buf.getvalue())), man


def test_dict_output_after_save_and_load():
    m = Heads().eval()
    loaded, man = _roundtrip(jit.trace(m, sm.randn(2, 4), strict=False))
    x = sm.randn(3, 4)
    with sm.no_grad():
        _same(loaded(x), m(x))
    assert man["modules"][0]["methods"][0]["output_structure"][:2] == \
        ["dict", ["logits", "aux", "list"]]


def test_namedtuple_after_load_is_a_namedtuple_of_that_name():
    """The user's class is never imported: a namedtuple class of the same name and fields
    comes back (equal as a tuple, not an instance of the user's class)."""
    loaded, man = _roundtrip(jit.trace(Named(), sm.randn(2, 2), strict=False))
    out = loaded(sm.ones(2, 2))
    assert type(out).__name__ == "Pair" and out._fields == ("low", "high")
    assert not isinstance(out, Pair) and isinstance(out, tuple)
    assert isinstance(out.high, dict) and list(out.high) == ["k"]
    again, _ = _roundtrip(jit.trace(Named(), sm.randn(2, 2), strict=False))
    assert type(again(sm.ones(2, 2))) is type(out)          # one class per (name, fields)


def test_plain_outputs_add_no_manifest_field():
    _, man = _roundtrip(jit.trace(nn.Linear(2, 2), sm.randn(1, 2)))
    assert "output_structure" not in man["modules"][0]["methods"][0]


# ---- hostile output structures ------------------------------------------------------------
def _with_structure(structure) -> bytes:
    from scriptmod.jit.archive import _zip
    buf = io.BytesIO()
    jit.trace(Named(), sm.randn(2, 2), strict=False).save(buf)
    zf = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    items = {n: zf.read(n) for n in zf.namelist()}
    man = json.loads(items["manifest.json"])
    man["modules"][0]["methods"][0]["output_structure"] = structure
    items["manifest.json"] = json.dumps(man).encode()
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()])


@pytest.mark.parametrize("structure,words", [
    (["dict", ["a"], [None]], "dict of 1 item"),
    (["dict", ["a", "a"], [None, None]], "distinct"),
    (["dict", [True, 1], [None, None]], "distinct strings or integers"),
    (["namedtuple", "os.system", ["a", "b"], [None, None]], "not an identifier"),
    (["namedtuple", "P", ["_a", "b"], [None, None]], "identifiers"),
    (["namedtuple", "P", ["a", "class"], [None, None]], "identifiers"),
    (["list", [None, None]], "list structure"),
    (["set", [None]], "kind one of"),
    ({"dict": 1}, "kind one of"),
    (["tuple", "x"], "must be a list"),
    (["tuple", [None, ["dict", ["k"], [["dict", ["z"], [None]]]]]], "output typed"),
])
def test_hostile_output_structures_are_refused(structure, words):
    with pytest.raises(jit.ArchiveError, match="output_structure") as info:
        jit.load(io.BytesIO(_with_structure(structure)))
    assert words in str(info.value)


def test_absurdly_nested_output_structure_is_refused():
    deep = None
    for _ in range(200):
        deep = ["tuple", [deep]]
    with pytest.raises(jit.ArchiveError, match="nested too deep|output typed"):
        jit.load(io.BytesIO(_with_structure(deep)))


def test_a_valid_edited_structure_loads():
    data = _with_structure(["tuple", [None, ["dict", ["renamed"], [None]]]])
    out = jit.load(io.BytesIO(data))(sm.ones(2, 2))
    assert type(out) is tuple and list(out[1]) == ["renamed"]


def test_hook_on_a_submodule_returning_a_dict_sees_the_dict():
    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return {"h": self.fc(x), "g": x * 2.0}

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = Enc()

        def forward(self, x):
            d = self.enc(x)
            return d["h"] + d["g"]

    m = Top().eval()
    traced = jit.trace(m, sm.randn(2, 3))
    seen = []
    handle = traced.enc.register_forward_hook(lambda mod, args, out: seen.append(list(out)))
    x = sm.randn(4, 3)
    with sm.no_grad():
        _close(traced(x), m(x))
    assert seen == [["h", "g"]]
    handle.remove()


@pytest.mark.parametrize("fn,keys", [
    (lambda x: {}, []),
    (lambda x: {"a": x, "n": 3, "none": None}, ["a", "n", "none"]),
    (lambda x: {"rows": x.shape[0], 7: x}, ["rows", 7]),
], ids=["empty", "constants", "int-key-and-size"])
def test_dict_outputs_of_every_kind_round_trip(fn, keys):
    traced = jit.trace(fn, sm.randn(2, 2), strict=False)
    buf = io.BytesIO()
    jit.save(traced, buf)
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    x = sm.randn(3, 2)
    want = fn(x)
    for out in (traced(x), loaded(x)):
        assert isinstance(out, dict) and list(out) == keys
        for k in keys:
            if isinstance(want[k], sm.Tensor):
                _close(out[k], want[k])
            else:
                assert out[k] == want[k]                     # a size follows the input


def test_list_of_unlike_dicts_round_trips():
    fn = lambda x: [{"a": x}, {"b": x, "c": x * 2.0}]  # noqa: E731
    traced = jit.trace(fn, sm.randn(2, 2), strict=False)
    buf = io.BytesIO()
    jit.save(traced, buf)
    x = sm.randn(4, 2)
    _same(jit.load(io.BytesIO(buf.getvalue()))(x), fn(x))


def test_dict_keys_must_be_str_or_int():
    with pytest.raises(jit.TracingError, match="str or int keys, got a tuple key"):
        jit.trace(lambda x: {(1, 2): x}, sm.randn(2), strict=False)
