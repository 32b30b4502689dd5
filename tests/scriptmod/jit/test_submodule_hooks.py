"""Hooks registered on submodules of a ScriptModule after tracing fire when the ScriptModule
is called, with the arguments eager passes, and what they return changes the result; the
hooked call is kept as a boundary and removing the handle goes back to the fused graph."""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir.graph import Prim
from scriptmod.jit import _boundary
from scriptmod.nn.module import register_module_forward_hook


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION", raising=False)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.fc(x).tanh()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.block = Inner()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        h = self.block(self.act(self.fc1(x))) + 1.0
        return self.fc2(h * 2.0)


@pytest.fixture
def pair() -> tuple[nn.Module, Any, Any]:
    sm.manual_seed(0)
    model = Net().eval()
    x = sm.randn(3, 4)
    return model, jit.trace(model, x), x


def _close(a: Any, b: Any, tol: float = 2e-5) -> None:
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _sub(root: Any, path: str) -> Any:
    for name in path.split("."):
        root = getattr(root, name)
    return root


def _calls(g: Any) -> int:
    return sum(n.kind == Prim.CALL_METHOD for n in g.walk())


def _both(model: Any, traced: Any, path: str, register: str, hook: Any,
          **kw: Any) -> tuple[Any, Any]:
    """Register ``hook`` on the same submodule of the eager model and the traced one."""
    return (getattr(_sub(model, path), register)(hook, **kw),
            getattr(_sub(traced, path), register)(hook, **kw))


@pytest.mark.parametrize("path", ["fc1", "block", "block.fc", "fc2"])
@pytest.mark.parametrize("fused", [True, False])
def test_forward_hook_fires_with_eager_arguments_and_changes_the_result(
        pair: Any, path: str, fused: bool) -> None:
    model, traced, x = pair
    seen: list[tuple] = []

    def hook(mod: Any, args: tuple, out: Any) -> Any:
        seen.append((mod, [a.numpy().copy() for a in args], out.numpy().copy()))
        return out * 3.0 - 0.5

    handles = _both(model, traced, path, "register_forward_hook", hook)
    with sm.no_grad(), jit.fuser(fused):
        want = model(x)
        got = traced(x)
    _close(got, want)
    (m_eager, a_eager, o_eager), (m_tr, a_tr, o_tr) = seen
    assert m_eager is _sub(model, path) and m_tr is _sub(traced, path)
    for u, v in zip(a_tr, a_eager):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(o_tr, o_eager, rtol=2e-5, atol=2e-5)
    for h in handles:
        h.remove()


def test_forward_pre_hook_replaces_the_input(pair: Any) -> None:
    model, traced, x = pair
    _both(model, traced, "fc2", "register_forward_pre_hook", lambda m, args: (args[0] * -1.0,))
    with sm.no_grad():
        _close(traced(x), model(x))


def test_with_kwargs_hooks(pair: Any) -> None:
    model, traced, x = pair
    seen: list[dict] = []

    def pre(mod: Any, args: tuple, kwargs: dict) -> Any:
        seen.append(dict(kwargs))
        return (args[0] + 1.0,), kwargs

    def post(mod: Any, args: tuple, kwargs: dict, out: Any) -> Any:
        return out * 0.5

    _both(model, traced, "block", "register_forward_pre_hook", pre, with_kwargs=True)
    _both(model, traced, "block", "register_forward_hook", post, with_kwargs=True)
    with sm.no_grad():
        _close(traced(x), model(x))
    assert seen == [{}, {}]


def test_prepend_orders_hooks_as_eager(pair: Any) -> None:
    model, traced, x = pair
    order: dict[str, list[str]] = {"eager": [], "traced": []}
    for root, key in ((model, "eager"), (traced, "traced")):
        root.fc1.register_forward_hook(lambda m, a, o, k=key: order[k].append("first"))
        root.fc1.register_forward_hook(lambda m, a, o, k=key: order[k].append("front"),
                                       prepend=True)
    with sm.no_grad():
        model(x)
        traced(x)
    assert order["traced"] == order["eager"] == ["front", "first"]


def test_always_call_hook_runs_when_the_call_raises(pair: Any) -> None:
    model, traced, x = pair
    ran: dict[str, int] = {"eager": 0, "traced": 0}

    class Boom(Exception):
        pass

    def pre(mod: Any, args: tuple) -> None:
        raise Boom("pre-hook refused")

    for root, key in ((model, "eager"), (traced, "traced")):
        root.block.register_forward_pre_hook(pre)
        root.block.register_forward_hook(
            lambda m, a, o, k=key: ran.__setitem__(k, ran[k] + 1), always_call=True)
    for root in (model, traced):
        with sm.no_grad(), pytest.raises(Boom, match="pre-hook refused"):
            root(x)                      # the user's own exception type, not a wrapper
    assert ran == {"eager": 1, "traced": 1}


