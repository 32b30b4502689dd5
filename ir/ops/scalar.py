"""Integer arithmetic on sizes, so that shapes read from ``x.shape`` stay symbolic in traces
(``x.view(x.size(0) * 2, -1)`` records ``size``, ``int_mul`` and ``reshape``), comparisons of
sizes, and ``guard``: the check that a specialization takes the branch the trace took."""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from . import rules as R
from .. import symdims as SD
from ..graph import SYMBOLIC_VALUE_RULES, VALUE_RULES
from ..schema import IMPURE, NONDIFF, op

# what each int op computes on Python ints: the reference kernels and the shape pass share it
INT_ARITH: dict[str, Callable[..., int]] = {
    "int_add": operator.add, "int_sub": operator.sub, "int_mul": operator.mul,
    "int_floordiv": operator.floordiv, "int_mod": operator.mod, "int_min": min, "int_max": max}
INT_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "int_eq": operator.eq, "int_ne": operator.ne, "int_lt": operator.lt, "int_le": operator.le,
    "int_gt": operator.gt, "int_ge": operator.ge}
INT_FUNCS: dict[str, Callable[..., int | bool]] = {**INT_ARITH, **INT_COMPARE,
                                                   "int_neg": operator.neg}

VALUE_RULES.update({f"sm::{name}": fn for name, fn in INT_FUNCS.items()})

# the same on symbolic sizes (``size(x, 1) - 1`` is ``T-1``); comparisons where decided
SYMBOLIC_ARITH: dict[str, Callable[..., Any]] = {
    "add": SD.add, "sub": SD.sub, "mul": SD.mul, "floordiv": SD.floordiv, "mod": SD.mod,
    "min": SD.minimum, "max": SD.maximum}
SYMBOLIC_COMPARE: dict[str, str] = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
                                    "ge": ">="}
SYMBOLIC_VALUE_RULES.update({f"sm::int_{name}": (lambda attrs, *a, fn=fn: fn(*a))
                             for name, fn in SYMBOLIC_ARITH.items()})
SYMBOLIC_VALUE_RULES.update({f"sm::int_{name}": (lambda attrs, a, b, o=o: SD.compare(o, a, b))
                             for name, o in SYMBOLIC_COMPARE.items()})
SYMBOLIC_VALUE_RULES["sm::int_neg"] = lambda attrs, a: SD.neg(a)

def _divisor(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    """An int; a constant zero divisor is refused where the graph is built or loaded."""
    if values[1] == 0 and type(values[1]) is int:
        raise ValueError("integer division or modulo by a constant zero")
    return ()


for _name in INT_ARITH:
    _rule = _divisor if _name in ("int_floordiv", "int_mod") else R.scalar_shape
    op(f"{_name}(int a, int b) -> int", R.no_dtype, _rule, NONDIFF)
op("int_neg(int a) -> int", R.no_dtype, R.scalar_shape, NONDIFF)
for _name in INT_COMPARE:
    op(f"{_name}(int a, int b) -> bool", R.no_dtype, R.scalar_shape, NONDIFF)

# IMPURE: dead-code elimination and CSE keep it although nothing reads its result
op("guard(bool cond, *, str what, str where='') -> bool", R.no_dtype, R.scalar_shape, NONDIFF,
   IMPURE, doc="Raises TraceGuardError unless ``cond``: the trace took a branch (or baked a "
               "size) that holds only while ``what`` is true.")
