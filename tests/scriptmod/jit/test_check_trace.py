"""check_trace as PyTorch does it: outputs that differ from the Python code warn (a
nondeterministic trace returns its module), graphs that differ raise; and keyword example
inputs (``example_kwarg_inputs``) work with the default check."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


class DropNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


class Noisy(nn.Module):
    def forward(self, x):
        return x + sm.rand_like(x)


def _noisy_fn(x):
    return x + sm.randn(x.shape)


def _messages(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, jit.TracerWarning)]


@pytest.mark.parametrize("make", [lambda: DropNet().train(), Noisy, lambda: _noisy_fn],
                         ids=["dropout-train", "rand_like", "randn-function"])
def test_nondeterministic_trace_warns_and_returns(make):
    fn = make()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = jit.trace(fn, sm.randn(4, 8))
    msgs = _messages(record)
    assert any(m.startswith("Trace had nondeterministic nodes. Did you forget call .eval() on "
                            "your model? Nodes:") for m in msgs), msgs
    assert any(m.startswith("Output nr 1. of the traced function does not match the "
                            "corresponding output of the Python function. Detailed error:")
               for m in msgs), msgs
    assert isinstance(traced, (jit.ScriptModule, jit.ScriptFunction))
    assert traced(sm.randn(3, 8)).shape == (3, 8)


def test_nondeterministic_warning_names_the_nodes():
    with pytest.warns(jit.TracerWarning, match=r"(?s)Nodes:\n\t%\d+ : .*sm::dropout.*check_trace=False"):
        jit.trace(DropNet().train(), sm.randn(4, 8))


def test_eval_model_checks_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        traced = jit.trace(DropNet().eval(), sm.randn(4, 8))
    x = sm.randn(2, 8)
    with sm.no_grad():
        # two compiled paths (another batch size than traced: the shared symbolic
        # specialization, BLAS; the submodule's own first size: inline GEMM loops) agree to
        # float32 rounding
        np.testing.assert_allclose(traced(x).numpy(), traced.drop(traced.fc(x)).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_torch_also_warns_and_returns_for_the_same_model():
    torch = pytest.importorskip("torch")

    class T(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = torch.jit.trace(T(), torch.randn(4, 8))
    ours = []
    with warnings.catch_warnings(record=True) as mine:
        warnings.simplefilter("always")
        jit.trace(Noisy(), sm.randn(4, 8))
    theirs = [str(w.message).split(" Nodes:")[0].split(" Detailed")[0] for w in record
              if w.category.__name__ == "TracerWarning"]
    ours = [m.split(" Nodes:")[0].split(" Detailed")[0] for m in _messages(mine)]
    assert traced is not None and theirs == ours


class Drift(nn.Module):
    """Reads a Python value that changes between calls: the trace bakes it in."""
    calls = 0

    def forward(self, x):
        Drift.calls += 1
        return x * float(Drift.calls)


def test_graphs_that_differ_raise_tracing_check_error():
    torch = pytest.importorskip("torch")

    class TDrift(torch.nn.Module):
        calls = 0

        def forward(self, x):
            TDrift.calls += 1
            return x * float(TDrift.calls)

    with pytest.raises(torch.jit.TracingCheckError, match="Graphs differed across invocations"):
        torch.jit.trace(TDrift(), torch.randn(2, 2))
    with pytest.raises(jit.TracingCheckError, match="Graphs differed across invocations") as info:
        jit.trace(Drift(), sm.randn(2, 2))
    assert "First diverging operator" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_check_inputs_that_fail_to_run_raise_tracing_check_error():
    class Two(nn.Module):
        def forward(self, x):
            return x.sum(dim=1)

    with pytest.raises(jit.TracingCheckError, match="exception while running the trace") as info:
        jit.trace(Two(), sm.randn(2, 3), check_inputs=[(sm.ones(2, 3, dtype=sm.int64),)])
    assert info.value.__cause__ is not None


def test_in_place_model_is_checked_on_fresh_inputs():
    class Inplace(nn.Module):
        def forward(self, x):
            return x.mul_(2.0)

    x = sm.randn(3, 3)
    before = x.numpy().copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        jit.trace(Inplace(), x)
    np.testing.assert_array_equal(x.numpy(), before * 2.0)   # the trace ran once on x


# ---- example_kwarg_inputs --------------------------------------------------------------
class KW(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x, y=None, scale: float = 2.0):
        out = self.fc(x) * scale
        return out if y is None else out + y


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [
    {"example_kwarg_inputs": {"x": "X", "y": "Y"}},
    {"example_inputs": None, "example_kwarg_inputs": {"y": "Y", "x": "X"}},
    {"example_inputs": "X", "example_kwarg_inputs": {"y": "Y"}},
], ids=["kwargs-only", "none-and-kwargs", "positional-and-kwargs"])
def test_module_with_example_kwarg_inputs_and_default_check(kwargs):
    sm.manual_seed(0)
    m = KW().eval()
    vals = {"X": sm.randn(2, 3), "Y": sm.randn(2, 3)}
    resolve = lambda v: vals[v] if isinstance(v, str) else v  # noqa: E731
    call = {k: ({n: resolve(t) for n, t in v.items()} if isinstance(v, dict) else resolve(v))
            for k, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        traced = jit.trace(m, **call)                         # check_trace=True by default
    x, y = sm.randn(5, 3), sm.randn(5, 3)
    with sm.no_grad():
        _close(traced(x=x, y=y), m(x, y=y))
        _close(traced(x, y), m(x, y))


def test_kwarg_trace_without_the_optional_argument():
    m = KW().eval()
    traced = jit.trace(m, example_kwarg_inputs={"x": sm.randn(2, 3)})
    x = sm.randn(4, 3)
    with sm.no_grad():
        _close(traced(x=x), m(x))
    assert len(traced.graph.inputs) == 2                     # self, x


def test_kwarg_check_inputs_are_dicts_like_torch():
    m = KW().eval()
    traced = jit.trace(m, example_kwarg_inputs={"x": sm.randn(2, 3), "y": sm.randn(2, 3)},
                       check_inputs=[{"x": sm.randn(4, 3), "y": sm.randn(4, 3)}])
    assert traced(x=sm.randn(1, 3), y=sm.randn(1, 3)).shape == (1, 3)


def test_kwarg_trace_check_catches_a_bad_trace():
    class Drifting(nn.Module):
        calls = 0

        def forward(self, x, y):
            Drifting.calls += 1
            return x * float(Drifting.calls) + y

    with pytest.raises(jit.TracingCheckError, match="Graphs differed"):
        jit.trace(Drifting(), example_kwarg_inputs={"x": sm.randn(2), "y": sm.randn(2)})


def test_function_with_example_kwarg_inputs():
    def f(a, b):
        return a - b * 2.0

    a, b = sm.randn(3), sm.randn(3)
    traced = jit.trace(f, example_kwarg_inputs={"b": b, "a": a})
    assert traced.code.startswith("def f(a: Tensor, b: Tensor) -> Tensor:")
    a2, b2 = sm.randn(3), sm.randn(3)
    _close(traced(a=a2, b=b2), f(a2, b2))
    _close(traced(a2, b2), f(a2, b2))
    both = jit.trace(f, (a,), example_kwarg_inputs={"b": b})
    _close(both(a2, b=b2), f(a2, b2))


def test_example_kwarg_inputs_must_be_a_dict():
    with pytest.raises(TypeError, match="example_kwarg_inputs must be a dict"):
        jit.trace(KW(), example_kwarg_inputs=[sm.randn(2, 3)])


def test_same_tensor_for_two_arguments_stays_two_inputs():
    """torch.jit.trace(f, (x, x)) reads one input twice; here ``a - b`` stays ``a - b``."""
    def f(a, b):
        return a - b

    x = sm.randn(3)
    traced = jit.trace(f, (x, x))
    np.testing.assert_array_equal(traced(sm.ones(3), sm.zeros(3)).numpy(), np.ones(3))
