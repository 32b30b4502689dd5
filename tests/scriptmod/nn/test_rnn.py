"""nn.RNN / LSTM / GRU and the cells against torch: a torch state dict loads strictly and the
outputs, final states and gradients (input, h0/c0 and every parameter) agree at every
configuration (batch_first, bidirectional, 1 or 2 layers, no bias, proj_size, unbatched input,
h0 given or not), float64 and float32; reprs, parameter names, init, dropout between layers,
error messages and jit.trace."""
from __future__ import annotations

import io

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

torch = pytest.importorskip("torch")

LAYERS = {"RNN": {}, "RNN_relu": {"nonlinearity": "relu"}, "LSTM": {}, "GRU": {}}
CONFIGS = [{}, {"batch_first": True}, {"bidirectional": True}, {"num_layers": 2},
           {"num_layers": 2, "bidirectional": True, "batch_first": True}, {"bias": False}]
LSTM_CONFIGS = [{"proj_size": 2}, {"proj_size": 2, "num_layers": 2, "bidirectional": True}]
T, B, I, H = 4, 3, 5, 4


def to_sm(t: torch.Tensor, requires_grad: bool = False) -> sm.Tensor:
    return sm.tensor(t.detach().numpy().copy(), requires_grad=requires_grad)


def assert_close(ours: sm.Tensor, theirs: torch.Tensor, tol: float) -> None:
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol,
                               atol=tol)


