"""Issue 37: any dim may be symbolic: ``trace(dynamic_dims=..., dynamic=...)`` and automatic
dynamic shapes (a dim becomes symbolic at its second distinct size), checked against eager
at many sizes, in float32 and float64, traced, loaded from an archive and with grad."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import jit, nn
from scriptmod.ir.errors import ShapeError
from scriptmod.jit._tracer import TracerWarning


class Mixer(nn.Module):
    """Sizes read from the input flow through shape arithmetic: ``B*T`` rows for the MLP,
    a mean over T, a LayerNorm over the features."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        b, t, d = x.shape
        h = self.fc2(F.gelu(self.fc1(x.reshape(b * t, d)))).reshape(b, t, d)
        return self.norm(h + x - x.mean(1, keepdim=True))


def _spec_count(traced) -> int:
    return traced.executor("forward").stats["specializations"]


def _close(a: sm.Tensor, b: sm.Tensor, dtype) -> None:
    tol = 1e-5 if dtype == sm.float32 else 1e-12
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64])
def test_named_dims_serve_every_size_with_one_symbolic_specialization(dtype) -> None:
    m = Mixer().to(dtype).eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16, dtype=dtype), dynamic_dims={"x": {0: "B", 1: "T"}})
        assert str(tr.graph.inputs[1].type) == f"{dtype.short}(B, T, 16)"
        for b, t in [(2, 5), (3, 7), (4, 2), (2, 13), (5, 31), (3, 64)]:
            x = sm.randn(b, t, 16, dtype=dtype)
            _close(tr(x), m(x), dtype)
    assert _spec_count(tr) == 2                # the first size concrete, every other shared


def test_a_list_of_dims_names_them_s0_s1() -> None:
    with sm.no_grad():
        tr = jit.trace(Mixer().eval(), sm.randn(2, 5, 16), dynamic_dims={"x": [0, 1]})
    assert str(tr.graph.inputs[1].type) == "Float(s0, s1, 16)"


def test_dynamic_true_names_every_dim_alike_sizes_share_a_name() -> None:
    f = jit.trace(lambda a, b: (a * b).sum(1), (sm.randn(3, 4), sm.randn(3, 4)), dynamic=True)
    assert [str(v.type) for v in f.graph.inputs] == ["Float(s0, s1)", "Float(s0, s1)"]
    for n, k in [(5, 7), (2, 9), (6, 6)]:
        a, b = sm.randn(n, k), sm.randn(n, k)
        _close(f(a, b), (a * b).sum(1), sm.float32)


def test_dynamic_false_names_nothing_and_every_size_specializes() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16), dynamic=False)
        assert str(tr.graph.inputs[1].type) == "Float(2, 5, 16)"
        before = _spec_count(tr)                 # check_trace ran the example
        for t in (6, 7, 8):
            x = sm.randn(2 + t % 2, t, 16)
            _close(tr(x), m(x), sm.float32)
    assert _spec_count(tr) == before + 3


def test_automatic_dynamic_second_distinct_size_makes_the_dim_symbolic() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16))
        for t in range(5, 25):                # a growing sequence, as in generation
            x = sm.randn(2, t, 16)
            _close(tr(x), m(x), sm.float32)
    assert _spec_count(tr) == 2               # T = 5 concrete, then one symbolic one


def test_automatic_dynamic_keeps_sizes_0_and_1_concrete() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16))
        for t in (5, 6, 7, 1, 8, 1):
            x = sm.randn(2, t, 16)
            _close(tr(x), m(x), sm.float32)
    assert _spec_count(tr) == 3               # 5, the shared one, and 1


def test_a_dim_a_weight_fixes_never_becomes_symbolic_and_errors_as_eager() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16))
        tr(sm.randn(2, 5, 16))
        with pytest.raises(ShapeError, match="15 != 16"):
            tr(sm.randn(2, 5, 15))
        with pytest.raises(ShapeError, match="16"):
            m(sm.randn(2, 5, 15))
        x = sm.randn(2, 9, 16)
        _close(tr(x), m(x), sm.float32)
    assert tr.executor("forward").auto == {(0, 3, 1): "s0"}


