"""einops on scriptmod tensors (scriptmod.integrations.einops): rearrange, reduce, repeat,
pack/unpack and the Rearrange/Reduce layers, against einops on NumPy, with gradients and
under ``jit.trace`` at several sizes."""
import warnings

import numpy as np
import pytest

einops = pytest.importorskip("einops")

import scriptmod as sm  # noqa: E402
from scriptmod.integrations.einops import Rearrange, Reduce  # noqa: E402

PATTERNS = [
    ("rearrange", "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", {"p1": 2, "p2": 2}),
    ("rearrange", "b c h w -> b h w c", {}),
    ("rearrange", "b ... -> b (...)", {}),
    ("reduce", "b c (h 2) (w 2) -> b c h w", {"reduction": "max"}),
    ("reduce", "b c h w -> b c", {"reduction": "mean"}),
    ("reduce", "b c h w -> c", {"reduction": "sum"}),
    ("reduce", "b c h w -> b w", {"reduction": "prod"}),
    ("repeat", "b c h w -> b c h w k", {"k": 3}),
    ("repeat", "b c h w -> b (c k) h w", {"k": 2}),
]


@pytest.mark.parametrize("fn, pattern, kw", PATTERNS)
def test_like_einops_on_numpy_with_gradients(fn, pattern, kw):
    x_np = np.random.default_rng(0).standard_normal((2, 3, 4, 6))
    x = sm.tensor(x_np, requires_grad=True)
    out = getattr(einops, fn)(x, pattern, **kw)
    want = getattr(einops, fn)(x_np, pattern, **kw)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12)
    out.sum().backward()
    assert x.grad.shape == x.shape
    if fn == "rearrange":      # a permutation of the elements: every gradient is one
        np.testing.assert_array_equal(x.grad.numpy(), np.ones(x_np.shape))


def test_pack_unpack():
    a, b = sm.randn(2, 3, 5), sm.randn(2, 7)
    packed, shapes = einops.pack([a, b], "b *")
    assert packed.shape == (2, 22)
    a2, b2 = einops.unpack(packed, shapes, "b *")
    np.testing.assert_array_equal(a2.numpy(), a.numpy())
    np.testing.assert_array_equal(b2.numpy(), b.numpy())


def test_layers_are_modules_with_einops_repr():
    layer = Rearrange("b c (h p) (w q) -> b (h w) (p q c)", p=4, q=4)
    assert isinstance(layer, sm.nn.Module)
    assert repr(layer) == "Rearrange('b c (h p) (w q) -> b (h w) (p q c)', p=4, q=4)"
    assert repr(Reduce("b c h w -> b c", "mean")) == "Reduce('b c h w -> b c', 'mean')"


def _patch_model():
    sm.manual_seed(0)
    return sm.nn.Sequential(Rearrange("b c (h p) (w q) -> b (h w) (p q c)", p=4, q=4),
                            sm.nn.Linear(48, 5), Reduce("b n d -> b d", "mean")).eval()


def test_layers_trace_over_batch_and_image_sizes():
    model = _patch_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # einops' divisibility checks become guards
        traced = sm.jit.trace(model, sm.randn(2, 3, 8, 8))
    with sm.no_grad(), sm.jit.fuser(False):
        for shape in ((5, 3, 8, 8), (1, 3, 16, 8)):
            x = sm.randn(*shape)
            np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5,
                                       atol=1e-6)
        with pytest.raises(sm.jit.TraceGuardError):
            traced(sm.randn(2, 3, 8, 6))          # 6 does not split into patches of 4


def test_functions_trace():
    def unpatch(x):
        return einops.rearrange(x, "b (h w) c -> b c h w", h=4)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(unpatch, sm.randn(2, 8, 3))
    x = sm.randn(5, 12, 3)
    np.testing.assert_array_equal(traced(x).numpy(), unpatch(x).numpy())



def test_einsum_like_numpy_with_gradients_and_traced():
    """``einops.einsum`` is scriptmod's einsum: named axes, against NumPy's, with gradients,
    and traced at another batch size."""
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    a, b = sm.tensor(a_np, requires_grad=True), sm.tensor(b_np, requires_grad=True)
    out = einops.einsum(a, b, "batch i j, j k -> batch k i")
    np.testing.assert_allclose(out.detach().numpy(), np.einsum("bij,jk->bki", a_np, b_np),
                               rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), np.einsum("bij->j", a_np)[:, None]
                               * np.ones((1, 5)), rtol=1e-12)

    def f(x: sm.Tensor, w: sm.Tensor) -> sm.Tensor:
        return einops.einsum(x, w, "batch i j, j k -> batch k i")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(f, (a.detach(), b.detach()))
    x = sm.randn(5, 3, 4, dtype=sm.float64)
    np.testing.assert_allclose(traced(x, b.detach()).numpy(), f(x, b.detach()).numpy(),
                               rtol=1e-10)
