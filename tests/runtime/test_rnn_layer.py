"""The ``rnn_layer`` op (one recurrent layer and direction, its time loop inside one kernel)
and its backward ``rnn_layer_backward``: against torch's single-layer RNN/LSTM/GRU (outputs,
final states, every gradient; reverse direction as torch's on the flipped sequence; LSTM
projections), gradcheck and double backward, a trace that runs at other sequence lengths
and batch sizes with eager's numbers and gradients, and the clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.autograd.derivative_table import _op
from scriptmod.autograd.gradcheck import gradcheck
from scriptmod.ir.errors import ShapeError

MODES = [("LSTM", 0), ("LSTM", 2), ("GRU", 0), ("RNN_TANH", 0), ("RNN_RELU", 0)]
T, N, I, H = 7, 3, 5, 6


def _torch_layer(torch, mode: str, proj: int, i: int = I, h: int = H):
    torch.manual_seed(0)
    if mode == "LSTM":
        return torch.nn.LSTM(i, h, proj_size=proj)
    if mode == "GRU":
        return torch.nn.GRU(i, h)
    return torch.nn.RNN(i, h, nonlinearity=mode[4:].lower())


def _layer(x, hx, cx, weights, mode, reverse):
    w_ih, w_hh, b_ih, b_hh, *rest = weights
    return _op("rnn_layer", x, hx, cx, w_ih, w_hh, b_ih, b_hh, rest[0] if rest else None,
               mode=mode, reverse=reverse)


@pytest.mark.parametrize("native", [True, False], ids=["native", "array-ops"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("mode,proj", MODES, ids=lambda v: str(v))
def test_matches_torch_with_every_gradient(mode: str, proj: int, reverse: bool, native: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Both step implementations: the native gate kernel, and the array operations CuPy
    and other dtypes run."""
    torch = pytest.importorskip("torch")
    if not native:
        from scriptmod.runtime import rnn
        monkeypatch.setattr(rnn, "_NATIVE", {})
    m = _torch_layer(torch, mode, proj)
    p = proj or H
    rng = np.random.default_rng(1)
    x, h0, c0 = (rng.standard_normal(s, dtype=np.float32) for s in ((T, N, I), (N, p), (N, H)))
    tx, th, tc = (torch.from_numpy(a).requires_grad_() for a in (x, h0, c0))
    seq = tx.flip(0) if reverse else tx
    if mode == "LSTM":
        ty, (thn, tcn) = m(seq, (th[None], tc[None]))
    else:
        (ty, thn), tcn = m(seq, th[None]), None
    ty = ty.flip(0) if reverse else ty
    gy, ghn = rng.standard_normal(tuple(ty.shape), dtype=np.float32), \
        rng.standard_normal((N, p), dtype=np.float32)
    loss = (ty * torch.from_numpy(gy)).sum() + (thn[0] * torch.from_numpy(ghn)).sum()
    if tcn is not None:
        loss = loss + tcn.sum()
    loss.backward()
    sx, sh, sc = (sm.from_numpy(a).requires_grad_() for a in (x, h0, c0))
    weights = [sm.from_numpy(w.detach().numpy().copy()).requires_grad_() for w in m.parameters()]
    out, hn, cn, _ = _layer(sx, sh, sc if mode == "LSTM" else None, weights, mode, reverse)
    sloss = (out * sm.from_numpy(gy)).sum() + (hn * sm.from_numpy(ghn)).sum()
    if mode == "LSTM":
        sloss = sloss + cn.sum()
    sloss.backward()
    np.testing.assert_allclose(out.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hn.detach().numpy(), thn[0].detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    pairs = [(sx, tx), (sh, th)] + ([(sc, tc)] if mode == "LSTM" else []) + \
        list(zip(weights, m.parameters()))
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,proj", MODES, ids=lambda v: str(v))
def test_gradcheck_and_double_backward(mode: str, proj: int) -> None:
    """float64 gradcheck of (output, h_n, c_n) in every input; the double backward (op by op
    under create_graph) against torch's."""
    rng = np.random.default_rng(2)
    p = proj or 3
    shapes = [(4, 2, 3), (2, p), (2, 3), ({"LSTM": 4, "GRU": 3}.get(mode, 1) * 3, 3)]
    x, hx, cx, w_ih = (rng.standard_normal(s) * 0.5 for s in shapes)
    w_hh = rng.standard_normal((w_ih.shape[0], p)) * 0.5
    b_ih, b_hh = rng.standard_normal(w_ih.shape[0]), rng.standard_normal(w_ih.shape[0])
    w_hr = rng.standard_normal((p, 3)) * 0.5 if proj else None
    lstm = mode == "LSTM"
    arrays = [x, hx, cx if lstm else None, w_ih, w_hh, b_ih, b_hh, w_hr]
    positions = [k for k, a in enumerate(arrays) if a is not None]

    def fn(*ts):
        args = list(arrays)
        for k, t in zip(positions, ts):
            args[k] = t
        outs = _op("rnn_layer", *args, mode=mode, reverse=True)
        return outs[:3] if lstm else outs[:2]
    tensors = tuple(sm.tensor(arrays[k], dtype=sm.float64, requires_grad=True)
                    for k in positions)
    assert gradcheck(fn, tensors, atol=1e-5, rtol=1e-4)
    torch = pytest.importorskip("torch")
    sx = tensors[0]
    g, = sm.autograd.grad(fn(*tensors)[0].pow(2).sum(), sx, create_graph=True)
    gg, = sm.autograd.grad((g * g).sum(), sx)
    tm = _torch_layer(torch, mode, proj, 3, 3).double()
    with torch.no_grad():
        for tp, a in zip(tm.parameters(), [w_ih, w_hh, b_ih, b_hh] + ([w_hr] if proj else [])):
            tp.copy_(torch.from_numpy(a))
    tx = torch.from_numpy(x).requires_grad_()
    state = (torch.from_numpy(hx)[None], torch.from_numpy(cx)[None]) if lstm else \
        torch.from_numpy(hx)[None]
    ty = tm(tx.flip(0), state)[0].flip(0)
    tg, = torch.autograd.grad(ty.pow(2).sum(), tx, create_graph=True)
    tgg, = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode,proj", MODES, ids=lambda v: str(v))
def test_one_sequence_leaves_its_inputs_alone(mode: str, proj: int) -> None:
    """A batch of one (an unbatched layer's call): the state's transpose is a view of the
    input there, and the loop must still write only its own buffers."""
    torch = pytest.importorskip("torch")
    m = _torch_layer(torch, mode, proj)
    p = proj or H
    rng = np.random.default_rng(4)
    x, h0, c0 = (rng.standard_normal(s, dtype=np.float32) for s in ((T, 1, I), (1, p), (1, H)))
    before = (h0.copy(), c0.copy())
    weights = [sm.from_numpy(w.detach().numpy().copy()) for w in m.parameters()]
    lstm = mode == "LSTM"
    sh, sc = sm.from_numpy(h0), sm.from_numpy(c0)
    out, _, _, _ = _layer(sm.from_numpy(x), sh, sc if lstm else None, weights, mode, False)
    np.testing.assert_array_equal(h0, before[0])
    np.testing.assert_array_equal(c0, before[1])
    state = (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None]) if lstm else \
        torch.from_numpy(h0)[None]
    with torch.no_grad():
        ty = m(torch.from_numpy(x), state)[0]
    np.testing.assert_allclose(out.numpy(), ty.numpy(), rtol=1e-5, atol=1e-6)


