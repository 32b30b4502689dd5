"""The convolution family without PyTorch: transposed convolutions, fold and unfold against
the float64 loops of ``op_cases_conv``, gradients to the second order, argument errors,
``jit.trace``/``jit.script`` at two batch sizes, BatchNorm folding into every rank, and ONNX
export run by onnxruntime."""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from op_cases_conv import _col2im_ref, _conv_ref, _grad_input_ref, _im2col_ref
from scriptmod import nn
from scriptmod.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(7)
TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _t(*shape: int, grad: bool = True) -> sm.Tensor:
    return sm.tensor(RNG.standard_normal(shape), requires_grad=grad)


@pytest.mark.parametrize("rank,cin,cout,size,kw", [
    (1, 4, 6, (3,), dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)),
    (2, 4, 6, (3, 3), dict(stride=(2, 1), padding=(0, 1), output_padding=(1, 0),
                           dilation=(1, 2))),
    (3, 2, 2, (2, 3, 2), dict(stride=1, padding=0, output_padding=(0, 1, 0), dilation=2)),
])
def test_conv_transpose_is_the_adjoint_loop_and_gradchecks(rank: int, cin: int, cout: int,
                                                           size: tuple, kw: dict) -> None:
    groups = kw.get("groups", 1)
    x, w, b = _t(1, cin, *size), _t(cin, cout // groups, *(2,) * rank), _t(cout)
    y = TRANSPOSED[rank](x, w, b, **kw)
    n = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * rank  # noqa: E731
    want = _grad_input_ref(x.detach().numpy(), w.detach().numpy(), list(y.shape), n(kw["stride"]),
                           n(kw["padding"]), n(kw["dilation"]), groups)
    np.testing.assert_allclose(y.detach().numpy(), want + b.detach().numpy().reshape(
        -1, *(1,) * rank), atol=1e-12)
    assert gradcheck(lambda *t: TRANSPOSED[rank](*t, **kw), (x, w, b))


def test_convolution_gradients_have_gradients() -> None:
    """Double backward: d/dx of a norm of d(loss)/dw, through the three conv ops."""
    x, w = _t(2, 2, 5), _t(3, 2, 3)

    def gradient_norm(x: sm.Tensor, w: sm.Tensor) -> sm.Tensor:
        y = F.conv1d(x, w, stride=2, padding=1)
        gx, gw = sm.autograd.grad((y * y).sum(), (x, w), create_graph=True)
        return (gx * gx).sum() + (gw * gw).sum()

    assert gradcheck(gradient_norm, (x, w))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2), dilation=(1, 2),
                                                          padding=(1, 0), stride=(2, 1))])
def test_unfold_and_fold_are_the_reference_loops_and_adjoint(kw: dict) -> None:
    x = _t(2, 3, 6, 5)
    cols = F.unfold(x, **kw)
    full = {k: (v if isinstance(v, tuple) else (v, v)) for k, v in
            (dict(dilation=1, padding=0, stride=1) | kw).items()}
    np.testing.assert_allclose(cols.detach().numpy(), _im2col_ref(x.detach().numpy(), **full),
                               atol=1e-12)
    back = F.fold(cols, (6, 5), **kw)
    np.testing.assert_allclose(back.detach().numpy(), _col2im_ref(
        cols.detach().numpy(), (6, 5), **full), atol=1e-12)
    assert gradcheck(lambda t: F.fold(F.unfold(t, **kw) * 2, (6, 5), **kw), (x,))
    unbatched = F.unfold(x[0], **kw)
    np.testing.assert_allclose(unbatched.detach().numpy(), cols[0].detach().numpy())
    assert tuple(F.fold(unbatched, (6, 5), **kw).shape) == (3, 6, 5)


def test_same_padding_pads_the_extra_position_at_the_end() -> None:
    x, w = _t(1, 2, 6, 5, 4), _t(3, 2, 2, 3, 4)
    y = F.conv3d(x, w, padding="same", dilation=(3, 1, 1))
    xp = np.pad(x.detach().numpy(), [(0, 0), (0, 0), (1, 2), (1, 1), (1, 2)])
    want = _conv_ref(xp, w.detach().numpy(), None, (1, 1, 1), (0, 0, 0), (3, 1, 1))
    np.testing.assert_allclose(y.detach().numpy(), want, atol=1e-12)
    assert tuple(F.conv1d(_t(2, 7), _t(4, 2, 4), padding="valid").shape) == (4, 4)


