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


# ---- Ivy's constructor keywords, v / module_dict / device / dtype, trace_graph --------------
class TwoLayer(nn.Module):
    """A user subclass that forwards Ivy's keywords to Module.__init__."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fc1 = nn.Linear(3, 4)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x)).relu())


class Fixed(nn.Module):
    """A user subclass whose __init__ takes no keywords: Module handles Ivy's."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("scale", sm.ones(2))

    def forward(self, x):
        return self.fc(x) * self.scale


def _two_layer_v(seed=0):
    rng = np.random.default_rng(seed)
    return {"fc1": {"weight": sm.tensor(rng.standard_normal((4, 3)), dtype=sm.float32),
                    "bias": sm.zeros(4)},
            "fc2": {"weight": sm.tensor(rng.standard_normal((2, 4)), dtype=sm.float32),
                    "bias": sm.ones(2)}}


def test_v_attribute_is_nested_by_submodule_path():
    m = TwoLayer()
    v = m.v
    assert list(v) == ["fc1", "fc2"] and list(v["fc1"]) == ["weight", "bias"]
    assert v["fc1"]["weight"] is m.fc1.weight and v.fc2.bias is m.fc2.bias   # attribute access
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert {k: list(x) for k, x in seq.v.items()} == {"0": ["weight", "bias"], "2": ["weight", "bias"]}
    lin = nn.Linear(2, 3)
    assert list(lin.v) == ["weight", "bias"] and lin.v["weight"] is lin.weight


