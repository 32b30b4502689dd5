"""Sizes read from ``x.shape`` stay symbolic in traces (issue 11): ops that take a size,
start, end, length or shape follow the input at other batch sizes, and Python decisions on
sizes (branches, ``range``, ``int()``) are guarded instead of silently frozen."""
from __future__ import annotations

import math
import os
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit import TraceGuardError

TRACED_AT = 8
BATCHES = (6, 1, 13, 7, 8)     # 13 and 7: // 2 and ceil(/ 2) round differently than at 8
HERE = os.path.basename(__file__)


class Fn(nn.Module):
    """A module around a function of x (and a parameter-free constant row ``c``)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.c = nn.Parameter(sm.arange(3, dtype=sm.float32).reshape(1, 3))

    def forward(self, x: sm.Tensor) -> Any:
        return self.fn(self, x)


MODELS: dict[str, Callable[..., Any]] = {
    "slice-half": lambda m, x: x[:x.size(0) // 2] * 2,
    "slice-from": lambda m, x: x[x.size(0) // 2:] + 1,
    "slice-negative": lambda m, x: x[-(x.size(0) // 3) - 1:] - 1,
    "slice-step": lambda m, x: x[1:x.shape[0]:2].exp(),
    "slice-multi-dim": lambda m, x: x[:x.shape[0] - 1, :x.shape[1] - 1],
    "select-last": lambda m, x: x[x.shape[0] - 1] * 3,
    "narrow": lambda m, x: x.narrow(0, x.size(0) // 4, x.size(0) // 2).relu(),
    "split": lambda m, x: x.split(x.size(0) // 2 + 1),
    "split-sections": lambda m, x: x.split([x.size(0) // 2, x.size(0) - x.size(0) // 2]),
    "chunk": lambda m, x: x.chunk(2),
    "view": lambda m, x: x.view(x.size(0) * 3).view(x.shape[0], -1) + 1,
    "reshape": lambda m, x: x.reshape(1, x.numel()).sum(1),
    "expand": lambda m, x: m.c.expand(x.size(0), -1) + x,
    "arange": lambda m, x: x + sm.arange(x.shape[0]).unsqueeze(1),
    "arange-bounds": lambda m, x: sm.arange(1, x.shape[0] + 1, 2, dtype=sm.float32),
    "zeros": lambda m, x: x + sm.zeros(x.shape[0], 1),
    "ones-full-empty": lambda m, x: sm.ones(x.shape) + sm.full((x.size(0), 3), 2.0)
    + sm.empty(x.size(0), 3),
    "new-zeros": lambda m, x: x.new_zeros(x.shape[0], 1) + x.new_ones(x.shape) + x,
    "repeat": lambda m, x: m.c.repeat(x.size(0), 1) * x,
    "index-select-range": lambda m, x: x.index_select(0, sm.arange(x.size(0) - 1, -1, -1)),
    "unflatten": lambda m, x: x.reshape(-1).unflatten(0, (x.size(0), -1)) * 2,
    "numel": lambda m, x: x.reshape(x.numel() // 3, 3),
    "last-dim": lambda m, x: x[:, :x.shape[-1] - 1],
}


def _arrays(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in outs]


def _assert_same(got: Any, want: Any) -> None:
    g, w = _arrays(got), _arrays(want)
    assert [a.shape for a in g] == [a.shape for a in w]
    for a, b in zip(g, w):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _traced(name: str) -> tuple[nn.Module, Any]:
    model = Fn(MODELS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.TracerWarning)    # symbolic: nothing is baked
        tr = jit.trace(model, sm.randn(TRACED_AT, 3))
    return model, tr


def _check(model: nn.Module, run: Callable[[sm.Tensor], Any], batch: int, grad: bool = False) -> None:
    sm.manual_seed(batch)
    x = sm.randn(batch, 3)
    want = model(x)
    xs = x.detach().requires_grad_(True) if grad else x
    n_traced = len(_arrays(model(sm.randn(TRACED_AT, 3))))
    if len(_arrays(want)) != n_traced:   # another count of pieces: the guard must say so
        with pytest.raises(TraceGuardError, match="traced with"):
            run(xs)
        return
    _assert_same(run(xs), want)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fused_follows_the_batch_size(name: str) -> None:
    model, tr = _traced(name)
    for b in BATCHES:
        _check(model, tr, b)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unfused_follows_the_batch_size(name: str) -> None:
    model, tr = _traced(name)
    with jit.fuser(False):
        for b in BATCHES:
            _check(model, tr, b)


@pytest.mark.parametrize("name", ["slice-half", "narrow", "split", "expand", "repeat",
                                  "index-select-range", "view", "slice-negative"])
def test_autograd_path_follows_the_batch_size(name: str) -> None:
    model, tr = _traced(name)
    for b in (6, 13):
        _check(model, tr, b, grad=True)
        x = sm.randn(b, 3, requires_grad=True)
        sum(o.sum() for o in (tr(x) if isinstance(tr(x), tuple) else (tr(x),))).backward()
        x2 = x.detach().requires_grad_(True)
        out = model(x2)
        sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
        np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["slice-half", "narrow", "split", "arange", "chunk",
                                  "select-last", "unflatten"])
def test_archive_keeps_the_size_arithmetic(name: str, tmp_path: Any) -> None:
    model, tr = _traced(name)
    path = str(tmp_path / "m.smod")
    tr.save(path)
    again = jit.load(path)
    for b in BATCHES:
        _check(model, again, b)


def test_reported_case_half_batch_at_six() -> None:
    """The issue's example: traced at 8, run at 6 gave shape (4, 3)."""
    model, tr = _traced("slice-half")
    assert tuple(tr(sm.randn(6, 3)).shape) == (3, 3)
    _, tr = _traced("narrow")
    assert tuple(tr(sm.randn(6, 3)).shape) == (3, 3)


