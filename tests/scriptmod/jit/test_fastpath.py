"""The warm-call fast path (``jit/_fastpath``): every check it skips the full path on must
send a call that fails it back to the full path, with eager's answer.

Each test warms a traced model (so the fast path is installed), changes one thing the fast
path checks, and compares with the eager model; ``slow`` counts full-path calls."""
from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.jit import _executor


def mlp() -> nn.Module:
    sm.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


@pytest.fixture
def slow(monkeypatch):
    """Counts the calls that took the full path."""
    calls = [0]
    full = _executor.Executor._call

    def counting(self, args):
        calls[0] += 1
        return full(self, args)
    monkeypatch.setattr(_executor.Executor, "_call", counting)
    return calls


def warm(model: nn.Module, x: sm.Tensor, grad: bool = False):
    for p in model.parameters():
        p.requires_grad_(grad)
    traced = sm.jit.trace(model, x)
    traced(x)
    traced(x)
    return traced


def close(a: sm.Tensor, b: sm.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_warm_calls_take_the_fast_path(slow) -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    slow[0] = 0
    ex = traced.executor("forward")
    before = ex.stats["calls"]
    for _ in range(5):
        close(traced(x), m(x))
    assert slow[0] == 0 and ex.module_fast is not None
    assert ex.stats["calls"] == before + 5          # the fast path counts its calls too


def test_another_batch_size_and_back(slow) -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    for n in (5, 1, 3, 7, 3):
        y = sm.randn(n, 8)
        close(traced(y), m(y))


def test_non_contiguous_and_wrong_inputs() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    t = sm.randn(8, 3).t()
    close(traced(t), m(t))
    with pytest.raises(Exception, match="argument"):
        traced(x, x)
    with pytest.raises(Exception):
        traced(sm.randn(3, 5))
    with pytest.raises(Exception, match="dtype"):     # as eager: float64 input, float32 weights
        traced(x.double())
    with pytest.raises(Exception, match="dtype"):
        m(x.double())
    close(traced(x), m(x))


def test_replaced_weights_are_read(slow) -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    traced[0].weight.data = sm.randn(16, 8)                     # a new array, same shape
    m[0].weight.data = traced[0].weight.data
    close(traced(x), m(x))
    traced[2].bias = nn.Parameter(sm.randn(4), requires_grad=False)   # a new Parameter
    m[2].bias = traced[2].bias
    close(traced(x), m(x))
    with sm.no_grad():
        traced[0].bias.add_(1.0)                               # in place: same array
    m[0].bias = traced[0].bias
    close(traced(x), m(x))
    assert slow[0] >= 2


def test_replaced_submodule_is_read() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    other = sm.jit.trace(nn.Sequential(nn.Linear(16, 4)).eval(), sm.randn(3, 16))
    sm.manual_seed(1)
    lin = nn.Linear(16, 4).eval()
    traced[2].weight.data = lin.weight.data.clone()
    m[2].weight.data = lin.weight.data.clone()
    close(traced(x), m(x))
    del other


def test_dtype_cast_of_the_module_respecializes() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    traced.double()
    y = traced(x.double())
    assert y.dtype == sm.float64
    close(y, m.double()(x.double()))


def test_hooks_added_after_warm_up_run_and_removal_restores() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    seen = []
    h = traced.register_forward_hook(lambda mod, inp, out: seen.append(1) or out * 2)
    close(traced(x), m(x) * 2)
    h2 = traced[2].register_forward_hook(lambda mod, inp, out: out + 1)
    close(traced(x), (m(x) + 1) * 2)
    h.remove()
    h2.remove()
    close(traced(x), m(x))
    assert seen == [1, 1]


def test_global_hook_added_after_warm_up_runs() -> None:
    from scriptmod.nn._module_hooks import register_module_forward_pre_hook
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    seen = []
    h = register_module_forward_pre_hook(lambda mod, args: seen.append(type(mod).__name__))
    try:
        traced(x)
    finally:
        h.remove()
    assert seen
    n = len(seen)
    traced(x)
    assert len(seen) == n


def test_grad_mode_and_requires_grad_follow_eager() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)                         # parameters do not require grad
    assert traced(x).grad_fn is None
    xr = x.clone().requires_grad_(True)
    y = traced(xr)
    assert y.requires_grad
    y.sum().backward()
    assert xr.grad is not None and xr.grad.shape == x.shape
    traced[0].weight.requires_grad_(True)       # a parameter now requires grad
    y = traced(x)
    assert y.requires_grad and y.grad_fn is not None
    with sm.no_grad():
        assert not traced(x).requires_grad      # and under no_grad, the native run again


def test_fusion_switches_are_honoured(monkeypatch) -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    ex = traced.executor("forward")
    n = ex.stats["specializations"]
    with sm.jit.fuser(False):
        close(traced(x), m(x))
    assert ex.stats["specializations"] == n + 1             # the unfused one
    monkeypatch.setenv("SCRIPTMOD_DISABLE_FUSION", "1")
    close(traced(x), m(x))
    assert ex.stats["specializations"] == n + 1             # the same unfused one, found
    monkeypatch.delenv("SCRIPTMOD_DISABLE_FUSION")
    close(traced(x), m(x))


def test_results_are_fresh_each_call() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    a = traced(x)
    keep = a.numpy().copy()
    b = traced(sm.randn(3, 8))
    assert a is not b and not np.shares_memory(a.numpy(), b.numpy())
    np.testing.assert_array_equal(a.numpy(), keep)


def test_deepcopy_uses_its_own_parameters() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    twin = copy.deepcopy(traced)
    with sm.no_grad():
        twin[0].weight.mul_(0.0)
    close(traced(x), m(x))
    assert not np.allclose(twin(x).numpy(), m(x).numpy())


def test_threads_share_one_fast_path() -> None:
    m, x = mlp(), sm.randn(3, 8)
    traced = warm(m, x)
    inputs = [sm.randn(3, 8) for _ in range(8)]
    want = [m(t).numpy() for t in inputs]
    errors: list[str] = []

    def worker(k: int) -> None:
        with sm.no_grad():
            for i in range(300):
                j = (i + k) % len(inputs)
                got = traced(inputs[j]).numpy()
                if not np.allclose(got, want[j], rtol=1e-5, atol=1e-6):
                    errors.append(f"thread {k} call {i}")
                    return
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_keyword_and_method_calls_still_work() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, scale=None):
            return self.fc(x)
    sm.manual_seed(0)
    net = Net().eval()
    x = sm.randn(2, 4)
    traced = warm(net, x)
    close(traced(x=x), net(x))
    close(traced.forward(x), net(x))
