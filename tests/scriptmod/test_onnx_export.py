"""scriptmod.onnx.export: every model of the test suite runs in onnxruntime and matches our
own output, at the traced batch size and at another one (the batch dim is dynamic)."""
from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import scriptmod as sm  # noqa: E402
import scriptmod.nn.functional as F  # noqa: E402
from scriptmod import jit, nn  # noqa: E402
from scriptmod.bench.workloads import WORKLOADS, GRUCell  # noqa: E402
from tests.scriptmod.jit.golden_model import Small  # noqa: E402


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.AvgPool2d(3, stride=2, padding=1))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 2 * 2, 5), nn.LogSoftmax(-1))

    def forward(self, x):
        return self.head(self.features(x))


class AttentionBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        h = self.norm(x)
        return x + self.attn(h, h, h)[0]


class EmbeddingBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8, padding_idx=0)
        self.fc = nn.Linear(8, 3)

    def forward(self, idx):
        return self.fc(self.emb(idx).mean(dim=1)).softmax(dim=-1)


class Activations(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.SiLU(), nn.ELU(), nn.LeakyReLU(0.2), nn.Softplus(),
                                    nn.Hardtanh(), nn.PReLU(), nn.ReLU6(), nn.Threshold(0.1, 2.0),
                                    nn.Dropout(0.3), nn.Softmax(dim=1))

    def forward(self, x):
        return self.layers(x)


class OpsZoo(nn.Module):
    """Shape ops, reductions, comparisons, casts, where/masked_fill; several outputs."""

    def forward(self, x):
        a = x.permute(0, 2, 1).reshape(x.size(0), -1)
        b = sm.cat([a, a.narrow(1, 0, 8)], dim=1)
        m = x.masked_fill(x > 0.5, 0.0).sum(dim=1) + x.mean(dim=(1, 2), keepdim=True).squeeze(-1)
        c = (x.amax(dim=-1) >= x.amin(dim=-1)).float() + x.var(dim=-1)
        e = x[:, 1:5, ::2].exp().log_softmax(-1)
        i = x.argmax(dim=-1).to(sm.float32) + x.unsqueeze(1).expand(-1, 3, -1, -1).sum(1).mean(-1)
        st = sm.stack([x.sum(-1), x.max(dim=-1)[0]], dim=-1)
        w = sm.where(x < 0, x * 2, x / 3).clamp(-1.0, 1.0).abs().sqrt()
        return b, m, c, e, i, st, w, (x != 0).sum(-1), x.int() // 2, x.int() % 3


class CausalChunks(nn.Module):
    """Causal attention (arange, masks), chunk/split/unbind (run-time size arithmetic)."""

    def forward(self, x):
        q, k = x.chunk(2, dim=-1)
        y = F.scaled_dot_product_attention(q, k, k, is_causal=True)
        first = x.split(3, dim=-1)[1].unbind(1)[0]
        return y @ x.new_ones(y.shape[-1], 2), first ** 2 + 2 ** first


class Gate(nn.Module):
    """Scripted: a branch on the data becomes an ONNX If."""

    def forward(self, x):
        if float(x.sum()) > 0:
            y = x * 2
        else:
            y = x - 1
        return y.relu()


def _workload(wid: str):
    return lambda: WORKLOADS[wid].build(quick=True)


def _with_input(make, *shape, ints: int | None = None):
    def build():
        sm.manual_seed(0)
        x = sm.randint(1, ints, shape) if ints else sm.randn(*shape)
        return make().eval(), x
    return build


# (id, build() -> (model, example), scripted, batch dim or None where it is not dynamic)
MODELS = [
    ("mlp", _with_input(lambda: nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2)), 3, 5),
     False, 0),
    ("golden", _with_input(Small, 3, 4), False, 0),
    ("convnet", _with_input(ConvNet, 2, 3, 16, 16), False, 0),
    ("attention-block", _with_input(AttentionBlock, 2, 5, 16), False, 0),
    ("embedding", _with_input(EmbeddingBag, 4, 7, ints=20), False, 0),
    ("activations", _with_input(Activations, 4, 6), False, 0),
    ("ops-zoo", _with_input(OpsZoo, 3, 6, 8), False, 0),
    ("causal-chunks", _with_input(CausalChunks, 2, 4, 6), False, 0),
    ("scripted-if", _with_input(Gate, 3, 4), True, None),
] + [(wid, _workload(wid), WORKLOADS[wid].script, None if WORKLOADS[wid].script else
      WORKLOADS[wid].batch_dim) for wid in ("W1", "W2", "W3", "W4", "W5", "W6", "A128")]


def _run(proto_bytes: bytes, inputs: dict) -> list:
    sess = ort.InferenceSession(proto_bytes, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def _flat(out) -> list:
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else [out])]


