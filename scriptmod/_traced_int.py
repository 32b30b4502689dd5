"""``TracedInt``: a size read from a traced tensor's shape.

Arithmetic on it is recorded (``int_*`` ops), so a size computed from ``x.shape`` follows the
input at run time. A Python decision on it cannot be recorded: a comparison or ``bool()``
picks a branch, and ``int()``, ``float()``, ``range(n)`` and friends turn it into a constant.
Those record the decision as int ops plus an ``sm::guard`` node and, when the user's own code
made it, emit a ``TracerWarning`` citing the line (as PyTorch does). At run time a call for
which the decision would differ raises ``TraceGuardError`` instead of returning what the other
branch would not have computed. Size checks inside scriptmod's own layers are not guarded:
the ops they feed check their inputs again at run time.
"""
from __future__ import annotations

import builtins
import os
import sys
import threading
import warnings
from typing import Any, Callable

from scriptmod.ir.ops.scalar import INT_COMPARE

Maker = Callable[[Any], Any]     # Frame -> Value

_SYMBOL = {"int_add": "+", "int_sub": "-", "int_mul": "*", "int_floordiv": "//", "int_mod": "%"}
_IDENTITY = {("int_add", 0), ("int_sub", 0), ("int_mul", 1), ("int_floordiv", 1)}
_LEFT_ONLY = {"int_sub", "int_floordiv"}          # 0 - n and 1 // n are not n
_CMP_SYMBOL = {"int_eq": "==", "int_ne": "!=", "int_lt": "<", "int_le": "<=", "int_gt": ">",
               "int_ge": ">="}
_NEGATED = {"int_eq": "int_ne", "int_ne": "int_eq", "int_lt": "int_ge", "int_ge": "int_lt",
            "int_gt": "int_le", "int_le": "int_gt"}
_FLIPPED = {"int_eq": "int_eq", "int_ne": "int_ne", "int_lt": "int_gt", "int_gt": "int_lt",
            "int_le": "int_ge", "int_ge": "int_le"}


class TracerWarning(Warning):
    """A traced value was turned into a Python value: the trace bakes it in as a constant."""


