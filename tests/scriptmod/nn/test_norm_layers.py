"""The normalization layers of issue 38 (GroupNorm, InstanceNorm*, RMSNorm, LocalResponseNorm,
BatchNorm3d, the Lazy variants, batch norm on an empty batch): against float64 NumPy formulas,
against PyTorch where it is installed (outputs, gradients, running stats, state-dict keys),
and traced at two batch sizes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn as nn
import scriptmod.nn.functional as F

from nn_testutil import arr, copy_state_to_torch, param_grads, torch_or_none

RNG = np.random.default_rng(0)


def _normalized(a: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = a.mean(axis=axes, keepdims=True)
    return (a - mean) / np.sqrt(a.var(axis=axes, keepdims=True) + eps)


def test_functionals_match_float64_formulas() -> None:
    a = RNG.standard_normal((3, 4, 5, 2))
    w, b = RNG.standard_normal(4), RNG.standard_normal(4)
    x, cw = sm.tensor(a), (1, 4, 1, 1)
    grouped = _normalized(a.reshape(3, 2, -1), (2,), 1e-5).reshape(a.shape)
    np.testing.assert_allclose(arr(F.group_norm(x, 2, sm.tensor(w), sm.tensor(b))),
                               grouped * w.reshape(cw) + b.reshape(cw), rtol=1e-10)
    np.testing.assert_allclose(arr(F.instance_norm(x, eps=1e-3)), _normalized(a, (2, 3), 1e-3),
                               rtol=1e-10)
    rms = a / np.sqrt((a * a).mean(axis=(2, 3), keepdims=True) + np.finfo(np.float64).eps)
    np.testing.assert_allclose(arr(F.rms_norm(x, (5, 2))), rms, rtol=1e-10)
    sq = np.pad(a * a, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = sum(sq[:, i:i + 4] for i in range(3)) / 3
    np.testing.assert_allclose(arr(F.local_response_norm(x, 3, 1e-2, 0.75, 2.0)),
                               a / (2.0 + 1e-2 * window) ** 0.75, rtol=1e-10)


def test_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(3, 4)
    with pytest.raises(Exception, match="divisible by num_groups"):
        F.group_norm(sm.ones(2, 4, 3), 3)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(sm.ones(2, 3, 1))
    with pytest.raises(ValueError, match="expected 3D or 4D input"):
        nn.InstanceNorm2d(3)(sm.ones(2, 3))
    with pytest.raises(ValueError, match="3D or higher"):
        F.local_response_norm(sm.ones(2, 3), 2)
    with pytest.raises(Exception, match="normalized_shape"):
        F.rms_norm(sm.ones(2, 3), [4])
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(sm.ones(1, 3), None, None, training=True)


def test_batch_norm_on_an_empty_batch_copies_it_and_keeps_the_running_stats() -> None:
    m = nn.BatchNorm1d(5)
    x = sm.zeros(0, 5, 9, requires_grad=True)
    y = m(x)
    assert tuple(y.shape) == (0, 5, 9)
    assert int(m.num_batches_tracked) == 1
    np.testing.assert_array_equal(arr(m.running_mean), np.zeros(5))
    np.testing.assert_array_equal(arr(m.running_var), np.ones(5))
    y.sum().backward()
    assert tuple(x.grad.shape) == (0, 5, 9)
    np.testing.assert_array_equal(arr(m.weight.grad), np.zeros(5))
    assert tuple(F.batch_norm(sm.zeros(0), sm.zeros(0), sm.ones(0), training=True).shape) == (0,)
    traced = sm.jit.trace(m, (sm.randn(4, 5, 9),), check_trace=False)   # the op itself
    m.weight.grad = None
    x = sm.zeros(0, 5, 9, requires_grad=True)
    traced(x).sum().backward()
    assert int(m.num_batches_tracked) == 3 and tuple(x.grad.shape) == (0, 5, 9)
    np.testing.assert_array_equal(arr(m.weight.grad), np.zeros(5))


CASES = {
    "GroupNorm": (lambda m: m.GroupNorm(2, 4), (3, 4, 5)),
    "GroupNorm_noaffine": (lambda m: m.GroupNorm(4, 4, affine=False, eps=1e-3), (2, 4, 3, 2)),
    "InstanceNorm1d_stats": (lambda m: m.InstanceNorm1d(4, affine=True, track_running_stats=True),
                             (3, 4, 5)),
    "InstanceNorm2d": (lambda m: m.InstanceNorm2d(4), (2, 4, 3, 3)),
    "InstanceNorm3d_unbatched": (lambda m: m.InstanceNorm3d(4, affine=True,
                                                            track_running_stats=True),
                                 (4, 2, 3, 2)),
    "BatchNorm3d": (lambda m: m.BatchNorm3d(4), (2, 4, 2, 3, 2)),
    "RMSNorm": (lambda m: m.RMSNorm([4, 5]), (3, 4, 5)),
    "RMSNorm_eps": (lambda m: m.RMSNorm(5, eps=1e-2, elementwise_affine=False), (3, 4, 5)),
    "LocalResponseNorm": (lambda m: m.LocalResponseNorm(3, alpha=0.1, k=2.0), (2, 4, 3, 2)),
    "LazyBatchNorm2d": (lambda m: m.LazyBatchNorm2d(), (2, 4, 3, 3)),
    "LazyInstanceNorm1d": (lambda m: m.LazyInstanceNorm1d(), (3, 4, 5)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_layers_against_torch(name: str, dtype: str) -> None:
    """Two training steps then eval: outputs, input and parameter gradients, running stats,
    state-dict keys and repr."""
    torch = torch_or_none()
    if torch is None:
        pytest.skip("torch not installed")
    make, shape = CASES[name]
    ours, theirs = make(nn), make(torch.nn)
    a = RNG.standard_normal(shape).astype(np.float32)
    with sm.no_grad():
        ours(sm.tensor(a))       # a lazy module builds; both then hold the same state
    with torch.no_grad():
        theirs(torch.tensor(a))
    ours.to(getattr(sm, dtype))
    theirs.to(getattr(torch, dtype))
    copy_state_to_torch(ours, theirs)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    tol = 1e-5 if dtype == "float32" else 1e-10
    for step in range(2):
        a = RNG.standard_normal(shape).astype(dtype)
        x, tx = sm.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        g = RNG.standard_normal(shape).astype(dtype)
        y, ty = ours(x), theirs(tx)
        y.backward(sm.tensor(g))
        ty.backward(torch.tensor(g))
        np.testing.assert_allclose(arr(y), arr(ty), rtol=tol, atol=tol)
        np.testing.assert_allclose(arr(x.grad), arr(tx.grad), rtol=tol, atol=tol)
        for k, v in param_grads(theirs).items():
            np.testing.assert_allclose(param_grads(ours)[k], v, rtol=tol, atol=tol)
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(arr(ours.state_dict()[k]), arr(v), rtol=tol, atol=tol)
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(arr(ours(sm.tensor(a))), arr(theirs(torch.tensor(a))),
                               rtol=tol, atol=tol)


def test_lazy_modules_build_from_the_first_input_and_become_the_plain_class() -> None:
    m = nn.LazyInstanceNorm2d(affine=True, track_running_stats=True)
    assert repr(m).startswith("LazyInstanceNorm2d(0, ")
    m(sm.randn(2, 3, 4, 4))
    assert type(m) is nn.InstanceNorm2d and m.num_features == 3
    assert tuple(m.weight.shape) == (3,) and tuple(m.running_var.shape) == (3,)
    m = nn.LazyBatchNorm3d(affine=False, track_running_stats=False)
    m(sm.randn(2, 3, 2, 2, 2))
    assert type(m) is nn.BatchNorm3d and m.weight is None and m.running_mean is None


def test_instance_norm_warns_when_channels_differ_without_affine() -> None:
    m = nn.InstanceNorm1d(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m(sm.randn(2, 5, 4))
    assert any("does not match num_features" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm1d(3, affine=True)(sm.randn(2, 5, 4))


@pytest.mark.parametrize("make", [
    lambda: nn.Sequential(nn.GroupNorm(2, 4), nn.InstanceNorm2d(4, affine=True),
                          nn.LocalResponseNorm(2), nn.RMSNorm([3, 3])),
    lambda: nn.InstanceNorm2d(4, track_running_stats=True),
])
def test_traced_at_two_batch_sizes(make) -> None:
    model, eager = make(), make()
    traced = sm.jit.trace(model, (sm.randn(2, 4, 3, 3),), check_trace=False)
    for batch in (3, 5):
        a = RNG.standard_normal((batch, 4, 3, 3)).astype(np.float32)
        x = sm.tensor(a, requires_grad=True)
        y = traced(x)
        y.sum().backward()
        xe = sm.tensor(a, requires_grad=True)
        ye = eager(xe)
        ye.sum().backward()
        np.testing.assert_allclose(arr(y), arr(ye), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(arr(x.grad), arr(xe.grad), rtol=1e-4, atol=1e-4)
    for name, buf in eager.named_buffers():      # the traced graph updated the running stats
        if name.endswith("running_mean"):
            assert np.abs(arr(buf)).max() > 0