@pytest.mark.parametrize("mid,build,scripted,batch_dim", MODELS, ids=[m[0] for m in MODELS])
def test_model_matches_onnxruntime(mid, build, scripted, batch_dim):
    model, x = build()
    compiled = jit.script(model) if scripted else jit.trace(model, x)
    buf = io.BytesIO()
    axes = {"x": {batch_dim: "b"}} if batch_dim else None     # A128 batches along dim 1
    proto = sm.onnx.export(compiled, buf, (x,), input_names=["x"], dynamic_axes=axes)
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()), full_check=True)
    assert not any(n.op_type.startswith("FusionGroup") for n in proto.graph.node)
    shapes = [list(x.shape)]
    if batch_dim is not None:                                   # the dynamic dim works
        shapes.append(list(x.shape))
        shapes[1][batch_dim] += 2
    for shape in shapes:
        xb = x if list(x.shape) == shape else (
            sm.randint(1, 20, tuple(shape)) if x.dtype == sm.int64 else sm.randn(*shape))
        with sm.no_grad():
            want = _flat(compiled(xb))
        got = _run(buf.getvalue(), {"x": xb.numpy()})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _op_types(proto) -> set[str]:
    out = set()
    for n in proto.graph.node:
        out.add(n.op_type)
        for a in n.attribute:
            if a.g is not None:
                out |= {m.op_type for m in a.g.node}
    return out


def test_gelu_and_layer_norm_recomposed():
    model, x = WORKLOADS["W5"].build(quick=True)                # LayerNorm + GELU (erf)
    traced = jit.trace(model, x)
    ops = _op_types(sm.onnx.export(traced, io.BytesIO(), opset_version=20))
    assert {"Gelu", "LayerNormalization"} <= ops
    assert not ops & {"Erf", "Sqrt", "Reciprocal", "ReduceMean"}
    ops17 = _op_types(sm.onnx.export(traced, io.BytesIO()))      # opset 17: Gelu's formula
    assert "LayerNormalization" in ops17 and "Erf" in ops17 and "Gelu" not in ops17
    mlp, x3 = WORKLOADS["W3"].build(quick=True)                 # GELU (tanh)
    proto = sm.onnx.export(jit.trace(mlp, x3), io.BytesIO(), opset_version=20)
    gelu = [n for n in proto.graph.node if n.op_type == "Gelu"]
    assert len(gelu) == 1 and gelu[0].attribute[0].s == b"tanh"
    assert not _op_types(proto) & {"Sigmoid", "Tanh"}


