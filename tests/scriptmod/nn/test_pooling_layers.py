"""Every pooling layer against torch (forward, indices, backward, ``jit.trace`` at two batch
sizes), reprs, argument errors, ``jit.script``, and the ONNX export of the pools that have an
ONNX node. The float64 NumPy references of each op are ``op_cases_pooling``'s rows."""
from __future__ import annotations

import io

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import jit, nn

torch = pytest.importorskip("torch")

# (class, constructor args, kwargs, per-sample input shape without the batch dim)
LAYERS = [
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1, "return_indices": True}, (3, 9)),
    ("MaxPool2d", (3, 2, 1), {"dilation": (1, 2), "ceil_mode": True}, (2, 7, 8)),
    ("MaxPool3d", ((2, 3, 2),), {"return_indices": True, "ceil_mode": True}, (2, 5, 6, 5)),
    ("AvgPool1d", (3, 2, 1), {"count_include_pad": False, "ceil_mode": True}, (3, 8)),
    ("AvgPool2d", (3, 2, 1), {"ceil_mode": True, "divisor_override": 4}, (2, 7, 8)),
    ("AvgPool3d", (2,), {"padding": 1, "count_include_pad": False}, (2, 5, 4, 3)),
    ("LPPool1d", (2, 3), {"stride": 2}, (3, 9)),
    ("LPPool2d", (1.5, (2, 3)), {"ceil_mode": True}, (2, 7, 8)),
    ("LPPool3d", (3, 2), {}, (2, 4, 5, 4)),
    ("AdaptiveAvgPool1d", (4,), {}, (3, 9)),
    ("AdaptiveAvgPool2d", ((3, None),), {}, (2, 7, 8)),
    ("AdaptiveAvgPool2d", (1,), {}, (2, 7, 8)),
    ("AdaptiveAvgPool3d", ((2, 3, 1),), {}, (2, 5, 7, 3)),
    ("AdaptiveMaxPool1d", (4,), {"return_indices": True}, (3, 9)),
    ("AdaptiveMaxPool2d", ((3, 5),), {}, (2, 7, 8)),
    ("AdaptiveMaxPool3d", (2,), {"return_indices": True}, (2, 5, 7, 3)),
]


def _module(lib, name, args, kwargs):
    return getattr(lib.nn, name)(*args, **kwargs)


def _outs(y):
    return list(y) if isinstance(y, tuple) else [y]


def _run(model, x, lib):
    """Outputs and the input's gradient of sum(outputs[0] * weights)."""
    y = _outs(model(x))
    weights = lib.linspace(-1.0, 2.0, y[0].numel(), dtype=x.dtype).reshape(y[0].shape)
    (y[0] * weights).sum().backward()
    return [t.detach().numpy() for t in y], x.grad.numpy()


def _check(ours, theirs, dtype):
    tol = 1e-12 if dtype == "float64" else 2e-5
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize("spec", LAYERS, ids=lambda s: s if isinstance(s, str) else None)
def test_layer_agrees_with_torch(spec) -> None:
    name, args, kwargs, shape = spec
    rng = np.random.default_rng(0)
    for dtype in ("float64", "float32"):
        for batch in ((2,), ()):                         # batched and unbatched
            data = rng.standard_normal(batch + shape).astype(dtype)
            if name.startswith("LPPool"):
                data = np.abs(data) + 0.1             # a real root of each power sum
            x, tx = sm.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
            ours = _run(_module(sm, name, args, kwargs), x, sm)
            theirs = _run(_module(torch, name, args, kwargs), tx, torch)
            _check(ours[0] + [ours[1]], theirs[0] + [theirs[1]], dtype)
    assert repr(_module(sm, name, args, kwargs)) == repr(_module(torch, name, args, kwargs))


@pytest.mark.parametrize("spec", LAYERS[::3], ids=lambda s: s if isinstance(s, str) else None)
def test_traced_layer_runs_at_another_batch_size(spec) -> None:
    name, args, kwargs, shape = spec
    model = _module(sm, name, args, kwargs)
    rng = np.random.default_rng(1)
    traced = jit.trace(model, sm.tensor(np.abs(rng.standard_normal((2,) + shape))))
    for batch in (2, 5):
        data = np.abs(rng.standard_normal((batch,) + shape)) + 0.1
        x, ex = sm.tensor(data, requires_grad=True), sm.tensor(data, requires_grad=True)
        got, want = _run(traced, x, sm), _run(model, ex, sm)
        _check(got[0] + [got[1]], want[0] + [want[1]], "float64")


