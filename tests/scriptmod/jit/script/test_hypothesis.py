"""Hypothesis-generated programs: random nested if, for (over ranges and over a tensor's
rows) and while over int scalars and small tensors, with break, continue and early returns
(every loop's trip count is bounded). Each is written to a real .py file (``inspect`` reads
the source from it), imported, scripted, and run scripted and as Python on the same inputs
(fused, and once unfused); results must match.

Ints stay small (``%`` after every product), tensors stay bounded (convex mixes, tanh,
scaled relu), so that a branch on a tensor never sits on a rounding edge."""
from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scriptmod as sm

from .script_util import assert_same_outcome, call, tensor

TENSORS = ("t0", "t1", "t2")
INTS = ("i0", "i1", "i2")
HEADER = """import scriptmod as sm
from scriptmod import Tensor
from typing import Tuple


def program(x: Tensor, a: int, b: int) -> Tuple[Tensor, int, int]:
    t0 = x
    t1 = x * 0.5
    t2 = sm.tanh(x)
    i0 = a
    i1 = b
    i2 = 0
"""
RESULT = "(t0 + t1 - t2, i0 + i1, i2)"


class Writer:
    """Draws statements into indented lines; ``loops`` names the counters of the loops the
    current statement is inside (break/continue are only drawn there)."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.lines: list[str] = []
        self.fresh = itertools.count()

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * (depth + 1) + text)

    def int_atom(self) -> str:
        return self.draw(st.one_of(st.sampled_from(INTS), st.integers(-3, 5).map(str)))

    def int_expr(self) -> str:
        a, b = self.int_atom(), self.int_atom()
        form = self.draw(st.integers(0, 5))
        m = self.draw(st.integers(2, 9))
        return [f"({a} + {b}) % {m}", f"({a} * {b}) % {m}", f"({a} - {b}) // {m}",
                f"{a} - {b}", f"-{a} + 1", f"min({a}, {b}) + max({a}, {b}) % {m}"][form]

    def tensor_expr(self) -> str:
        p, q = self.draw(st.sampled_from(TENSORS)), self.draw(st.sampled_from(TENSORS))
        i = self.draw(st.sampled_from(INTS))
        form = self.draw(st.integers(0, 5))
        return [f"{p} * 0.5 + {q} * 0.5", f"sm.tanh({p} - {q} * 2.0)",
                f"({p} - {i}).relu() * 0.25", f"{p}.sin() * 0.75 - {q} * 0.25",
                f"sm.where({p} > {q}, {p}, {q} * -0.5)", f"{p}.clamp(-1.0, 1.0) + 0.125"][form]

    def condition(self) -> str:
        a, b = self.draw(st.sampled_from(INTS)), self.int_atom()
        t = self.draw(st.sampled_from(TENSORS))
        c = self.draw(st.sampled_from(["-0.5", "0.25", "1.5"]))
        form = self.draw(st.integers(0, 5))
        return [f"{a} < {b}", f"{a} % 2 == 0", f"bool({t}.sum() > {c})",
                f"float({t}.mean()) < {c}", f"{a} >= {b} and {a} != 3",
                f"not ({a} == {b} or bool({t}.max() < {c}))"][form]

    def block(self, depth: int, loops: int, size: int) -> None:
        for _ in range(size):
            self.statement(depth, loops)

    def statement(self, depth: int, loops: int) -> None:
        kinds = ["int", "tensor", "aug"]
        if depth < 3:
            kinds += ["if", "for", "for-tensor", "while"]
        if loops:
            kinds += ["break", "continue"]
        kinds.append("return")
        kind = self.draw(st.sampled_from(kinds))
        if kind == "int":
            self.emit(depth, f"{self.draw(st.sampled_from(INTS))} = {self.int_expr()}")
        elif kind == "tensor":
            self.emit(depth, f"{self.draw(st.sampled_from(TENSORS))} = {self.tensor_expr()}")
        elif kind == "aug":
            op = self.draw(st.sampled_from(["+=", "-=", "*="]))
            name = self.draw(st.sampled_from(INTS))
            self.emit(depth, f"{name} {op} {self.draw(st.integers(-2, 3))}")
            self.emit(depth, f"{name} = {name} % 23")
        elif kind in ("break", "continue", "return"):
            self.emit(depth, f"if {self.condition()}:")
            self.emit(depth + 1, f"return {RESULT}" if kind == "return" else kind)
        elif kind == "if":
            self.emit(depth, f"if {self.condition()}:")
            self.block(depth + 1, loops, self.draw(st.integers(1, 3)))
            if self.draw(st.booleans()):
                self.emit(depth, f"elif {self.condition()}:")
                self.block(depth + 1, loops, self.draw(st.integers(1, 2)))
            if self.draw(st.booleans()):
                self.emit(depth, "else:")
                self.block(depth + 1, loops, self.draw(st.integers(1, 2)))
        elif kind == "for":
            k = f"k{next(self.fresh)}"
            bound = self.draw(st.sampled_from(["3", "i0 % 4", "(i1 % 3) + 1", "4, 0, -2",
                                               "1, 5, 2"]))
            self.emit(depth, f"for {k} in range({bound}):")
            self.emit(depth + 1, f"i2 = (i2 + {k}) % 31")
            self.block(depth + 1, loops + 1, self.draw(st.integers(1, 3)))
        elif kind == "for-tensor":                     # over dim 0: 0-d rows
            r = f"r{next(self.fresh)}"
            self.emit(depth, f"for {r} in {self.draw(st.sampled_from(TENSORS))}:")
            self.emit(depth + 1, f"t1 = t1 * 0.5 + {r} * 0.25")
            self.block(depth + 1, loops + 1, self.draw(st.integers(1, 3)))
        else:
            w = f"w{next(self.fresh)}"
            self.emit(depth, f"{w} = 0")
            self.emit(depth, f"while {w} < {self.draw(st.integers(0, 4))} and "
                             f"({self.condition()}):")
            self.emit(depth + 1, f"{w} += 1")
            self.block(depth + 1, loops + 1, self.draw(st.integers(1, 3)))


@st.composite
def programs(draw: Any) -> str:
    w = Writer(draw)
    w.block(0, 0, draw(st.integers(1, 4)))
    w.emit(0, f"return {RESULT}")
    return HEADER + "\n".join(w.lines) + "\n"


_DIR = Path(tempfile.mkdtemp(prefix="scriptmod_hypothesis_"))
_COUNTER = itertools.count()


def load(source: str) -> Any:
    """Write ``source`` to a new file and import it (a new name each time: inspect and
    linecache key the source by file name)."""
    name = f"scriptmod_generated_{next(_COUNTER)}"
    path = _DIR / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.program


X = tensor(3, seed=21)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          print_blob=True)
@given(source=programs(), inputs=st.lists(st.tuples(st.integers(-6, 9), st.integers(-6, 9)),
                                          min_size=2, max_size=3))
def test_generated_programs_scripted_equal_python(source: str, inputs: list) -> None:
    fn = load(source)
    scripted = sm.jit.script(fn)
    for a, b in inputs:
        args = (X, a, b)
        assert_same_outcome(call(scripted, args), call(fn, args),
                            f"inputs a={a} b={b}; program:\n{source}")
    a, b = inputs[0]
    with sm.jit.fuser(False):
        assert_same_outcome(call(scripted, (X, a, b)), call(fn, (X, a, b)),
                            f"unfused, inputs a={a} b={b}; program:\n{source}")


def test_a_fixed_generated_shape_program() -> None:
    """One hand-written program of the generated shape, so a generator change that breaks
    the harness shows here first."""
    source = HEADER + """    for k0 in range(i0 % 4):
        i2 = (i2 + k0) % 31
        w1 = 0
        while w1 < 3 and (bool(t1.sum() > -0.5)):
            w1 += 1
            t1 = sm.tanh(t1 - t2 * 2.0)
            if i1 % 2 == 0:
                continue
            if i0 < 2:
                break
        if float(t0.mean()) < 0.25:
            return """ + RESULT + """
        i0 = (i0 - i1) // 3
    return """ + RESULT + "\n"
    fn = load(source)
    scripted = sm.jit.script(fn)
    for a, b in [(3, 2), (7, -5), (0, 0), (-4, 1)]:
        assert_same_outcome(call(scripted, (X, a, b)), call(fn, (X, a, b)), f"a={a} b={b}")