class _Seq(sm.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        g = {"LSTM": 4, "GRU": 3}.get(mode, 1) * H
        self.mode = mode
        self.w_ih = sm.nn.Parameter(sm.randn(g, I) * 0.3)
        self.w_hh = sm.nn.Parameter(sm.randn(g, H) * 0.3)
        self.b = sm.nn.Parameter(sm.randn(g) * 0.1)

    def forward(self, x: sm.Tensor, h: sm.Tensor) -> sm.Tensor:
        c = h if self.mode == "LSTM" else None
        out, hn, _, _ = _op("rnn_layer", x, h, c, self.w_ih, self.w_hh, self.b, self.b, None,
                            mode=self.mode)
        return out.mean(0) + hn


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_a_trace_runs_at_other_lengths_and_batches(mode: str) -> None:
    """One op in the graph, not an unrolled loop: the trace at T=7 gives eager's output and
    gradients at T = 2, 7, 19 and another batch size."""
    m = _Seq(mode)
    traced = sm.jit.trace(m, (sm.randn(T, N, I), sm.randn(N, H)))
    assert [n.op_name for n in traced.graph.nodes if n.is_op].count("rnn_layer") == 1
    for t, n in ((2, N), (7, N), (19, N), (5, 8)):
        x, h = sm.randn(t, n, I, requires_grad=True), sm.randn(n, H)
        traced(x, h).sum().backward()
        got, gw = x.grad.numpy().copy(), m.w_hh.grad.numpy().copy()
        x.grad = m.w_hh.grad = None
        with sm.no_grad():
            np.testing.assert_allclose(traced(x, h).numpy(), m(x, h).numpy(), rtol=1e-5,
                                       atol=1e-6)
        m(x, h).sum().backward()
        np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gw, m.w_hh.grad.numpy(), rtol=1e-5, atol=1e-6)
        m.w_hh.grad = None


