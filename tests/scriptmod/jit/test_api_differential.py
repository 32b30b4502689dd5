"""The jit API surface against torch 2.13: several traced methods, check_trace, output
structures, hooks and module state on traced and loaded modules, reprs and ``.code``,
pickling, and argument errors. Each scenario runs the same model in both libraries (or
eagerly) and compares what a user sees."""
from __future__ import annotations

import ast
import collections
import copy
import io
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn

torch = pytest.importorskip("torch")

Pair = collections.namedtuple("Pair", "a b")


def both(build):
    """The same model built in scriptmod and torch, with torch's weights copied over."""
    ours, theirs = build(sm), build(torch)
    ours.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours.eval(), theirs.eval()


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def leaves(x):
    if isinstance(x, dict):
        return [v for k in x for v in leaves(x[k])]
    if isinstance(x, (tuple, list)):
        return [v for i in x for v in leaves(i)]
    return [x]


def close(ours, theirs, tol=1e-5) -> None:
    a, b = leaves(ours), leaves(theirs)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=tol, atol=tol)


def roundtrip(module):
    buf = io.BytesIO()
    jit.save(module, buf)
    buf.seek(0)
    return jit.load(buf)


# ---- trace_module with several methods -----------------------------------------------------
def _multi(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(4, 3)
            self.head = Head(lib)

        def forward(self, x):
            return self.fc(x).relu()

        def encode(self, x, y):                  # calls forward and a submodule's method
            return self.head.project(self.forward(x)) + y

        def pair(self, x):
            return (x * 2,)

    class Head(lib.nn.Module):
        def __init__(self, lib):
            super().__init__()
            self.lin = lib.nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x)

        def project(self, x):
            return self.lin(x).tanh()
    return Net()


