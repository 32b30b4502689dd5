"""Every error a compiled call raises reads in the user's terms (issue 35, item 7).

Each case provokes one raise site reachable from calling a traced or scripted module: a guard
on the arguments (wrong dtype, rank, size, container structure, a non-tensor), an op refusing
its data at run time (an index out of range, a size computed at run time), a library call the
script frontend found refusing its types, and our own invariant broken inside a kernel. The
message must name the argument or the op, the user's ``file:line`` where there is one, what was
expected and what was given, and must show nothing of the compiler's insides: no IR value names
(``%3``, ``%?``), node kinds (``prim::``), fusion groups, native segments or NumPy types. The
failing node's IR line stays reachable, on the exception (``.node_ir``) and in the log
(``SCRIPTMOD_LOG=errors``).
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Tuple

import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.runtime.errors import InternalError, InterpreterError

INTERNALS = re.compile(r"%\d|%\?|%[a-z]|native segment|FusionGroup|ndarray|numpy|NumPy|prim::|"
                       r"sm::|Float\(|Long\(")
HERE = "test_error_messages.py"


def line_of(marker: str) -> str:
    """``test_error_messages.py:N``, N the line holding ``# <marker>``."""
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# <{marker}>"):
                return f"{HERE}:{n}"
    raise AssertionError(marker)


class Lin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return (self.fc(x) * 2.0).relu()                      # <lin>