def test_fractional_max_pool_agrees_with_torch_on_given_samples() -> None:
    rng = np.random.default_rng(2)
    for n, shape, kw in ((2, (2, 3, 9, 8), {"output_size": (4, 3)}),
                         (3, (2, 2, 7, 6, 8), {"output_ratio": 0.5})):
        data, u = rng.standard_normal(shape), rng.random(shape[:2] + (n,))
        layer = f"FractionalMaxPool{n}d"
        x, tx = sm.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
        ours = _run(getattr(sm.nn, layer)(2, return_indices=True, _random_samples=sm.tensor(u), **kw), x, sm)
        theirs = _run(getattr(torch.nn, layer)(2, return_indices=True,
                                               _random_samples=torch.tensor(u), **kw), tx, torch)
        _check(ours[0] + [ours[1]], theirs[0] + [theirs[1]], "float64")
    drawn = F.fractional_max_pool2d(sm.randn(2, 3, 9, 9), 3, output_ratio=(0.5, 0.5))
    assert tuple(drawn.shape) == (2, 3, 4, 4)          # samples drawn when none are given


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_inverts_max_pool_as_torch(n: int) -> None:
    shape = (2, 3) + (7, 6, 5)[:n]
    data = np.random.default_rng(n).standard_normal(shape)
    tx = torch.tensor(data)
    tv, ti = getattr(torch.nn.functional, f"max_pool{n}d")(tx, 2, return_indices=True)
    size = list(shape[2:])          # one more than the default where the pool dropped one
    v = sm.tensor(tv.numpy(), requires_grad=True)
    tv = tv.clone().requires_grad_(True)
    ours = _run(lambda a: getattr(sm.nn, f"MaxUnpool{n}d")(2)(a, sm.tensor(ti.numpy()), size), v, sm)
    theirs = _run(lambda a: getattr(torch.nn, f"MaxUnpool{n}d")(2)(a, ti, size), tv, torch)
    _check(ours[0] + [ours[1]], theirs[0] + [theirs[1]], "float64")
    assert repr(sm.nn.MaxUnpool3d(2, 1)) == repr(torch.nn.MaxUnpool3d(2, 1))


def test_global_average_is_a_mean_and_even_windows_match_uneven_ones() -> None:
    x = sm.randn(2, 4, 14, 14)
    pooled = F.adaptive_avg_pool2d(x, 1)
    np.testing.assert_allclose(pooled.numpy(), x.numpy().mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)
    graph = str(jit.trace(nn.AdaptiveAvgPool2d(1), x).graph)
    assert "sm::mean" in graph and "adaptive" not in graph
    seven = F.adaptive_avg_pool2d(x, 7).numpy()
    np.testing.assert_allclose(seven, x.numpy().reshape(2, 4, 7, 2, 7, 2).mean(axis=(3, 5)),
                               rtol=1e-5, atol=1e-6)


def test_half_inputs_average_in_float32() -> None:
    x = sm.randn(1, 2, 6, 9, 9).to(sm.float16)
    for fn in (lambda a: F.avg_pool3d(a, 3), lambda a: F.adaptive_avg_pool3d(a, (1, 3, 2))):
        want = fn(x.to(sm.float32)).to(sm.float16)
        assert fn(x).dtype == sm.float16
        np.testing.assert_array_equal(fn(x).numpy(), want.numpy())


def test_argument_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="output_ratio must be between 0 and 1"):
        nn.FractionalMaxPool2d(2, output_ratio=1.5)
    with pytest.raises(ValueError, match="either an output size"):
        nn.FractionalMaxPool3d(2)
    with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
        nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5)
    with pytest.raises(ValueError, match="output_size"):
        F.max_unpool2d(sm.randn(1, 1, 2, 2), sm.zeros(1, 1, 2, 2, dtype=sm.int64), 2,
                       output_size=(9, 9))
    with pytest.raises(RuntimeError, match="invalid max index"):
        F.max_unpool1d(sm.randn(1, 1, 2), sm.tensor([[[0, 9]]]), 2)
    with pytest.raises(RuntimeError, match="stride"):
        F.max_pool3d(sm.randn(1, 1, 4, 4, 4), 2, stride=0)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.avg_pool1d(sm.randn(1, 1, 8), 2, padding=2)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool3d(sm.randn(1, 1, 4, 4, 4), 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="4-D or 5-D"):
        F.adaptive_max_pool3d(sm.randn(4, 4), 2)


class _Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool1d(2)
        self.lp = nn.LPPool1d(2, 2)
        self.avg = nn.AdaptiveAvgPool1d(3)

    def forward(self, x):
        return self.avg(self.pool(x) + self.lp(x.abs()))


def test_scripted_module_with_pooling() -> None:
    model = _Scripted()
    x = sm.randn(2, 3, 8)
    np.testing.assert_allclose(jit.script(model)(x).numpy(), model(x).numpy(), rtol=1e-6)