def test_traced_function_follows_the_batch_size() -> None:
    def f(x: sm.Tensor) -> sm.Tensor:
        return x[:x.size(0) // 2] + sm.arange(x.size(0) // 2).unsqueeze(1)
    tr = jit.trace(f, sm.randn(8, 3))
    for b in BATCHES:
        x = sm.randn(b, 3)
        _assert_same(tr(x), f(x))


def test_graph_and_code_show_the_size_arithmetic() -> None:
    _, tr = _traced("slice-half")
    g = str(tr.graph)
    assert "sm::size[dim=0](%x)" in g and "sm::int_floordiv" in g
    assert '("input", 0)' in g                   # the slice bound is the op's input
    assert "x.size(0) // 2" in tr.code             # .code reads the arithmetic as Python
    _, tr = _traced("narrow")
    assert "sm::narrow[dim=0](%x, %" in str(tr.graph)


def test_against_torch_at_other_batch_sizes() -> None:
    torch = pytest.importorskip("torch")
    model, tr = _traced("split")
    for b in (6, 7):
        x = sm.randn(b, 3)
        want = torch.from_numpy(x.numpy()).split(b // 2 + 1)
        got = tr(x)
        assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy())


# ---- Python decisions on sizes: warned about and guarded ---------------------------------
class Branch(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        if x.shape[0] > 2:                        # LINE_BRANCH
            return (x * 2).relu() + 1
        return x - 1


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if f"# {marker}" in line and "def " not in line)


def _trace_warned(model: nn.Module, x: sm.Tensor) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = jit.trace(model, x)
    return tr, [w for w in caught if issubclass(w.category, jit.TracerWarning)]


def test_branch_on_a_size_warns_at_the_users_line() -> None:
    _, caught = _trace_warned(Branch(), sm.randn(8, 3))
    assert len(caught) == 1
    w = caught[0]
    assert os.path.basename(w.filename) == HERE and w.lineno == _line("LINE_BRANCH")
    assert "x.shape[0] > 2" in str(w.message) and "might cause the trace to be incorrect" in str(w.message)


@pytest.mark.parametrize("mode", ["fused", "unfused", "grad"])
def test_branch_guard_passes_the_same_branch_and_rejects_the_other(mode: str) -> None:
    tr, _ = _trace_warned(Branch(), sm.randn(8, 3))
    m = Branch()

    def run(x: sm.Tensor) -> Any:
        if mode == "unfused":
            with jit.fuser(False):
                return tr(x)
        return tr(x.requires_grad_(True) if mode == "grad" else x)
    for b in (3, 5, 13):
        x = sm.randn(b, 3)
        _assert_same(run(x.detach()), m(x))
    with pytest.raises(TraceGuardError) as e:
        run(sm.randn(2, 3))
    msg = str(e.value)
    assert f"{HERE}:{_line('LINE_BRANCH')}" in msg and "x.shape[0] > 2" in msg
    assert isinstance(e.value, RuntimeError)


def test_branch_traced_false_guards_the_negation() -> None:
    tr, caught = _trace_warned(Branch(), sm.randn(1, 3))
    assert "x.shape[0] <= 2" in str(caught[0].message)
    x = sm.randn(2, 3)
    _assert_same(tr(x), Branch()(x))
    with pytest.raises(TraceGuardError, match=r"x.shape\[0\] <= 2"):
        tr(sm.randn(4, 3))


def test_guard_survives_save_and_load(tmp_path: Any) -> None:
    tr, _ = _trace_warned(Branch(), sm.randn(8, 3))
    path = str(tmp_path / "b.smod")
    tr.save(path)
    again = jit.load(path)
    assert "sm::guard" in str(again.graph)
    x = sm.randn(4, 3)
    _assert_same(again(x), Branch()(x))
    with pytest.raises(TraceGuardError, match="traced with"):
        again(sm.randn(2, 3))


def test_guard_does_not_block_fusion() -> None:
    tr, _ = _trace_warned(Branch(), sm.randn(8, 3))
    plain = jit.trace(lambda x: (x * 2).relu() + 1, sm.randn(8, 3))
    x = sm.randn(5, 3)
    assert len(jit.kernels_for(tr, x)) == len(jit.kernels_for(plain, x)) == 1
    spec = next(iter(tr.executor("forward").specs.values())) if hasattr(tr, "executor") else None
    if spec is not None:                       # the guard folded away for a known shape
        assert "sm::guard" not in str(spec.graph)


class Comparisons(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        n = x.size(0)
        out = x
        if n == 8:
            out = out + 1
        if n != 3 and n >= 4 and n < 100 and n <= 8 and 2 < n:
            out = out * 2
        if bool(n % 2 == 0) and n:
            out = out - 1
        return out


def test_every_comparison_is_guarded() -> None:
    tr, caught = _trace_warned(Comparisons(), sm.randn(8, 3))
    assert len(caught) >= 7
    g = str(tr.graph)
    for op in ("int_eq", "int_ne", "int_ge", "int_lt", "int_le", "int_gt"):
        assert f"sm::{op}" in g
    x = sm.randn(8, 3)
    _assert_same(tr(x), Comparisons()(x))
    for b in (6, 3, 200):
        with pytest.raises(TraceGuardError):
            tr(sm.randn(b, 3))


class Loop(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        acc = x[0]
        for i in range(1, x.size(0)):             # LINE_RANGE
            acc = acc + x[i]
        return acc


@pytest.mark.parametrize("model, marker, what", [
    (Loop(), "LINE_RANGE", "range()"),
    (Fn(lambda m, x: x.reshape(int(x.shape[0]), 3)), None, "a Python int"),   # int(n)
    (Fn(lambda m, x: x * float(x.shape[0])), None, "a Python float"),
    (Fn(lambda m, x: x * math.sqrt(x.shape[0])), None, "a Python float"),
    (Fn(lambda m, x: x / (x.shape[0] / 2)), None, "a Python float"),
    (Fn(lambda m, x: x * len(x)), None, "len()"),
    (Fn(lambda m, x: sum(r for r in x)), None, "iteration"),
])
def test_baked_sizes_are_guarded_to_their_traced_value(model: nn.Module, marker: Any, what: str) -> None:
    tr, caught = _trace_warned(model, sm.randn(8, 3))
    assert caught and what in str(caught[0].message)
    assert os.path.basename(caught[0].filename) == HERE
    if marker:
        assert caught[0].lineno == _line(marker)
    x = sm.randn(8, 3)
    _assert_same(tr(x), model(x))
    with pytest.raises(TraceGuardError, match=r"x.shape\[0\] == 8"):
        tr(sm.randn(5, 3))


def test_range_stays_a_type_while_tracing() -> None:
    seen = []
    jit.trace(Fn(lambda m, x: seen.append(isinstance(range(3), range)) or x + 1), sm.randn(2, 3))
    import builtins
    assert seen and all(seen)
    assert builtins.range is type(range(0))          # restored after the trace


def test_symbolic_ops_do_not_warn_and_checks_inside_layers_add_no_guards() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    tr, caught = _trace_warned(model, sm.randn(8, 3))
    assert caught == []
    assert "sm::guard" not in str(tr.inlined_graph)


def test_split_into_another_number_of_pieces_raises() -> None:
    _, tr = _traced("chunk")
    with pytest.raises(TraceGuardError, match="ceil"):
        tr(sm.randn(1, 3))                      # chunk(2) of 1 row gives 1 piece, traced 2
    _, tr = _traced("split")
    with pytest.raises(TraceGuardError):
        tr(sm.randn(1, 3))
