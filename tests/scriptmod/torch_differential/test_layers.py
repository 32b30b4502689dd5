"""PReLU, modules with Ivy-style attribute names, cosine_similarity and class-index targets."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from ._common import F, _raised  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


# ---- PReLU ------------------------------------------------------------------------------------
PRELU_SHAPES = [(), (1,), (3,), (4,), (2, 3), (2, 4), (2, 3, 5), (2, 3, 4, 4), (2, 1, 4, 4),
                (3, 3), (0, 3)]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("shape", PRELU_SHAPES, ids=str)
def test_prelu_matches_torch(n: int, shape: tuple[int, ...]) -> None:
    """num_parameters 1 and 3 on 0-d to 4-d inputs: the same values, or both refuse (ours a
    RuntimeError, as torch's 'Mismatch of parameter numbers and input channel size')."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    te = _raised(lambda L: L.nn.PReLU(n, init=0.3)(L.tensor(x)), torch)
    if te is not None:
        with pytest.raises(RuntimeError):
            sm.nn.PReLU(n, init=0.3)(sm.tensor(x))
        return
    with torch.no_grad():
        want = torch.nn.PReLU(n, init=0.3)(torch.tensor(x)).numpy()
    got = sm.nn.PReLU(n, init=0.3)(sm.tensor(x)).detach().numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_prelu_gradients_and_traced_batch_match_torch() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    grads = []
    for L in (torch, sm):
        m, xt = L.nn.PReLU(3), L.tensor(x).requires_grad_()
        m(xt).sum().backward()
        grads.append((np.asarray(m.weight.grad.numpy()), np.asarray(xt.grad.numpy())))
    for g, w in zip(grads[1], grads[0]):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    traced = sm.jit.trace(sm.nn.PReLU(3, init=0.1), sm.randn(5, 3, 4))
    with torch.no_grad():
        want = torch.nn.PReLU(3, init=0.1)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(np.asarray(traced(sm.tensor(x)).detach().numpy()), want, rtol=1e-6)


# ---- the Ivy surface leaves torch-style modules alone -----------------------------------------
def _torch_style(L: Any) -> dict[str, Callable[[], Any]]:
    """User modules whose names collide with the Ivy surface (v, device, dtype, training,
    buffers, module_dict), a forward taking `v`/`buffers`, an __init__(self, v)."""
    nn = L.nn

    class Attrs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.v, self.device, self.dtype, self.module_dict = 5, "mine", "d", {"x": 1}
            self.training = False

        def forward(self, x: Any) -> Any:
            return self.fc(x) * self.v

    class VArg(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x: Any, v: float = 2.0, buffers: Any = None) -> Any:
            return self.fc(x) * v + (0 if buffers is None else buffers)

    class VInit(nn.Module):
        def __init__(self, v: int) -> None:
            super().__init__()
            self.fc = nn.Linear(3, v)

        def forward(self, x: Any) -> Any:
            return self.fc(x)

    class SubNames(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v, self.device = nn.Linear(3, 2), nn.Linear(2, 2)
            self.register_buffer("dtype", L.ones(2))

        def forward(self, x: Any) -> Any:
            return self.device(self.v(x)) + self.dtype
    return {"Attrs": Attrs, "VArg": VArg, "VInit": lambda: VInit(4), "SubNames": SubNames}


@pytest.mark.parametrize("name", list(_torch_style(torch)))
def test_torch_style_module_with_ivy_names_behaves_as_in_torch(name: str) -> None:
    theirs, ours = _torch_style(torch)[name](), _torch_style(sm)[name]()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for attr in ("v", "device", "dtype", "training", "module_dict"):
        if not hasattr(theirs, attr):   # ours has the Ivy attribute; torch has none to match
            continue
        a, b = getattr(theirs, attr), getattr(ours, attr)
        if isinstance(a, (torch.nn.Module, torch.Tensor)):
            assert type(b).__name__ == type(a).__name__, attr
        else:
            assert b == a, attr
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    calls = [{}] + ([{"v": 3.0}, {"buffers": 1.0}] if name == "VArg" else [])
    for kw in calls:
        with torch.no_grad():
            want = theirs(torch.tensor(x), **kw).numpy()
        np.testing.assert_allclose(np.asarray(ours(sm.tensor(x), **kw).detach().numpy()), want,
                                   rtol=1e-5, atol=1e-6, err_msg=str(kw))
    traced = sm.jit.trace(ours, sm.tensor(x[:1]))
    np.testing.assert_allclose(np.asarray(traced(sm.tensor(x)).detach().numpy()), want if not calls[1:]
                               else theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def _ivy_net(**kw: Any) -> Any:
    nn = sm.nn

    class Net(nn.Module):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.fc1, self.bn, self.fc2 = nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)

        def forward(self, x: Any) -> Any:
            return self.fc2(self.bn(self.fc1(x)).relu())
    return Net(**kw)


def test_ivy_variables_give_torchs_numbers() -> None:
    """Construct-with-v, call-with-v/buffers (eager and traced at another batch),
    store_vars=False and functional_call all equal torch's forward with those tensors."""
    tn = torch.nn.Sequential()
    tn.fc1, tn.bn, tn.fc2 = torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)
    tn.bn.running_mean.uniform_()
    tn.eval()
    sd = {k: v.detach().numpy() for k, v in tn.state_dict().items()}
    names = dict(tn.named_parameters())
    v = {k: sm.tensor(a) for k, a in sd.items() if k in names}
    bufs = {k: sm.tensor(a) for k, a in sd.items() if k not in names}
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    with torch.no_grad():
        want = torch.nn.functional.linear(torch.relu(tn.bn(tn.fc1(torch.tensor(x)))),
                                          tn.fc2.weight, tn.fc2.bias).numpy()
    net = _ivy_net(training=False)
    traced = net.trace_graph(sm.tensor(x[:2]))
    got = {"construct": _ivy_net(v=v, buffers=bufs, training=False)(sm.tensor(x)),
           "call": net(sm.tensor(x), v=v, buffers=bufs),
           "traced call": traced(sm.tensor(x), v=v, buffers=bufs),
           "store_vars": _ivy_net(store_vars=False, training=False)(sm.tensor(x), v=v,
                                                                    buffers=bufs),
           "functional_call": sm.func.functional_call(net, {**v, **bufs}, (sm.tensor(x),))}
    for label, out in got.items():
        np.testing.assert_allclose(np.asarray(out.detach().numpy()), want, rtol=1e-5,
                                   atol=1e-6, err_msg=label)


def test_ivy_store_vars_partial_v_and_build_modes() -> None:
    bare = _ivy_net(store_vars=False)
    assert bare.v == {} and list(bare.state_dict()) == [
        "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    with pytest.raises(RuntimeError, match="store_vars=False"):
        bare(sm.ones(2, 3))
    part = {"fc1": {"weight": sm.full((4, 3), 0.5), "bias": sm.zeros(4)}}
    assert (_ivy_net(v=part, with_partial_v=True).fc1.weight.detach().numpy() == 0.5).all()
    with pytest.raises(sm.ShapeError, match="Missing key"):
        _ivy_net(v=part)
    for mode in ("on_init", "on_call", "explicit"):
        lazy = sm.nn.LazyLinear(2, build_mode=mode)
        assert repr(lazy) == repr(torch.nn.LazyLinear(2))
        if mode == "explicit":
            with pytest.raises(RuntimeError, match="explicit"):
                lazy(sm.ones(5, 3))
            lazy.build(sm.ones(5, 3))
        assert tuple(lazy(sm.ones(5, 3)).shape) == (5, 2) and lazy.built
        assert repr(lazy) == "Linear(in_features=3, out_features=2, bias=True)"


COSINE_CASES: dict[str, Callable[[Any], Any]] = {
    "zeros and tiny rows": lambda L: F(L).cosine_similarity(
        L.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1e-20, 0.0, 0.0]]),
        L.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])),
    "broadcast": lambda L: F(L).cosine_similarity(L.tensor([[1.0, 2.0], [3.0, -4.0]]),
                                                  L.tensor([1.0, 0.0])),
    "dim 0, all zeros": lambda L: F(L).cosine_similarity(L.zeros(2, 3), L.zeros(2, 3), dim=0),
    "inf": lambda L: F(L).cosine_similarity(L.tensor([[float("inf"), 1.0]]),
                                            L.tensor([[1.0, 1.0]])),
    "float64 and float32": lambda L: F(L).cosine_similarity(
        L.tensor([[1.0, 2.0]], dtype=L.float64), L.tensor([[2.0, 1.0]])),
}


@pytest.mark.parametrize("name", list(COSINE_CASES))
def test_cosine_similarity_matches_torch(name: str) -> None:
    want, got = COSINE_CASES[name](torch), COSINE_CASES[name](sm)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(np.asarray(got.numpy()), want.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("target_dtype", ["int64", "uint8"])
def test_class_index_targets_torch_accepts(target_dtype: str) -> None:
    """Long and Byte targets work (int32 is refused, in BAD_CALLS), weighted and ignored."""
    got, want = [], []
    for L, out in ((torch, want), (sm, got)):
        x = L.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0], [2.0, 0.5, 0.0]])
        t = L.tensor([2, 0, 1]).to(getattr(L, target_dtype))
        w = L.tensor([0.2, 1.0, 3.0])
        out += [F(L).cross_entropy(x, t, weight=w).item(),
                F(L).nll_loss(x.log_softmax(1), t, ignore_index=0).item(),
                F(L).cross_entropy(x, t, label_smoothing=0.1).item()]
    np.testing.assert_allclose(got, want, rtol=1e-6)