def test_bad_shapes_name_the_argument() -> None:
    x, h = sm.randn(4, 2, 3), sm.randn(2, 5)
    w_ih, w_hh = sm.randn(20, 3), sm.randn(20, 5)
    with pytest.raises(ShapeError, match=r"expected cx \(2, 5\), got None"):
        _op("rnn_layer", x, h, None, w_ih, w_hh, None, None, None, mode="LSTM")
    with pytest.raises(ShapeError, match=r"expected input 3, got 4"):
        _op("rnn_layer", sm.randn(4, 2, 4), h, h, w_ih, w_hh, None, None, None, mode="LSTM")
    with pytest.raises(ShapeError, match=r"expected hx \(2, 5\), got \(3, 5\)"):
        _op("rnn_layer", x, sm.randn(3, 5), h, w_ih, w_hh, None, None, None, mode="LSTM")
    with pytest.raises(ShapeError, match=r"expected b_ih \(20,\)"):
        _op("rnn_layer", x, h, h, w_ih, w_hh, sm.randn(21), None, None, mode="LSTM")
    with pytest.raises(ShapeError, match="GRU expects w_ih and w_hh of 3 x hidden rows"):
        _op("rnn_layer", x, h, None, w_ih, w_hh, None, None, None, mode="GRU")
    with pytest.raises(ShapeError, match="mode must be one of"):
        _op("rnn_layer", x, h, None, w_ih, w_hh, None, None, None, mode="LSTMX")
    with pytest.raises(ShapeError, match="sequence length larger than 0"):
        _op("rnn_layer", sm.randn(0, 2, 3), h, h, w_ih, w_hh, None, None, None, mode="LSTM")
    out = _op("rnn_layer", sm.randn(4, 0, 3), sm.randn(0, 5), sm.randn(0, 5), w_ih, w_hh,
              None, None, None, mode="LSTM")                  # an empty batch: empty results
    assert [tuple(o.shape) for o in out[:3]] == [(4, 0, 5), (0, 5), (0, 5)]
    with pytest.raises(ShapeError, match=r"\(T, N, input\)"):
        _op("rnn_layer", sm.randn(4, 3), h, h, w_ih, w_hh, None, None, None, mode="LSTM")


@pytest.mark.parametrize("mode,proj", MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("n,hidden", [(3, 37), (20, 64), (16, 8)], ids=str)
def test_native_time_loop_gives_the_step_loops_bits(mode: str, proj: int, n: int, hidden: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``rnn_drive`` (every step of the forward and the backward in native code, each stage
    split into chunks the pool's threads claim) computes what the step-by-step loop
    computes, to the bit: on one thread, on two, and with several chunks but one thread
    entering (a pool worker that never started)."""
    from scriptmod.runtime import rnn, threads
    rng = np.random.default_rng(3)
    g = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden
    p = proj or hidden
    t_len = 9
    x = rng.standard_normal((t_len, n, 5), dtype=np.float32)
    h0, c0 = rng.standard_normal((n, p), dtype=np.float32), \
        rng.standard_normal((n, hidden), dtype=np.float32)
    w_ih, w_hh = rng.standard_normal((g, 5), dtype=np.float32), \
        rng.standard_normal((g, p), dtype=np.float32) * 0.3
    b_ih, b_hh = (rng.standard_normal(g, dtype=np.float32) for _ in range(2))
    w_hr = rng.standard_normal((p, hidden), dtype=np.float32) * 0.3 if proj else None
    g_out, g_hn, g_cn = rng.standard_normal((t_len, n, p), dtype=np.float32), \
        rng.standard_normal((n, p), dtype=np.float32), \
        rng.standard_normal((n, hidden), dtype=np.float32)

    def run(reverse: bool) -> list:
        out, hn, cn, reserve = rnn.forward(np, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, mode,
                                           reverse)
        grads = rnn.backward(np, g_out, g_hn, g_cn if mode == "LSTM" else None, x, h0, c0,
                             w_ih, w_hh, w_hr, out, reserve, mode, reverse)
        return [a.copy() for a in (out, hn, cn, reserve, *grads)]
    used = []
    drive = rnn.rnn_drive.run
    monkeypatch.setattr(rnn.rnn_drive, "run", lambda *a: used.append(drive(*a)) or used[-1])
    before = threads.get_num_threads()
    try:
        native = {}
        for count in (1, 2):
            threads.set_num_threads(count)
            native[count] = [run(False), run(True)]
        monkeypatch.setattr(threads, "parallel_for", lambda fn, n, min_split=0: fn(0, n))
        alone = [run(False), run(True)]
    finally:
        threads.set_num_threads(before)
    assert used == [True] * 12         # the native loop ran every time
    monkeypatch.setattr(rnn.rnn_drive, "run", lambda *a: False)
    loop = [run(False), run(True)]
    for got in (native[1], native[2], alone):
        for ours, theirs in zip(got, loop):
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(a, b)
