"""Container inputs: an argument that is a dict (PyTorch's ``Dict[str, Tensor]``) or a nested
tuple/list/dict of tensors is traced as its tensor leaves, and a call flattens what it is
given against the recorded structure (missing keys or another structure raise
``ArgumentError`` naming the argument; extra keys are ignored, as in PyTorch). Works for
functions, modules, submodules called with a dict, other batch sizes, fused and unfused, under
grad, with ``check_trace``, and through ``save``/``load`` (the manifest's ``input_structure``)."""
from __future__ import annotations

import io
import json
import random
import warnings
import zipfile

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit.archive import _zip


def _np(t) -> np.ndarray:
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t.numpy(force=True))


def _pair(*shape, seed=0):
    """The same random data as a scriptmod and a torch tensor."""
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return sm.tensor(a), torch.tensor(a)


def mixer(d):
    return d["a"] * 2.0 + d["b"].sin() - d["a"].mean(dim=1, keepdim=True)


def nested(t):
    (p, q), r = t[0], t[1]
    return p * q + r["s"][0] - r["s"][1].exp()


# ---- against torch ---------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
def test_dict_function_matches_torch_at_other_batch_sizes(fused):
    torch = pytest.importorskip("torch")
    a, ta = _pair(3, 4, seed=1)
    b, tb = _pair(3, 4, seed=2)
    with jit.fuser(fused):
        ours = jit.trace(mixer, ({"a": a, "b": b},))
        theirs = torch.jit.trace(mixer, ({"a": ta, "b": tb},))
        for n, seed in ((3, 3), (7, 4), (1, 5)):
            a2, ta2 = _pair(n, 4, seed=seed)
            b2, tb2 = _pair(n, 4, seed=seed + 10)
            got = ours({"b": b2, "a": a2})               # key order of the call is free
            want = theirs({"b": tb2, "a": ta2})
            np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-5, atol=1e-5)


def test_nested_tuple_list_dict_input_matches_torch():
    torch = pytest.importorskip("torch")
    ex = [_pair(2, 3, seed=i) for i in range(4)]
    ours = jit.trace(nested, (((ex[0][0], ex[1][0]), {"s": [ex[2][0], ex[3][0]]}),))
    theirs = torch.jit.trace(nested, (((ex[0][1], ex[1][1]), {"s": [ex[2][1], ex[3][1]]}),))
    new = [_pair(5, 3, seed=10 + i) for i in range(4)]
    got = ours(((new[0][0], new[1][0]), {"s": [new[2][0], new[3][0]]}))
    want = theirs(((new[0][1], new[1][1]), {"s": [new[2][1], new[3][1]]}))
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-5, atol=1e-5)
    assert [v.debug_name for v in ours.graph.inputs] == ["t_0_0", "t_0_1", "t_1_s_0", "t_1_s_1"]


def test_extra_keys_are_ignored_and_missing_keys_raise_like_torch():
    torch = pytest.importorskip("torch")
    a, ta = _pair(2, 4)
    b, tb = _pair(2, 4, seed=1)
    ours = jit.trace(mixer, ({"a": a, "b": b},))
    theirs = torch.jit.trace(mixer, ({"a": ta, "b": tb},))
    np.testing.assert_allclose(_np(ours({"a": a, "b": b, "c": a})),
                               theirs({"a": ta, "b": tb, "c": ta}).numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError):
        theirs({"a": ta})
    with pytest.raises(jit.ArgumentError) as info:
        ours({"a": a})
    msg = str(info.value)
    assert "'d'" in msg and "['b']" in msg and "traced with keys ['a', 'b']" in msg
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TypeError)


