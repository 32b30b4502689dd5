"""Every traced model of the jit tests saves, loads and runs: ``save -> load -> call`` gives
eager's outputs at the traced inputs and at another batch size.

``jit.load`` types each method from its declared inputs and refuses an archive whose
declared types disagree with what its ops give (``_archive_checks.check_types``), so this
also checks that a trace's types are its ops' types: a symbolic batch dim (``B``) named only
where it stays symbolic, and a dim that a guard pins concrete everywhere it flows
(``jit._batch_dims``). The corpus reuses the models of the other jit tests (the archive
fuzz models, the golden model, the layer table, the workloads, the container-argument
models) and adds the shapes that broke it: an LSTM over the time axis whose ``range(x.size(0))``
pins dim 0, sizes baked into a view, a branch on a size, submodule calls whose argument has
the batch's size by coincidence, a submodule called at the batch and at a fixed size."""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.ir.graph import Prim
from scriptmod.ir.types import TensorType, TupleType
from scriptmod.jit._specialize import submodule_of, typed_inlined
from tests.fuzz import archive_models as AM
from tests.scriptmod.jit import golden_model
from tests.scriptmod.jit.test_container_args_grad import MODELS as CONTAINER_MODELS
from tests.scriptmod.jit.test_trace_models import LAYERS

Case = tuple[nn.Module, tuple, list[tuple]]      # model, traced inputs, other inputs


class TinyLSTM(nn.Module):
    """Embedding -> hand-written LSTM over T (dim 0) -> Dropout -> Linear (issue 35)."""

    def __init__(self, ntoken: int = 50, H: int = 32, batch_first: bool = False) -> None:
        super().__init__()
        self.enc = nn.Embedding(ntoken, H)
        self.drop = nn.Dropout(0.2)
        self.w_ih = nn.Parameter(sm.randn(4 * H, H) * 0.1)
        self.w_hh = nn.Parameter(sm.randn(4 * H, H) * 0.1)
        self.dec = nn.Linear(H, ntoken)
        self.ntoken, self.batch_first = ntoken, batch_first

    def forward(self, tokens: Any, hidden: Any) -> Any:
        h, c = hidden
        x = self.drop(self.enc(tokens))
        if self.batch_first:
            x = x.transpose(0, 1)
        xw = sm.matmul(x, self.w_ih.t())
        outs = []
        for t in range(x.size(0)):
            i, f, g, o = (xw[t] + sm.matmul(h, self.w_hh.t())).chunk(4, 1)
            c = sm.sigmoid(f) * c + sm.sigmoid(i) * sm.tanh(g)
            h = sm.sigmoid(o) * sm.tanh(c)
            outs.append(h)
        y = self.drop(sm.stack(outs, 0))
        return self.dec(y).view(-1, self.ntoken), (h, c)


class BakedView(nn.Module):
    """``int(x.size(0))`` becomes a constant of the view: the guard pins the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: Any) -> Any:
        n = int(x.size(0))
        return self.fc(x).view(n, 2, 3).sum(1)


class SizeBranch(nn.Module):
    """A Python branch on the batch size: the trace took one side, guarded."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        if x.size(0) > 1:
            return self.fc(x).relu()
        return self.fc(x)


class Coincident(nn.Module):
    """A parameter whose dim 0 equals the example batch, passed through a submodule: its
    size is not the batch, whatever the callee's graph sees."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(sm.randn(3, 5))
        self.fc = nn.Linear(5, 5)
        self.act = nn.Tanh()

    def forward(self, x: Any) -> Any:
        return self.act(self.fc(x)) + self.act(self.fc(self.table)).sum(0)


class CatThenLinear(nn.Module):
    """A submodule called on ``cat`` of batch-sized tensors (its dim 0 is 2*B)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, a: Any, b: Any) -> Any:
        y = self.fc(sm.cat([a, b], 0))
        return y[: a.size(0)] * y[a.size(0):]


class SharedCallee(nn.Module):
    """One submodule called on the batch and on a fixed-size tensor of the same shape."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("probe", sm.randn(2, 4))

    def forward(self, x: Any) -> Any:
        return self.fc(x) + self.fc(self.probe).mean(0)


class _Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        y = self.fc(x)
        if float(y.sum()) > 0:
            y = y.relu()
        else:
            y = y - 1.0
        return y


class WithScripted(nn.Module):
    """A scripted submodule (its own graphs, control flow kept) inside a traced model,
    called on the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.gate = jit.script(_Gate())
        self.out = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.out(self.gate(self.inp(x)))


