"""state_dict / load_state_dict: keys, order, errors, assign, extra state, hooks."""
from collections import OrderedDict

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import Parameter


class Leaf(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.weight = Parameter(sm.arange(n, dtype=sm.float32))
        self.register_buffer("running", sm.zeros(n))
        self.register_buffer("scratch", sm.zeros(n), persistent=False)
        self.register_buffer("unset", None)

    def forward(self, x):
        return x * self.weight


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("step", sm.tensor(0))
        self.enc = Leaf()
        self.head = nn.Sequential(Leaf(2), Leaf(4))


class WithExtra(Leaf):
    def __init__(self):
        super().__init__()
        self.note = {"seen": 0}

    def get_extra_state(self):
        return dict(self.note)

    def set_extra_state(self, state):
        self.note = dict(state)


KEYS = ["step", "enc.weight", "enc.running", "head.0.weight", "head.0.running",
        "head.1.weight", "head.1.running"]


def test_keys_order_and_detach():
    net = Net()
    sd = net.state_dict()
    assert isinstance(sd, OrderedDict) and list(sd) == KEYS
    assert not isinstance(sd["enc.weight"], Parameter) and not sd["enc.weight"].requires_grad
    assert sd._metadata[""] == {"version": 1} and "head.0" in sd._metadata
    assert net.state_dict(keep_vars=True)["enc.weight"] is net.enc.weight
    assert list(net.enc.state_dict(prefix="x.")) == ["x.weight", "x.running"]
    dest = {}
    assert net.state_dict(destination=dest) is dest and list(dest) == KEYS


def test_state_dict_shares_storage():
    net = Net()
    sd = net.state_dict()
    with sm.no_grad():    # (PyTorch allows this without no_grad; see the report on _check_leaf)
        sd["enc.weight"].add_(10)
    assert float(net.enc.weight[0]) == 10.0


def test_load_round_trip_and_result_repr():
    a, b = Net(), Net()
    for p in a.parameters():
        p.data = p.data + 1
    w = b.enc.weight
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert repr(res) == "<All keys matched successfully>"
    assert b.enc.weight is w and np.array_equal(w.detach().numpy(), a.enc.weight.detach().numpy())


def test_one_error_lists_every_problem():
    sd = Net().state_dict()
    del sd["enc.running"], sd["step"]
    sd["head.0.weight"] = sm.zeros(7)
    sd["bogus"] = sm.zeros(1)
    sd["head.9.weight"] = sm.zeros(1)
    with pytest.raises(RuntimeError) as e:
        Net().load_state_dict(sd)
    assert str(e.value) == (
        "Error(s) in loading state_dict for Net:\n"
        '\tMissing key(s) in state_dict: "step", "enc.running". \n'
        '\tUnexpected key(s) in state_dict: "bogus", "head.9.weight". \n'
        "\tsize mismatch for head.0.weight: copying a param with shape scriptmod.Size([7]) "
        "from checkpoint, the shape in current model is scriptmod.Size([2]).")


def test_error_message_matches_torch_format():
    torch = pytest.importorskip("torch")

    def fail(lib, net):
        sd = {k: lib.zeros(1) for k in ("weight", "extra")}
        with pytest.raises(RuntimeError) as e:
            net.load_state_dict(sd)
        return str(e.value)
    ours = fail(sm, nn.Linear(2, 3))
    theirs = fail(torch, torch.nn.Linear(2, 3))
    assert ours == theirs.replace("torch.Size", "scriptmod.Size")


def test_non_strict_returns_keys():
    sd = Net().state_dict()
    del sd["step"]
    sd["zzz"] = sm.zeros(1)
    res = Net().load_state_dict(sd, strict=False)
    assert res.missing_keys == ["step"] and res.unexpected_keys == ["zzz"]
    assert repr(res) == "_IncompatibleKeys(missing_keys=['step'], unexpected_keys=['zzz'])"
    sd["enc.weight"] = sm.zeros(9)
    with pytest.raises(RuntimeError, match="size mismatch for enc.weight"):
        Net().load_state_dict(sd, strict=False)


def test_strict_result_lists():
    sd = Net().state_dict()
    del sd["step"]
    net = Net()
    net.register_load_state_dict_post_hook(lambda m, keys: keys.missing_keys.clear())
    res = net.load_state_dict(sd)
    assert res.missing_keys == []


def test_numpy_values_and_bad_values():
    sd = {k: v.numpy() + 1 for k, v in Net().state_dict().items()}
    net = Net()
    net.load_state_dict(sd)
    assert float(net.enc.weight[0]) == 1.0 and net.enc.weight.dtype is sm.float32
    sd["step"] = "nope"
    with pytest.raises(RuntimeError, match='expected torch.Tensor or Tensor-like object from '
                                           "checkpoint but received <class 'str'>"):
        Net().load_state_dict(sd)


def test_zero_dim_param_accepts_one_element():
    net = Net()
    sd = net.state_dict()
    sd["step"] = sm.tensor([5])
    net.load_state_dict(sd)
    assert int(net.step) == 5


def test_assign_replaces_tensors():
    net, src = Net(), Net()
    sd = src.state_dict(keep_vars=True)
    old = net.enc.weight
    net.load_state_dict({k: v.detach() for k, v in sd.items()}, assign=True)
    assert net.enc.weight is not old and isinstance(net.enc.weight, Parameter)
    assert net.enc.weight.requires_grad
    assert net.enc.running is not None


def test_extra_state():
    m = WithExtra()
    m.note["seen"] = 3
    sd = m.state_dict()
    assert list(sd) == ["weight", "running", "_extra_state"] and sd["_extra_state"] == {"seen": 3}
    m2 = WithExtra()
    m2.load_state_dict(sd)
    assert m2.note == {"seen": 3}
    del sd["_extra_state"]
    with pytest.raises(RuntimeError, match='Missing key.*"_extra_state"'):
        WithExtra().load_state_dict(sd)
    with pytest.raises(RuntimeError, match='Unexpected key.*"_extra_state"'):
        Leaf().load_state_dict({**Leaf().state_dict(), "_extra_state": 1})


def test_state_dict_hooks():
    net = Net()
    calls = []
    h1 = net.enc.register_state_dict_pre_hook(lambda m, prefix, keep: calls.append(("pre", prefix)))

    def post(m, sd, prefix, meta):
        calls.append(("post", prefix))
        sd[prefix + "added"] = sm.ones(1)
    h2 = net.enc.register_state_dict_post_hook(post)
    sd = net.state_dict()
    assert calls == [("pre", "enc."), ("post", "enc.")] and "enc.added" in sd
    h1.remove()
    h2.remove()
    assert "enc.added" not in net.state_dict()
    net.register_state_dict_post_hook(lambda *a: {})
    with pytest.raises(RuntimeError, match="state_dict post-hook must return None"):
        net.state_dict()


def test_load_state_dict_pre_and_post_hooks():
    net = Net()
    seen = []

    def pre(module, sd, prefix, meta, strict, missing, unexpected, errors):
        seen.append((type(module).__name__, prefix))
        sd[prefix + "weight"] = sm.full((3,), 7.0)    # rewrite the checkpoint on the fly
    net.enc.register_load_state_dict_pre_hook(pre)
    net.register_load_state_dict_post_hook(lambda m, keys: seen.append(("post", list(keys))))
    net.load_state_dict(Net().state_dict())
    assert seen == [("Leaf", "enc."), ("post", [[], []])]
    assert float(net.enc.weight[1]) == 7.0
    net.register_load_state_dict_post_hook(lambda m, keys: 1)
    with pytest.raises(RuntimeError, match="not expected to return new values"):
        net.load_state_dict(Net().state_dict())


def test_type_errors():
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        Net().load_state_dict([1, 2])


def test_lazy_linear_loads_from_state_dict():
    lazy = nn.LazyLinear(3)
    src = nn.Linear(5, 3)
    lazy.load_state_dict(src.state_dict())
    assert lazy.weight.shape == (3, 5)
    np.testing.assert_array_equal(lazy.weight.detach().numpy(), src.weight.detach().numpy())


def test_unbuilt_lazy_state_dict_round_trip():
    from scriptmod.nn.parameter import is_lazy
    sd = nn.LazyLinear(3).state_dict()
    assert is_lazy(sd["weight"])
    target = nn.LazyLinear(3)
    assert repr(target.load_state_dict(sd)) == "<All keys matched successfully>"
    assert not target.built


def test_torch_tensors_load_directly_including_bfloat16():
    torch = pytest.importorskip("torch")
    src = torch.nn.Linear(2, 3).to(torch.bfloat16)
    dst = nn.Linear(2, 3).bfloat16()
    dst.load_state_dict(src.state_dict())
    assert dst.weight.dtype is sm.bfloat16
    np.testing.assert_array_equal(dst.weight.detach().float().numpy(),
                                  src.weight.detach().float().numpy())
    dst.float().load_state_dict(torch.nn.Linear(2, 3).state_dict())


# ---- BatchNorm versioning (PyTorch's _NormBase._version = 2) ------------------------------
def _bn_model(lib):
    m = lib.nn
    return m.Sequential(m.Linear(2, 3), m.BatchNorm1d(3),
                        m.Sequential(m.ReLU(), m.BatchNorm2d(3)), m.LayerNorm(3),
                        m.BatchNorm1d(3, track_running_stats=False))


def test_batchnorm_metadata_version_2_others_1():
    meta = _bn_model(sm).state_dict()._metadata
    assert meta == OrderedDict([("", {"version": 1}), ("0", {"version": 1}),
                                ("1", {"version": 2}), ("2", {"version": 1}),
                                ("2.0", {"version": 1}), ("2.1", {"version": 2}),
                                ("3", {"version": 1}), ("4", {"version": 2})])
    torch = pytest.importorskip("torch")
    assert meta == _bn_model(torch).state_dict()._metadata
    assert nn.BatchNorm1d(2).state_dict(prefix="bn.")._metadata == {"bn": {"version": 2}}


@pytest.mark.parametrize("meta", ["none", "plain_dict", "empty", "version_1"])
def test_old_checkpoint_without_num_batches_tracked_loads_strict(meta):
    m = _bn_model(sm)
    m[1].num_batches_tracked.fill_(5)
    sd = m.state_dict()
    del sd["1.num_batches_tracked"], sd["2.1.num_batches_tracked"]
    if meta == "none":
        del sd._metadata
    elif meta == "plain_dict":
        sd = dict(sd)
    elif meta == "empty":
        sd._metadata = OrderedDict()
    else:
        sd._metadata["1"] = {"version": 1}
        sd._metadata["2.1"] = {"version": 1}
    fresh = _bn_model(sm)
    fresh[1].num_batches_tracked.fill_(3)
    assert fresh.load_state_dict(sd, strict=True) == ([], [])
    assert fresh[1].num_batches_tracked.item() == 3      # the current count is kept
    assert "1.num_batches_tracked" not in sd             # the caller's dict is not changed
    np.testing.assert_array_equal(fresh[1].running_mean.numpy(), m[1].running_mean.numpy())


def test_version_2_checkpoint_missing_num_batches_tracked_is_an_error():
    m = _bn_model(sm)
    sd = m.state_dict()
    del sd["1.num_batches_tracked"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "1.num_batches_tracked"'):
        m.load_state_dict(sd)
    assert m.load_state_dict(sd, strict=False).missing_keys == ["1.num_batches_tracked"]


def test_old_checkpoint_matches_torch():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (sm, torch):
        m = lib.nn.BatchNorm1d(3)
        m.num_batches_tracked.fill_(4)
        sd = OrderedDict((k, v) for k, v in m.state_dict().items() if "num_batches" not in k)
        sd._metadata = OrderedDict([("", {"version": 1})])
        res = m.load_state_dict(sd)
        results.append((list(res.missing_keys), list(res.unexpected_keys),
                        int(m.num_batches_tracked.item())))
    assert results[0] == results[1]
