"""nn.Module: registration, attribute rules, lookups, traversal, modes, casts, repr."""
import copy
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import Parameter


class Leaf(nn.Module):
    """A tiny layer with a parameter, an optional bias and two buffers."""

    def __init__(self, n=3, bias=True):
        super().__init__()
        self.weight = Parameter(sm.ones(n))
        self.bias = Parameter(sm.zeros(n)) if bias else None
        self.register_buffer("running", sm.zeros(n))
        self.register_buffer("count", sm.zeros((), dtype=sm.int64), persistent=False)

    def forward(self, x):
        y = x * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"n={self.weight.shape[0]}"


class Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Leaf()
        self.b = nn.Sequential(Leaf(), Leaf(bias=False))
        self.scale = Parameter(sm.tensor(2.0))

    def forward(self, x):
        return self.b(self.a(x)) * self.scale


# ---- registration ---------------------------------------------------------------------------
def test_assignment_registers_parameters_modules_buffers():
    t = Tree()
    assert list(t._parameters) == ["scale"]
    assert list(t._modules) == ["a", "b"]
    assert list(t.a._buffers) == ["running", "count"]
    assert t.a.count.dtype is sm.int64 and "count" in t.a._non_persistent_buffers_set


def test_plain_tensor_to_parameter_name_raises():
    m = Leaf()
    with pytest.raises(TypeError, match=r"cannot assign 'scriptmod.FloatTensor' as parameter "
                                        r"'weight' \(torch.nn.Parameter or None expected\)"):
        m.weight = sm.ones(3)
    m.weight = None
    assert m.weight is None and "weight" in m._parameters


def test_module_slot_rejects_non_module_and_buffer_rejects_non_tensor():
    t = Tree()
    with pytest.raises(TypeError, match="as child module 'a'"):
        t.a = 3
    t.a = None
    assert t.a is None
    with pytest.raises(TypeError, match="as buffer 'running'"):
        Leaf().running = [1, 2]


def test_reassigning_kind_moves_between_registries():
    m = Leaf()
    m.running = Parameter(sm.ones(3))        # buffer name -> parameter
    assert "running" in m._parameters and "running" not in m._buffers
    with pytest.raises(TypeError, match="cannot assign 'test_module.Leaf' as parameter"):
        m.running = Leaf()                    # a parameter name only takes Parameter/None
    m.plain = 1
    m.plain = Leaf()                          # plain attribute -> module
    assert "plain" in m._modules and "plain" not in m.__dict__


def test_register_errors_match_pytorch():
    m = Leaf()
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.register_buffer("forward", sm.ones(1))
    with pytest.raises(KeyError, match='t contain'):
        m.register_parameter("a.b", None)
    with pytest.raises(KeyError, match="empty string"):
        m.register_buffer("", None)
    with pytest.raises(TypeError, match="buffer name should be a string"):
        m.register_buffer(1, None)
    with pytest.raises(TypeError, match="cannot assign 'scriptmod.FloatTensor' object to parameter"):
        m.register_parameter("p", sm.ones(1))
    with pytest.raises(ValueError, match="non-leaf Tensor"):
        m.register_parameter("p", _non_leaf_param())
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", 3)
    with pytest.raises(KeyError, match='got: a.b'):
        m.add_module("a.b", Leaf())


def _non_leaf_param():
    p = Parameter(sm.ones(2))
    q = p.detach()
    q.__class__ = Parameter
    q._set_grad_fn(object(), 0)
    return q


def test_assign_before_init_raises():
    class Bad(nn.Module):
        def __init__(self):
            self.w = Parameter(sm.ones(1))
    with pytest.raises(AttributeError, match="cannot assign parameters before Module.__init__"):
        Bad()


def test_init_rejects_arguments():
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        nn.Module(foo=1)
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        nn.Module(1)


def test_register_module_and_delattr():
    m = nn.Module()
    m.register_module("child", Leaf())
    m.register_buffer("buf", sm.ones(1), persistent=False)
    del m.child, m.buf
    assert not m._modules and not m._buffers and not m._non_persistent_buffers_set
    m.plain = 1
    del m.plain
    with pytest.raises(AttributeError):
        del m.nothing


def test_getattr_error_names_class():
    with pytest.raises(AttributeError, match="'Leaf' object has no attribute 'foo'"):
        Leaf().foo


def test_dir_lists_members():
    d = dir(Tree())
    assert {"a", "b", "scale", "forward", "training"} <= set(d)
    assert d == sorted(d)
    assert "0" not in dir(Tree().b)


# ---- lookups ---------------------------------------------------------------------------------
def test_get_submodule_parameter_buffer():
    t = Tree()
    assert t.get_submodule("") is t and t.get_submodule("b.1") is t.b[1]
    assert t.get_parameter("b.0.weight") is t.b[0].weight
    assert t.get_parameter("scale") is t.scale
    assert t.get_buffer("a.running") is t.a.running