def make_pair(cls: str, kwargs: dict, dtype: torch.dtype = torch.float64, size: int = I,
              hidden: int = H) -> tuple[nn.Module, torch.nn.Module]:
    """A torch layer and a scriptmod one holding its weights (loaded with strict=True)."""
    torch.manual_seed(0)
    name = cls.split("_")[0]
    theirs = getattr(torch.nn, name)(size, hidden, **kwargs).to(dtype)
    ours = getattr(nn, name)(size, hidden, **kwargs).to(to_sm(torch.zeros((), dtype=dtype)).dtype)
    result = ours.load_state_dict({k: to_sm(v) for k, v in theirs.state_dict().items()},
                                  strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return ours, theirs


def as_tuple(x: object) -> tuple:
    return tuple(x) if isinstance(x, tuple) else (x,)


def backward_both(ours_out: tuple, theirs_out: tuple) -> None:
    """Backward of sum(out * fixed random weights) over every output in both libraries."""
    torch.manual_seed(1)
    weights = [torch.randn(t.shape, dtype=t.dtype) for t in theirs_out]
    sum((t * w).sum() for t, w in zip(theirs_out, weights)).backward()
    sum((o * to_sm(w)).sum() for o, w in zip(ours_out, weights)).backward()


def check_against_torch(ours: nn.Module, theirs: torch.nn.Module, x: torch.Tensor,
                        hx: tuple | None, tol: float) -> None:
    """Forward and backward of both layers from the same input and initial state; compares
    the output, the final state and the gradients of the input, the state and every
    parameter."""
    x = x.clone().requires_grad_()
    hx_t = None if hx is None else tuple(h.clone().requires_grad_() for h in hx)
    xs = to_sm(x, requires_grad=True)
    hx_s = None if hx_t is None else tuple(to_sm(h, requires_grad=True) for h in hx_t)
    lstm = isinstance(theirs, (torch.nn.LSTM, torch.nn.LSTMCell))
    arg = (lambda hs: hs if lstm else hs[0]) if hx is not None else (lambda hs: None)
    out_t, out_s = theirs(x, arg(hx_t)), ours(xs, arg(hx_s))
    flat_t = [out_t] if isinstance(out_t, torch.Tensor) else [out_t[0], *as_tuple(out_t[1])]
    flat_s = [out_s] if isinstance(out_s, sm.Tensor) else [out_s[0], *as_tuple(out_s[1])]
    if isinstance(theirs, torch.nn.LSTMCell):
        flat_t, flat_s = list(out_t), list(out_s)
    for o, t in zip(flat_s, flat_t, strict=True):
        assert_close(o, t, tol)
    backward_both(tuple(flat_s), tuple(flat_t))
    assert_close(xs.grad, x.grad, tol)
    for h_s, h_t in zip(hx_s or (), hx_t or ()):
        assert_close(h_s.grad, h_t.grad, tol)
    grads_t = {k: p.grad for k, p in theirs.named_parameters()}
    grads_s = {k: p.grad for k, p in ours.named_parameters()}
    assert grads_s.keys() == grads_t.keys()
    for k, grad in grads_t.items():
        assert_close(grads_s[k], grad, tol)


def initial_state(theirs: torch.nn.Module, batch: int | None, dtype: torch.dtype) -> tuple:
    layers = theirs.num_layers * (2 if theirs.bidirectional else 1)
    out = theirs.proj_size or theirs.hidden_size
    sizes = [out, theirs.hidden_size] if isinstance(theirs, torch.nn.LSTM) else [out]
    lead = (layers,) if batch is None else (layers, batch)
    return tuple(torch.randn(*lead, n, dtype=dtype) for n in sizes)


LAYER_CASES = [(cls, cfg) for cls in LAYERS for cfg in CONFIGS] + \
              [("LSTM", cfg) for cfg in LSTM_CONFIGS]


@pytest.mark.parametrize("cls,config", LAYER_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("form", ["batched", "batched+h0", "unbatched", "unbatched+h0"])
def test_layer_matches_torch(cls: str, config: dict, form: str) -> None:
    ours, theirs = make_pair(cls, {**LAYERS[cls], **config})
    torch.manual_seed(2)
    batched = form.startswith("batched")
    shape = ((B, T, I) if config.get("batch_first") else (T, B, I)) if batched else (T, I)
    x = torch.randn(*shape, dtype=torch.float64)
    hx = initial_state(theirs, B if batched else None, x.dtype) if "h0" in form else None
    check_against_torch(ours, theirs, x, hx, 1e-10)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("cls", list(LAYERS))
def test_layer_float32_matches_torch(cls: str) -> None:
    config = {"num_layers": 2, "bidirectional": True, "proj_size": 2} if cls == "LSTM" else \
        {"num_layers": 2, "bidirectional": True}
    ours, theirs = make_pair(cls, {**LAYERS[cls], **config}, dtype=torch.float32)
    torch.manual_seed(3)
    x = torch.randn(T, B, I)
    check_against_torch(ours, theirs, x, initial_state(theirs, B, x.dtype), 2e-5)


CELLS = {"RNNCell": {}, "RNNCell_relu": {"nonlinearity": "relu"}, "LSTMCell": {},
         "GRUCell": {}}


@pytest.mark.parametrize("cls", list(CELLS))
@pytest.mark.parametrize("form", ["batched", "batched+hx", "unbatched+hx", "no_bias"])
def test_cell_matches_torch(cls: str, form: str) -> None:
    kwargs = {**CELLS[cls], **({"bias": False} if form == "no_bias" else {})}
    ours, theirs = make_pair(cls, kwargs)
    torch.manual_seed(4)
    batch = () if form.startswith("unbatched") else (B,)
    x = torch.randn(*batch, I, dtype=torch.float64)
    hx = None
    if "hx" in form:
        hx = tuple(torch.randn(*batch, H, dtype=torch.float64)
                   for _ in range(2 if cls == "LSTMCell" else 1))
    check_against_torch(ours, theirs, x, hx, 1e-10)


# ---- the module surface ----------------------------------------------------------------------
REPR_CASES = [("RNN", (3, 4), {}), ("RNN", (3, 4), {"nonlinearity": "relu", "num_layers": 2}),
              ("LSTM", (3, 4), {"proj_size": 2, "bias": False, "batch_first": True,
                                "dropout": 0.5, "num_layers": 3, "bidirectional": True}),
              ("GRU", (3, 4, 2), {"dropout": 0.25}), ("RNNCell", (3, 4), {}),
              ("RNNCell", (3, 4), {"bias": False, "nonlinearity": "relu"}),
              ("LSTMCell", (3, 4), {"bias": False}), ("GRUCell", (3, 4), {})]


@pytest.mark.parametrize("cls,args,kwargs", REPR_CASES, ids=lambda v: str(v))
def test_repr_names_shapes_and_init_as_torch(cls: str, args: tuple, kwargs: dict) -> None:
    sm.manual_seed(0)
    ours, theirs = getattr(nn, cls)(*args, **kwargs), getattr(torch.nn, cls)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(p.shape)) for k, p in ours.named_parameters()] == \
        [(k, tuple(p.shape)) for k, p in theirs.named_parameters()]
    bound = 1 / np.sqrt(args[1])
    values = np.concatenate([p.detach().numpy().ravel() for p in ours.parameters()])
    assert np.all(np.abs(values) <= bound) and values.std() > bound / 3   # U(-k, k): k/sqrt(3)
    if cls in ("RNN", "LSTM", "GRU"):
        assert ours._flat_weights_names == theirs._flat_weights_names
        assert [[tuple(w.shape) for w in ws] for ws in ours.all_weights] == \
            [[tuple(w.shape) for w in ws] for ws in theirs.all_weights]
        assert all(a is b for a, b in zip(ours._flat_weights, ours.parameters()))
        assert ours.flatten_parameters() is None


