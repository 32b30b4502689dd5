"""Sizes in the derivative rules of a graph typed with symbolic dims (``Float(B, 64)``).

``_autodiff`` runs each op's rule on zero-filled stand-ins of one example size (the call that
asked for the backward). Where a forward value has a symbolic dim, a rule that reads that
size (``ctx.input_meta``, ``x.shape``, ``x.numel()``) gets a ``TracedInt``: its value is the
example's, and where it feeds an op (``g.reshape(shape)``, ``g.expand(shape)``, ``g / n``)
it becomes an int computed in the backward graph from a ``sm::size`` of a backward value, so
the backward serves every size of the specialization's class and no size is baked in.

A rule that decides on such a size in Python (``_sum_to``'s ``s == 1``, ``max(n, 1)``) takes
the branch the example takes; that is allowed only when every size of the class decides the
same (``always``: a class's named sizes are >= 2, so ``B == 1`` is false for all of them and
``B == B`` true), else the derivative raises ``NotDifferentiable`` and the call runs op by
op. A size turned into a Python int (``int(n)``, ``range(n)``) would be baked in, so it
raises too. As when tracing, only the rules' own decisions count, and those an op layer
forces (how many pieces ``split`` returns); a kernel computing the example's result, or an
op's size check, reads the example's value. This plays the part of ``_tracer.Tracer`` for
``TracedInt`` (``int_value``, ``guard``), with the backward under construction as the frame
(its builder ``b``).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from scriptmod.ir import symdims
from scriptmod.ir.graph import Value, known_value
from scriptmod import autograd
from scriptmod import _traced_int
from scriptmod._traced_int import TracedInt, comparison_text

_SYMBOL = {"int_eq": "==", "int_ne": "!=", "int_lt": "<", "int_le": "<=", "int_gt": ">",
           "int_ge": ">="}
# where the derivative rules decide: the autograd package (its table and the engine's
# ``_sum_to``) and ``_autodiff``, which runs them
_RULES = (os.path.dirname(os.path.abspath(autograd.__file__)) + os.sep,
          os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autodiff.py"))
_SIZE_CODE = frozenset(os.path.abspath(m.__file__) for m in (_traced_int, sys.modules[__name__]))


class NotDifferentiable(Exception):
    """The graph has a node whose backward cannot be built in the IR (the reason says which)."""


class RuleSizes:
    """The ``TracedInt`` sizes of one backward under construction. ``frame`` has the builder
    ``b`` that the ints are recorded with (the ``_autodiff._Backward``)."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self._ints: dict[int, Value] = {}     # id(TracedInt) -> its value in the backward
        self._keep: list[TracedInt] = []      # the TracedInts of ``_ints``, kept alive

    def size(self, example: int, dim: int | str | None, make: Callable[[Any], Value]) -> int:
        """The size a rule sees for a dim of type ``dim`` whose example size is ``example``:
        the plain int for a concrete dim, a ``TracedInt`` built by ``make(frame)`` else."""
        if isinstance(dim, int):
            return dim
        if dim is None:
            raise NotDifferentiable("a derivative rule reads a size the graph does not know")
        return TracedInt(example, self, make, dim)

    # ---- what TracedInt asks of its tracer ------------------------------------------------
    def int_value(self, fr: Any, x: Any) -> Value:
        return _traced_int.int_value(x, fr, self._ints, self._keep)

    def guard(self, op: str, a: Any, b: Any, how: str, force: bool = False,
              frame: Any = None) -> None:
        """``a <op> b`` held at the example size: when a rule decided on it (or an op layer
        with ``force``), it must hold at every size of the class."""
        frame = frame or _deciding_frame()
        if not force and (frame is None or not _is_rule(frame)):
            return
        if not always(op, self._dim_of(a), self._dim_of(b)):
            raise NotDifferentiable(f"a derivative rule decides on a symbolic size "
                                    f"({comparison_text(op, a, b)}, as {how}), which other "
                                    f"sizes of the class may decide otherwise")

    def _dim_of(self, x: Any) -> int | str | None:
        """The dim ``x`` is in the backward graph's types: an int, a symbolic text, or None."""
        if not isinstance(x, TracedInt):
            return int(x)
        d = known_value(self.int_value(self.frame, x))
        return d if isinstance(d, (int, str)) else None


def _deciding_frame() -> Any:
    """The frame that decided on a size: the first outside ``TracedInt`` and this module."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename) in _SIZE_CODE:
        f = f.f_back
    return f


def _is_rule(frame: Any) -> bool:
    path = os.path.abspath(frame.f_code.co_filename)
    return path.startswith(_RULES[0]) or path == _RULES[1]


def always(op: str, a: int | str | None, b: int | str | None) -> bool:
    """Whether ``a <op> b`` holds for every size of a batch class, as the dims alone show
    (``ir.symdims.compare``: each named size >= 2, so ``B != 1``, ``16*B > 31``,
    ``T-1 >= 1``); False where they do not decide it (``B == 64``) or a dim is unknown."""
    return symdims.compare(_SYMBOL[op], a, b) is True