def test_constructor_v_replaces_the_created_parameters():
    v = _two_layer_v()
    m = TwoLayer(v=v)
    x = sm.randn(5, 3)
    expect = (x @ v["fc1"]["weight"].t()).relu() @ v["fc2"]["weight"].t() + 1
    np.testing.assert_allclose(m.eval()(x).detach().numpy(), expect.numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(m.fc1.weight, Parameter) and m.fc1.weight.requires_grad
    assert list(m.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    dotted = TwoLayer(v={f"{a}.{b}": t for a, d in v.items() for b, t in d.items()})
    np.testing.assert_array_equal(dotted.fc2.weight.detach().numpy(), v["fc2"]["weight"].numpy())


def test_constructor_v_on_builtin_layers_and_no_keyword_subclasses():
    w = sm.arange(6, dtype=sm.float32).reshape(3, 2)
    lin = nn.Linear(2, 3, v={"weight": w, "bias": sm.zeros(3)})
    assert lin.weight.tolist() == w.tolist() and lin.bias.tolist() == [0.0] * 3
    f = Fixed(v={"fc": {"weight": sm.eye(2), "bias": sm.zeros(2)}}, buffers={"scale": sm.full((2,), 3.0)})
    assert f(sm.ones(1, 2)).tolist() == [[3.0, 3.0]]
    assert nn.Sequential(nn.Linear(2, 3), v={"0": {"weight": sm.ones(3, 2), "bias": sm.zeros(3)}})[0].weight.sum().item() == 6.0


def test_constructor_v_is_checked():
    with pytest.raises(RuntimeError) as info:
        nn.Linear(2, 3, v={"weight": sm.ones(3, 3), "zz": sm.ones(1)})
    msg = str(info.value)
    assert "'zz'" in msg and "'bias'" in msg and "size mismatch for weight: given (3, 3)" in msg
    assert isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'fc2.bias'"):
        TwoLayer(v={"fc1": _two_layer_v()["fc1"], "fc2": {"weight": sm.ones(2, 4)}})
    with pytest.raises(TypeError, match="v must be a"):
        nn.Linear(2, 3, v=[sm.ones(3, 2)])
    with pytest.raises(TypeError, match="store_vars must be a bool"):
        TwoLayer(store_vars="no")


def test_with_partial_v_keeps_the_created_ones():
    sm.manual_seed(0)
    ref = TwoLayer()
    sm.manual_seed(0)
    m = TwoLayer(v={"fc2": {"bias": sm.full((2,), 7.0)}}, with_partial_v=True)
    assert m.fc2.bias.tolist() == [7.0, 7.0]
    np.testing.assert_array_equal(m.fc1.weight.detach().numpy(), ref.fc1.weight.detach().numpy())


def test_v_keeps_tied_parameters_tied():
    t = _TiedKw(v={"a": {"w": sm.tensor([5.0, 6.0])}})      # one name of the tied pair
    assert t.a.w is t.c.w and t.a.w.tolist() == [5.0, 6.0]
    assert list(t.v) == ["a"]                                 # each variable once, as named_parameters


class _TiedKw(Tied):
    def __init__(self, **kw):
        nn.Module.__init__(self, **kw)
        self.a = Affine()
        self.c = Affine()
        self.c.w = self.a.w


def test_training_keyword_sets_the_mode_of_the_whole_tree():
    m = TwoLayer(training=False)
    assert not m.training and not m.drop.training and not m.fc1.training
    x = sm.randn(4, 3)
    np.testing.assert_array_equal(m(x).detach().numpy(), m(x).detach().numpy())  # dropout off
    assert TwoLayer().drop.training and nn.Dropout(0.5, training=False).training is False
    with pytest.raises(TypeError, match="training must be a bool"):
        TwoLayer(training="eval")


def test_build_mode_keyword():
    m = nn.LazyLinear(3, build_mode="explicit")
    assert m.build_mode == "explicit" and nn.LazyLinear.build_mode == "on_call"
    with pytest.raises(RuntimeError, match="build_mode is 'explicit'"):
        m(sm.randn(2, 5))
    m.build(sm.randn(2, 5))
    assert m.built and m(sm.randn(2, 5)).shape == (2, 3)
    assert KnownShape(3, build_mode="on_init").built and not KnownShape(3).built
    with pytest.raises(ValueError, match="build_mode must be one of"):
        TwoLayer(build_mode="later")


def test_lazy_layer_takes_its_shape_from_v():
    m = nn.LazyLinear(2, v={"weight": sm.ones(2, 5), "bias": sm.zeros(2)})
    assert m.built and m.weight.shape == (2, 5) and m.in_features == 5
    assert type(m) is nn.Linear and m(sm.ones(1, 5)).tolist() == [[5.0, 5.0]]


def test_store_vars_false_needs_v_on_every_call():
    donor = TwoLayer(training=False)
    m = TwoLayer(store_vars=False, training=False)
    assert m.v == {} and list(m.state_dict()) == [] and list(m.parameters()) == []
    x = sm.randn(3, 3)
    with pytest.raises(RuntimeError, match="store_vars=False.*fc1.weight"):
        m(x)
    np.testing.assert_allclose(m(x, v=donor.v).detach().numpy(), donor(x).detach().numpy())
    assert m.fc1.weight is None                                   # not kept after the call
    with pytest.raises(RuntimeError, match="fc2.bias"):
        m(x, v={"fc1": donor.v["fc1"], "fc2": {"weight": donor.fc2.weight}})


def test_call_with_nested_v_and_buffers():
    f = Fixed()
    x = sm.ones(1, 2)
    out = f(x, v={"fc": {"weight": sm.eye(2), "bias": sm.zeros(2)}}, buffers={"scale": sm.tensor([2.0, 3.0])})
    assert out.tolist() == [[2.0, 3.0]] and f.scale.tolist() == [1.0, 1.0]
    assert f(x, buffers={"scale": sm.zeros(2)}).tolist() == [[0.0, 0.0]]
    with pytest.raises(KeyError, match="fc.weight is not a buffer"):
        f(x, buffers={"fc.weight": sm.eye(2)})

    class TakesBuffers(nn.Module):
        def forward(self, x, buffers=None):
            return buffers
    assert TakesBuffers()(1, buffers={"a": 1}) == {"a": 1}


def test_module_dict_device_dtype():
    m = TwoLayer()
    assert list(m.module_dict) == ["fc1", "drop", "fc2"] and m.module_dict["fc2"] is m.fc2
    assert m.device == sm.device("cpu") and m.dtype == sm.float32
    d = TwoLayer(dtype=sm.float64)
    assert d.dtype == sm.float64 and d.fc1.weight.dtype == sm.float64
    assert nn.ReLU().dtype == sm.get_default_dtype() and nn.ReLU().device.type == "cpu"
    assert nn.ReLU(dtype=sm.float64).dtype == sm.float64
    assert TwoLayer(device="cpu").device == sm.device("cpu")


def test_ivy_attributes_never_shadow_torch_members():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(2, 2)
            self.v = nn.Linear(2, 2)                  # a submodule named v
            self.device = "recorded"                  # a plain attribute named device
            self.register_buffer("dtype", sm.zeros(1))  # a buffer named dtype
            self.register_parameter("module_dict", Parameter(sm.ones(1)))

        def forward(self, x):
            return self.v(self.q(x))
    a = Attn()
    assert isinstance(a.v, nn.Linear) and a.device == "recorded"
    assert a.dtype.shape == (1,) and isinstance(a.module_dict, Parameter)
    assert list(a.state_dict()) == ["module_dict", "dtype", "q.weight", "q.bias", "v.weight", "v.bias"]
    assert a.get_submodule("v") is a.v
    with pytest.raises(AttributeError, match="has no attribute `device`"):
        nn.Linear(2, 2).get_submodule("device")


def test_torch_style_init_is_unchanged():
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        nn.Module(foo=1)
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        nn.Module(1)
    m = TwoLayer()
    assert repr(m) == ("TwoLayer(\n  (fc1): Linear(in_features=3, out_features=4, bias=True)\n"
                       "  (drop): Dropout(p=0.5, inplace=False)\n"
                       "  (fc2): Linear(in_features=4, out_features=2, bias=True)\n)")
    assert "_ivy_init" not in m.__dict__ and "_ivy_init" not in m.fc1.__dict__


def test_torch_state_dict_and_repr_match_with_ivy_keywords():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), v={"0": {"weight": sm.ones(3, 2), "bias": sm.zeros(3)}},
                         training=False)
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU()).eval()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())