def test_lookup_errors():
    t = Tree()
    with pytest.raises(AttributeError, match="Tree has no attribute `zz`"):
        t.get_submodule("zz")
    with pytest.raises(AttributeError, match="`scale` is not an nn.Module"):
        t.get_submodule("scale.x")
    with pytest.raises(AttributeError, match="`running` is not an nn.Parameter"):
        t.get_parameter("a.running")
    with pytest.raises(AttributeError, match="`weight` is not a buffer"):
        t.get_buffer("a.weight")
    with pytest.raises(AttributeError, match="Leaf has no attribute `nope`"):
        t.get_buffer("a.nope")


def test_set_submodule():
    t = Tree()
    new = Leaf(5)
    t.set_submodule("b.0", new)
    assert t.b[0] is new
    t.set_submodule("extra", Leaf())
    assert "extra" in t._modules
    with pytest.raises(AttributeError, match="Leaf has no attribute `zz`"):
        t.set_submodule("a.zz", Leaf(), strict=True)
    with pytest.raises(AttributeError, match="`scale` is not an nn.Module"):
        t.set_submodule("scale", Leaf())
    with pytest.raises(ValueError, match="without a target name"):
        t.set_submodule("", Leaf())
    with pytest.raises(ValueError, match="is not an nn.Module"):
        t.set_submodule("a", 3)


# ---- traversal -------------------------------------------------------------------------------
def test_named_members_order_and_prefix():
    t = Tree()
    assert [n for n, _ in t.named_parameters()] == [
        "scale", "a.weight", "a.bias", "b.0.weight", "b.0.bias", "b.1.weight"]
    assert [n for n, _ in t.named_parameters(prefix="m", recurse=False)] == ["m.scale"]
    assert [n for n, _ in t.named_buffers()] == [
        "a.running", "a.count", "b.0.running", "b.0.count", "b.1.running", "b.1.count"]
    assert [n for n, _ in t.named_modules()] == ["", "a", "b", "b.0", "b.1"]
    assert [n for n, _ in t.named_children()] == ["a", "b"]
    assert len(list(t.parameters())) == 6 and len(list(t.buffers(recurse=False))) == 0
    assert list(t.children()) == [t.a, t.b]


def test_shared_members_deduplicated_unless_asked():
    shared = Leaf()
    s = nn.Sequential(shared, shared)
    assert [n for n, _ in s.named_modules()] == ["", "0"]
    assert [n for n, _ in s.named_modules(remove_duplicate=False)] == ["", "0", "1"]
    assert [n for n, _ in s.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(s.named_parameters(remove_duplicate=False))) == 4
    assert len(list(s.children())) == 1


def test_apply_visits_children_first():
    seen = []
    Tree().apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Leaf", "Leaf", "Leaf", "Sequential", "Tree"]


# ---- modes and gradients -------------------------------------------------------------------
def test_train_eval():
    t = Tree().eval()
    assert not t.training and not t.b[1].training
    t.train()
    assert all(m.training for m in t.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        t.train("yes")


def test_requires_grad_and_zero_grad():
    t = Tree()
    t(sm.ones(3)).sum().backward()
    assert all(p.grad is not None for p in t.parameters())
    t.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0 for p in t.parameters())
    t.zero_grad()
    assert all(p.grad is None for p in t.parameters())
    t.requires_grad_(False)
    assert not any(p.requires_grad for p in t.parameters())


# ---- casts and devices -----------------------------------------------------------------------
def test_to_dtype_changes_only_floating_and_keeps_identity():
    t = Tree()
    t(sm.ones(3)).sum().backward()
    w = t.a.weight
    assert t.to(sm.float64) is t
    assert t.a.weight is w and w.dtype is sm.float64 and w.grad.dtype is sm.float64
    assert t.a.running.dtype is sm.float64 and t.a.count.dtype is sm.int64
    t.half()
    assert w.dtype is sm.float16
    t.float()
    assert w.dtype is sm.float32
    t.bfloat16()
    assert w.dtype is sm.bfloat16
    t.double()
    assert w.dtype is sm.float64


def test_to_forms():
    t = Tree()
    t.to(dtype=sm.float64)
    t.to(sm.zeros(1, dtype=sm.float32))
    assert t.scale.dtype is sm.float32
    t.to("cpu", sm.float64, non_blocking=True)
    assert t.scale.dtype is sm.float64 and t.scale.device.type == "cpu"
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes"):
        t.to(sm.int32)
    assert t.cpu() is t


def test_type_casts_every_tensor():
    m = Leaf().type(sm.float64)
    assert m.count.dtype is sm.float64 and m.weight.dtype is sm.float64