def test_removing_the_handle_returns_to_the_fused_specialization(pair: Any) -> None:
    model, traced, x = pair
    ex = traced.executor()
    with sm.no_grad():
        traced(x)
    fused = traced.graph_for(x)
    assert _calls(fused) == 0
    n = ex.stats["specializations"]
    h = traced.block.fc.register_forward_hook(lambda m, a, o: o + 1.0)
    with sm.no_grad():
        traced(x)
    hooked = traced.graph_for(x)
    assert _calls(hooked) == 1 and any(n.kind == Prim.FUSION_GROUP for n in hooked.walk())
    assert ex.stats["specializations"] == n + 1
    h.remove()
    with sm.no_grad():
        _close(traced(x), model(x))
    assert traced.graph_for(x) is fused and ex.stats["specializations"] == n + 1


def test_other_batch_sizes_and_ranks_with_a_hook(pair: Any) -> None:
    model, traced, x = pair
    _both(model, traced, "fc1", "register_forward_hook", lambda m, a, o: o.abs())
    for shape in [(7, 4), (1, 4), (2, 5, 4)]:
        xi = sm.randn(*shape)
        with sm.no_grad():
            _close(traced(xi), model(xi))


def test_hooks_under_autograd_and_backward_hooks(pair: Any) -> None:
    model, traced, x = pair
    grads: dict[str, list] = {"eager": [], "traced": []}
    for root, key in ((model, "eager"), (traced, "traced")):
        root.fc1.register_forward_hook(lambda m, a, o: o * 2.0)
        root.block.register_full_backward_hook(
            lambda m, gi, go, k=key: grads[k].append((gi[0].numpy().copy(),
                                                      go[0].numpy().copy())))
        root.block.register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))
    results = {}
    for root, key in ((model, "eager"), (traced, "traced")):
        xi = x.clone().requires_grad_()
        model.zero_grad()
        root(xi).sum().backward()
        results[key] = (xi.grad.numpy().copy(), model.fc1.weight.grad.numpy().copy())
    for u, v in zip(results["traced"], results["eager"]):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)
    assert len(grads["traced"]) == len(grads["eager"]) == 1
    for u, v in zip(grads["traced"][0], grads["eager"][0]):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


def test_hooks_on_a_loaded_module(pair: Any) -> None:
    model, traced, x = pair
    buf = io.BytesIO()
    jit.save(traced, buf)
    buf.seek(0)
    loaded = jit.load(buf)
    seen: list[tuple] = []
    loaded.block.fc.register_forward_hook(lambda m, a, o: seen.append(tuple(o.shape)) or -o)
    model.block.fc.register_forward_hook(lambda m, a, o: -o)
    with sm.no_grad():
        _close(loaded(x), model(x))
    assert seen == [(3, 8)]


def test_global_module_hooks_fire_for_every_submodule_call(pair: Any) -> None:
    model, traced, x = pair
    names: list[str] = []
    h = register_module_forward_hook(
        lambda m, a, o: names.append(type(m).__name__ if not isinstance(m, jit.ScriptModule)
                                     else m.original_name))
    try:
        with sm.no_grad():
            want = model(x)
            eager_names = list(names)
            names.clear()
            got = traced(x)
    finally:
        h.remove()
    _close(got, want)
    assert names == eager_names and "Inner" in names and names.count("Linear") == 3


def test_a_hook_that_changes_the_output_shape_gets_a_clear_error(pair: Any) -> None:
    _, traced, x = pair
    traced.fc1.register_forward_hook(lambda m, a, o: o[:, :4])
    with sm.no_grad(), pytest.raises(sm.ShapeError, match=r"submodule Linear.*shape \(3, 4\)"):
        traced(x)


def test_hook_changes_are_found_without_walking_the_tree_per_call(
        pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, traced, x = pair
    walks = []
    real = _boundary.hooked_paths
    monkeypatch.setattr("scriptmod.jit._executor.hooked_paths",
                        lambda root: (walks.append(1) if root is traced else None) or real(root))
    with sm.no_grad():
        traced(x)
        before = len(walks)
        for _ in range(20):
            traced(x)
        assert len(walks) == before                      # no walk while no hook changed
        h = traced.fc2.register_forward_hook(lambda m, a, o: o)
        traced(x)
        traced(x)
        h.remove()
    assert len(walks) == before + 1


def test_a_submodule_called_twice_fires_its_hook_twice() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(self.fc(x).relu())

    sm.manual_seed(0)
    model = Twice()
    x = sm.randn(2, 4)
    traced = jit.trace(model, x)
    counts = {"eager": 0, "traced": 0}
    for root, key in ((model, "eager"), (traced, "traced")):
        root.fc.register_forward_hook(
            lambda m, a, o, k=key: (counts.__setitem__(k, counts[k] + 1), o + 1.0)[1])
    with sm.no_grad():
        _close(traced(x), model(x))
    assert counts == {"eager": 2, "traced": 2}
