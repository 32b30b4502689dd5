"""Ivy-style Module features: explicit variables, functional_call, lazy build modes,
show_graph."""
import importlib.util

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.func import functional_call
from scriptmod.nn import Parameter, UninitializedParameter


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = Parameter(sm.tensor([1.0, 2.0]))
        self.register_buffer("b", sm.tensor([0.5, 0.5]))

    def forward(self, x, scale=1.0):
        return (x * self.w + self.b) * scale


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Affine()
        self.c = Affine()
        self.c.w = self.a.w

    def forward(self, x):
        return self.c(self.a(x))


# ---- explicit variables -------------------------------------------------------------------
def test_call_with_v_uses_given_tensors_without_changing_module():
    m = Affine()
    out = m(sm.ones(2), v={"w": sm.tensor([10.0, 20.0])})
    assert out.tolist() == [10.5, 20.5]
    assert m.w.tolist() == [1.0, 2.0] and isinstance(m.w, Parameter)
    assert m(sm.ones(2), v={"w": np.array([3.0, 3.0], np.float32), "b": sm.zeros(2)},
             scale=2.0).tolist() == [6.0, 6.0]


def test_v_is_passed_through_when_forward_takes_v():
    class Attn(nn.Module):
        def forward(self, q, k, v):
            return v
    assert Attn()(1, 2, v={"x": 1}) == {"x": 1}


def test_functional_call_grads_flow_to_given_tensors():
    m = Affine()
    w = sm.tensor([2.0, 2.0], requires_grad=True)
    functional_call(m, {"w": w}, (sm.tensor([3.0, 4.0]),)).sum().backward()
    assert w.grad.tolist() == [3.0, 4.0] and m.w.grad is None


def test_functional_call_args_kwargs_and_dict_sequence():
    m = Affine()
    out = functional_call(m, ({"w": sm.zeros(2)}, {"b": sm.ones(2)}), sm.ones(2), {"scale": 3.0})
    assert out.tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="w appeared in multiple dictionaries"):
        functional_call(m, ({"w": sm.zeros(2)}, {"w": sm.ones(2)}), sm.ones(2))


def test_functional_call_restores_on_exception():
    m = Affine()
    w = m.w
    with pytest.raises(ValueError, match="do not broadcast"):
        functional_call(m, {"w": sm.zeros(3)}, (sm.ones(2),))
    assert m.w is w and m._parameters["w"] is w


def test_functional_call_strict():
    m = Affine()
    with pytest.raises(RuntimeError, match=r"Error\(s\) in reparametrizing for Affine:\n\t"
                                           r"Unexpected key\(s\): 'zz'.\n\tMissing key\(s\): 'b'."):
        functional_call(m, {"w": sm.ones(2), "zz": sm.ones(1)}, (sm.ones(2),), strict=True)
    functional_call(m, {"w": sm.ones(2), "b": sm.ones(2)}, (sm.ones(2),), strict=True)


def test_functional_call_tie_weights():
    m = Tied()
    x = sm.ones(2)
    tied = functional_call(m, {"a.w": sm.zeros(2)}, (x,))
    untied = functional_call(m, {"a.w": sm.zeros(2)}, (x,), tie_weights=False)
    assert tied.tolist() == [0.5, 0.5]             # c.w follows a.w
    assert untied.tolist() == [1.0, 1.5]           # c.w keeps its stored value
    with pytest.raises(ValueError, match="which are tied"):
        functional_call(m, {"a.w": sm.zeros(2), "c.w": sm.ones(2)}, (x,))


def test_functional_call_matches_torch_func():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)

    def run(lib, fc):
        lib.manual_seed(0)
        m = lib.nn.Linear(3, 2)
        return fc(m, {"weight": lib.from_numpy(w)}, (lib.from_numpy(x),)).detach().numpy(), m
    ours, m = run(sm, functional_call)
    theirs, tm = run(torch, torch.func.functional_call)
    np.testing.assert_allclose(ours - m.bias.detach().numpy(), theirs - tm.bias.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


# ---- lazy build ---------------------------------------------------------------------------
class KnownShape(nn.Module):
    """Knows its shape at construction; builds from _build() without inputs."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.w = UninitializedParameter()

    def _build(self, *inputs):
        self.w.materialize((self.n,))
        sm.nn.init.ones_(self.w)

    def forward(self, x):
        return x * self.w


class EagerKnown(KnownShape):
    build_mode = "on_init"


def test_lazy_linear_builds_on_first_call():
    m = nn.LazyLinear(3)
    assert not m.built
    assert m(sm.randn(2, 5)).shape == (2, 3)
    assert m.built and m.weight.shape == (3, 5)


def test_on_init_builds_when_shapes_known():
    assert EagerKnown(4).built and EagerKnown(4).w.shape == (4,)
    assert not KnownShape(4).built
    m = KnownShape(2)
    m.build_mode = "on_init"                      # setting it on an instance builds at once
    assert m.built


def test_on_init_without_known_shapes_falls_back_to_call():
    class EagerLazy(nn.LazyLinear):
        build_mode = "on_init"
    m = EagerLazy(3)
    assert not m.built
    m(sm.randn(1, 4))
    assert m.built


def test_explicit_mode_requires_build():
    m = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    m.build_mode = "explicit"
    with pytest.raises(RuntimeError, match="Sequential is not built: its build_mode is 'explicit'"):
        m(sm.randn(2, 5))
    assert m.build(sm.randn(2, 5)) is m and m.built
    assert m(sm.randn(2, 5)).shape == (2, 3)


def test_build_without_inputs():
    assert KnownShape(3).build().built
    with pytest.raises(ValueError, match="without example inputs"):
        nn.LazyLinear(3).build()


def test_build_mode_is_validated():
    with pytest.raises(ValueError, match="build_mode must be one of"):
        Affine().build_mode = "sometimes"
    with pytest.raises(ValueError, match="build_mode must be one of"):
        class Bad(nn.Module):
            build_mode = "never"


def test_build_mode_is_a_class_attribute():
    assert nn.Module.build_mode == "on_call" and EagerKnown.build_mode == "on_init"
    m = Affine()
    m.build_mode = "explicit"
    assert Affine().build_mode == "on_call" and m(sm.ones(2)).shape == (2,)   # built: runs


def test_non_lazy_modules_are_built():
    assert Affine().built and nn.Linear(2, 3).built


# ---- show_graph ---------------------------------------------------------------------------
def test_show_graph(tmp_path):
    m = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    if importlib.util.find_spec("scriptmod.jit") is None:
        with pytest.raises(RuntimeError, match="show_graph needs scriptmod.jit"):
            m.show_graph(sm.randn(1, 3))
        return
    dot = m.show_graph(sm.randn(1, 3), fname=str(tmp_path / "g.dot"))
    assert "digraph" in dot and (tmp_path / "g.dot").read_text() == dot
    with pytest.raises(ValueError, match="expected a .dot"):
        m.show_graph(sm.randn(1, 3), fname=str(tmp_path / "g.txt"))