class Unrolled(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        out = x[:, 0]
        for i in range(1, x.size(1)):
            out = out + x[:, i] * i
        return out


def test_a_dim_a_guard_pins_warns_and_stays_concrete() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tr = jit.trace(Unrolled(), sm.randn(3, 4), dynamic_dims={"x": {0: "B", 1: "T"}})
    assert any("dim 1 of 'x' stays concrete" in str(w.message) for w in seen
               if issubclass(w.category, TracerWarning))
    assert str(tr.graph.inputs[1].type) == "Float(B, 4)"
    x = sm.randn(7, 4)
    _close(tr(x), Unrolled()(x), sm.float32)
    with pytest.raises(Exception, match="dim 1"):
        tr(sm.randn(3, 5))


@pytest.mark.parametrize("bad, error, match", [
    ({"y": [1]}, ValueError, "'y' is not an argument"),
    ({"x": {3: "T"}}, IndexError, "dim 3 is out of range"),
    ({"x": {1: "max"}}, ValueError, "identifier"),
    ({"x": {1: "2T"}}, ValueError, "identifier"),
    ({"x": "T"}, TypeError, "dict dim -> name or a list"),
    ([1], TypeError, "dynamic_dims must be a dict"),
    ({"x": {0: "T", 1: "T"}}, ValueError, "example sizes differ"),
])
def test_bad_dynamic_dims_name_the_argument(bad, error, match) -> None:
    with pytest.raises(error, match=match):
        jit.trace(Mixer(), sm.randn(2, 5, 16), dynamic_dims=bad)


def test_dynamic_and_dynamic_dims_together_or_a_non_bool_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        jit.trace(Mixer(), sm.randn(2, 5, 16), dynamic=True, dynamic_dims={"x": [1]})
    with pytest.raises(TypeError, match="dynamic must be True, False or None"):
        jit.trace(Mixer(), sm.randn(2, 5, 16), dynamic="yes")


def test_archives_keep_the_names_and_the_loaded_module_shares_one_specialization() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16), dynamic_dims={"x": {0: "B", 1: "T"}})
        buf = io.BytesIO()
        jit.save(tr, buf)
        buf.seek(0)
        loaded = jit.load(buf)
        assert str(loaded.graph.inputs[1].type) == "Float(B, T, 16)"
        for b, t in [(3, 4), (2, 9), (4, 17)]:
            x = sm.randn(b, t, 16)
            _close(loaded(x), m(x), sm.float32)
    assert _spec_count(loaded) == 2


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64])
def test_grad_through_symbolic_dims_equals_eager(dtype) -> None:
    m = Mixer().to(dtype)
    tr = jit.trace(m, sm.randn(2, 5, 16, dtype=dtype), dynamic_dims={"x": {0: "B", 1: "T"}})
    for b, t in [(2, 5), (3, 7), (2, 11)]:
        x = sm.randn(b, t, 16, dtype=dtype)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        m.zero_grad()
        m(xa).square().sum().backward()
        want = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        tr(xb).square().sum().backward()
        _close(xb.grad, xa.grad, dtype)
        for p, w in zip(m.parameters(), want):
            _close(p.grad, w, dtype)


def test_check_trace_at_other_sizes_passes() -> None:
    m = Mixer().eval()
    with sm.no_grad():
        jit.trace(m, sm.randn(2, 5, 16), dynamic_dims={"x": {0: "B", 1: "T"}},
                  check_inputs=[(sm.randn(3, 8, 16),), (sm.randn(2, 2, 16),)])


def test_hooks_run_at_every_size() -> None:
    m = Mixer().eval()
    seen = []
    with sm.no_grad():
        tr = jit.trace(m, sm.randn(2, 5, 16), dynamic_dims={"x": {1: "T"}})
        tr.fc2.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
        for t in (5, 6, 9):
            x = sm.randn(2, t, 16)
            _close(tr(x), m(x), sm.float32)
    assert seen == [(10, 16), (12, 16), (18, 16)]