def _tiny_lstm(batch_first: bool) -> Callable[[], Case]:
    def build() -> Case:
        m = TinyLSTM(batch_first=batch_first)
        tok = (lambda t, b: sm.randint(0, 50, (b, t) if batch_first else (t, b)))
        hc = (lambda b: (sm.randn(b, 32), sm.randn(b, 32)))
        return m, (tok(10, 4), hc(4)), [(tok(10, 3), hc(3)), (tok(10, 6), hc(6))]
    return build


def _plain(model: Callable[[], nn.Module], *shapes: tuple[int, ...]) -> Callable[[], Case]:
    """A one-argument model traced at ``shapes[0]``, called at the others as well."""
    def build() -> Case:
        return model(), (sm.randn(*shapes[0]),), [(sm.randn(*s),) for s in shapes[1:]]
    return build


def _two(model: Callable[[], nn.Module], shape: tuple[int, ...],
         other: tuple[int, ...]) -> Callable[[], Case]:
    def build() -> Case:
        return model(), (sm.randn(*shape), sm.randn(*shape)), [(sm.randn(*other),
                                                                sm.randn(*other))]
    return build


def _workload(wid: str) -> Callable[[], Case]:
    def build() -> Case:
        w = WORKLOADS[wid]
        model, x = w.build(quick=True)
        shape = list(x.shape)
        shape[w.batch_dim] = max(1, shape[w.batch_dim] - 1)
        return model, (x,), [(sm.randn(*shape),)]
    return build


def _layer(make: Callable[[], nn.Module], shape: tuple[int, ...]) -> Callable[[], Case]:
    def build() -> Case:
        layer = make()
        if isinstance(layer, nn.MultiheadAttention):
            layer = _SelfAttention(layer)
        other = (shape[0] + 1,) + tuple(shape[1:])
        if isinstance(layer, (nn.BatchNorm1d, nn.BatchNorm2d)):
            layer.train()
            layer(sm.randn(*shape) * 2 + 1)          # running stats that matter
        return layer, (sm.randn(*shape),), [(sm.randn(*other),)]
    return build


class _SelfAttention(nn.Module):
    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, q: Any) -> Any:
        return self.attn(q, q, q)[0]


def _container(name: str) -> Callable[[], Case]:
    def build() -> Case:
        model, make = CONTAINER_MODELS[name]()
        return model, make(), []
    return build


def _warm_buffers() -> Case:
    return AM._warm(AM.WithBuffers()), (sm.randn(2, 6),), [(sm.randn(4, 6),)]


CORPUS: dict[str, Callable[[], Case]] = {
    "tiny_lstm": _tiny_lstm(batch_first=False),
    "tiny_lstm_batch_first": _tiny_lstm(batch_first=True),
    "baked_view": _plain(BakedView, (4, 6), (4, 6)),
    "size_branch": _plain(SizeBranch, (3, 4), (5, 4)),
    "coincident": _plain(Coincident, (3, 5), (4, 5), (2, 5)),
    "cat_then_linear": _two(CatThenLinear, (2, 3), (5, 3)),
    "shared_callee": _plain(SharedCallee, (2, 4), (3, 4)),
    "with_scripted": _plain(WithScripted, (2, 3), (5, 3)),
    "archive_mlp": _plain(AM.MLP, (2, 8), (3, 8)),
    "archive_convnet": _plain(AM.ConvNet, (2, 3, 8, 8), (3, 3, 8, 8)),
    "archive_buffers": _warm_buffers,
    "golden_small": _plain(golden_model.Small, (2, 4), (5, 4)),
    **{f"workload_{w}": _workload(w) for w in sorted(WORKLOADS) if not WORKLOADS[w].script},
    **{f"layer_{i}_{type(make()).__name__}": _layer(make, shape)
       for i, (make, shape) in enumerate(LAYERS)},
    **{f"container_{name}": _container(name) for name in CONTAINER_MODELS},
}


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, sm.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _leaves(v)]
    return []


def _assert_same(got: Any, want: Any, what: str) -> None:
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w), what
    for k, (a, b) in enumerate(zip(g, w)):
        np.testing.assert_allclose(a.numpy(force=True), b.numpy(force=True), rtol=1e-4,
                                   atol=1e-5, err_msg=f"{what}: output {k}")


def _roundtrip(traced: Any) -> Any:
    buf = io.BytesIO()
    traced.save(buf)
    buf.seek(0)
    return jit.load(buf)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_save_load_call_equals_eager(name: str) -> None:
    sm.manual_seed(0)
    model, args, others = CORPUS[name]()
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(model, args, strict=False)
    loaded = _roundtrip(traced)
    again = _roundtrip(loaded)                      # what load gives saves and loads too
    with sm.no_grad():
        for i, call in enumerate([args] + others):
            want = model(*call)
            _assert_same(traced(*call), want, f"{name}: traced, inputs {i}")
            _assert_same(loaded(*call), want, f"{name}: loaded, inputs {i}")
            _assert_same(again(*call), want, f"{name}: loaded twice, inputs {i}")