class Emb(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e = nn.Embedding(5, 3)

    def forward(self, idx: sm.Tensor) -> sm.Tensor:
        return self.e(idx) * 2.0                              # <emb>


class Gather(nn.Module):
    def forward(self, x: sm.Tensor, idx: sm.Tensor) -> sm.Tensor:
        return x.gather(1, idx) + 1.0                         # <gather>


class Narrow(nn.Module):
    def forward(self, x: sm.Tensor, n: int) -> sm.Tensor:
        return x.narrow(0, 0, n) * 2.0                        # <narrow>


class Pair(nn.Module):
    def forward(self, x: sm.Tensor, hc: Tuple[sm.Tensor, sm.Tensor]) -> sm.Tensor:
        h, c = hc
        return x + h * c                                      # <pair>


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.conv(x).relu()                            # <conv>


class Two(nn.Module):
    def forward(self, x: sm.Tensor, y: sm.Tensor) -> sm.Tensor:
        return (x @ y).relu()                                 # <two>


X, IDX = sm.randn(2, 4), sm.tensor([0, 1, 2])
XG, IG = sm.randn(2, 3), sm.tensor([[0], [1]])
HC = (sm.randn(2, 4), sm.randn(2, 4))


@functools.cache
def compiled(cls: type, how: str) -> Any:
    """A compiled instance (its first call made) of ``cls``, traced or scripted."""
    sm.manual_seed(0)
    model = cls().eval()
    example = {Lin: (X,), Emb: (IDX,), Gather: (XG, IG), Narrow: (sm.randn(4, 3), 2),
               Pair: (X, HC), Conv: (sm.randn(1, 2, 5, 5),),
               Two: (sm.randn(2, 3), sm.randn(3, 4))}[cls]
    m = sm.jit.trace(model, example) if how == "trace" else sm.jit.script(model)
    m(*example)
    return m


@dataclass(frozen=True)
class Case:
    name: str
    cls: type
    args: Callable[[], tuple]
    exc: type                         # the class a user's ``except`` relies on
    words: tuple[str, ...]            # what the message must name (argument, op, line)
    hows: tuple[str, ...] = ("trace", "script")
    gave_numpy: bool = False          # the user passed a NumPy array: naming it is their terms


CASES = [
    # (a) guards on the arguments
    Case("wrong-dtype", Lin, lambda: (X.long(),), TypeError,
         ("argument 'x' (position 0)", "expected", "got an int64 tensor of shape (2, 4)"),
         ("trace",)),
    Case("non-tensor", Lin, lambda: (3,), TypeError,
         ("argument 'x' (position 0)", "expected a Tensor", "got an int")),
    Case("string", Lin, lambda: ("x",), TypeError,
         ("argument 'x' (position 0)", "expected a Tensor", "got a str")),
    Case("list", Lin, lambda: ([1.0, 2.0],), TypeError,
         ("argument 'x' (position 0)", "expected a Tensor", "got a list")),
    Case("numpy-array", Lin, lambda: (X.numpy(),), TypeError,
         ("argument 'x' (position 0)", "expected a Tensor", "numpy.ndarray", "from_numpy"),
         gave_numpy=True),
    Case("feature-size", Lin, lambda: (sm.randn(2, 5),), RuntimeError,
         ("argument 'x' (position 0)", "matmul", "in fc", line_of("lin"),
          "got a float32 tensor of shape (2, 5)", "5 != 4"), ("trace",)),
    Case("rank", Conv, lambda: (sm.randn(2, 5, 5),), RuntimeError,
         ("argument 'x' (position 0)", "rank 4", "rank 3", "conv2d", line_of("conv")),
         ("trace",)),
    Case("index-dtype", Emb, lambda: (sm.tensor([0.0, 1.0]),), TypeError,
         ("argument 'idx' (position 0)", "integer", "got a float32 tensor"), ("trace",)),
    Case("second-size", Two, lambda: (sm.randn(2, 3), sm.randn(5, 4)), RuntimeError,
         ("argument 'y' (position 1)", "matmul", line_of("two"), "shape (5, 4)"), ("trace",)),
    Case("tuple-short", Pair, lambda: (X, (HC[0],)), TypeError,
         ("argument 'hc' (position 1)", "expected a tuple of 2", "got a tuple of 1"),
         ("trace",)),
    Case("not-a-tuple", Pair, lambda: (X, HC[0]), TypeError,
         ("argument 'hc' (position 1)", "expected a tuple of 2", "got a float32 tensor"),
         ("trace",)),
    Case("tuple-item-not-tensor", Pair, lambda: (X, (1.0, HC[1])), TypeError,
         ("argument 'hc[0]' (position 1)", "expected a Tensor", "got a float"), ("trace",)),
    Case("tuple-item-dtype", Pair, lambda: (X, (HC[0].long(), HC[1])), TypeError,
         ("argument 'hc[0]' (position 1)", "floating-point", "got an int64 tensor"),
         ("trace",)),
    Case("tuple-item-batch", Pair, lambda: (X, (sm.randn(3, 4), HC[1])), RuntimeError,
         ("argument 'hc[0]' (position 1)", "B = 2 from 'x'", "mul", line_of("pair"),
          "shape (3, 4)"), ("trace",)),
    # (b) an op refusing its data while it runs
    Case("embedding-index", Emb, lambda: (sm.tensor([0, 7, 1]),), IndexError,
         ("embedding", "in e", line_of("emb"), "index 7", "5 rows")),
    Case("gather-index", Gather, lambda: (XG, sm.tensor([[0], [5]])), RuntimeError,
         ("gather", line_of("gather"), "out of bounds", "size 3")),
    Case("size-at-run-time", Narrow, lambda: (sm.randn(4, 3), 9), RuntimeError,
         ("narrow", line_of("narrow"), "length (9)", "size (4)"), ("script",)),
    Case("library-refusal", Lin, lambda: (X.long(),), TypeError,
         ("Linear.forward", line_of("lin"), "same dtype", "Long", "Float"), ("script",)),
]


def _raised(case: Case, how: str, grad: bool = False) -> BaseException:
    m = compiled(case.cls, how)
    with sm.enable_grad() if grad else sm.no_grad():
        with pytest.raises(case.exc) as info:
            m(*case.args())
    return info.value


def _check(case: Case, e: BaseException) -> None:
    msg = str(e)
    missing = [w for w in case.words if w not in msg]
    assert not missing, f"{msg!r} lacks {missing}"
    shown = INTERNALS.findall(msg)
    if case.gave_numpy:
        shown = [s for s in shown if s not in ("numpy", "ndarray")]
    assert not shown, f"{msg!r} shows internals {shown}"


@pytest.mark.parametrize("case,how", [(c, h) for c in CASES for h in c.hows],
                         ids=[f"{c.name}-{h}" for c in CASES for h in c.hows])
def test_error_names_the_argument_or_op_and_the_line(case: Case, how: str) -> None:
    _check(case, _raised(case, how))


@pytest.mark.parametrize("name", ["embedding-index", "gather-index"])
def test_errors_with_autograd_recording_read_the_same(name: str) -> None:
    """With grad on, the graph runs op by op through autograd: same wording."""
    case = next(c for c in CASES if c.name == name)
    _check(case, _raised(case, "trace", grad=True))


def test_an_op_failure_keeps_the_ir_line_for_us(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("scriptmod.errors")
    sm.set_logs(errors=True)
    log.addHandler(caplog.handler)
    try:
        e = _raised(CASES[[c.name for c in CASES].index("embedding-index")], "trace")
    finally:
        log.removeHandler(caplog.handler)
        sm.set_logs()
    assert isinstance(e, InterpreterError) and "sm::embedding" in e.node_ir
    assert e.op == "embedding" and e.source == line_of("emb")
    assert any("sm::embedding" in r.getMessage() for r in caplog.records)


def test_a_kernel_breaking_our_invariant_is_an_internal_error(monkeypatch: Any) -> None:
    """A kernel meeting what the specialization promised it would not (our bug) reads as
    an internal error that still names the op and the user's line, and asks for a report."""
    from scriptmod.runtime import kernels

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("%7 : Float(3, 3) has no buffer in native segment 0")

    idx = sm.tensor([0, 1, 2])
    # (traced only: the script frontend runs a layer's kernels on stand-ins as it compiles,
    # and a kernel raising there becomes the program's own raise, as Python code would)
    for m in (sm.jit.trace(Emb().eval(), (idx,)),):
        with monkeypatch.context() as patch:           # the module compiles with it broken
            patch.setitem(kernels.KERNELS, "embedding", broken)
            patch.setitem(kernels._PLANS, "embedding",
                          kernels._Plan(kernels.REGISTRY["embedding"], broken))
            with sm.no_grad(), pytest.raises(InternalError) as info:
                m(idx)
        msg = str(info.value)
        assert "internal error in scriptmod" in msg and "embedding" in msg
        assert line_of("emb") in msg and "report" in msg
        assert not INTERNALS.findall(msg), msg
        assert isinstance(info.value.__cause__, KeyError)       # the original, for us


def test_scripted_code_raises_pythons_error_with_a_note_of_the_line() -> None:
    """A scripted Python error keeps Python's class and message; a note names the line."""
    def pick(xs: sm.Tensor, i: int) -> sm.Tensor:
        ys = [1, 2, 3]
        return xs * ys[i]                                     # <pick>
    f = sm.jit.script(pick)
    with pytest.raises(IndexError) as info:
        f(X, 7)
    assert str(info.value) == "list index out of range"
    notes = getattr(info.value, "__notes__", [])
    assert any(line_of("pick") in n for n in notes), notes