@pytest.fixture(scope="module")
def multi():
    ours, theirs = both(_multi)
    ex = {"forward": data(2, 4), "encode": (data(2, 4), data(2, 3, seed=1)), "pair": data(2, 4)}
    to = lambda lib, v: tuple(lib.tensor(a) for a in v) if isinstance(v, tuple) else lib.tensor(v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_ours = jit.trace_module(ours, {k: to(sm, v) for k, v in ex.items()})
        t_theirs = torch.jit.trace_module(theirs, {k: to(torch, v) for k, v in ex.items()})
    return t_ours, t_theirs


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_every_traced_method_runs_at_other_batch_sizes(multi, batch):
    ours, theirs = multi
    x, y = data(batch, 4, seed=batch), data(batch, 3, seed=batch + 1)
    loaded = roundtrip(ours)
    for mod in (ours, loaded):
        close(mod(sm.tensor(x)), theirs(torch.tensor(x)))
        close(mod.encode(sm.tensor(x), sm.tensor(y)), theirs.encode(torch.tensor(x), torch.tensor(y)))
        got = mod.pair(sm.tensor(x))
        assert isinstance(got, tuple) and len(got) == 1
        close(got, theirs.pair(torch.tensor(x)))


def test_every_method_has_graph_and_parseable_code(multi):
    ours, _ = multi
    loaded = roundtrip(ours)
    for mod in (ours, loaded):
        for method in (mod.encode, mod.pair):
            assert method.code.startswith(f"def {method.name}(self")
            ast.parse(method.code)
            code, consts = method.code_with_constants
            assert code == method.code and all(isinstance(v, sm.Tensor) for v in consts.values())
            assert "return" in str(method.graph)
        ast.parse(mod.code)
        assert "Tuple[Tensor]" in mod.pair.code


def test_inspect_cli_lists_every_method(multi, tmp_path):
    ours, _ = multi
    path = tmp_path / "multi.smod"
    ours.save(str(path))
    out = subprocess.run([sys.executable, "-m", "scriptmod.cli", "inspect", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("forward", "encode", "pair"):
        assert f"def {name}(" in out.stdout
    for flag, words in (("--code", "def encode(self, x: Tensor, y: Tensor)"),
                        ("--graph", "sm::tanh")):
        out = subprocess.run([sys.executable, "-m", "scriptmod.cli", "inspect", str(path), flag],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and words in out.stdout, out.stdout + out.stderr


def test_inspect_cli_shows_output_structures(tmp_path):
    class Structured(nn.Module):
        def forward(self, x):
            return {"h": x * 2, "p": Pair(x, (x + 1,))}
    path = tmp_path / "structured.smod"
    jit.trace(Structured(), sm.ones(2, 3), strict=False).save(str(path))
    out = subprocess.run([sys.executable, "-m", "scriptmod.cli", "inspect", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "# returns {'h': _, 'p': Pair(a=_, b=_)}" in out.stdout


# ---- argument errors ---------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m, x: m.encode(x),                         # missing positional
    lambda m, x: m(x, x),                             # extra positional
    lambda m, x: m("a"),                              # wrong kind
    lambda m, x: m.encode(x, z=x),                    # unknown keyword
    lambda m, x: m.encode(x=x),                       # missing keyword
])
def test_argument_errors_are_runtime_and_type_errors(multi, call):
    ours, theirs = multi
    with pytest.raises(RuntimeError):
        call(theirs, torch.ones(2, 4))
    for mod in (ours, roundtrip(ours)):
        with pytest.raises(RuntimeError) as info:
            call(mod, sm.ones(2, 4))
        assert isinstance(info.value, TypeError) and isinstance(info.value, jit.ArgumentError)
        assert "Net." in str(info.value)


def test_wrong_dtype_is_a_runtime_error_naming_both(multi):
    ours, theirs = multi
    with pytest.raises(RuntimeError):
        theirs(torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="(?s)float.*double|double.*float|float64.*float32"):
        ours(sm.ones(2, 4, dtype=sm.float64))
    with pytest.raises(RuntimeError, match="int64"):
        ours(sm.ones(2, 4, dtype=sm.int64))


# ---- check_trace ---------------------------------------------------------------------------
def _nondeterministic(lib):
    def dropout(x):
        return lib.nn.functional.dropout(x, 0.5, True)

    def rand_like(x):
        return x + lib.rand_like(x)

    def randn(x):
        return x * lib.randn(x.shape)
    return [dropout, rand_like, randn]


@pytest.mark.parametrize("i", range(3))
def test_check_trace_warns_on_nondeterminism_like_torch(i):
    x = data(3, 4)
    for lib in (torch, sm):
        fn = _nondeterministic(lib)[i]
        with pytest.warns(lib.jit.TracerWarning):
            traced = lib.jit.trace(fn, lib.tensor(x))
        assert traced(lib.tensor(data(5, 4))).shape == (5, 4)


def test_check_tolerance_silences_small_differences():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + sm.rand_like(x) * 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        jit.trace(Noisy(), sm.ones(3, 4), check_tolerance=1e-1)
    with pytest.warns(jit.TracerWarning):
        jit.trace(Noisy(), sm.ones(3, 4), check_tolerance=1e-7)


def test_check_inputs_of_other_shapes_pass_for_polymorphic_models():
    ours, theirs = both(lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.GELU()))
    checks = [(data(n, 4, seed=n),) for n in (1, 5)]
    torch.jit.trace(theirs, torch.tensor(data(2, 4)), check_inputs=[tuple(map(torch.tensor, c)) for c in checks])
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        t = jit.trace(ours, sm.tensor(data(2, 4)), check_inputs=[tuple(map(sm.tensor, c)) for c in checks])
    close(t(sm.tensor(checks[1][0])), theirs(torch.tensor(checks[1][0])))


def test_graphs_that_differ_per_input_raise_tracing_check_error():
    def build(lib):
        class Branch(lib.nn.Module):
            def forward(self, x):
                if x.shape[0] > 2:
                    return x * 2
                return x - 1
        return Branch()
    x, small = data(3, 4), data(1, 4)
    with pytest.raises(torch.jit.TracingCheckError, match="Graphs differed"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.jit.trace(build(torch), torch.tensor(x), check_inputs=[(torch.tensor(small),)])
    with pytest.raises(jit.TracingCheckError, match="x.shape\\[0\\] > 2"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jit.trace(build(sm), sm.tensor(x), check_inputs=[(sm.tensor(small),)])


def test_data_dependent_branch_is_refused_at_trace_time():
    class Branch(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1
    with pytest.raises(RuntimeError, match="data-dependent"):
        jit.trace(Branch(), sm.ones(3), check_inputs=[(sm.ones(3),), (-sm.ones(3),)])


def _kw(lib):
    class KW(lib.nn.Module):
        def forward(self, x, y=None, scale: float = 2.0):
            return x * scale if y is None else x - y
    return KW()


@pytest.mark.parametrize("how", ["kwargs only", "positional and kwargs", "default left out"])
def test_example_kwarg_inputs_with_check_trace(how):
    x, y = data(3, 4), data(3, 4, seed=1)
    eager = _kw(sm)
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)
        if how == "kwargs only":
            t = jit.trace(eager, example_kwarg_inputs={"x": sm.tensor(x), "y": sm.tensor(y)})
            args = (data(5, 4, seed=2), data(5, 4, seed=3))
        elif how == "positional and kwargs":
            t = jit.trace(eager, (sm.tensor(x),), example_kwarg_inputs={"y": sm.tensor(y)})
            args = (data(5, 4, seed=2), data(5, 4, seed=3))
        else:
            t = jit.trace(eager, example_kwarg_inputs={"x": sm.tensor(x)})
            args = (data(5, 4, seed=2),)
    tens = [sm.tensor(a) for a in args]
    close(t(*tens), eager(*tens))
    close(roundtrip(t)(*tens), eager(*tens))
    if len(tens) == 2:
        close(t(x=tens[0], y=tens[1]), eager(*tens))


def test_traced_function_with_kwarg_inputs():
    def f(a, b):
        return a * b + 1
    x, y = sm.tensor(data(3)), sm.tensor(data(3, seed=1))
    t = jit.trace(f, example_kwarg_inputs={"a": x, "b": y})
    close(t(y, x), f(y, x))
    assert t.code.startswith("def f(a: Tensor, b: Tensor)")


# ---- output structures ---------------------------------------------------------------------
OUTPUTS = {
    "dict": (lambda m, x: {"a": x * 2, "b": x + m.w}, False),
    "nested": (lambda m, x: {"a": (x * 2, [x + m.w, {"c": x - 1}])}, False),
    "namedtuple": (lambda m, x: Pair(x * 2, x + m.w), True),
    "single tuple": (lambda m, x: (x * 2,), True),
    "None in tuple": (lambda m, x: (x * 2, None), True),
    "int in tuple": (lambda m, x: (x * 2, 3), True),
    "float in tuple": (lambda m, x: (x * 2, 2.5), True),
    "list": (lambda m, x: [x * 2, x + m.w], False),
    "input and param": (lambda m, x: (x, m.w * 1), True),
}


class Out(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(sm.arange(4).float())

    def forward(self, x):
        return self.fn(self, x)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_output_structures_survive_trace_and_archive(name):
    fn, strict = OUTPUTS[name]
    eager = Out(fn).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = jit.trace(eager, sm.ones(2, 4), strict=strict)
    x = sm.tensor(data(5, 4))
    want = eager(x)
    for mod in (t, roundtrip(t)):
        got = mod(x)
        if mod is t:               # a loaded namedtuple is rebuilt by name and fields
            assert type(got) is type(want)
        assert type(got).__name__ == type(want).__name__
        assert getattr(got, "_fields", None) == getattr(want, "_fields", None)
        assert _shape_of(got) == _shape_of(want)
        close([v for v in leaves(got) if isinstance(v, sm.Tensor)],
              [v for v in leaves(want) if isinstance(v, sm.Tensor)])


def _shape_of(x):
    if isinstance(x, dict):
        return {k: _shape_of(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x).__name__, [_shape_of(v) for v in x]
    return type(x).__name__ if isinstance(x, sm.Tensor) else x


def test_strict_dict_output_raises_torchs_error():
    def build(lib):
        class D(lib.nn.Module):
            def forward(self, x):
                return {"a": x}
        return D()
    with pytest.raises(RuntimeError, match="Encountering a dict at the output") as theirs:
        torch.jit.trace(build(torch), torch.ones(2))
    with pytest.raises(RuntimeError, match="Encountering a dict at the output") as ours:
        jit.trace(build(sm), sm.ones(2))
    assert str(ours.value).split(".")[0] == str(theirs.value).split(".")[0]


def _aliasing(lib):
    class Alias(lib.nn.Module):
        def forward(self, x):
            y = x + 1
            return y, y, x
    return Alias()


def test_aliased_outputs_are_the_same_objects_like_torch():
    x_t, x_s = torch.ones(3, 4), sm.ones(3, 4)
    theirs = torch.jit.trace(_aliasing(torch), x_t)
    a, b, c = theirs(x_t)
    assert a is b and c is x_t
    t = jit.trace(_aliasing(sm), x_s)
    for mod in (t, roundtrip(t)):
        for grad in (False, True):
            x = sm.ones(5, 4, requires_grad=grad)
            a, b, c = mod(x)
            assert a is b and c is x
            np.testing.assert_array_equal(a.detach().numpy(), np.full((5, 4), 2.0))


def test_identity_returns_the_input_like_torch():
    class Id(nn.Module):
        def forward(self, x):
            return x
    x_t = torch.ones(2)
    assert torch.jit.trace(torch.nn.Identity(), x_t)(x_t) is x_t
    t = jit.trace(Id(), sm.ones(2))
    for mod in (t, roundtrip(t)):
        x = sm.ones(6)
        assert mod(x) is x


# ---- hooks and module state -----------------------------------------------------------------
def _hooks(target, log):
    hs = [target.fc1.register_forward_hook(lambda m, i, o: o * 2),
          target.fc2.register_forward_pre_hook(lambda m, i: (i[0] + 1,)),
          target.fc1.register_forward_hook(lambda m, a, k, o: log.append("kw") or o - 1,
                                           with_kwargs=True, always_call=True),
          target.register_forward_hook(lambda m, i, o: o * 3)]
    return hs


def _two(lib):
    class Two(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = lib.nn.Linear(4, 5), lib.nn.Linear(5, 2)

        def forward(self, x):
            return self.fc2(self.fc1(x).tanh())
    return Two()


def test_hooks_on_traced_and_loaded_modules_match_eager_with_grad():
    eager, _ = both(_two)
    t = jit.trace(eager, sm.ones(2, 4))
    x = data(5, 4)
    results = []
    for target in (eager, t, roundtrip(t)):
        log: list[str] = []
        hs = _hooks(target, log)
        xx = sm.tensor(x, requires_grad=True)
        out = target(xx)
        out.sum().backward()
        results.append((out.detach().numpy(), xx.grad.numpy(), log))
        for h in hs:
            h.remove()
        results.append(target(sm.tensor(x)).detach().numpy())
    for got in results[2:]:
        want = results[0] if isinstance(got, tuple) else results[1]
        if isinstance(got, tuple):
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
            assert got[2] == want[2] == ["kw"]
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_state_changes_on_traced_modules_never_run_stale_kernels():
    ours, theirs = both(_two)
    t_ours, t_theirs = jit.trace(ours, sm.ones(2, 4)), torch.jit.trace(theirs, torch.ones(2, 4))
    x = data(3, 4)
    close(t_ours(sm.tensor(x)), t_theirs(torch.tensor(x)))
    _, fresh = both(_two)
    t_ours.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in fresh.state_dict().items()})
    t_theirs.load_state_dict(fresh.state_dict())
    close(t_ours(sm.tensor(x)), t_theirs(torch.tensor(x)))
    t_ours.double()
    t_theirs.double()
    got = t_ours(sm.tensor(x.astype(np.float64)))
    assert got.dtype == sm.float64
    close(got, t_theirs(torch.tensor(x.astype(np.float64))), tol=1e-10)
    with pytest.raises(RuntimeError):
        t_ours(sm.tensor(x))
    t_ours.to(sm.float32).train()
    assert t_ours.training and t_ours.fc1.training
    close(t_ours(sm.tensor(x)), fresh(torch.tensor(x)))
    t_ours.eval()
    assert not t_ours.fc2.training


def test_deepcopy_and_copy_of_traced_modules():
    eager, _ = both(_two)
    t = jit.trace(eager, sm.ones(2, 4))
    x = sm.tensor(data(3, 4))
    t(x)
    for clone in (copy.deepcopy(t), copy.deepcopy(roundtrip(t))):
        close(clone(x), eager(x))
        with sm.no_grad():
            clone.fc1.weight.mul_(0)
        close(t(x), eager(x))
    shallow = copy.copy(t)
    assert shallow.fc1 is t.fc1
    close(shallow(x), eager(x))


def test_pickling_a_script_module_raises_a_clear_error():
    with pytest.raises(RuntimeError):
        pickle.dumps(torch.jit.trace(torch.nn.Linear(2, 2), torch.ones(1, 2)))
    t = jit.trace(nn.Linear(2, 2), sm.ones(1, 2))
    fn = jit.trace(lambda a: a * 2, sm.ones(2))
    for obj in (t, roundtrip(t), fn):
        with pytest.raises(RuntimeError, match="cannot pickle.*scriptmod.jit.save") as info:
            pickle.dumps(obj)
        assert isinstance(info.value, TypeError)
    assert (copy.deepcopy(fn)(sm.ones(3)) == 2).all()


# ---- reprs and code --------------------------------------------------------------------------
def _containers(lib):
    class Nested(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.Sequential(lib.nn.ReLU()))
            self.ml = lib.nn.ModuleList([lib.nn.Linear(4, 4), lib.nn.Tanh()])
            self.md = lib.nn.ModuleDict({"a": lib.nn.Linear(4, 2), "b": lib.nn.Sigmoid()})

        def forward(self, x):
            x = self.seq(x)
            for m in self.ml:
                x = m(x)
            return self.md["b"](self.md["a"](x))
    return Nested()


def test_reprs_of_traced_and_loaded_containers_match_torch():
    ours, theirs = both(_containers)
    x = data(2, 4)
    t_ours, t_theirs = jit.trace(ours, sm.tensor(x)), torch.jit.trace(theirs, torch.tensor(x))
    assert str(t_ours) == str(t_theirs)
    buf = io.BytesIO()
    torch.jit.save(t_theirs, buf)
    buf.seek(0)
    loaded_theirs, loaded_ours = torch.jit.load(buf), roundtrip(t_ours)
    assert str(loaded_ours) == str(loaded_theirs)
    for mod in (t_ours, loaded_ours):
        ast.parse(mod.code)
        ast.parse(mod.seq.code)
        close(mod(sm.tensor(data(6, 4))), theirs(torch.tensor(data(6, 4))))
    assert 'getattr(self, "0")' in t_ours.seq.code


ODD_NAMES = ["my-layer", "class", "0", "my layer", "if", "é"]


def test_odd_member_names_give_valid_code_and_round_trip():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            for name in ODD_NAMES:
                self.add_module(name, nn.Linear(4, 4))
            self.register_buffer("lambda", sm.arange(4).float())

        def forward(self, x):
            for name in ODD_NAMES:
                x = getattr(self, name)(x).tanh()
            return x + getattr(self, "lambda")
    eager = Odd().eval()
    t = jit.trace(eager, sm.ones(2, 4))
    loaded = roundtrip(t)
    x = sm.tensor(data(5, 4))
    for mod in (t, loaded):
        ast.parse(mod.code)
        for name in ODD_NAMES:
            assert f"({name}): " in str(mod)
        close(mod(x), eager(x))
    assert list(loaded.state_dict()) == list(eager.state_dict())


def test_identity_arithmetic_on_returned_state_gives_new_storage_like_eager():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(sm.ones(4))

        def forward(self, x):
            return x * 1, self.w * 1, x + 0
    eager = Scaled()
    t = jit.trace(eager, sm.ones(2, 4))
    for mod in (t, roundtrip(t)):
        for grad in (True, False):
            x = sm.ones(3, 4)
            with sm.set_grad_enabled(grad):
                outs = mod(x)
            assert all(o is not x and o is not mod.w for o in outs)
            for o in outs:
                with sm.no_grad():
                    o.mul_(5)
            assert (x == 1).all() and (mod.w == 1).all()
            assert (grad and outs[1].grad_fn is not None) or (not grad and outs[1].grad_fn is None)


def test_tracing_a_bound_method_matches_torch():
    ours, theirs = both(_multi)
    x = data(2, 4)
    with pytest.raises(AttributeError, match="individual module's functions"):
        torch.jit.trace(theirs.pair, torch.tensor(x))
    with pytest.raises(AttributeError, match="trace_module"):    # its weights would be baked in
        jit.trace(ours.pair, sm.tensor(x))
    t_theirs = torch.jit.trace(theirs.forward, torch.tensor(x))
    t_ours = jit.trace(ours.forward, sm.tensor(x))
    assert isinstance(t_ours, jit.ScriptModule) and str(t_ours) == str(t_theirs)
    with sm.no_grad():
        ours.fc.weight.mul_(2)                                   # the module's own parameters
    close(t_ours(sm.tensor(x)), ours(sm.tensor(x)))


def test_keyword_only_parameters_trace_like_torch():
    def build(lib):
        class Scale(lib.nn.Module):
            def forward(self, x, *, scale=2.0):
                return x * scale

        class Outer(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Scale()

            def forward(self, x, *, y):
                return self.inner(x, scale=3.0) + y
        return Scale(), Outer()
    (s_ours, o_ours), (s_theirs, _) = build(sm), build(torch)
    x = data(4, 3)
    close(jit.trace(s_ours, sm.ones(2, 3))(sm.tensor(x)),
          torch.jit.trace(s_theirs, torch.ones(2, 3))(torch.tensor(x)))
    t = jit.trace(o_ours, (sm.ones(2, 3),), example_kwarg_inputs={"y": sm.ones(2, 3)})
    for mod in (t, roundtrip(t)):
        close(mod(sm.tensor(x), y=sm.tensor(x)), o_ours(sm.tensor(x), y=sm.tensor(x)))


@pytest.mark.parametrize("arg", [
    lambda x: (x, 3),                    # torch: "Tracer cannot infer type" (dict/nested
    lambda x: {"a": x, "k": None},       # inputs of tensors trace: test_trace_inputs.py)
])
def test_container_inputs_that_cannot_be_graph_inputs_are_refused(arg):
    class Any_(nn.Module):
        def forward(self, d):
            return sm.ones(1)
    with pytest.raises(jit.TracingError, match="argument 'd' holds a value of type"):
        jit.trace(Any_(), (arg(sm.ones(2)),))


def test_graphs_that_differ_between_traces_raise_like_torch():
    def build(lib):
        class Counter(lib.nn.Module):
            calls = 0

            def forward(self, x):
                type(self).calls += 1
                return x * type(self).calls
        return Counter()
    with pytest.raises(torch.jit.TracingCheckError, match="Graphs differed across invocations"):
        torch.jit.trace(build(torch), torch.ones(2))
    with pytest.raises(jit.TracingCheckError, match="Graphs differed across invocations"):
        jit.trace(build(sm), sm.ones(2))


def test_python_number_from_a_tensor_with_strict_false_is_checked():
    class Item(nn.Module):
        def forward(self, x):
            return x * int(x[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(jit.TracingCheckError, match="Graphs differed"):
            jit.trace(Item(), sm.ones(2), strict=False, check_inputs=[(sm.ones(2) * 3,)])
        with pytest.raises(jit.TracingError, match="Python number"):
            jit.trace(Item(), sm.ones(2), check_inputs=[(sm.ones(2) * 3,)])


def test_state_changes_on_loaded_modules_never_run_stale_kernels():
    eager, _ = both(_two)
    loaded = roundtrip(jit.trace(eager, sm.ones(2, 4)))
    x = sm.tensor(data(3, 4))
    close(loaded(x), eager(x))
    _, fresh = both(_two)
    state = {k: sm.tensor(v.detach().numpy()) for k, v in fresh.state_dict().items()}
    loaded.load_state_dict(state)
    eager.load_state_dict(state)
    close(loaded(x), eager(x))
    loaded.to(sm.float64)
    eager.to(sm.float64)
    got = loaded(x.double())
    assert got.dtype == sm.float64
    close(got, eager(x.double()), tol=1e-12)
    with pytest.raises(RuntimeError, match="(?i)double|float64"):
        loaded(x)
    with sm.no_grad():
        loaded.fc2.bias.add_(1)
        eager.fc2.bias.add_(1)
    close(loaded(x.double()), eager(x.double()), tol=1e-12)


def test_code_of_a_submodule_never_called_says_why():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])
            self.unused = nn.Linear(2, 2)

        def forward(self, x):
            return self.blocks[0](x)
    t = jit.trace(M(), sm.ones(1, 2))
    for sub in (t.blocks, t.unused, roundtrip(t).unused):
        for name in ("code", "graph"):
            with pytest.raises(AttributeError, match="forward was not called while tracing"):
                getattr(sub, name)
    with pytest.raises(RuntimeError, match="not called during tracing"):
        t.unused(sm.ones(1, 2))
    ast.parse(t.blocks[0].code)
