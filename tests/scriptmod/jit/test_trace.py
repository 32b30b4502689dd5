"""jit.trace and ScriptModule: graphs, code, execution, train/eval, hooks, state."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from tests.scriptmod.jit.golden_model import Small

try:
    from tests.ir.irsamples import assert_golden
except ImportError:  # pragma: no cover
    def assert_golden(actual: str, expected: str) -> None:
        assert actual == expected, f"actual text:\n{actual}"


def _close(a: sm.Tensor, b: sm.Tensor, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


@pytest.fixture
def small() -> tuple[Small, sm.Tensor]:
    sm.manual_seed(0)
    return Small().eval(), sm.randn(2, 4)


GRAPH = '''graph(%self : __module__.tests.scriptmod.jit.golden_model.Small, %x : Float(B, 4)):
  %0 : __module__.nn.Linear = prim::GetAttr[name="fc"](%self)  # golden_model.py:12
  %1 : Float(B, 3) = prim::CallMethod[name="forward"](%0, %x)  # golden_model.py:12
  %2 : __module__.nn.ReLU = prim::GetAttr[name="act"](%self)  # golden_model.py:12
  %3 : Float(B, 3) = prim::CallMethod[name="forward"](%2, %1)  # golden_model.py:12
  %4 : float = prim::Constant[value=2.0]()  # golden_model.py:13
  %5 : Float(B, 3) = sm::mul(%3, %4)  # golden_model.py:13
  %6 : Float(B, 1) = sm::sum[dim=[1], keepdim=1](%x)  # golden_model.py:13
  %7 : Float(B, 3) = sm::add(%5, %6)  # golden_model.py:13
  return (%7)
'''


def test_golden_graph(small):
    traced = jit.trace(*small)
    assert_golden(str(traced.graph), GRAPH)


def test_golden_inlined_graph_has_no_calls(small):
    traced = jit.trace(*small)
    text = str(traced.inlined_graph)
    assert "CallMethod" not in text
    assert "sm::matmul" in text and "sm::relu" in text
    assert 'prim::GetAttr[name="weight"]' in text, "parameters must be read, not baked"


def test_golden_code(small):
    code = jit.trace(*small).code
    import ast
    ast.parse(code)
    assert code.startswith("def forward(self, x: Tensor) -> Tensor:")
    assert "self.fc" in code and ".forward(" in code


def test_code_with_constants(small):
    code, consts = jit.trace(*small).code_with_constants
    assert isinstance(code, str) and isinstance(consts, dict)


def test_traced_equals_eager_and_dynamic_batch(small):
    model, x = small
    traced = jit.trace(model, x)
    for batch in (2, 3, 7):
        xb = sm.randn(batch, 4)
        with sm.no_grad():
            _close(traced(xb), model(xb))


def test_second_call_does_not_specialize_again(small):
    model, x = small
    traced = jit.trace(model, x, check_trace=False)
    with sm.no_grad():
        traced(x)
        traced(x)
        traced(sm.randn(2, 4))
    stats = traced.executor().stats
    assert stats["specializations"] == 1 and stats["calls"] == 3
    with sm.no_grad():
        traced(sm.randn(5, 4))                         # a new shape is a new signature
    assert stats["specializations"] == 2


def test_load_state_dict_after_trace_takes_effect(small):
    model, x = small
    traced = jit.trace(model, x)
    assert list(traced.state_dict()) == list(model.state_dict())
    sd = {k: v * 0 for k, v in model.state_dict().items()}
    traced.load_state_dict(sd)
    with sm.no_grad():
        y = traced(x)
    _close(y, x.sum(dim=1, keepdim=True).expand(2, 3))


def test_to_dtype_after_trace(small):
    model, x = small
    traced = jit.trace(model, x)
    traced.double()
    with sm.no_grad():
        y = traced(x.double())
    assert y.dtype is sm.float64


def test_eval_after_train_mode_trace():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 6)
            self.bn = nn.BatchNorm1d(6)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.bn(self.fc(x)))

    sm.manual_seed(1)
    model = Net()
    x = sm.randn(5, 6)
    traced = jit.trace(model, x, check_trace=False)   # train mode: dropout is random
    traced.eval()
    model.eval()
    with sm.no_grad():
        _close(traced(x), model(x))
        _close(traced(x), traced(x))                  # deterministic in eval
    traced.train()
    with sm.no_grad():
        y = traced(x)
    assert float((y == 0).float().mean()) > 0.2, "dropout must be active again in train mode"


def test_gradients_through_script_module(small):
    model, x = small
    traced = jit.trace(model, x)
    xg = x.clone().requires_grad_()
    traced(xg).sum().backward()
    gw, gx = traced.fc.weight.grad.clone(), xg.grad.clone()
    model.zero_grad()
    xg2 = x.clone().requires_grad_()
    model(xg2).sum().backward()
    _close(gw, model.fc.weight.grad)
    _close(gx, xg2.grad)


def test_hooks_run_on_script_module_and_submodules(small):
    model, x = small
    traced = jit.trace(model, x)
    seen = []
    h1 = traced.register_forward_pre_hook(lambda m, inp: seen.append("pre"))
    h2 = traced.register_forward_hook(lambda m, inp, out: out * 0)
    with sm.no_grad():
        y = traced(x)
    assert seen == ["pre"] and float(y.abs().sum()) == 0
    h1.remove()
    h2.remove()
    with sm.no_grad():
        _close(traced(x), model(x))


def test_submodules_are_script_modules(small):
    traced = jit.trace(*small)
    assert isinstance(traced, jit.ScriptModule) and isinstance(traced.fc, jit.ScriptModule)
    assert traced.original_name == "Small" and traced.fc.original_name == "Linear"
    assert "original_name=Linear" in repr(traced)


def test_shape_reads_stay_symbolic():
    class Flat(nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], -1) * 2

    x = sm.randn(4, 2, 3)
    traced = jit.trace(Flat(), x)
    assert "sm::size[dim=0]" in str(traced.graph)
    with sm.no_grad():
        assert tuple(traced(sm.randn(9, 2, 3)).shape) == (9, 6)


def test_data_dependent_control_flow_strict_raises():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(jit.TracingError, match=r"test_trace.py:\d+"):
        jit.trace(f, sm.randn(3))


def test_data_dependent_control_flow_warns_when_not_strict():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jit.trace(f, sm.randn(3), strict=False)
    msgs = [str(w.message) for w in caught if issubclass(w.category, jit.TracerWarning)]
    assert msgs and "test_trace.py" in msgs[0]


def test_item_in_trace_warns():
    def f(x):
        return x * float(x.max().item()) if False else x * x.shape[0]

    jit.trace(f, sm.randn(3))   # shape reads are not value reads: no warning, no error


def test_check_trace_fails_on_nondeterministic_function():
    rng = np.random.default_rng()

    def f(x):
        return x + sm.tensor(rng.standard_normal(3).astype(np.float32))

    with pytest.raises(jit.TracingCheckError, match="differs across invocations"):
        jit.trace(f, sm.randn(3))


def test_check_trace_warns_on_random_op():
    """PyTorch: outputs that differ because of a random op warn, and the trace is returned."""
    def f(x):
        return x + sm.rand(3)

    with pytest.warns(jit.TracerWarning, match="nondeterministic nodes"):
        traced = jit.trace(f, sm.randn(3))
    assert "sm::rand" in str(traced.graph)


def test_check_inputs(small):
    model, x = small
    jit.trace(model, x, check_inputs=[(sm.randn(5, 4),), (sm.randn(1, 4),)])


def test_trace_function_and_graph_for():
    def f(x, y):
        return (x * y).relu() + 1.0

    sf = jit.trace(f, (sm.randn(2, 3), sm.randn(2, 3)))
    a, b = sm.randn(2, 3), sm.randn(2, 3)
    _close(sf(a, b), f(a, b))
    assert "sm::relu" in str(sf.graph_for(a, b))


def test_guard_errors_name_the_argument(small):
    model, x = small
    traced = jit.trace(model, x)
    with pytest.raises(ValueError, match=r"argument 'x' \(position 0\).*rank 2"):
        traced(sm.randn(4))
    with pytest.raises(TypeError, match=r"argument 'x'.*expected a Tensor"):
        traced(3)
    with pytest.raises(TypeError, match="expected 1 argument"):
        traced(x, x)


def test_trace_module_multiple_methods():
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)

        def double(self, x):
            return self.fc(x) * 2

    m = Two()
    x = sm.randn(2, 3)
    traced = jit.trace_module(m, {"forward": x, "double": x})
    with sm.no_grad():
        _close(traced._run("double", (x,), {}), m.double(x))


def test_tuple_outputs_and_inputs():
    class Pair(nn.Module):
        def forward(self, xs):
            a, b = xs
            return a + b, a * b

    a, b = sm.randn(2, 2), sm.randn(2, 2)
    traced = jit.trace(Pair(), ((a, b),))
    s, p = traced((a, b))
    _close(s, a + b)
    _close(p, a * b)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_bookkeeping_follows_train_eval_after_tracing(momentum):
    """Traced in eval mode, switched to train: the batch count and running stats update
    exactly as eager does (the op does the bookkeeping, not Python control flow)."""
    sm.manual_seed(3)
    eager = nn.BatchNorm1d(4, momentum=momentum).eval()
    x = sm.randn(6, 4)
    traced = jit.trace(nn.BatchNorm1d(4, momentum=momentum).eval(), x)
    traced.train()
    eager.train()
    with sm.no_grad():
        for _ in range(3):
            xb = sm.randn(6, 4)
            _close(traced(xb), eager(xb))
    assert int(traced.num_batches_tracked) == int(eager.num_batches_tracked) == 3
    _close(traced.running_mean, eager.running_mean)
    _close(traced.running_var, eager.running_var)
    traced.eval()
    with sm.no_grad():
        traced(x)
    assert int(traced.num_batches_tracked) == 3, "eval mode must not count batches"


def test_traced_containers_index_like_their_originals(small):
    seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    traced = jit.trace(seq, sm.randn(2, 3))
    assert len(traced) == 3 and traced[0].original_name == "Linear"
    assert [m.original_name for m in traced] == ["Linear", "ReLU", "Linear"]
    assert traced[-1].weight is seq[-1].weight
    assert bool(traced) and bool(jit.trace(*small))
    with pytest.raises(TypeError, match="does not support indexing"):
        jit.trace(*small)[0]
