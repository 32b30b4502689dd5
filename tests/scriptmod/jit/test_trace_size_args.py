"""A traced size passed into a submodule's call inside a container (``output_size=
x.shape[-2:]``, ``size=[h, w]``) follows the input at every size: the call is inlined so
the size stays the caller's ``sm::size``. It used to be baked into the callee's graph, and
a call at another size returned a tensor of the traced size (or failed on the indices)."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn


class _Unpool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)

    def forward(self, x):
        v, i = self.pool(x)
        return self.unpool(v, i, output_size=x.shape[-2:])


class _Resize(nn.Module):
    def forward(self, x, size: list):
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class _ToSkip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.resize = _Resize()

    def forward(self, x, skip):
        return self.resize(x, [skip.shape[2], skip.shape[3]]) + skip


class _Transposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)

    def forward(self, x):
        return self.up(self.down(x), output_size=x.shape[-2:])


CASES = {
    "unpool": (_Unpool, lambda n, h: (sm.randn(n, 3, h, h),)),
    "interpolate": (_ToSkip, lambda n, h: (sm.randn(n, 2, 3, 3), sm.randn(n, 2, h, h + 1))),
    "conv_transpose": (_Transposed, lambda n, h: (sm.randn(n, 3, h, h),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dynamic", [False, True])
def test_size_arguments_follow_the_input(name: str, dynamic: bool) -> None:
    make, inputs = CASES[name]
    model = make()
    kwargs = {"dynamic": True} if dynamic else {}
    traced = sm.jit.trace(model, inputs(2, 5), **kwargs)
    for n, h in ((2, 5), (3, 5), (2, 4), (1, 7), (2, 6)):
        args = inputs(n, h)
        try:
            got = traced(*args)
        except sm.jit.TraceGuardError:   # a size the trace pinned: refused, never stale
            assert not dynamic
            continue
        want = model(*args)
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


class _Sum(nn.Module):
    def forward(self, x, y):
        n = x.shape[0] + y.shape[0] * 1 + (y.shape[0] - y.shape[0])   # y's size is 0 at trace
        return sm.ones(n, x.shape[1]) * 2 + sm.cat([x, y])


def test_a_size_that_is_zero_at_trace_time_is_recorded_not_dropped() -> None:
    """``n + m`` with a traced ``m`` that is 0 now was recorded as ``n`` (the identity shortcut
    for ``n + 0`` read the traced size's value as a constant)."""
    model = _Sum()
    traced = sm.jit.trace(model, (sm.randn(3, 2), sm.randn(0, 2)))
    for m in (0, 2, 5):
        x, y = sm.randn(3, 2), sm.randn(m, 2)
        np.testing.assert_array_equal(traced(x, y).numpy(), model(x, y).numpy())
