"""Issue 42's measure: public TorchScript code (``public_corpus``) scripts here and gives the
numbers of plain Python and of ``torch.jit.script`` on the same inputs.

- ``test_scripted_equals_python``: scriptmod's ``jit.script`` of the ported source against
  the same source run as plain Python on scriptmod (values, arguments afterwards, or the
  exception raised);
- ``test_torch_agrees``: where torch is installed, ``torch.jit.script`` of the source as
  published accepts it, and its results equal scriptmod's scripted ones (so the corpus holds
  only code TorchScript takes, and both libraries mean the same by it).
"""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm

from .public_corpus import Entry, assert_close, entries, load, plain, target, to_backend
from .script_util import Outcome, assert_same_outcome, call

ENTRIES = entries()


def _params(entries: list[Entry], strict_xfail: bool) -> list:
    return [pytest.param(e, id=e.name, marks=[pytest.mark.xfail(strict=True, reason=e.xfail)]
                         if e.xfail and strict_xfail else []) for e in entries]


def _inputs(entry: Entry) -> list[tuple]:
    return entry.inputs(np.random.default_rng(0))


def _ours(entry: Entry) -> tuple[object, object]:
    """The entry on scriptmod as plain Python, and scripted (modules in eval mode, seeded)."""
    sm.manual_seed(0)
    fn = target(entry, load(entry, "scriptmod"))
    if isinstance(fn, sm.nn.Module):
        fn.eval()
    return fn, sm.jit.script(fn)


def test_the_corpus_has_forty_functions_and_ten_modules() -> None:
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    modules = sum(e.build is not None for e in ENTRIES)
    assert len(ENTRIES) - modules >= 40 and modules >= 10, (len(ENTRIES) - modules, modules)


def _as_torchscript_sees(outcome: Outcome, given: tuple) -> Outcome:
    """What a caller of TorchScript code can count on: a list argument reaches scripted code
    as a copy (TorchScript's and ours), so only its original items, tensors written in
    place, are compared afterwards, not what the program appended; an exception's type;
    and a dict result as a dict (``OrderedDict(...)`` builds one, as in TorchScript)."""
    args = [a[:len(g)] if isinstance(a, list) and isinstance(g, list) else a
            for a, g in zip(outcome.args, given)]
    # an exception's type, not its text: TorchScript formats values in messages its own way
    # (a shape is a list: ``[3, 5]``, where Python prints ``torch.Size([3, 5])``)
    error = None if outcome.error is None else (outcome.error[0], "")
    value = outcome.value
    if isinstance(value, dict):        # an OrderedDict comes back a dict, as TorchScript's
        value = dict(value)
    return Outcome(value, error, args)


@pytest.mark.parametrize("entry", _params(ENTRIES, True))
def test_scripted_equals_python(entry: Entry) -> None:
    fn, scripted = _ours(entry)
    for k, args in enumerate(_inputs(entry)):
        args = to_backend(args, sm)
        with sm.no_grad():
            got, want = call(scripted, args), call(fn, args)
        assert_same_outcome(_as_torchscript_sees(got, args), _as_torchscript_sees(want, args),
                            f"{entry.name} input {k}")


@pytest.mark.parametrize("entry", _params([e for e in ENTRIES if not e.xfail], False))
def test_torch_agrees(entry: Entry) -> None:
    torch = pytest.importorskip("torch")
    fn, scripted = _ours(entry)
    theirs = target(entry, load(entry, "torch"))
    if isinstance(theirs, torch.nn.Module):
        theirs.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy()))
                                for k, v in fn.state_dict().items()})
        theirs.eval()
    theirs = torch.jit.script(theirs)
    for k, args in enumerate(_inputs(entry)):
        with sm.no_grad():
            got = call(scripted, to_backend(args, sm))
        with torch.no_grad():
            want = call(theirs, to_backend(args, torch))
        where = f"{entry.name} input {k}"
        assert (got.error is None) == (want.error is None), \
            f"{where}: scriptmod {got.error or 'returned'}, torch {want.error or 'returned'}"
        if want.error is None:
            assert_close(plain(got.value), plain(want.value), entry.rtol, entry.atol, where)