class TracedInt(int):
    """A size read from a traced tensor's shape; arithmetic on it is recorded too.

    ``text`` is how the size reads in messages (``x.shape[0] // 2``)."""

    def __new__(cls, value: int, tracer: Any, make: Maker, text: str = "size") -> "TracedInt":
        obj = super().__new__(cls, value)
        obj._tracer, obj._make, obj._text = tracer, make, text
        return obj

    # ---- recorded arithmetic ---------------------------------------------------------------
    def _binop(self, other: Any, op: str, fn: Callable[[int, int], int], flip: bool = False) -> Any:
        if not isinstance(other, int) or isinstance(other, bool):
            mine = self._bake(f"a Python {type(other).__name__} operand")
            return fn(mine, other) if not flip else fn(other, mine)
        if not isinstance(other, TracedInt) and (op, int(other)) in _IDENTITY \
                and not (flip and op in _LEFT_ONLY):
            return self                    # n + 0, n * 1, n // 1: nothing to record (a traced
            # size that is 0 now is no constant: it is recorded)
        a, b = (other, self) if flip else (self, other)
        tr = self._tracer
        return TracedInt(fn(int.__int__(a), int.__int__(b)), tr,
                         lambda fr: fr.b.op(op, tr.int_value(fr, a), tr.int_value(fr, b)),
                         f"{_paren(a)} {_SYMBOL.get(op, op)} {_paren(b)}" if op in _SYMBOL
                         else f"{op[4:]}({_text(a)}, {_text(b)})")

    def __add__(self, o: Any) -> Any: return self._binop(o, "int_add", lambda a, b: a + b)
    def __radd__(self, o: Any) -> Any: return self._binop(o, "int_add", lambda a, b: a + b, True)
    def __sub__(self, o: Any) -> Any: return self._binop(o, "int_sub", lambda a, b: a - b)
    def __rsub__(self, o: Any) -> Any: return self._binop(o, "int_sub", lambda a, b: a - b, True)
    def __mul__(self, o: Any) -> Any: return self._binop(o, "int_mul", lambda a, b: a * b)
    def __rmul__(self, o: Any) -> Any: return self._binop(o, "int_mul", lambda a, b: a * b, True)
    def __floordiv__(self, o: Any) -> Any: return self._binop(o, "int_floordiv", lambda a, b: a // b)
    def __rfloordiv__(self, o: Any) -> Any: return self._binop(o, "int_floordiv", lambda a, b: a // b, True)
    def __mod__(self, o: Any) -> Any: return self._binop(o, "int_mod", lambda a, b: a % b)
    def __rmod__(self, o: Any) -> Any: return self._binop(o, "int_mod", lambda a, b: a % b, True)

    def __neg__(self) -> Any:
        tr = self._tracer
        return TracedInt(-int.__int__(self), tr,
                         lambda fr: fr.b.op("int_neg", tr.int_value(fr, self)), f"-{_paren(self)}")

    def __pos__(self) -> Any:
        return self

    def __floor__(self) -> Any:      # math.floor/ceil/trunc and round() of an int: itself
        return self

    __ceil__ = __trunc__ = __floor__

    def __round__(self, ndigits: Any = None) -> Any:
        return self if ndigits is None or ndigits >= 0 else round(self._bake("round()"), ndigits)

    def __hash__(self) -> int:
        return int.__hash__(self)

    # ---- decisions: recorded as guards -----------------------------------------------------
    def _compare(self, other: Any, op: str) -> bool:
        if not isinstance(other, int) or isinstance(other, bool):
            return INT_COMPARE[op](self._bake(f"a comparison with a {type(other).__name__}"), other)
        result = INT_COMPARE[op](int.__int__(self), int.__int__(other))
        self._tracer.guard(op if result else _NEGATED[op], self, other, "a Python bool")
        return result

    def __eq__(self, o: Any) -> bool: return self._compare(o, "int_eq")   # type: ignore[override]
    def __ne__(self, o: Any) -> bool: return self._compare(o, "int_ne")   # type: ignore[override]
    def __lt__(self, o: Any) -> bool: return self._compare(o, "int_lt")
    def __le__(self, o: Any) -> bool: return self._compare(o, "int_le")
    def __gt__(self, o: Any) -> bool: return self._compare(o, "int_gt")
    def __ge__(self, o: Any) -> bool: return self._compare(o, "int_ge")

    def __bool__(self) -> bool:
        result = int.__int__(self) != 0
        self._tracer.guard("int_ne" if result else "int_eq", self, 0, "a Python bool")
        return result

    def _bake(self, how: str, force: bool = False, frame: Any = None) -> int:
        """The plain value, with a guard that the size keeps it (``int(n)``, ``range(n)``)."""
        self._tracer.guard("int_eq", self, int.__int__(self), how, force, frame)
        return int.__int__(self)

    def __int__(self) -> int: return self._bake("a Python int")
    def __index__(self) -> int: return self._bake("a Python index")
    def __float__(self) -> float: return float(self._bake("a Python float"))
    def __truediv__(self, o: Any) -> Any: return self._bake("a Python float") / o
    def __rtruediv__(self, o: Any) -> Any: return o / self._bake("a Python float")
    def __pow__(self, o: Any, mod: Any = None) -> Any: return pow(self._bake("a Python number"), o, mod)
    def __rpow__(self, o: Any) -> Any: return pow(o, self._bake("a Python number"))
    def __abs__(self) -> int: return abs(self._bake("a Python int"))
    def __and__(self, o: Any) -> Any: return self._bake("a Python int") & o
    def __or__(self, o: Any) -> Any: return self._bake("a Python int") | o
    def __xor__(self, o: Any) -> Any: return self._bake("a Python int") ^ o
    def __lshift__(self, o: Any) -> Any: return self._bake("a Python int") << o
    def __rshift__(self, o: Any) -> Any: return self._bake("a Python int") >> o
    def __divmod__(self, o: Any) -> Any: return divmod(self._bake("a Python int"), o)


def int_value(x: Any, fr: Any, ints: dict, keep: list) -> Any:
    """The graph value of a size in frame ``fr``: a ``TracedInt``'s, made once (``ints``:
    id -> value; ``keep`` holds the TracedInt alive so that its id is not recycled), or a
    constant for a plain int. Tracers implement their ``int_value`` with it."""
    if isinstance(x, TracedInt):
        v = ints.get(id(x))
        if v is None:
            v = ints[id(x)] = x._make(fr)
            keep.append(x)
        return v
    return fr.b.constant(int(x))


def _text(x: Any) -> str:
    return x._text if isinstance(x, TracedInt) else repr(x)


def _paren(x: Any) -> str:
    t = _text(x)
    return f"({t})" if " " in t and not t.startswith(("min(", "max(")) else t


def comparison_text(op: str, a: Any, b: Any) -> str:
    """``x.shape[0] > 2``: how a guard's condition reads in warnings and errors."""
    return f"{_text(a)} {_CMP_SYMBOL[op]} {_text(b)}"


def flipped(op: str) -> str:
    """The comparison with its operands swapped (``2 < n`` is ``n > 2``)."""
    return _FLIPPED[op]


# ---- whose code made the decision --------------------------------------------------------
_INTERNAL = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (
    sys.modules["scriptmod"], sys.modules["scriptmod.ir"], sys.modules["scriptmod.runtime"]))
_MODELS = os.sep + os.path.join("scriptmod", "bench") + os.sep   # built-in models are user code
_HERE = os.path.dirname(os.path.abspath(__file__))
_OWN = frozenset((os.path.abspath(__file__), os.path.join(_HERE, "jit", "_tracer.py")))


def deciding_frame() -> Any:
    """The frame that made a decision on a size: the first one outside the tracer."""
    f = sys._getframe(1)
    while f is not None and _path(f) in _OWN:
        f = f.f_back
    return f


def is_user_code(frame: Any) -> bool:
    """Not scriptmod's own layers (whose size checks are re-checked by the ops they feed)."""
    path = _path(frame)
    return not path.startswith(_INTERNAL) or _MODELS in path


def _path(frame: Any) -> str:
    name = frame.f_code.co_filename
    return name if name.startswith("<") else os.path.abspath(name)


def warn_at(frame: Any, message: str) -> None:
    """A ``TracerWarning`` attributed to the user's line (filters and ``-W error`` apply)."""
    g = frame.f_globals
    warnings.warn_explicit(TracerWarning(message), TracerWarning, frame.f_code.co_filename,
                           frame.f_lineno, g.get("__name__"), g.setdefault("__warningregistry__", {}))


def where(frame: Any) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


# ---- range(n): the one conversion an int subclass cannot see -----------------------------
_builtin_range = builtins.range
_watch = {"depth": 0}
_watch_lock = threading.Lock()


class _RangeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _builtin_range)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, _builtin_range)

    def __call__(cls, *args: Any) -> Any:
        plain = []
        for a in args:
            plain.append(a._bake("a range() bound (the loop is unrolled)")
                         if type(a) is TracedInt else a)
        return _builtin_range(*plain)


