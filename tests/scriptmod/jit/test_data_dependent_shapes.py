"""Ops whose result's length depends on the input's values (issue 42): ``nonzero``
(``as_tuple`` too), ``argwhere``, one-argument ``where``, ``masked_select``, boolean-mask
indexing, ``unique`` and ``unique_consecutive`` (without ``dim``) trace and script as a
boolean mask index, whose length the compiled program binds at run time: traced or scripted
once, they give eager's results on other data (other counts, none at all) and other sizes.
``unique`` along a ``dim`` is still refused while tracing, with the clear error."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod._dispatch import TracingError


def nonzero_rows(x):
    return x.nonzero() * 2


def nonzero_3d(x):
    return sm.nonzero(x).float() + 1


def nonzero_tuple(x):
    return x.nonzero(as_tuple=True)[1] + 1


def where_one_argument(x):
    return sm.where(x > 0)[0] * 3


def masked(x, m):
    return sm.masked_select(x, m) * 2


def argwhere(x):
    return sm.argwhere(x)


def keep_sorted_boxes(boxes, scores):
    """The start of a sort-based NMS: boxes by descending score, those above a threshold."""
    order = scores.argsort(descending=True)
    keep = scores[order] > 0.5
    return boxes[order][keep]


def unique_all(x):
    values, inverse, counts = sm.unique(x, return_inverse=True, return_counts=True)
    return values * 2, inverse, counts


def unique_runs(x):
    values, counts = sm.unique_consecutive(x, return_counts=True)
    return values + 1, counts


def unique_runs_inverse(x):
    return sm.unique_consecutive(x, return_inverse=True)


CASES = [
    (nonzero_rows, lambda n: (sm.randint(0, 2, (n,)),)),
    (nonzero_3d, lambda n: (sm.randn(2, n, 3) > 0.3,)),
    (nonzero_tuple, lambda n: (sm.randn(n, 5) > 0,)),
    (where_one_argument, lambda n: (sm.randn(n, 2),)),
    (masked, lambda n: (sm.randn(n, 4), sm.randn(1, 4) > 0)),
    (argwhere, lambda n: (sm.randn(n, 3) > 1.0,)),
    (keep_sorted_boxes, lambda n: (sm.randn(n, 4), sm.rand(n))),
    (unique_all, lambda n: (sm.randint(0, 5, (n, 3)),)),
    (unique_runs, lambda n: (sm.randint(0, 3, (n,)),)),
    (unique_runs_inverse, lambda n: (sm.randint(0, 2, (2, n)).float(),)),
]


def _same(want, got) -> None:
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert tuple(w.shape) == tuple(g.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("how", ["trace", "script"])
@pytest.mark.parametrize("fn,make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_compiled_once_gives_eagers_results_on_other_data(fn, make, how: str) -> None:
    sm.manual_seed(0)
    compiled = sm.jit.trace(fn, make(8), check_trace=False) if how == "trace" \
        else sm.jit.script(fn)
    for n in (8, 8, 8, 3, 1, 20):
        args = make(n)
        _same(fn(*args), compiled(*args))
    nothing = [sm.zeros_like(a) for a in make(8)]          # no element selected
    _same(fn(*nothing), compiled(*nothing))


def test_masked_select_gradient_through_a_trace() -> None:
    x = sm.randn(6, 3, requires_grad=True)
    traced = sm.jit.trace(lambda v: sm.masked_select(v, v > 0).sum(), (x,))
    traced(x).backward()
    got, x.grad = x.grad.clone(), None
    sm.masked_select(x, x > 0).sum().backward()
    np.testing.assert_array_equal(got.numpy(), x.grad.numpy())


def test_unique_along_a_dim_is_refused_while_tracing() -> None:
    with pytest.raises(TracingError, match="unique\\(\\): the shape of its result depends"):
        sm.jit.trace(lambda v: sm.unique(v, dim=0), (sm.randint(0, 3, (5, 2)),))


def _histogram_then_unique_rows(x: sm.Tensor) -> sm.Tensor:
    hist = sm.bincount(x.view(-1), minlength=8)
    rows = sm.unique(x, dim=0)
    return hist.sum() * 0 + rows.size(0) + hist


def test_a_scripted_call_of_a_data_dependent_op_runs_eagerly_when_reached() -> None:
    """``bincount`` and ``unique(dim=...)`` in a scripted function (torchvision's
    ``equalize``): the trace of the call is refused, so the call stays and runs the eager
    function on the values each time, as a call with an unknown argument does."""
    s = sm.jit.script(_histogram_then_unique_rows)
    for seed in (0, 1):
        x = sm.from_numpy(np.random.default_rng(seed).integers(0, 4, (6, 2)))
        np.testing.assert_array_equal(s(x).numpy(), _histogram_then_unique_rows(x).numpy())