# ---- ONNX ------------------------------------------------------------------------------------
class _OnnxPools(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool3 = nn.MaxPool3d(2, return_indices=True)
        self.unpool3 = nn.MaxUnpool3d(2)
        self.avg3 = nn.AvgPool3d(2, stride=1, padding=1, divisor_override=3)
        self.max1 = nn.MaxPool1d(3, 2, 1)
        self.avg1 = nn.AvgPool1d(3, 2, 1, count_include_pad=False)

    def forward(self, x):
        values, indices = self.pool3(x)
        up = self.unpool3(values, indices)
        flat = self.avg3(up).flatten(2)
        a = self.max1(flat) + self.avg1(flat)
        b = F.adaptive_max_pool2d(x[:, :, 0], (2, 3))
        c = F.adaptive_avg_pool2d(x[:, :, 0], (2, 3))
        d = F.adaptive_max_pool2d(x[:, :, 0], 1, return_indices=True)[1]
        return a, b + c, d, indices


def test_pools_export_to_onnx_and_match_onnxruntime() -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model, x = _OnnxPools(), sm.randn(2, 3, 4, 6, 6)
    buf = io.BytesIO()
    proto = sm.onnx.export(jit.trace(model, x), buf, (x,), input_names=["x"])
    kinds = {n.op_type for n in proto.graph.node}
    assert {"MaxPool", "MaxUnpool", "AveragePool"} <= kinds
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()), full_check=True)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x.numpy()})
    with sm.no_grad():
        want = [t.numpy() for t in model(x)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


class _Symbolic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)
        self.avg = nn.AdaptiveAvgPool2d((3, 2))
        self.max = nn.AdaptiveMaxPool2d((3, 2))
        self.div = nn.AvgPool2d(2, divisor_override=3)

    def forward(self, x):
        values, indices = self.pool(x)
        return self.avg(self.unpool(values, indices)) + self.max(self.div(x))


def test_trace_with_symbolic_batch_and_image_sizes() -> None:
    """One trace over dynamic batch and image dims: outputs and input gradients as eager."""
    model = _Symbolic()
    traced = jit.trace(model, sm.randn(2, 3, 10, 8),
                       dynamic_dims={"x": {0: "B", 2: "H", 3: "W"}})
    for shape in ((2, 3, 10, 8), (3, 3, 12, 10), (1, 3, 8, 14)):
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        x, ex = sm.tensor(data, requires_grad=True), sm.tensor(data, requires_grad=True)
        got, want = _run(traced, x, sm), _run(model, ex, sm)
        _check(got[0] + [got[1]], want[0] + [want[1]], "float32")


@pytest.mark.parametrize("call", [
    lambda lib, x: lib.nn.functional.max_pool3d(x, 2, return_indices=True),
    lambda lib, x: lib.nn.functional.adaptive_max_pool3d(x, 2, return_indices=True),
    lambda lib, x: lib.nn.functional.fractional_max_pool3d(
        x, (2, 2, 1), output_size=2, return_indices=True,
        _random_samples=lib.ones(1, 1, 3, dtype=lib.float64) / 3),
    lambda lib, x: lib.nn.functional.avg_pool3d(x, 2, ceil_mode=True),
    lambda lib, x: lib.nn.functional.adaptive_avg_pool3d(x, 3),
])
def test_empty_batch(call) -> None:
    data = np.zeros((0, 1, 4, 5, 4))
    x = sm.tensor(data, requires_grad=True)
    ours, theirs = _outs(call(sm, x)), _outs(call(torch, torch.tensor(data)))
    assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs]
    ours[0].sum().backward()
    assert tuple(x.grad.shape) == data.shape


class _PoolUnpool(nn.Module):
    def __init__(self, pool: nn.Module, unpool: nn.Module) -> None:
        super().__init__()
        self.pool, self.unpool = pool, unpool

    def forward(self, x):
        v, i = self.pool(x)
        return self.unpool(v, i)


class _PoolIndices(nn.Module):
    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x):
        v, i = self.pool(x)
        return v * 2 + i.float()


@pytest.mark.parametrize("make,shapes", [
    (lambda: _PoolUnpool(nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)),
     ((2, 3, 4, 6), (1, 3, 8, 6))),
    (lambda: _PoolUnpool(nn.MaxPool1d(3, stride=2, return_indices=True),
                         nn.MaxUnpool1d(3, stride=2)), ((2, 3, 9), (1, 3, 11))),
    (lambda: _PoolIndices(nn.AdaptiveMaxPool2d(2, return_indices=True)),
     ((2, 3, 4, 6), (1, 3, 8, 6))),
])
def test_script_unpacks_the_indices_pair(make, shapes) -> None:
    """A scripted model that unpacks ``return_indices=True``'s (values, indices) pair."""
    model = make()
    scripted = sm.jit.script(model)
    for shape in shapes:
        x = sm.randn(*shape)
        np.testing.assert_array_equal(scripted(x).numpy(), model(x).numpy())