@pytest.mark.parametrize("call,kind,pattern", [
    (lambda: F.conv1d(_t(2, 3, 4, 4), _t(2, 3, 2)), ValueError, r"conv1d: expected 2-D .* or 3-D"),
    (lambda: F.conv3d(_t(1, 2, 3, 3, 3), _t(2, 2, 2, 2, 2), stride=0), ValueError,
     "conv3d: non-positive stride"),
    (lambda: F.conv1d(_t(1, 2, 5), _t(2, 2, 2), stride=2, padding="same"), ValueError,
     "padding='same' is not supported for strided"),
    (lambda: F.conv_transpose2d(_t(1, 2, 3, 3), _t(2, 2, 3, 3), stride=2, output_padding=2),
     ValueError, "output padding must be smaller than either stride or dilation"),
    (lambda: F.conv_transpose1d(_t(1, 3, 4), _t(2, 2, 3)), ValueError,
     r"conv_transpose1d: input has 3 channels but weight \(2, 2, 3\)"),
    (lambda: F.fold(_t(1, 8, 5), (4, 4), 2), ValueError, r"col2im.*\(N, C\*4, 9\)"),
    (lambda: F.unfold(_t(1, 2, 4, 4), 2, padding=-1), ValueError, "padding should be at least 0"),
    (lambda: nn.ConvTranspose2d(2, 2, 3, stride=2)(_t(1, 2, 3, 3), output_size=(9, 9)),
     ValueError, r"requested an output size of \[9, 9\], but valid sizes range from \[7, 7\]"),
    (lambda: nn.ConvTranspose1d(2, 2, 3, padding_mode="reflect"), ValueError,
     'Only "zeros" padding mode is supported for ConvTranspose1d'),
    (lambda: nn.Conv3d(3, 2, 3)(_t(1, 2, 4, 4, 4)), ValueError, r"Conv3d: expected 4-D or 5-D"),
    (lambda: nn.LazyConv1d(2, 2)(_t(2, 3, 4, 5)), RuntimeError,
     r"Expected 2D \(unbatched\) or 3D \(batched\) input to LazyConv1d"),
])
def test_errors_name_the_argument(call: Any, kind: type, pattern: str) -> None:
    with pytest.raises(kind, match=pattern):
        call()


class _Net(nn.Module):
    """Every layer kind of the family in one model (1-D and 2-D, batch dim first)."""

    def __init__(self, padding_mode: str = "circular") -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1, padding_mode=padding_mode)
        self.up = nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1, groups=2)
        self.unfold = nn.Unfold(2, stride=2)
        self.fold = nn.Fold((2, 6), 2, stride=2)
        self.conv2 = nn.Conv2d(2, 2, 3, padding="same", groups=2)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        y = self.up(self.conv(x).relu())                      # (B, 2, 12)
        img = y.reshape(y.shape[0], 2, 2, 6)
        return self.conv2(self.fold(self.unfold(img) * 0.5))


def test_trace_and_script_follow_the_batch_size() -> None:
    sm.manual_seed(0)
    model = _Net()
    traced, scripted = sm.jit.trace(model, sm.randn(2, 2, 5)), sm.jit.script(model)
    for batch in (2, 3):
        x = _t(batch, 2, 5, grad=False).float()
        want = model(x).detach().numpy()
        for compiled in (traced, scripted):
            with sm.no_grad():
                np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-5, atol=1e-6)
    x = _t(3, 2, 5, grad=False).float().requires_grad_()
    traced(x).sum().backward()
    eager = x.detach().requires_grad_()
    model(eager).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), eager.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_symbolic_image_size_flows_through_transposed_conv_and_unfold() -> None:
    """A trace with batch and image size symbolic: the transposed convolution's output size
    and unfold's block count are expressions of H and W, and one trace serves every size."""
    sm.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1),
                          nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
                          nn.Unfold(2, stride=2))
    traced = sm.jit.trace(model, sm.randn(2, 2, 8, 8),
                          dynamic_dims={"input": {0: "B", 2: "H", 3: "W"}})
    types = [str(n.outputs[0].type) for n in traced.inlined_graph.nodes
             if n.kind in ("sm::conv2d", "sm::conv2d_grad_input", "sm::im2col")]
    assert types == ["Float(B, 4, (H+1)//2, (W+1)//2)", "Float(B, 3, 2*((H+1)//2), 2*((W+1)//2))",
                     "Float(B, 12, ((H+1)//2)*((W+1)//2))"]
    for shape in ((3, 2, 12, 10), (1, 2, 7, 14)):
        x = sm.randn(*shape).requires_grad_()
        traced(x).sum().backward()
        eager = x.detach().requires_grad_()
        model(eager).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), eager.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_batchnorm_folds_into_conv1d() -> None:
    sm.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(3, 4, 3), nn.BatchNorm1d(4)).eval()
    model[1].running_mean.copy_(sm.randn(4))
    x = sm.randn(2, 3, 8)
    fast = sm.jit.optimize_for_inference(sm.jit.trace(model, x))
    assert [n.kind for n in fast.graph.nodes if n.kind != "prim::Constant"] == ["sm::conv1d"]
    with sm.no_grad():
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


class _Volume(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 2, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1))
        self.up = nn.ConvTranspose3d(4, 3, (2, 3, 2), stride=2, output_padding=(1, 0, 1))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.up(self.conv(x))


@pytest.mark.parametrize("make,shape,opset", [(_Net, (2, 2, 5), 17),
                                              (lambda: _Net("zeros"), (2, 2, 5), 18),
                                              (_Volume, (2, 2, 4, 5, 3), 17)],
                         ids=["1d-2d-fold-17", "1d-2d-fold-18", "3d"])
def test_onnx_export_matches_onnxruntime(make: Any, shape: tuple, opset: int) -> None:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    sm.manual_seed(0)
    model, x = make().eval(), sm.randn(*shape)
    buf = io.BytesIO()
    proto = sm.onnx.export(sm.jit.trace(model, x), buf, (x,), input_names=["x"],
                           opset_version=opset)
    kinds = {n.op_type for n in proto.graph.node}
    assert {"Conv", "ConvTranspose"} <= kinds
    assert ("Col2Im" in kinds) == (len(shape) == 3 and opset >= 18)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (shape[0], shape[0] + 1):                  # the batch dim stays dynamic
        xb = sm.randn(batch, *shape[1:])
        with sm.no_grad():
            want = model(xb).numpy()
        np.testing.assert_allclose(sess.run(None, {"x": xb.numpy()})[0], want, rtol=1e-4,
                                   atol=1e-5)