def _dims(t: Any) -> list[Any]:
    if isinstance(t, TensorType):
        return list(t.shape or ())
    if isinstance(t, TupleType):
        return [d for e in t.elements for d in _dims(e)]
    return []


def _symbols(traced: Any) -> set[str]:
    """The symbolic dims named anywhere in the graphs of the module tree."""
    out: set[str] = set()
    for mod in traced.modules():
        for g in getattr(mod, "_methods", {}).values():
            values = list(g.inputs) + [o for n in g.walk() for o in n.outputs]
            out.update(d for v in values for d in _dims(v.type) if isinstance(d, str))
    return out


def test_a_guard_pinned_dim_is_concrete_everywhere() -> None:
    """TinyLSTM's dim 0 is its time axis, which ``range(x.size(0))`` pins: no graph of the
    tree names it, and a call at another T names the argument and the traced size."""
    sm.manual_seed(0)
    model, args, _ = _tiny_lstm(batch_first=False)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(model.eval(), args)
    assert _symbols(traced) == set()
    assert "Long(10, 4)" in str(traced.graph) and "Float(40, 50)" in str(traced.graph)
    tok = sm.randint(0, 50, (7, 4))
    with sm.no_grad(), pytest.raises(jit.TraceGuardError,
                                     match=r"argument 'tokens' has size 7 at dim 0, but the "
                                           r"trace fixed it at 10"):
        traced(tok, (sm.zeros(4, 32), sm.zeros(4, 32)))


def test_a_size_check_that_holds_at_other_sizes_keeps_the_batch_symbolic() -> None:
    """``if x.size(0) > 1`` holds at other batches: ``B`` stays, and batch 1 fails the guard
    with the argument named; ``int(x.size(0))`` baked into a view pins the batch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        branch = jit.trace(SizeBranch().eval(), sm.randn(3, 4))
    assert "%x : Float(B, 4)" in str(branch.graph)
    with sm.no_grad():
        branch(sm.randn(6, 4))
        with pytest.raises(jit.TraceGuardError, match=r"argument 'x' has size 1 at dim 0, for "
                                                      r"which a size check the trace recorded"):
            branch(sm.randn(1, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        baked = jit.trace(BakedView().eval(), sm.randn(4, 6))
    assert _symbols(baked) == set()
    with sm.no_grad(), pytest.raises(jit.TraceGuardError,
                                     match="argument 'x' has size 5 at dim 0, but the trace "
                                           "fixed it at 4"):
        baked(sm.randn(5, 6))


def test_an_unpinned_batch_stays_symbolic_through_calls() -> None:
    """Batch-first, the guard pins dim 1 (T) and dim 0 stays ``B`` in the caller and in the
    callees that take it; a callee called on a fixed-size tensor keeps its sizes."""
    sm.manual_seed(0)
    model, args, _ = _tiny_lstm(batch_first=True)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(model.eval(), args)
    assert "%tokens : Long(B, 10)" in str(traced.graph)
    assert "Float(B, 10, 32) = prim::CallMethod" in str(traced.graph)
    shared = jit.trace(SharedCallee().eval(), sm.randn(2, 4))
    assert str(shared.fc.graph).startswith("graph(%self : __module__.nn.Linear, %input : "
                                           "Float(2, 4)"), str(shared.fc.graph)
    assert "Float(B, 4) = prim::CallMethod" in str(shared.graph)


def _typed_from_declared(mod: Any, method: str) -> Any:
    """``mod.method`` inlined and typed from its declared inputs, as ``jit.load`` types it
    (a scripted submodule's library calls expanded at their types)."""
    return typed_inlined(mod, method)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_graph_declares_its_ops_types(name: str) -> None:
    """Exactly, for every method of every module of the tree: its outputs as its ops give
    them from its declared inputs (``jit.load`` lets a symbolic size stand for a concrete
    one at a tensor output; this does not), and each submodule call's results as the
    callee's body gives them at the call's argument types."""
    sm.manual_seed(0)
    model, args, _ = CORPUS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(model.eval(), args, strict=False)
    for mod in traced.modules():
        for method, g in getattr(mod, "_methods", {}).items():
            typed = _typed_from_declared(mod, method)
            assert [v.type for v in typed.outputs] == [v.type for v in g.outputs], \
                f"{name}: {type(mod).__name__}.{method}\n{g}"
            for call in (n for n in g.walk() if n.kind == Prim.CALL_METHOD):
                callee = typed_inlined(submodule_of(mod, call), call.attrs["name"],
                                       [v.type for v in call.inputs])
                assert [v.type for v in callee.outputs] == [v.type for v in call.outputs], \
                    f"{name}: {type(mod).__name__}.{method}: {call}"
