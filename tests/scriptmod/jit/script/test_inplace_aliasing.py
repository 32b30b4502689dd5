"""In-place writes in scripted code see eager's aliasing (issue 42): every name of a
written tensor sees the write, a write through a view (``row = x[0]; row.mul_(2)``,
``x.t()[0] = v``, ``y[0][1] = 5``) reaches its base and the base's other named views, and
an argument written through a view is written for the caller. Each program runs scripted
and as plain Python on copies of the same input, comparing results and the arguments
afterwards; where torch is installed, torch.jit.script of the same source agrees."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import scriptmod as sm

from . import inplace_programs as P
from .script_util import assert_same_outcome, call

PROGRAMS = [fn for name, fn in vars(P).items() if inspect.isfunction(fn)
            and fn.__module__ == P.__name__]


def _inputs(fn) -> list[tuple]:
    x = sm.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    return [(x, True), (x, False)] if "c" in inspect.signature(fn).parameters else [(x,)]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_scripted_writes_equal_eager(fn) -> None:
    scripted = sm.jit.script(fn)
    for k, args in enumerate(_inputs(fn)):
        assert_same_outcome(call(scripted, args), call(fn, args), f"{fn.__name__} input {k}")


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_torch_script_agrees(fn) -> None:
    torch = pytest.importorskip("torch")
    ours = sm.jit.script(fn)
    theirs = torch.jit.script(fn)
    for args in _inputs(fn):
        mine = [a.clone() if isinstance(a, sm.Tensor) else a for a in args]
        tor = [torch.from_numpy(a.numpy().copy()) if isinstance(a, sm.Tensor) else a
               for a in args]
        np.testing.assert_allclose(ours(*mine).numpy(), theirs(*tor).numpy())
        np.testing.assert_allclose(mine[0].numpy(), tor[0].numpy())     # the argument


def test_the_base_write_is_one_scatter_not_a_copy_per_view() -> None:
    """A write through a view is one ``index_put`` into the base (then ``copy_``)."""
    g = sm.jit.script(P.mul_through_a_row).graph
    kinds = [n.kind for n in g.walk()]
    assert kinds.count("sm::index_put") == 1 and kinds.count("sm::copy_") == 1


def _write_into_a_conversion_of_a_named_tensor(x: sm.Tensor) -> sm.Tensor:
    z = x * 1
    y = z.float()                 # z itself in eager (already float32), or a copy
    y += 1.0
    return z


def test_a_write_into_a_conversion_of_a_named_tensor_is_refused() -> None:
    """``y = z.float(); y += 1`` writes ``z`` in eager when no conversion was needed; the
    compiler cannot know, so it refuses (a reshape or conversion of a tensor no name holds
    any more, ``s = s.reshape(-1); s /= 4``, is written freely: nothing else sees it)."""
    with pytest.raises(sm.jit.FrontendError, match="may share memory"):
        sm.jit.script(_write_into_a_conversion_of_a_named_tensor)