def test_state_dict_round_trip_scriptmod_to_torch() -> None:
    ours = nn.LSTM(I, H, num_layers=2, bidirectional=True, proj_size=3)
    theirs = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, proj_size=3)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()},
                           strict=True)
    x = torch.randn(T, B, I)
    with sm.no_grad():
        out_s, (h_s, c_s) = ours(to_sm(x))
    out_t, (h_t, c_t) = theirs(x)
    for o, t in ((out_s, out_t), (h_s, h_t), (c_s, c_t)):
        assert_close(o, t, 2e-5)


def test_dropout_between_layers_in_training_only() -> None:
    """A 2-layer relu RNN whose second layer is the identity: its output is layer 1's output
    through dropout, so the zeros are dropped units (about p of them) and the rest are scaled
    by 1/(1-p). Eval mode and p=0 give the undropped output."""
    p, hidden = 0.4, 32
    rnn = nn.RNN(hidden, hidden, num_layers=2, nonlinearity="relu", dropout=p)
    with sm.no_grad():
        rnn.weight_ih_l1.copy_(sm.eye(hidden))
        rnn.weight_hh_l1.zero_()
        rnn.bias_ih_l1.zero_()
        rnn.bias_hh_l1.zero_()
    x = sm.randn(20, 8, hidden)
    with sm.no_grad():
        clean = rnn.eval()(x)[0].numpy()
        dropped = rnn.train()(x)[0].numpy()
        again = rnn(x)[0].numpy()
    alive = clean > 1e-6
    kept = dropped[alive] != 0
    assert abs(1 - kept.mean() - p) < 0.05
    np.testing.assert_allclose(dropped[alive][kept], clean[alive][kept] / (1 - p), rtol=1e-5)
    assert not np.array_equal(dropped, again)
    rnn.dropout = 0.0
    with sm.no_grad():
        np.testing.assert_allclose(rnn(x)[0].numpy(), clean, rtol=1e-6)


def test_dropout_one_matches_torch_in_training() -> None:
    ours, theirs = make_pair("GRU", {"num_layers": 2, "dropout": 1.0})
    torch.manual_seed(5)
    check_against_torch(ours.train(), theirs.train(), torch.randn(T, B, I, dtype=torch.float64),
                        None, 1e-10)


# ---- errors ----------------------------------------------------------------------------------
def _bad_calls(lib: object) -> list:
    lstm, gru = lib.nn.LSTM(I, H, num_layers=2), lib.nn.GRU(I, H)
    rnn = lib.nn.RNN(I, H)
    cell, lcell = lib.nn.GRUCell(I, H), lib.nn.LSTMCell(I, H)
    r = lib.randn
    return [lambda: lstm(r(T, B, I + 1)), lambda: lstm(r(T, B, I, 2)),
            lambda: lstm(r(T, B, I), (r(2, B, H), r(2, B + 1, H))),
            lambda: lstm(r(T, B, I), (r(1, B, H), r(2, B, H))),
            lambda: lstm(r(T, B, I), (r(B, H), r(B, H))),
            lambda: gru(r(T, B, I), r(1, B, H + 1)), lambda: gru(r(T, I), r(1, 1, H)),
            lambda: rnn(r(I)), lambda: gru(r(T, B, I), r(B, H)),
            lambda: cell(r(B, I + 1)), lambda: cell(r(B, I), r(B + 1, H)),
            lambda: cell(r(B, I, 1)), lambda: lcell(r(B, I), (r(B, H), r(B, H + 2))),
            lambda: lcell(r(B, I), (r(B, H), r(B, H, 1))),
            lambda: lib.nn.GRU(I, H, proj_size=2), lambda: lib.nn.LSTM(I, H, proj_size=H),
            lambda: lib.nn.RNN(I, H, nonlinearity="gelu"), lambda: lib.nn.LSTM(I, 0),
            lambda: lstm(r(0, B, I)),
            lambda: lib.nn.LSTM(I, H, dropout=1.5)]


def test_errors_as_torch() -> None:
    for ours, theirs in zip(_bad_calls(sm), _bad_calls(torch), strict=True):
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(type(expected.value), match=None) as got:
            ours()
        assert str(got.value) == str(expected.value)


def test_dtype_mismatch_names_both_dtypes() -> None:
    with pytest.raises(ValueError, match=r"RNN input dtype \(scriptmod.float64\) does not "
                                         r"match weight dtype \(scriptmod.float32\)"):
        nn.GRU(I, H)(sm.randn(T, B, I, dtype=sm.float64))


# ---- jit.trace ---------------------------------------------------------------------------------
class _Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(I, H, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * H, 3)

    def forward(self, x: sm.Tensor) -> tuple:
        out, (h, c) = self.lstm(x)
        return self.head(out), h, c


