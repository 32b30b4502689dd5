"""trace_module with several methods: each is a compiled attribute of the result, with its
own guards and specializations, its own ``.graph``/``.code``, and survives save/load."""
from __future__ import annotations

import ast
import io

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


class Coder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.fc(x).relu())

    def encode(self, x):
        return self.fc(x) * 2.0

    def mix(self, x, y, scale: float = 0.5):
        return self.forward(x) * scale + y.sum(dim=1, keepdim=True)

    def pair(self, xs):
        a, b = xs
        return self.fc(a) - b


def _traced(**kw):
    sm.manual_seed(0)
    m = Coder().eval()
    x, y = sm.randn(3, 4), sm.randn(3, 2)
    inputs = {"forward": x, "encode": x, "mix": (x, y), "pair": ((x, x * 2),)}
    return m, jit.trace_module(m, inputs, **kw)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("batch", [3, 1, 7])
def test_every_traced_method_is_callable_at_any_batch(batch):
    m, tm = _traced()
    x, y = sm.randn(batch, 4), sm.randn(batch, 2)
    with sm.no_grad():
        _close(tm(x), m(x))
        _close(tm.encode(x), m.encode(x))
        _close(tm.mix(x, y), m.mix(x, y))
        _close(tm.mix(x, y=y), m.mix(x, y=y))
        _close(tm.pair((x, x + 1)), m.pair((x, x + 1)))


def test_float64_inputs_run_each_method():
    m, tm = _traced()
    m.double()
    tm.double()
    x = sm.randn(5, 4, dtype=sm.float64)
    with sm.no_grad():
        out = tm.encode(x)
        assert out.dtype == sm.float64
        _close(out, m.encode(x), 1e-12)


def test_methods_have_their_own_guards_and_specializations():
    _, tm = _traced(check_trace=False)
    with sm.no_grad():
        tm.encode(sm.randn(2, 4))
        tm.encode(sm.randn(2, 4))
        tm.encode(sm.randn(6, 4))
    assert tm.executor("encode").stats == {"specializations": 2, "calls": 3}
    assert tm.executor("forward").stats["calls"] == 0
    with pytest.raises(TypeError, match=r"encode\(\): argument 'x' \(position 0\).*Tensor"):
        tm.encode(3)
    with pytest.raises(TypeError, match=r"mix\(\): expected 2 argument"):
        tm.mix(sm.randn(2, 4))
    with pytest.raises(TypeError, match=r"missing argument 'y'"):
        tm.mix(x=sm.randn(2, 4))


def test_method_graph_and_code_like_torch():
    """torch: ``tm.code`` is forward's; ``tm.encode.code``/``.graph`` are encode's."""
    _, tm = _traced()
    assert tm.code.startswith("def forward(self, x: Tensor) -> Tensor:")
    code = tm.encode.code
    ast.parse(code)
    assert code.startswith("def encode(self, x: Tensor) -> Tensor:")
    assert "ops.sm.mul(" in code
    assert tm.mix.code.startswith("def mix(self, x: Tensor, y: Tensor) -> Tensor:")
    assert "sm::mul" in str(tm.encode.graph) and "CallMethod" in str(tm.encode.graph)
    assert "CallMethod" not in str(tm.encode.inlined_graph)
    assert "sm::matmul" in str(tm.encode.inlined_graph)
    code, consts = tm.encode.code_with_constants
    assert code == tm.encode.code and len(consts) == 0


def test_a_method_calling_forward_inlines_it():
    m, tm = _traced()
    text = str(tm.mix.graph)
    assert 'prim::CallMethod[name="forward"](%' in text      # out's and fc's forward
    assert "sm::relu" in text                                   # Coder.forward inlined
    x, y = sm.randn(4, 4), sm.randn(4, 2)
    with sm.no_grad():
        _close(tm.mix(x, y), m.mix(x, y))