def test_trace_graph_returns_the_script_module():
    m = TwoLayer(training=False)
    x = sm.randn(4, 3)
    for traced in (m.trace_graph(x), m.trace_graph(args=(x,)), m.trace_graph(args=[x], check_trace=False)):
        assert isinstance(traced, sm.jit.ScriptModule) and traced.original_name == "TwoLayer"
        np.testing.assert_allclose(traced(sm.ones(2, 3)).detach().numpy(), m(sm.ones(2, 3)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    traced = m.trace_graph(x)
    assert traced.trace_graph(x) is traced
    with pytest.raises(TypeError, match="either positionally or as args"):
        m.trace_graph(x, args=(x,))


def test_trace_graph_kwargs_and_several_inputs():
    class Two(nn.Module):
        def forward(self, a, b):
            return a * 2 + b
    a, b = sm.ones(2), sm.full((2,), 3.0)
    assert Two().trace_graph(a, b)(a, b).tolist() == [5.0, 5.0]
    assert Two().trace_graph(kwargs={"a": a, "b": b})(a, b).tolist() == [5.0, 5.0]


def test_trace_graph_without_inputs_compiles_on_first_call():
    m = TwoLayer(training=False)
    x = sm.randn(2, 3)
    want = m(x).detach().numpy()
    assert m.trace_graph() is m
    np.testing.assert_allclose(m(x).detach().numpy(), want, rtol=1e-5, atol=1e-6)
    assert type(m.__dict__["forward"]).__name__ == "_CompiledForward"