@pytest.mark.parametrize("bad, words", [
    (lambda a: a, "expected a dict with keys ['a', 'b'] at d"),
    (lambda a: (a, a), "expected a dict"),
    (lambda a: {"a": a, "b": (a,)}, "expected a Tensor at d['b'], got tuple"),
    (lambda a: {"a": a, "c": a}, "lacks key(s) ['b']"),
])
def test_a_call_of_another_structure_names_the_argument(bad, words):
    a = sm.randn(2, 4)
    traced = jit.trace(mixer, ({"a": a, "b": a.clone()},))
    with pytest.raises(jit.ArgumentError) as info:
        traced(bad(a))
    assert "mixer.forward(): argument 'd'" in str(info.value) and words in str(info.value)


def test_nested_length_mismatch_names_the_path():
    x = sm.randn(2, 3)
    traced = jit.trace(nested, (((x, x), {"s": [x, x]}),))
    with pytest.raises(jit.ArgumentError, match=r"expected a list of 2 item\(s\) at t\[1\]\['s'\]"):
        traced(((x, x), {"s": [x]}))
    with pytest.raises(jit.ArgumentError, match="missing argument 't'"):
        traced()


def test_a_non_tensor_leaf_raises_tracing_error_like_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="cannot infer type"):
        torch.jit.trace(lambda d: d["a"] * d["k"], ({"a": torch.ones(2), "k": 3},))
    with pytest.raises(jit.TracingError) as info:
        jit.trace(lambda d: d["a"] * d["k"], ({"a": sm.ones(2), "k": 3},))
    assert "argument 'd' holds a value of type int" in str(info.value)
    with pytest.raises(jit.TracingError, match="str or int keys"):
        jit.trace(lambda d: d[1.5], ({1.5: sm.ones(2)},))


# ---- modules, submodules, methods -----------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.k = nn.Linear(4, 4)

    def forward(self, feats):
        return self.q(feats["query"]) * self.k(feats["key"]).sigmoid()


class Parent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = Encoder()
        self.out = nn.Linear(4, 2)

    def forward(self, x, y):
        return self.out(self.enc({"query": x, "key": y}).relu())


def _torch_twin(module):
    """A torch copy of ``Parent``/``Encoder`` with the same weights."""
    torch = pytest.importorskip("torch")

    class TEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, feats):
            return self.q(feats["query"]) * self.k(feats["key"]).sigmoid()

    class TParent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.out = TEncoder(), torch.nn.Linear(4, 2)

        def forward(self, x, y):
            return self.out(self.enc({"query": x, "key": y}).relu())

    twin = TParent() if isinstance(module, Parent) else TEncoder()
    twin.load_state_dict({k: torch.tensor(_np(v)) for k, v in module.state_dict().items()})
    return twin