class _Range(metaclass=_RangeMeta):
    """``builtins.range`` while a trace runs: notices a traced size used as a loop bound
    (CPython reads an int subclass's value directly, so no hook of ``TracedInt`` sees it)."""


class watch_range:
    """``with watch_range():`` — ``range`` is ``_Range`` while any trace runs."""

    def __enter__(self) -> None:
        with _watch_lock:
            _watch["depth"] += 1
            if _watch["depth"] == 1:
                builtins.range = _Range    # type: ignore[misc]

    def __exit__(self, *exc: Any) -> None:
        with _watch_lock:
            _watch["depth"] -= 1
            if _watch["depth"] == 0:
                builtins.range = _builtin_range    # type: ignore[misc]


# ---- for scriptmod's own ops: sizes that fix a structure (how many pieces split returns) --
def fixed(n: Any, how: str) -> int:
    """``n`` as a plain int; a traced size is guarded to keep its value (no warning: the
    structure of an op, not the user's code, depends on it)."""
    return n._bake(how, force=True) if type(n) is TracedInt else n


def check(op: str, a: Any, b: Any, how: str) -> bool:
    """``a <op> b`` on sizes; when a traced size takes part, the outcome is guarded."""
    result = INT_COMPARE[op](int.__int__(a), int.__int__(b))
    traced = a if type(a) is TracedInt else b if type(b) is TracedInt else None
    if traced is not None:
        traced._tracer.guard(op if result else _NEGATED[op], a, b, how, True)
    return result


def sym_max(a: Any, b: Any) -> Any:
    """``max`` that stays symbolic for traced sizes (``int_max``)."""
    if type(a) is TracedInt:
        return a._binop(b, "int_max", max)
    return b._binop(a, "int_max", max, True) if type(b) is TracedInt else max(a, b)


def sym_min(a: Any, b: Any) -> Any:
    """``min`` that stays symbolic for traced sizes (``int_min``)."""
    if type(a) is TracedInt:
        return a._binop(b, "int_min", min)
    return b._binop(a, "int_min", min, True) if type(b) is TracedInt else min(a, b)


def ceil_div(a: Any, b: Any) -> Any:
    """``ceil(a / b)`` for sizes, recorded as ``-(-a // b)`` and read as ``ceil(a / b)``."""
    out = -(-a // b)
    if type(out) is TracedInt:
        out._text = f"ceil({_paren(a)} / {_paren(b)})"
    return out
