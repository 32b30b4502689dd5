"""Norms (``scriptmod.linalg``, ``Tensor.norm``) and gradient clipping (``nn.utils``) against
PyTorch: values and gradients for every ord, dims and keepdim, zero vectors, torch's errors;
a traced norm fuses into a row kernel and differentiates as eager does; clipping equals
``torch.nn.utils`` on identical models."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

torch = pytest.importorskip("torch")

INF = math.inf
ORDS = (2, 1, 0, INF, -INF, 3, 1.5, 0.5, -1)
DIMS = (None, 1, -1, (0, 2), (2, 0, 1))


def _pair(a: np.ndarray) -> tuple:
    return sm.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _check(ours, theirs, x, tx, rtol=1e-10, atol=1e-12) -> None:
    """Equal values, and equal gradients of a random weighting of the output."""
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)
    w = np.random.default_rng(1).standard_normal(tuple(theirs.shape))
    (ours * sm.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    if tx.grad is None:
        assert x.grad is None
    else:
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)


# ---- vector norms ---------------------------------------------------------------------------
@pytest.mark.parametrize("ord", ORDS)
def test_vector_norm_values_and_grads_equal_torch(ord: float) -> None:
    a = np.random.default_rng(0).standard_normal((3, 4, 5))
    for dim in DIMS:
        for keepdim in (False, True):
            x, tx = _pair(a)
            _check(sm.linalg.vector_norm(x, ord, dim, keepdim),
                   torch.linalg.vector_norm(tx, ord, dim, keepdim), x, tx)


@pytest.mark.parametrize("ord", ORDS)
def test_zero_vectors_have_torchs_gradient_not_nan(ord: float) -> None:
    a = np.zeros((3, 4))
    a[1] = [1.0, 0.0, -2.0, 0.5]
    a[2, 0] = 3.0
    x, tx = _pair(a)
    _check(sm.linalg.vector_norm(x, ord, dim=1), torch.linalg.vector_norm(tx, ord, dim=1), x, tx)
    if ord == 2:
        assert not np.isnan(x.grad.numpy()).any() and (x.grad.numpy()[0] == 0).all()


def test_inf_norm_ties_share_the_gradient() -> None:
    a = np.array([[1.0, -3.0, 3.0, 2.0], [-4.0, -4.0, -4.0, 1.0]])
    for ord in (INF, -INF):
        x, tx = _pair(a)
        _check(sm.linalg.vector_norm(x, ord, dim=1), torch.linalg.vector_norm(tx, ord, dim=1), x, tx)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "complex64"])
def test_dtypes_and_the_dtype_argument(dtype: str) -> None:
    a = np.random.default_rng(2).standard_normal((6, 7)).astype(np.float32)
    t = torch.tensor(a).to(getattr(torch, dtype))
    if dtype == "complex64":
        t = t + 1j * torch.tensor(a[::-1].copy())
    x = sm.from_numpy(t.numpy()) if dtype != "bfloat16" else sm.tensor(a).to(sm.bfloat16)
    ours, theirs = sm.linalg.vector_norm(x, dim=1), torch.linalg.vector_norm(t, dim=1)
    assert ours.dtype.name == str(theirs.dtype).split(".")[1]
    tol = {"float32": 1e-6, "complex64": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=tol)
    wide = "complex128" if dtype == "complex64" else "float64"
    ours = sm.linalg.vector_norm(x, 3, dtype=getattr(sm, wide))
    theirs = torch.linalg.vector_norm(t, 3, dtype=getattr(torch, wide))
    assert ours.dtype is sm.float64 and theirs.dtype is torch.float64
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=tol)


def test_vector_norm_errors_are_torchs() -> None:
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got int64"):
        sm.linalg.vector_norm(sm.arange(4))
    with pytest.raises(RuntimeError, match="dtype should be floating point or complex, but got int64"):
        sm.linalg.vector_norm(sm.ones(3), dtype=sm.int64)
    with pytest.raises(RuntimeError, match=r"input \(float64\) should be convertible without narrowing"):
        sm.linalg.vector_norm(sm.ones(3, dtype=sm.float64), dtype=sm.float32)
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        sm.linalg.vector_norm(sm.zeros(0, 3), INF)
    with pytest.raises(RuntimeError, match="-1 norm on the dimension 0 because this dimension is empty"):
        sm.linalg.vector_norm(sm.zeros(0, 3), -1, dim=0)
    with pytest.raises(TypeError, match="'ord' must be a number, got str"):
        sm.linalg.vector_norm(sm.ones(3), "fro")
    # reductions with an identity are fine on empty tensors, as in torch
    np.testing.assert_array_equal(sm.linalg.vector_norm(sm.zeros(0, 3), 2, dim=0).numpy(), [0, 0, 0])
    np.testing.assert_array_equal(sm.linalg.vector_norm(sm.zeros(0, 3), INF, dim=1).numpy(), [])


# ---- matrix norms, linalg.norm, Tensor.norm -------------------------------------------------
@pytest.mark.parametrize("ord", ["fro", "nuc", 2, -2, 1, -1, INF, -INF])
def test_matrix_norm_values_and_grads_equal_torch(ord) -> None:
    a = np.random.default_rng(3).standard_normal((2, 3, 4))
    for dim in ((-2, -1), (0, 2), (2, 0), (-1, 1)):
        for keepdim in (False, True):
            x, tx = _pair(a)
            _check(sm.linalg.matrix_norm(x, ord, dim, keepdim),
                   torch.linalg.matrix_norm(tx, ord, dim, keepdim), x, tx)


def test_matrix_norm_errors() -> None:
    A = sm.randn(3, 3)
    for ord in (3, "abc", 0):
        with pytest.raises(RuntimeError, match=f"Order {ord} not supported"):
            sm.linalg.matrix_norm(A, ord)
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        sm.linalg.matrix_norm(sm.randn(3))
    with pytest.raises(RuntimeError, match="dims must be different"):
        sm.linalg.matrix_norm(A, dim=(1, -1))
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple"):
        sm.linalg.matrix_norm(A, dim=(1,))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got int64"):
        sm.linalg.matrix_norm(sm.ones(2, 2, dtype=sm.int64), 1)


NORM_CALLS = [  # (args, kwargs) as passed to linalg.norm (torch's dispatch: vector or matrix)
    ((), {}), ((1,), {}), ((INF,), {}), (("fro",), {}), ((-INF,), {}),
    ((None, 1), {}), ((3, 0), {"keepdim": True}), ((1, (0, 1)), {}), ((None, (0, 1)), {}),
    (("fro", (1, 0)), {}), ((0.5, -1), {}), ((), {"dtype": "float64"}), (("nuc",), {}),
    ((2,), {}), ((-2, (1, 0)), {"keepdim": True})]


@pytest.mark.parametrize("args,kwargs", NORM_CALLS)
def test_linalg_norm_dispatches_as_torch(args, kwargs) -> None:
    a = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    # a 1-d input takes no dim and no matrix ord
    vector_ok = len(args) < 2 and not (args and isinstance(args[0], str))
    for arr in (a, a[0]) if vector_ok else (a,):
        kw = dict(kwargs)
        tkw = dict(kw, dtype=getattr(torch, kw["dtype"])) if "dtype" in kw else kw
        x, tx = _pair(arr)
        ours, theirs = sm.linalg.norm(x, *args, **kw), torch.linalg.norm(tx, *args, **tkw)
        assert ours.dtype.name == str(theirs.dtype).split(".")[1]
        _check(ours, theirs, x, tx, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("p,dim", [("fro", None), ("fro", 1), ("fro", (0, 2)), (None, None),
                                   (1, None), (INF, (1, 2)), (3, 0), (0, None),
                                   (2, (0, 1, 2)), ("nuc", None), ("nuc", (2, 0))])
def test_tensor_norm_and_function_form_equal_torch(p, dim) -> None:
    a = np.random.default_rng(5).standard_normal((2, 3, 4))
    if p == "nuc" and dim is None:
        a = a[0]                                   # torch: 'nuc' over every dim of a matrix
    for keepdim in (False, True):
        x, tx = _pair(a)
        _check(x.norm(p, dim, keepdim), tx.norm(p, dim, keepdim), x, tx)
        np.testing.assert_allclose(sm.norm(x, p, dim, keepdim).detach().numpy(),
                                   torch.norm(tx, p, dim, keepdim).detach().numpy(), rtol=1e-12)
    assert sm.randn(3, 3).norm().dtype is sm.float32


def test_linalg_norm_errors() -> None:
    with pytest.raises(RuntimeError, match="the input must be 1D or 2D. Got 3D"):
        sm.linalg.norm(sm.randn(2, 2, 2), 1)
    with pytest.raises(RuntimeError, match="it must be of length 1 or 2"):
        sm.linalg.norm(sm.randn(2, 2, 2), dim=(0, 1, 2))
    with pytest.raises(RuntimeError, match=r"dim must be a 2-tuple. Got \[0, 1, 2\]"):
        sm.randn(3, 3, 3).norm("fro", dim=(0, 1, 2))      # as torch: 'fro' is over <= 2 dims


# ---- tracing: one row kernel, torch's gradients ------------------------------------------
class Normalize(nn.Module):
    def __init__(self, ord: float) -> None:
        super().__init__()
        self.ord = ord

    def forward(self, x):
        return x * 3 / (sm.linalg.vector_norm(x - 0.5, self.ord, dim=-1, keepdim=True) + 1)


@pytest.mark.parametrize("ord", ORDS)
def test_a_traced_norm_fuses_into_one_row_kernel(ord: float) -> None:
    x = sm.randn(16, 33)
    model = Normalize(ord)
    traced = sm.jit.trace(model, x)
    groups = [n for n in traced.graph_for(x).nodes if n.kind == "prim::FusionGroup"]
    assert len(groups) == 1
    ops = [n.op_name for n in groups[0].attrs["subgraph"].nodes if n.is_op]
    assert sorted(ops) == ["add", "div", "linalg_vector_norm", "mul", "sub"], ops
    kernels = sm.jit.kernels_for(traced, x)
    assert len(kernels) == 1 and any(s.op.startswith("row_") for s in kernels[0].spec.ops)
    np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=2e-5, atol=1e-6)
    t = torch.tensor(x.numpy())
    want = t * 3 / (torch.linalg.vector_norm(t - 0.5, ord, dim=-1, keepdim=True) + 1)
    np.testing.assert_allclose(traced(x).numpy(), want.numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("ord", [2, 1, INF, 0, 3])
def test_the_row_kernel_keeps_nan_inf_and_zero_rows(ord: float) -> None:
    rows = np.array([[np.nan, 1, 2, 3], [np.inf, 1, 0, 2], [-np.inf, 0, 0, 1], [0, 0, 0, 0],
                     [1e20, 1e20, 0, 1e-20], [0, -0.0, 3, 4]], np.float32)
    fn = sm.jit.trace(lambda x: sm.linalg.vector_norm(x, ord, dim=1), sm.tensor(rows))
    assert "FusionGroup" in str(fn.graph_for(sm.tensor(rows)))
    want = torch.linalg.vector_norm(torch.tensor(rows), ord, dim=1).numpy()
    np.testing.assert_allclose(fn(sm.tensor(rows)).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("ord", [2, 1, INF, 3, 0.5])
def test_compiled_training_gradient_equals_torch(ord: float) -> None:
    a = np.random.default_rng(6).standard_normal((8, 5))
    a[3] = 0.0                                           # a zero row: torch's gradient is 0
    lin = nn.Linear(5, 5).double()
    tlin = torch.nn.Linear(5, 5).double()
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(lin.weight.detach().numpy()))
        tlin.bias.copy_(torch.tensor(lin.bias.detach().numpy()))

    def f(x):
        return sm.linalg.vector_norm(lin(x) * 0 + x, ord, dim=1).sum()
    traced = sm.jit.trace(f, sm.tensor(a))
    x, tx = _pair(a)
    y = traced(x)
    assert y.grad_fn.name() == "CompiledFunctionBackward0"
    y.backward()
    ty = torch.linalg.vector_norm(tlin(tx) * 0 + tx, ord, dim=1).sum()
    ty.backward()
    np.testing.assert_allclose(y.item(), ty.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---- clipping ---------------------------------------------------------------------------
def _twin_models(seed: int = 0) -> tuple:
    """A scriptmod MLP and a torch MLP with equal weights and equal gradients."""
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for p, q in zip(model.parameters(), tmodel.parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    x = np.random.default_rng(seed).standard_normal((4, 6)).astype(np.float32) * 5
    (model(sm.tensor(x)) ** 2).sum().backward()
    (tmodel(torch.tensor(x)) ** 2).sum().backward()
    return model, tmodel


def _assert_grads_equal(model, tmodel) -> None:
    for p, q in zip(model.parameters(), tmodel.parameters()):
        if q.grad is None:
            assert p.grad is None
        else:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("norm_type", [2.0, 1, INF, 3.0, 0.5])
@pytest.mark.parametrize("max_norm", [0.1, 1e6])
def test_clip_grad_norm_equals_torch(norm_type: float, max_norm: float) -> None:
    model, tmodel = _twin_models()
    model[0].bias.grad = None                      # parameters without a gradient are skipped
    tmodel[0].bias.grad = None
    total = nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), max_norm, norm_type)
    assert isinstance(total, sm.Tensor) and total.ndim == 0 and total.dtype is sm.float32
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=2e-6)
    _assert_grads_equal(model, tmodel)


def test_clip_grad_norm_single_tensor_empty_list_and_foreach() -> None:
    for foreach in (None, True, False):
        w, tw = sm.nn.Parameter(sm.zeros(3)), torch.nn.Parameter(torch.zeros(3))
        w.grad, tw.grad = sm.tensor([3.0, 4.0, 12.0]), torch.tensor([3.0, 4.0, 12.0])
        total = nn.utils.clip_grad_norm_(w, 2.0, foreach=foreach)
        ttotal = torch.nn.utils.clip_grad_norm_(tw, 2.0, foreach=foreach)
        np.testing.assert_allclose(total.item(), ttotal.item())
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    assert nn.utils.clip_grad_norm_([], 1.0).item() == torch.nn.utils.clip_grad_norm_([], 1.0).item()
    assert nn.utils.get_total_norm([sm.tensor([3.0]), sm.tensor([4.0])]).item() == 5.0


def test_clip_grad_norm_nonfinite() -> None:
    w = sm.nn.Parameter(sm.zeros(3))
    w.grad = sm.tensor([math.nan, 1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"The total norm of order 2.0 for gradients from "
                                           r"`parameters` is non-finite"):
        nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
    assert math.isnan(nn.utils.clip_grad_norm_([w], 1.0).item())     # torch scales by NaN
    assert np.isnan(w.grad.numpy()).all()


def test_clip_grad_value_equals_torch() -> None:
    model, tmodel = _twin_models(1)
    assert nn.utils.clip_grad_value_(model.parameters(), 0.5) is None
    torch.nn.utils.clip_grad_value_(tmodel.parameters(), 0.5)
    _assert_grads_equal(model, tmodel)
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 0.5


def test_clipping_runs_under_no_grad_and_keeps_grads_leaf() -> None:
    model, _ = _twin_models()
    nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert all(p.grad.grad_fn is None and not p.grad.requires_grad for p in model.parameters())


def test_parameters_to_vector_and_back() -> None:
    model, tmodel = _twin_models()
    vec = nn.utils.parameters_to_vector(model.parameters())
    tvec = torch.nn.utils.parameters_to_vector(tmodel.parameters())
    np.testing.assert_allclose(vec.detach().numpy(), tvec.detach().numpy())
    nn.utils.vector_to_parameters(vec * 2, model.parameters())
    torch.nn.utils.vector_to_parameters(tvec * 2, tmodel.parameters())
    for p, q in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy())
        assert isinstance(p, nn.Parameter) and p.requires_grad
    with pytest.raises(TypeError, match="expected scriptmod.Tensor, but got: list"):
        nn.utils.vector_to_parameters([1.0], model.parameters())


# ---- memory formats and other arguments that used to be accepted and ignored ------------
def _cl_pair(shape=(2, 3, 4, 5)) -> tuple:
    a = np.random.default_rng(7).standard_normal(shape)
    return sm.tensor(a), torch.tensor(a)


def test_channels_last_strides_and_checks_equal_torch() -> None:
    x, tx = _cl_pair()
    for fmt, tfmt in ((sm.channels_last, torch.channels_last),
                      (sm.contiguous_format, torch.contiguous_format)):
        y, ty = x.contiguous(memory_format=fmt), tx.contiguous(memory_format=tfmt)
        assert y.stride() == ty.stride()
        np.testing.assert_array_equal(y.numpy(), ty.numpy())
        for check, tcheck in ((sm.channels_last, torch.channels_last),
                              (sm.contiguous_format, torch.contiguous_format)):
            assert y.is_contiguous(memory_format=check) == ty.is_contiguous(memory_format=tcheck)
        assert y.is_contiguous() == ty.is_contiguous()
    cl, tcl = x.contiguous(memory_format=sm.channels_last), tx.contiguous(memory_format=torch.channels_last)
    assert cl.contiguous(memory_format=sm.channels_last) is cl               # already so: no copy
    assert cl.clone().stride() == tcl.clone().stride()                       # preserve_format
    assert cl.clone(memory_format=sm.contiguous_format).stride() == (60, 20, 5, 1)
    assert cl.contiguous().stride() == tcl.contiguous().stride()
    assert x.to(memory_format=sm.channels_last).stride() == tx.to(memory_format=torch.channels_last).stride()
    assert cl.to(sm.float32).stride() == tcl.to(torch.float32).stride()     # a cast keeps it
    assert (cl * 2).stride() == (tcl * 2).stride()                           # so do elementwise ops
    for like, tlike in ((sm.zeros_like, torch.zeros_like), (sm.empty_like, torch.empty_like),
                        (sm.randn_like, torch.randn_like)):
        assert like(cl).stride() == tlike(tcl).stride()
        assert like(cl, memory_format=sm.contiguous_format).stride() == (60, 20, 5, 1)
    assert sm.empty(2, 3, 4, 5, memory_format=sm.channels_last).stride() == \
        torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    x5 = sm.zeros(2, 3, 4, 5, 6).contiguous(memory_format=sm.channels_last_3d)
    assert x5.stride() == torch.zeros(2, 3, 4, 5, 6).contiguous(
        memory_format=torch.channels_last_3d).stride()
    leaf = sm.ones_like(cl, requires_grad=True)
    assert leaf.is_leaf and leaf.requires_grad and leaf.stride() == cl.stride()


def test_memory_format_errors() -> None:
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        sm.zeros(2, 3, 4).contiguous(memory_format=sm.channels_last)
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        sm.zeros(2, 3, 4).to(memory_format=sm.channels_last)
    with pytest.raises(TypeError, match="'memory_format' must be a scriptmod.memory_format"):
        sm.zeros(2, 3, 4, 5).contiguous(memory_format="channels_last")
    with pytest.raises(TypeError, match="'memory_format' must be a scriptmod.memory_format"):
        nn.Linear(2, 2).to(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError, match="preserve_format needs an input"):
        sm.empty(2, 3, 4, 5, memory_format=sm.preserve_format)
    assert not sm.zeros(2, 3, 4).is_contiguous(memory_format=sm.channels_last)


def _conv_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5)).double()


def test_module_to_channels_last_changes_4d_params_only_and_results_do_not() -> None:
    model = _conv_model()
    x = sm.randn(2, 3, 8, 8, dtype=sm.float64)
    want = model(x).detach().numpy()
    weight = model[0].weight
    assert model.to(memory_format=sm.channels_last) is model
    assert model[0].weight is weight and isinstance(weight, nn.Parameter)    # in place
    assert weight.is_contiguous(memory_format=sm.channels_last) and not weight.is_contiguous()
    assert model[5].weight.is_contiguous()                                  # 2-d: untouched
    for inp in (x, x.contiguous(memory_format=sm.channels_last)):
        np.testing.assert_allclose(model(inp).detach().numpy(), want, rtol=1e-12, atol=1e-12)


def test_tracing_a_channels_last_input_gives_eagers_values_and_gradients() -> None:
    model = _conv_model().to(memory_format=sm.channels_last)
    x = sm.randn(2, 3, 8, 8, dtype=sm.float64).contiguous(memory_format=sm.channels_last)
    traced = sm.jit.trace(model, x)
    xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (model(xe) ** 2).sum().backward()
    want = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    y = traced(xc)
    assert y.grad_fn.name() == "CompiledFunctionBackward0"
    (y ** 2).sum().backward()
    np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-10, atol=1e-12)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[n], rtol=1e-10, atol=1e-12, err_msg=n)
    contiguous = x.contiguous()                                  # another layout, same values
    np.testing.assert_allclose(traced(contiguous).detach().numpy(), model(x).detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    relaid = sm.jit.trace(lambda t: t.contiguous(memory_format=sm.channels_last) * 2, contiguous)
    np.testing.assert_array_equal(relaid(contiguous).numpy(), 2 * x.numpy())


def test_optimizer_differentiable_true_records_the_step_not_ignored() -> None:
    """``differentiable=True`` makes the update part of the graph (tests/scriptmod/optim
    compares every optimizer's gradients with PyTorch's)."""
    w = sm.ones(3, requires_grad=True)
    p = w.clone()
    p.grad = sm.ones(3)
    sm.optim.SGD([p], lr=0.1, weight_decay=0.5, differentiable=True).step()
    p.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 0.95))    # d(p - 0.1 (g + 0.5 p))/dp


def test_autograd_backward_inputs_accumulates_only_into_inputs() -> None:
    a, b = sm.tensor(2.0, requires_grad=True), sm.tensor(3.0, requires_grad=True)
    ta, tb = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    sm.autograd.backward(a * b * b, inputs=[a])
    torch.autograd.backward(ta * tb * tb, inputs=[ta])
    assert a.grad.item() == ta.grad.item() and b.grad is None and tb.grad is None


def test_init_generator_is_used() -> None:
    for init in (nn.init.uniform_, nn.init.normal_, nn.init.trunc_normal_,
                 nn.init.xavier_uniform_, nn.init.xavier_normal_, nn.init.kaiming_uniform_,
                 nn.init.kaiming_normal_):
        first = init(sm.empty(3, 4), generator=sm.Generator().manual_seed(5))
        sm.randn(7)                                          # the default stream moves on
        again = init(sm.empty(3, 4), generator=sm.Generator().manual_seed(5))
        other = init(sm.empty(3, 4), generator=sm.Generator().manual_seed(6))
        np.testing.assert_array_equal(first.numpy(), again.numpy(), err_msg=init.__name__)
        assert not np.array_equal(first.numpy(), other.numpy())
    with pytest.raises(TypeError, match="'generator' must be a scriptmod.Generator"):
        nn.init.normal_(sm.empty(2), generator=5)


def test_uninitialized_buffer_keeps_requires_grad() -> None:
    assert nn.UninitializedBuffer(requires_grad=True).requires_grad
    assert not nn.UninitializedBuffer().requires_grad


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
def test_svdvals_values_and_first_order_grads_equal_torch(dtype: str) -> None:
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 4, 3))
    if dtype == "complex128":
        a = a + 1j * rng.standard_normal((2, 4, 3))
    a = a.astype(dtype)
    x, tx = _pair(a)
    tol = 1e-5 if dtype == "float32" else 1e-10
    _check(sm.linalg.svdvals(x), torch.linalg.svdvals(tx), x, tx, rtol=tol, atol=tol)
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        sm.linalg.svdvals(sm.ones(3))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        sm.linalg.svdvals(sm.ones(3, 3, dtype=sm.int64))