@pytest.mark.parametrize("layer,op,opset", [
    (nn.SiLU(), "Swish", 24), (nn.ELU(0.7), "Elu", 17), (nn.LeakyReLU(0.2), "LeakyRelu", 17),
    (nn.Hardtanh(-0.5, 2.0), "Clip", 17), (nn.ReLU6(), "Clip", 17), (nn.PReLU(), "PRelu", 17),
], ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else str(v))
def test_activations_recomposed(layer, op, opset):
    x = sm.randn(4, 5) * 4
    traced = jit.trace(layer, x)
    buf = io.BytesIO()
    proto = sm.onnx.export(traced, buf, opset_version=opset)
    assert [n.op_type for n in proto.graph.node if n.op_type not in ("Identity", "Reshape")] \
        == [op]
    np.testing.assert_allclose(_run(buf.getvalue(), {"input": x.numpy()})[0],
                               traced(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_recomposition_keeps_values_read_elsewhere():
    class Leaky(nn.Module):                                      # LN's mean read twice
        def forward(self, x):
            m = x.mean(-1, keepdim=True)
            d = x - m
            return d * (d * d).mean(-1, keepdim=True).add(1e-5).rsqrt() + m
    x = sm.randn(3, 8)
    traced = jit.trace(Leaky(), x)
    buf = io.BytesIO()
    proto = sm.onnx.export(traced, buf)
    assert "LayerNormalization" in _op_types(proto)
    np.testing.assert_allclose(_run(buf.getvalue(), {"x": x.numpy()})[0],
                               traced(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_constant_folding_spares_parameters():
    class Ones(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x) @ x.new_ones(3, 2)                 # Expand of constants only
    x = sm.randn(2, 4)
    traced = jit.trace(Ones(), x)
    for fold in (True, False):
        buf = io.BytesIO()
        proto = sm.onnx.export(traced, buf, do_constant_folding=fold)
        ops = [n.op_type for n in proto.graph.node]
        assert ("Expand" in ops) is not fold and "Transpose" in ops   # fc.weight kept
        assert {"fc.weight", "fc.bias"} <= {i.name for i in proto.graph.initializer}
        np.testing.assert_allclose(_run(buf.getvalue(), {"x": x.numpy()})[0],
                                   traced(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_parameters_are_initializers_named_by_state_dict():
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()
    traced = jit.trace(model, sm.randn(2, 4))
    proto = sm.onnx.export(traced, io.BytesIO())
    names = {i.name for i in proto.graph.initializer}
    assert {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
            "1.running_var"} <= names
    weight = next(i for i in proto.graph.initializer if i.name == "0.weight")
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(weight),
                                  model[0].weight.detach().numpy())


def test_dynamic_batch_dim_and_names(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    traced = jit.trace(model, sm.randn(2, 4))
    path = tmp_path / "model.onnx"
    sm.onnx.export(traced, str(path), input_names=["features"], output_names=["scores"])
    proto = onnx.load(str(path))
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert (inp.name, out.name) == ("features", "scores")
    assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == ["batch", 4]
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", 3]
    x = sm.randn(7, 4)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(["scores"], {"features": x.numpy()})[0],
                               traced(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_two_inputs():
    cell = GRUCell(6, 8)
    x, h = sm.randn(3, 6), sm.randn(3, 8)
    traced = jit.trace(cell, (x, h))
    buf = io.BytesIO()
    proto = sm.onnx.export(traced, buf, input_names=["x"], output_names=["h_next"])
    assert [i.name for i in proto.graph.input] == ["x", "h"]       # the rest keep theirs
    x, h = sm.randn(5, 6), sm.randn(5, 8)
    np.testing.assert_allclose(_run(buf.getvalue(), {"x": x.numpy(), "h": h.numpy()})[0],
                               traced(x, h).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_outputs_repeated_or_passed_through():
    class Twice(nn.Module):
        def forward(self, x):
            y = x.relu()
            return y, y, x
    x = sm.randn(2, 3)
    buf = io.BytesIO()
    proto = sm.onnx.export(jit.trace(Twice(), x), buf)
    assert [o.name for o in proto.graph.output] == ["output_0", "output_1", "output_2"]
    got = _run(buf.getvalue(), {"x": x.numpy()})
    for g, w in zip(got, (x.relu(), x.relu(), x)):
        np.testing.assert_array_equal(g, w.numpy())


def test_file_object_and_eager_module_with_args():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()
    x = sm.randn(2, 4)
    buf = io.BytesIO()
    sm.onnx.export(model, buf, (x,))                              # traced first, as torch does
    np.testing.assert_allclose(_run(buf.getvalue(), {"input": x.numpy()})[0],
                               model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [sm.float64, sm.float16, sm.bfloat16])
def test_dtypes_mapped(dtype):
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.LayerNorm(8)).to(dtype).eval()
    x = sm.randn(2, 4, dtype=dtype)
    traced = jit.trace(model, x, check_trace=False)
    buf = io.BytesIO()
    proto = sm.onnx.export(traced, buf)
    expected = {sm.float64: onnx.TensorProto.DOUBLE, sm.float16: onnx.TensorProto.FLOAT16,
                sm.bfloat16: onnx.TensorProto.BFLOAT16}[dtype]
    assert proto.graph.input[0].type.tensor_type.elem_type == expected
    assert proto.graph.output[0].type.tensor_type.elem_type == expected
    if dtype is not sm.bfloat16:              # onnxruntime's CPU kernels have no bfloat16
        tol = 1e-10 if dtype is sm.float64 else 1e-2     # half: its rounding, not ours
        np.testing.assert_allclose(_run(buf.getvalue(), {"input": x.numpy()})[0],
                                   traced(x).detach().numpy(), rtol=tol, atol=tol)


def test_loaded_archive_exports(tmp_path):
    model, x = WORKLOADS["W5"].build(quick=True)
    jit.trace(model, x).save(str(tmp_path / "block.smod"))
    loaded = jit.load(str(tmp_path / "block.smod"))               # no TransformerBlock class
    buf = io.BytesIO()
    proto = sm.onnx.export(loaded, buf)
    assert "attn.in_proj_weight" in {i.name for i in proto.graph.initializer}
    xb = sm.randn(3, 16, 64)
    np.testing.assert_allclose(_run(buf.getvalue(), {"x": xb.numpy()})[0],
                               loaded(xb).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_scripted_loop_becomes_onnx_loop():
    model, x = WORKLOADS["W6"].build(quick=True)
    proto = sm.onnx.export(jit.script(model), io.BytesIO(), (x,))
    assert "Loop" in {n.op_type for n in proto.graph.node}
    with pytest.raises(TypeError, match="pass example inputs as args"):
        sm.onnx.export(jit.script(model), io.BytesIO())


def test_logical_and_bitwise_ops():
    class Logic(nn.Module):
        def forward(self, x):
            a, b = x > 0, x < 0.5
            return (a & b) | ~a, sm.logical_xor(x, b), sm.logical_not(x), (x.int() & 6) ^ 3
    x = sm.randn(3, 4)
    traced = jit.trace(Logic(), x)
    with pytest.raises(sm.onnx.ExportError, match="BitwiseAnd needs opset_version >= 18"):
        sm.onnx.export(traced, io.BytesIO())                  # int & int: opset 18's op
    buf = io.BytesIO()
    sm.onnx.export(traced, buf, opset_version=18)
    for got, want in zip(_run(buf.getvalue(), {"x": x.numpy()}), traced(x)):
        np.testing.assert_array_equal(got, want.numpy())


def test_unsupported_op_names_op_line_and_opset():
    class Angle(nn.Module):
        def forward(self, x):
            return sm.atan2(x, x + 1)
    traced = jit.trace(Angle(), sm.randn(2, 3))
    with pytest.raises(sm.onnx.UnsupportedOperatorError,
                       match=r"sm::atan2 \(test_onnx_export.py:\d+\).*opset 17"):
        sm.onnx.export(traced, io.BytesIO())


def test_table_rows_are_registry_ops_or_recomposed():
    from scriptmod.ir.ops import REGISTRY
    from scriptmod.onnx._export import EMITTERS
    recomposed = {"gelu", "layer_norm", "silu", "leaky_relu", "elu", "prelu", "clip"}
    assert set(EMITTERS) - set(REGISTRY) == recomposed


def test_bad_arguments():
    traced = jit.trace(nn.Linear(4, 3), sm.randn(2, 4))
    with pytest.raises(ValueError, match="opset_version must be an int from 17"):
        sm.onnx.export(traced, io.BytesIO(), opset_version=13)
    with pytest.raises(ValueError, match="dynamic_axes names 'y'"):
        sm.onnx.export(traced, io.BytesIO(), dynamic_axes={"y": [0]})
    with pytest.raises(ValueError, match="input_names has 2 names"):
        sm.onnx.export(traced, io.BytesIO(), input_names=["a", "b"])
    with pytest.raises(TypeError, match="pass its example inputs as args"):
        sm.onnx.export(nn.Linear(4, 3), io.BytesIO())
    with pytest.raises(TypeError, match="model must be a ScriptModule"):
        sm.onnx.export(object(), io.BytesIO())
    dropout = jit.trace(nn.Dropout(0.5).train(), sm.randn(2, 4), check_trace=False)
    with pytest.raises(sm.onnx.ExportError, match="model.eval"):
        sm.onnx.export(dropout, io.BytesIO())


def test_onnx_imported_only_on_use():
    code = ("import sys, scriptmod\nassert 'onnx' not in sys.modules\n"
            "sys.modules['onnx'] = None\n"
            "try:\n    scriptmod.onnx\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install scriptmod[onnx]" in out.stdout


class _Recurrent(nn.Module):
    """A 2-layer bidirectional LSTM, then a GRU and an RNN(relu) over its output."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=batch_first)
        self.gru = nn.GRU(12, 4, batch_first=batch_first)
        self.rnn = nn.RNN(4, 3, nonlinearity="relu", batch_first=batch_first)

    def forward(self, x):
        a, (h, c) = self.lstm(x)
        b, hg = self.gru(a)
        return self.rnn(b)[0], h, c, hg


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("batch_first", [False, True], ids=["time-major", "batch-first"])
def test_recurrent_layers_export_as_onnx_lstm_gru_rnn(batch_first):
    """Each layer and direction is ONNX's own LSTM/GRU/RNN node (gates reordered to ONNX's
    i,o,f,c and z,r,h); onnxruntime gives eager's outputs and final states at the traced
    sequence length and at others (and other batch sizes where the trace's batch is
    symbolic)."""
    sm.manual_seed(0)
    model = _Recurrent(batch_first).eval()
    x = sm.randn(3, 7, 5) if batch_first else sm.randn(7, 3, 5)
    with sm.no_grad():
        traced = jit.trace(model, x)
    buf = io.BytesIO()
    axes = {"x": {0: "b", 1: "t"}} if batch_first else {"x": {0: "t"}}
    proto = sm.onnx.export(traced, buf, (x,), input_names=["x"], dynamic_axes=axes)
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()), full_check=True)
    assert {"LSTM", "GRU", "RNN"} <= _op_types(proto)
    shapes = [(3, 7, 5), (2, 11, 5), (4, 1, 5)] if batch_first else \
        [(7, 3, 5), (11, 3, 5), (1, 3, 5)]
    for shape in shapes:
        xb = sm.randn(*shape)
        with sm.no_grad():
            want = _flat(model(xb))
        got = _run(buf.getvalue(), {"x": xb.numpy()})
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_an_lstm_with_projections_is_refused():
    lstm = nn.LSTM(4, 6, proj_size=3).eval()
    with sm.no_grad():
        traced = jit.trace(lstm, sm.randn(5, 2, 4))
    with pytest.raises(sm.onnx.ExportError, match="proj_size"):
        sm.onnx.export(traced, io.BytesIO())