def test_unsupported_devices_raise_clearly():
    with pytest.raises(RuntimeError, match="'xpu' device is not supported"):
        Leaf().xpu()
    with pytest.raises(RuntimeError, match="'ipu' device is not supported"):
        Leaf().ipu()


@pytest.mark.skipif(sm.tensor(1.0).is_cuda or __import__("scriptmod.runtime.arrays").runtime.arrays.cuda_available(),
                    reason="a GPU is present")
def test_cuda_without_gpu_raises():
    with pytest.raises(RuntimeError, match="cuda"):
        Leaf().cuda()
    with pytest.raises(RuntimeError, match="cuda"):
        Leaf().to("cuda")


def test_to_empty_and_share_memory():
    m = Leaf()
    w = m.weight
    assert m.to_empty(device="cpu") is m and m.weight is w and w.shape == (3,)
    assert m.share_memory() is m


def test_deepcopy_copies_parameters_and_buffers():
    t = Tree()
    c = copy.deepcopy(t)
    assert c.a.weight is not t.a.weight and isinstance(c.a.weight, Parameter)
    assert c.a.running is not t.a.running
    c.a.running.add_(1)
    assert float(t.a.running.sum()) == 0


# ---- forward and repr ---------------------------------------------------------------------
def test_forward_missing_raises():
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required "forward"'):
        nn.Module()(1)


def test_repr_nested_format():
    assert repr(Tree()) == (
        "Tree(\n"
        "  (a): Leaf(n=3)\n"
        "  (b): Sequential(\n"
        "    (0): Leaf(n=3)\n"
        "    (1): Leaf(n=3)\n"
        "  )\n"
        ")")
    assert repr(nn.Module()) == "Module()"


def _cnn_mlp(lib):
    tnn = lib.nn
    return tnn.Sequential(
        tnn.Conv2d(3, 8, 3, padding=1), tnn.BatchNorm2d(8), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Flatten(), tnn.Linear(8 * 4 * 4, 16), tnn.GELU(approximate="tanh"),
        tnn.Dropout(0.1), tnn.LayerNorm(16), tnn.Linear(16, 4))


def _zoo(lib):
    tnn = lib.nn
    return tnn.ModuleDict({
        "net": _cnn_mlp(lib),
        "blocks": tnn.ModuleList([tnn.Linear(4, 4) for _ in range(3)] + [tnn.Tanh()]),
        "emb": tnn.Embedding(10, 4),
        "act": tnn.Sequential(tnn.PReLU(), tnn.Threshold(0.1, 20.0), tnn.LeakyReLU(0.2),
                              tnn.Softmax(dim=1), tnn.Sigmoid(), tnn.SiLU(), tnn.ELU()),
        "bn1": tnn.BatchNorm1d(4), "ident": tnn.Identity(),
    })


def _norm_free_zoo(lib):
    # BatchNorm/LayerNorm extra_repr belongs to the layers (torch 2.13 prints bias=True)
    zoo = _zoo(lib)
    del zoo["bn1"]
    zoo["net"][1] = lib.nn.Identity()
    zoo["net"][8] = lib.nn.Identity()
    return zoo


def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    assert repr(_norm_free_zoo(sm)) == repr(_norm_free_zoo(torch))


def test_state_dict_keys_match_torch_cnn_mlp():
    torch = pytest.importorskip("torch")
    ours, theirs = _zoo(sm), _zoo(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    for (k, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert tuple(a.shape) == tuple(b.shape), k


def test_torch_state_dict_loads_and_outputs_match():
    torch = pytest.importorskip("torch")
    theirs = _cnn_mlp(torch).eval()
    ours = _cnn_mlp(sm).eval()
    result = ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert repr(result) == "<All keys matched successfully>"
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        want = theirs(torch.from_numpy(x)).numpy()
    got = ours(sm.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_buffer_and_parameter_dtype_warning_free():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Tree().to(sm.float64)


def test_buffer_marker_registers_with_persistence():
    from scriptmod.nn.parameter import Buffer
    m = nn.Module()
    m.steps = Buffer(sm.zeros(()), persistent=False)
    m.mean = Buffer(sm.ones(2))
    assert list(m._buffers) == ["steps", "mean"] and list(m.state_dict()) == ["mean"]
    m.mean = sm.zeros(2)                       # a plain tensor keeps the buffer's persistence
    assert list(m.state_dict()) == ["mean"] and "mean" in m._buffers


def test_global_module_hooks_exported():
    from scriptmod.nn import module
    assert callable(module.register_module_forward_hook)


def test_compile_in_place_keeps_results_and_hooks():
    pytest.importorskip("scriptmod.jit._compile_inplace")
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    x = sm.randn(5, 3)
    want = m(x).detach().numpy()
    log = []
    m.register_forward_hook(lambda mod, args, out: log.append("hook"))
    assert m.compile() is None
    with sm.no_grad():
        got = m(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert log == ["hook"]