def test_module_with_dict_input_matches_torch_under_grad():
    torch = pytest.importorskip("torch")
    sm.manual_seed(0)
    enc = Encoder()
    twin = _torch_twin(enc)
    q, tq = _pair(3, 4, seed=1)
    k, tk = _pair(3, 4, seed=2)
    traced = jit.trace(enc, ({"query": q, "key": k},))
    ttraced = torch.jit.trace(twin, ({"query": tq, "key": tk},))
    q2, tq2 = _pair(6, 4, seed=3)
    k2, tk2 = _pair(6, 4, seed=4)
    q2.requires_grad_(True)
    tq2.requires_grad_(True)
    out = traced({"query": q2, "key": k2})
    tout = ttraced({"query": tq2, "key": tk2})
    np.testing.assert_allclose(_np(out), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(_np(q2.grad), tq2.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(traced.q.weight.grad), twin.q.weight.grad.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_dict_function_grad_flows_to_dict_values():
    a = sm.randn(4, 3).requires_grad_(True)
    b = sm.randn(4, 3)
    traced = jit.trace(lambda d: (d["a"] * d["b"]).sum(), ({"a": sm.randn(2, 3), "b": b[:2]},))
    traced({"a": a, "b": b}).backward()
    np.testing.assert_allclose(_np(a.grad), _np(b), rtol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_submodule_called_with_a_dict_matches_torch(fused):
    torch = pytest.importorskip("torch")
    sm.manual_seed(0)
    model = Parent().eval()
    twin = _torch_twin(model).eval()
    x, tx = _pair(2, 4, seed=1)
    y, ty = _pair(2, 4, seed=2)
    with jit.fuser(fused):
        traced = jit.trace(model, (x, y))
        x2, tx2 = _pair(5, 4, seed=3)
        y2, ty2 = _pair(5, 4, seed=4)
        with torch.no_grad():
            want = twin(tx2, ty2).numpy()
        np.testing.assert_allclose(_np(traced(x2, y2)), want, rtol=1e-5, atol=1e-5)
        sub = traced.enc({"query": x2, "key": y2})     # the submodule alone takes the dict
        with torch.no_grad():
            np.testing.assert_allclose(_np(sub), twin.enc({"query": tx2, "key": ty2}).numpy(),
                                       rtol=1e-5, atol=1e-5)
    assert [v.debug_name for v in traced.enc.graph.inputs[1:]] == ["feats_query", "feats_key"]


def test_a_hook_on_a_submodule_sees_the_dict():
    model = Parent().eval()
    x, y = sm.randn(3, 4), sm.randn(3, 4)
    traced = jit.trace(model, (x, y))
    seen = []

    def pre(mod, args):
        seen.append(sorted(args[0]))
        return ({"query": args[0]["query"] * 0.0, "key": args[0]["key"]},)

    traced.enc.register_forward_pre_hook(pre)
    model.enc.register_forward_pre_hook(lambda m, a: ({"query": a[0]["query"] * 0.0,
                                                       "key": a[0]["key"]},))
    np.testing.assert_allclose(_np(traced(x, y)), _np(model(x, y)), rtol=1e-6, atol=1e-6)
    assert seen == [["key", "query"]]


def test_trace_module_method_and_keyword_call_with_a_dict():
    class Two(nn.Module):
        def forward(self, x):
            return x + 1.0

        def score(self, batch, scale):
            return batch["x"] * scale["w"][0] + scale["w"][1]

    x = sm.randn(2, 3)
    ex = ({"x": x}, {"w": (x.clone(), x.clone())})
    traced = jit.trace_module(Two(), {"forward": x, "score": ex})
    x2 = sm.randn(4, 3)
    got = traced.score(batch={"x": x2}, scale={"w": (x2, x2)})
    np.testing.assert_allclose(_np(got), _np(x2 * x2 + x2), rtol=1e-6)
    np.testing.assert_allclose(_np(traced.score({"x": x2}, scale={"w": [x2, x2]})),
                               _np(got), rtol=1e-6)
    with pytest.raises(jit.ArgumentError, match="unexpected keyword"):
        traced.score({"x": x2}, {"w": (x2, x2)}, other=1)
    assert traced._in_specs.keys() == {"score"}          # plain forward: nothing recorded


def test_check_trace_compares_dict_inputs():
    a, b = sm.randn(2, 4), sm.randn(2, 4)
    checks = [({"a": sm.randn(5, 4), "b": sm.randn(5, 4)},)]
    traced = jit.trace(mixer, ({"a": a, "b": b},), check_inputs=checks)
    assert traced is not None

    def branchy(d):
        return d["a"] + 1.0 if float(d["b"].sum()) > 0 else d["a"] - 1.0
    pos, neg = sm.ones(2, 2), -sm.ones(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(jit.TracingCheckError):
            jit.trace(branchy, ({"a": pos, "b": pos},), strict=False,
                      check_inputs=[({"a": pos, "b": neg},)])


def test_one_tensor_under_two_keys_stays_two_inputs():
    x = sm.randn(2, 3)
    traced = jit.trace(lambda d: d["a"] - d["b"], ({"a": x, "b": x},))
    a, b = sm.randn(3, 3), sm.randn(3, 3)
    np.testing.assert_allclose(_np(traced({"a": a, "b": b})), _np(a - b), rtol=1e-6)


def test_in_place_write_into_a_dict_value_reaches_the_caller():
    def f(d):
        d["a"].relu_()
        return d["a"] + d["b"]
    traced = jit.trace(f, ({"a": sm.randn(2, 3), "b": sm.randn(2, 3)},))
    a, b = sm.tensor([[-1.0, 2.0, -3.0]]), sm.ones(1, 3)
    out = traced({"a": a, "b": b})
    np.testing.assert_allclose(_np(a), [[0.0, 2.0, 0.0]])
    np.testing.assert_allclose(_np(out), [[1.0, 3.0, 1.0]])


def test_graph_for_takes_the_dict():
    traced = jit.trace(mixer, ({"a": sm.randn(2, 4), "b": sm.randn(2, 4)},))
    g = traced.graph_for({"a": sm.randn(2, 4), "b": sm.randn(2, 4)})
    assert [repr(v.type) for v in g.inputs] == ["Float(2, 4)", "Float(2, 4)"]
    g = traced.graph_for({"a": sm.randn(5, 4), "b": sm.randn(5, 4)})   # a second size: dim 0
    assert [repr(v.type) for v in g.inputs] == ["Float(s0, 4)", "Float(s0, 4)"]   # symbolic
    with pytest.raises(jit.ArgumentError, match="lacks key"):
        traced.graph_for({"a": sm.randn(5, 4)})


def test_plain_tensor_modules_record_no_input_structure():
    traced = jit.trace(nn.Linear(4, 2), sm.randn(2, 4))
    assert traced._in_specs == {}


# ---- archives ---------------------------------------------------------------------------------
def _saved(obj) -> bytes:
    buf = io.BytesIO()
    jit.save(obj, buf)
    return buf.getvalue()


def _manifest(data: bytes) -> dict:
    return json.loads(zipfile.ZipFile(io.BytesIO(data)).read("manifest.json"))


def _with_manifest(data: bytes, edit) -> bytes:
    zf = zipfile.ZipFile(io.BytesIO(data))
    items = {n: zf.read(n) for n in zf.namelist()}
    man = json.loads(items["manifest.json"])
    edit(man)
    items["manifest.json"] = json.dumps(man).encode()
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()])


def test_save_load_keeps_the_input_structure():
    sm.manual_seed(0)
    model = Parent().eval()
    x, y = sm.randn(2, 4), sm.randn(2, 4)
    data = _saved(jit.trace(model, (x, y)))
    enc = [m for m in _manifest(data)["modules"] if m["original_name"] == "Encoder"][0]
    assert enc["methods"][0]["input_structure"] == [["feats", ["dict", ["query", "key"],
                                                                [None, None]]]]
    loaded = jit.load(io.BytesIO(data))
    x2, y2 = sm.randn(5, 4), sm.randn(5, 4)
    np.testing.assert_allclose(_np(loaded(x2, y2)), _np(model(x2, y2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(loaded.enc({"key": y2, "query": x2})),
                               _np(model.enc({"query": x2, "key": y2})), rtol=1e-5, atol=1e-5)
    with pytest.raises(jit.ArgumentError, match="lacks key"):
        loaded.enc({"query": x2})


def test_saved_traced_function_with_nested_input():
    x = sm.randn(2, 3)
    loaded = jit.load(io.BytesIO(_saved(jit.trace(nested, (((x, x), {"s": [x, x]}),)))))
    p, q, r, s = (sm.randn(4, 3) for _ in range(4))
    np.testing.assert_allclose(_np(loaded(((p, q), {"s": [r, s]}))),
                               _np(nested(((p, q), {"s": [r, s]}))), rtol=1e-5, atol=1e-5)


def _dict_archive() -> bytes:
    a = sm.randn(2, 4)
    return _saved(jit.trace(mixer, ({"a": a, "b": a.clone()},)))


@pytest.mark.parametrize("bad, words", [
    ({}, "expected a list"),
    ([["d", ["dict", ["a"], [None]]]], "hold 1 tensor(s), the graph takes 2"),
    ([["d", ["dict", ["a", "a"], [None, None]]]], "distinct"),
    ([["d", ["dict", [["a"], "b"], [None, None]]]], "distinct"),
    ([["1d", ["dict", ["a", "b"], [None, None]]]], "identifier"),
    ([["d", ["namedtuple", "P", ["a", "b"], [None, None]]]], "no namedtuples"),
    ([["d", ["set", [None, None]]]], "kind one of"),
    ([["d", ["dict", ["a", "b"], [None, None]]], ["e", None]], "hold 3 tensor(s)"),
    ([["d", None], ["e", None], ["f", None]], "at most 2"),
    ([["d", None], ["d", None]], "distinct"),
    ([["d"]], "[identifier, structure]"),
    ("d", "expected a list"),
])
def test_hostile_input_structure_is_an_archive_error(bad, words):
    data = _with_manifest(_dict_archive(),
                          lambda man: man["modules"][0]["methods"][0].update(input_structure=bad))
    with pytest.raises(jit.ArchiveError) as info:
        jit.load(io.BytesIO(data))
    assert "input_structure" in str(info.value) and words in str(info.value), str(info.value)


def test_deep_input_structure_is_refused():
    deep: object = None
    for _ in range(200):
        deep = ["tuple", [deep]]
    data = _with_manifest(_dict_archive(), lambda man: man["modules"][0]["methods"][0].update(
        input_structure=[["d", deep]]))
    with pytest.raises(jit.ArchiveError, match="input_structure"):
        jit.load(io.BytesIO(data))


def _mutate(rng: random.Random, spec: list) -> object:
    """One seeded mutation of ``[["d", ["dict", ["a", "b"], [None, None]]]]``."""
    choice = rng.randrange(8)
    s = spec[0][1]
    if choice == 0:
        s[0] = rng.choice(["list", "tuple", "namedtuple", 3, None, "dict "])
    elif choice == 1:
        s[1] = rng.choice([["b", "a"], ["a"], ["a", "b", "c"], [1, 2], [True, False], "ab", None])
    elif choice == 2:
        s[2] = rng.choice([[None], [None] * 3, [["tuple", [None]], None], [3, None], None, []])
    elif choice == 3:
        spec[0][0] = rng.choice(["e", "", "x y", 5, None, "d" * 300])
    elif choice == 4:
        spec.append(rng.choice([["e", None], [], None, ["d", None]]))
    elif choice == 5:
        del s[rng.randrange(len(s))]
    elif choice == 6:
        return rng.choice([[], {}, None, 0, [[]], [["d"]]])
    else:
        s[2][rng.randrange(2)] = rng.choice([["tuple", []], ["list", [None]], ["dict", [], []], 7])
    return spec


def test_mutated_input_structures_fail_at_load_or_behave():
    """Every mutation either raises ``ArchiveError`` at load, or loads and then either computes
    what the original computes or raises ``ArgumentError`` for a dict of the original's shape
    (a key renamed: the call now needs that key) -- never an internal error."""
    good = _dict_archive()
    original = jit.load(io.BytesIO(good))
    a, b = sm.randn(3, 4), sm.randn(3, 4)
    want = _np(original({"a": a, "b": b}))
    rng = random.Random(0)
    outcomes = set()
    for _ in range(120):
        spec = [["d", ["dict", ["a", "b"], [None, None]]]]
        mutated = _mutate(rng, spec)
        data = _with_manifest(good, lambda man: man["modules"][0]["methods"][0].update(
            input_structure=mutated))
        try:
            loaded = jit.load(io.BytesIO(data))
        except jit.ArchiveError:
            outcomes.add("refused")
            continue
        try:
            got = loaded({"a": a, "b": b})
        except jit.ArgumentError:
            outcomes.add("argument error")
            continue
        outcomes.add("ran")
        assert got.shape == (3, 4)
        ok = np.allclose(_np(got), want) or np.allclose(_np(got), _np(mixer({"a": b, "b": a})))
        assert ok, mutated        # ["b", "a"] swaps which tensor feeds which input, nothing else
    assert "refused" in outcomes
