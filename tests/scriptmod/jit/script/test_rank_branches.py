"""A branch the input's rank rules out is neither typed nor run (issue 42): a scripted
program specialized for a rank-2 input does not fail on ``img.shape[-3]`` in the branch
only rank 3 takes, as Python and TorchScript never evaluate it; nor on what follows a
``raise`` the rank decides (``if img.ndim < 3: raise TypeError(...)``): the program's own
error is raised."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm

from . import rank_branch_programs as P
from .script_util import assert_same_outcome, call


def _images() -> list[sm.Tensor]:
    rng = np.random.default_rng(0)
    return [sm.from_numpy(rng.standard_normal(s).astype(np.float32))
            for s in ((4, 5), (3, 4, 5), (2, 3, 4, 5))]


@pytest.mark.parametrize("fn", [P.channels_by_rank, P.returns_by_rank, P.grayscale_by_rank,
                                P.checked_channels],
                         ids=lambda f: f.__name__)
def test_a_branch_of_another_rank_is_not_typed(fn) -> None:
    scripted = sm.jit.script(fn)
    for img in _images():
        assert_same_outcome(call(scripted, (img,)), call(fn, (img,)),
                            f"{fn.__name__} at rank {img.dim()}")


def test_the_untaken_branch_is_folded_away() -> None:
    """The specialized graph for a rank-2 input has no If left and no ``size(-3)``."""
    scripted = sm.jit.script(P.returns_by_rank)
    g = scripted.graph_for(sm.ones(4, 5))
    assert not [n for n in g.walk() if n.kind in ("prim::If", "sm::size")]


def test_size_at_a_runtime_axis_is_an_int() -> None:
    """``x.size(d)`` of a run-time ``d`` is an int (torchvision's ``_topk_min``)."""
    scripted = sm.jit.script(P.size_at_a_runtime_axis)
    img = sm.ones(2, 5)
    assert [scripted(img, k, a) for k, a in ((3, 1), (9, 1), (1, 0))] == [3, 5, 1]


@pytest.mark.parametrize("fn", [P.normalized_by_mask, P.checked_lengths],
                         ids=lambda f: f.__name__)
def test_an_optional_argument_given_none_types_only_its_branch(fn) -> None:
    """A ``None`` for an ``Optional[Tensor]`` argument specializes as None: the branch under
    ``if mask is not None`` (and the right of ``lengths is None or ...``) is not typed for it
    (torchaudio's ``psd`` and ``add_noise``); a tensor takes the other branch, and one of
    the wrong shape meets the program's own check (its ``ValueError``), which the shapes
    decide, before any op it would break."""
    scripted = sm.jit.script(fn)
    x = sm.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    second = x if fn is P.normalized_by_mask else sm.ones(2)
    for args in ((x,), (x, None), (x, second), (x, sm.ones(2, 2))):
        assert_same_outcome(call(scripted, args), call(fn, args), f"{fn.__name__}{args}")