def test_gradients_flow_through_a_method():
    m, tm = _traced()
    x = sm.randn(3, 4, requires_grad=True)
    tm.encode(x).sum().backward()
    g_traced = x.grad.numpy().copy()
    x.grad = None
    m.encode(x).sum().backward()
    np.testing.assert_allclose(g_traced, x.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_methods_survive_save_and_load(tmp_path):
    m, tm = _traced()
    tm.save(tmp_path / "coder.smod")
    loaded = jit.load(tmp_path / "coder.smod")
    x, y = sm.randn(5, 4), sm.randn(5, 2)
    with sm.no_grad():
        _close(loaded.encode(x), m.encode(x))
        _close(loaded.mix(x, y), m.mix(x, y))
        _close(loaded.pair((x, x)), m.pair((x, x)))
    assert loaded.encode.code == tm.encode.code
    import json
    import zipfile
    man = json.loads(zipfile.ZipFile(tmp_path / "coder.smod").read("manifest.json"))
    assert [meth["name"] for meth in man["modules"][0]["methods"]] == \
        ["forward", "encode", "mix", "pair"]


def test_torch_trace_module_agrees():
    torch = pytest.importorskip("torch")

    class T(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()

        def encode(self, x):
            return self.fc(x) * 2.0

    class S(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()

        def encode(self, x):
            return self.fc(x) * 2.0

    t, s = T().eval(), S().eval()
    with sm.no_grad():
        s.fc.weight.copy_(sm.tensor(t.fc.weight.detach().numpy()))
        s.fc.bias.copy_(sm.tensor(t.fc.bias.detach().numpy()))
    xn = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    tt = torch.jit.trace_module(t, {"forward": torch.tensor(xn), "encode": torch.tensor(xn)})
    st = jit.trace_module(s, {"forward": sm.tensor(xn), "encode": sm.tensor(xn)})
    x6 = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    with torch.no_grad(), sm.no_grad():
        np.testing.assert_allclose(st.encode(sm.tensor(x6)).numpy(),
                                   tt.encode(torch.tensor(x6)).numpy(), rtol=1e-5, atol=1e-5)
    assert tt.code.lstrip().startswith("def forward") and st.code.startswith("def forward")
    assert tt.encode.code.lstrip().startswith("def encode") and st.encode.code.startswith("def encode")


def test_method_names_that_are_not_methods_are_refused():
    m = Coder()
    x = sm.randn(2, 4)
    with pytest.raises(ValueError, match="'fc'|fc is a parameter, buffer or submodule"):
        jit.trace_module(m, {"forward": x, "fc": x})
    with pytest.raises(AttributeError, match="no method 'nope'"):
        jit.trace_module(m, {"forward": x, "nope": x})
    with pytest.raises(TypeError, match="non-empty dict"):
        jit.trace_module(m, {})


def test_a_method_named_like_a_module_method_keeps_the_module_api():
    """A user's ``double`` is traced (and saved), but ``traced.double`` stays
    ``Module.double``: the ScriptModule API always wins over traced method names."""
    class D(nn.Module):
        def forward(self, x):
            return x + 1

        def double(self, x):
            return x * 2

    x = sm.randn(2, 3)
    tm = jit.trace_module(D(), {"forward": x, "double": x})
    assert tm.double() is tm                       # Module.double, not the traced method
    with sm.no_grad():
        _close(tm._run("double", (x,), {}), x * 2)
    buf = io.BytesIO()
    tm.save(buf)
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    with sm.no_grad():
        _close(loaded._run("double", (x,), {}), x * 2)


def test_hostile_archive_method_named_like_a_member_is_refused():
    import json
    import zipfile
    from scriptmod.jit.archive import _zip
    _, tm = _traced()
    buf = io.BytesIO()
    tm.save(buf)
    zf = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    items = {n: zf.read(n) for n in zf.namelist()}
    man = json.loads(items["manifest.json"])
    man["modules"][0]["methods"][1]["name"] = "fc"
    items["manifest.json"] = json.dumps(man).encode()
    data = _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()])
    with pytest.raises(jit.ArchiveError, match="'fc' has the name of a parameter, buffer or submodule"):
        jit.load(io.BytesIO(data))


def test_deepcopy_of_a_run_module_copies_methods_and_state():
    import copy
    m, tm = _traced()
    x = sm.randn(2, 4)
    with sm.no_grad():
        tm.encode(x)                                  # compiled state exists
        c = copy.deepcopy(tm)
        assert c.encode.owner is c and c.fc.weight is not tm.fc.weight
        _close(c.encode(x), m.encode(x))
        c.fc.weight.zero_()
        c.fc.bias.zero_()
        assert float(c.encode(x).abs().sum()) == 0.0
        _close(tm.encode(x), m.encode(x))             # the original is untouched


def test_methods_traced_at_different_batches_are_both_symbolic():
    sm.manual_seed(0)
    m = Coder().eval()
    tm = jit.trace_module(m, {"forward": sm.randn(2, 4), "encode": sm.randn(3, 4)})
    assert repr(tm.graph.inputs[1].type) == "Float(B, 4)"
    assert repr(tm.encode.graph.inputs[1].type) == "Float(B, 4)"
    x = sm.randn(9, 4)
    with sm.no_grad():
        _close(tm.encode(x), m.encode(x))
        _close(tm(x), m(x))