def test_traced_lstm_runs_at_every_length_and_batch() -> None:
    """The time loop is one rnn_layer op per layer and direction, not unrolled: the trace at
    T=5 gives eager's numbers at T = 5, 7, 1 and 40 and at another batch size, with no new
    trace (one rnn_layer node per layer and direction)."""
    model = _Tagger().eval()
    with sm.no_grad():
        traced = sm.jit.trace(model, (sm.randn(5, 2, I),))
        nodes = [n.op_name for n in traced.inlined_graph.nodes if n.is_op]
        assert nodes.count("rnn_layer") == 4
        for shape in ((5, 2, I), (5, 3, I), (7, 2, I), (1, 2, I), (40, 3, I)):
            x = sm.randn(*shape)
            for a, b in zip(model(x), traced(x), strict=True):
                np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)


def test_traced_gru_gives_eager_gradients() -> None:
    sm.manual_seed(0)
    gru = nn.GRU(I, H, num_layers=2, batch_first=True, bidirectional=True)
    x = sm.randn(2, T, I)
    traced = sm.jit.trace(gru, (x,))
    grads = []
    for run in (gru, traced):
        gru.zero_grad()
        out, h = run(x)
        (out.sum() + (h * h).sum()).backward()
        grads.append([p.grad.numpy().copy() for p in gru.parameters()])
    for eager, from_trace in zip(*grads, strict=True):
        np.testing.assert_allclose(from_trace, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_sizes", [None, [3, 2, 2, 1]])
def test_time_steps_gradient_when_some_steps_are_unused(batch_sizes: list | None) -> None:
    """The stacked backward of the per-step slices fills unused steps with zeros, as slicing
    op by op does."""
    from scriptmod.nn._functional_rnn import time_steps
    shape = (4, 3, 5) if batch_sizes is None else (8, 5)
    gx = sm.randn(*shape, requires_grad=True)
    steps = time_steps(gx, batch_sizes)
    (steps[0].sum() + (steps[2] * steps[2]).sum()).backward()
    expected = np.zeros(shape, dtype=np.float32)
    rows = gx.detach().numpy()
    if batch_sizes is None:
        expected[0], expected[2] = 1, 2 * rows[2]
    else:
        expected[0:3], expected[5:7] = 1, 2 * rows[5:7]
    np.testing.assert_allclose(gx.grad.numpy(), expected, rtol=1e-6)


# ---- jit.script --------------------------------------------------------------------------------
class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(I, H, batch_first=True, bidirectional=True, proj_size=2)
        self.gru = nn.GRU(4, H, num_layers=2)

    def forward(self, x: sm.Tensor, h0: sm.Tensor, c0: sm.Tensor,
                g0: sm.Tensor) -> tuple[sm.Tensor, sm.Tensor, sm.Tensor, sm.Tensor]:
        out, (h, c) = self.lstm(x, (h0, c0))
        out2, g = self.gru(out.transpose(0, 1), g0)
        return out2, h, c, g


def test_scripted_model_equals_eager_at_every_length() -> None:
    """A scripted model traces each layer per input signature: eager's numbers and gradients
    at the first length and batch size and at others."""
    sm.manual_seed(0)
    model = _Encoder()
    scripted = sm.jit.script(model)
    for batch, steps in ((2, 5), (3, 7), (2, 2)):
        args = (sm.randn(batch, steps, I), sm.randn(2, batch, 2), sm.randn(2, batch, H),
                sm.randn(2, batch, H))
        grads = []
        for run in (model, scripted):
            model.zero_grad()
            outs = run(*args)
            sum((o * o).sum() for o in outs).backward()
            grads.append([p.grad.numpy().copy() for p in model.parameters()])
            if run is model:
                want = [o.detach().numpy() for o in outs]
        for w, g in zip(want, outs, strict=True):
            np.testing.assert_allclose(g.detach().numpy(), w, rtol=1e-5, atol=1e-6)
        for eager, from_script in zip(*grads, strict=True):
            np.testing.assert_allclose(from_script, eager, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_scripted_layer_as_root(cls: str) -> None:
    layer = getattr(nn, cls)(I, H, num_layers=2)
    scripted = sm.jit.script(layer)
    with sm.no_grad():
        for steps in (4, 6):
            x = sm.randn(steps, B, I)
            want, got = layer(x), scripted(x)
            np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-6)


def test_scripted_lstm_survives_an_archive_round_trip() -> None:
    layer = nn.LSTM(I, H, bidirectional=True)
    buffer = io.BytesIO()
    sm.jit.save(sm.jit.script(layer), buffer)
    buffer.seek(0)
    loaded = sm.jit.load(buffer)
    with sm.no_grad():
        for steps in (3, 6):
            x = sm.randn(steps, B, I)
            for want, got in zip(layer(x), loaded(x), strict=True):
                want, got = as_tuple(want), as_tuple(got)
                for w, g in zip(want, got, strict=True):
                    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
