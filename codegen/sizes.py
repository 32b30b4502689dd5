"""Sizes of a symbolic specialization (``runtime.native`` plans with them, ``codegen.native``
computes them): integer polynomials in its symbolic dims.

A symbolic specialization's types name their run-time dims (``Float(B, 16, 64)``, ``16*B``,
``B*T``, ``T - 1``); each symbol is bound once per call from the inputs' shapes and is at
least 2 (the executor's guard). The native planner works with ``Poly`` wherever a size,
stride, element count or byte offset depends on them, the codegen computes them from the
symbol values the call passes, and the arena is placed per set of symbol values.

    >>> b = dim("B"); n = 16 * b * 64
    >>> n, n.evaluate({"B": 3}), n > 64, (b - 1) * 2
    (Poly(1024*B), 3072, True, Poly(2*B - 2))

``lift(fn, *args)`` runs a planning helper written for concrete sizes (``plan_layout``,
``gemm_shape``, a view probe) on symbolic arguments: at several sizes, checking that every
answer has one structure and fitting each integer in it to a polynomial:

    >>> lift(lambda s: (s[0] * s[1], s[1] + 1, "x"), (b, 5))
    (Poly(5*B), 6, 'x')

``SizeDependent`` is raised where a choice depends on the sizes (a comparison that is not
the same for every size, an answer whose structure changes): that node stays in Python.
"""
from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping

from scriptmod.ir import symdims
from .record import Record

Monomial = tuple[str, ...]          # sorted symbol names, repeated for powers
MIN_SYMBOL = 2                      # every symbolic dim is >= 2 (the executor's guard)
_FIT = (5, 7, 11)                   # the sizes a lifted helper is fitted at (degree <= 2)
_CHECK = (2, 3, 64, 1000)           # and checked at, each symbol alike, then mixed


class SizeDependent(Exception):
    """A planning choice that is not the same for every size of the symbolic dims."""


class Poly:
    """An integer polynomial in symbol names (never a constant: arithmetic that cancels
    every symbol returns an ``int``). Comparisons hold for every symbol value >= 2, else
    raise ``SizeDependent``; ``==`` is structural."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        self.terms = tuple(sorted((m, c) for m, c in terms.items() if c))
        self._hash = hash(self.terms)

    # -- building ------------------------------------------------------------------------------
    @staticmethod
    def make(terms: Mapping[Monomial, int]) -> "int | Poly":
        """``terms`` as a ``Poly``, or an ``int`` when no symbol is left."""
        live = {m: c for m, c in terms.items() if c}
        if not any(live):
            return live.get((), 0)
        return Poly(live)

    def _combine(self, other: Any, sign: int) -> "int | Poly":
        o = _as_terms(other)
        if o is None:
            return NotImplemented
        out = dict(self.terms)
        for m, c in o.items():
            out[m] = out.get(m, 0) + sign * c
        return Poly.make(out)

    def __add__(self, other: Any) -> "int | Poly":
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> "int | Poly":
        return self._combine(other, -1)

    def __rsub__(self, other: Any) -> "int | Poly":
        return (-self) + other

    def __neg__(self) -> "int | Poly":
        return Poly.make({m: -c for m, c in self.terms})

    def __mul__(self, other: Any) -> "int | Poly":
        o = _as_terms(other)
        if o is None:
            return NotImplemented
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.items():
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.make(out)

    __rmul__ = __mul__

    # -- reading ---------------------------------------------------------------------------------
    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s in m)

    def evaluate(self, env: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms:
            for s in m:
                c *= env[s]
            total += c
        return total

    def positive(self) -> bool | None:
        """True when > 0 for every symbol value >= 2, False when <= 0 for every one of
        them (checked on the polynomial in ``s - 2``, where all coefficients must agree in
        sign), None when it depends."""
        shifted: dict[Monomial, int] = {}
        for m, c in self.terms:            # expand prod (t_s + 2)
            parts: list[tuple[Monomial, int]] = [((), c)]
            for s in m:
                parts = [(pm + add, pc * mul) for pm, pc in parts
                         for add, mul in (((s,), 1), ((), MIN_SYMBOL))]
            for pm, pc in parts:
                key = tuple(sorted(pm))
                shifted[key] = shifted.get(key, 0) + pc
        coefs = [c for c in shifted.values() if c]
        if all(c >= 0 for c in coefs) and shifted.get((), 0) > 0:
            return True
        if all(c <= 0 for c in coefs):
            return False
        return None

    def _decide(self, other: Any, strict: bool) -> bool:
        diff = self - other                      # self > other (strict) / self >= other
        if isinstance(diff, int):
            return diff > 0 if strict else diff >= 0
        sign = diff.positive() if strict else (diff + 1).positive()
        if sign is None:
            raise SizeDependent(f"whether {self} {'>' if strict else '>='} {other} depends "
                                f"on the sizes")
        return sign

    def __gt__(self, other: Any) -> bool:
        return self._decide(other, True)

    def __ge__(self, other: Any) -> bool:
        return self._decide(other, False)

    def __lt__(self, other: Any) -> bool:
        return not self._decide(other, False)

    def __le__(self, other: Any) -> bool:
        return not self._decide(other, True)

    def __bool__(self) -> bool:
        if self.positive() or (-self).positive():   # type: ignore[union-attr]
            return True
        raise SizeDependent(f"whether {self} is 0 depends on the sizes")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def text(self, name: Callable[[str], str] = str) -> str:
        """``16*B``, ``B*T - 1``: symbols named by ``name`` (a Python expression for each
        makes this a Python expression)."""
        out = ""
        for m, c in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            factors = [str(abs(c))] if abs(c) != 1 or not m else []
            factors += [name(s) for s in m]
            sign = "-" if c < 0 else "+"
            out += (f" {sign} " if out else ("-" if c < 0 else "")) + "*".join(factors)
        return out

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"Poly({self.text()})"


def _as_terms(x: Any) -> dict[Monomial, int] | None:
    if isinstance(x, Poly):
        return dict(x.terms)
    if isinstance(x, int) and not isinstance(x, bool):
        return {(): x}
    return None


def dim(d: int | str) -> int | Poly:
    """A shape entry of an IR type as a size: ints stay ints; a symbolic dim that is a
    polynomial in names (``B``, ``16*B``, ``B*T``, ``T - 1``: ``ir.symdims``' canonical
    text) becomes a ``Poly``. ``ValueError`` for anything else (``None``, or a dim with a
    floor division, ``max`` or ``min`` atom): such a value stays out of native code."""
    if isinstance(d, int) and not isinstance(d, bool):
        return d
    if not isinstance(d, str) or not d:
        raise ValueError(f"dim {d!r}: not a size")
    found = symdims.terms(d)
    if found is None:
        raise ValueError(f"symbolic dim {d!r}: a floor division, modulo, max or min is not a "
                         f"polynomial in its symbols")
    return Poly.make(found)


def symbols_of(x: Any) -> frozenset[str]:
    """Every symbol in ``x`` (sizes, tuples, lists, dicts, ``Record`` values)."""
    out: set[str] = set()
    for leaf in _leaves(x):
        if isinstance(leaf, Poly):
            out |= leaf.symbols
    return frozenset(out)


def evaluate(x: Any, env: Mapping[str, int]) -> Any:
    """``x`` with every ``Poly`` replaced by its value in ``env`` (containers and
    ``Record`` values rebuilt)."""
    if isinstance(x, Poly):
        return x.evaluate(env)
    if isinstance(x, (tuple, list)):
        return type(x)(evaluate(v, env) for v in x)
    if isinstance(x, dict):
        return {k: evaluate(v, env) for k, v in x.items()}
    if _is_record(x) and symbols_of(x):
        return type(x)(*(evaluate(v, env) for v in x._values()))
    return x


def _is_record(x: Any) -> bool:
    return isinstance(x, Record)


def _leaves(x: Any) -> Iterable[Any]:
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from _leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif _is_record(x):
        for v in x._values():
            yield from _leaves(v)
    else:
        yield x


# ---- lifting a concrete helper -------------------------------------------------------------------

def lift(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` for symbolic ``args``: ``fn`` on concrete sizes at ``_FIT`` (every
    combination, per symbol) and checked at ``_CHECK``; each integer of the answer is fitted
    to a polynomial of degree <= 2 in each symbol. ``SizeDependent`` when the answers differ
    in structure or an integer is no such polynomial. Without symbols, ``fn(*args)``."""
    syms = sorted(symbols_of(args))
    if not syms:
        return fn(*args)
    if len(syms) > 3:
        raise SizeDependent(f"more than 3 symbols ({', '.join(syms)})")
    grid = list(itertools.product(_FIT, repeat=len(syms)))
    checks = [tuple([v] * len(syms)) for v in _CHECK]
    checks += [tuple(_CHECK[(i + j) % len(_CHECK)] for j in range(len(syms)))
               for i in range(len(_CHECK))]
    answers = {pt: _call(fn, args, dict(zip(syms, pt))) for pt in grid + checks}
    first = answers[grid[0]]
    skeleton = _skeleton(first)
    for pt, ans in answers.items():
        if _skeleton(ans) != skeleton:
            raise SizeDependent(f"the layout at {dict(zip(syms, pt))} differs from the one "
                                f"at {dict(zip(syms, grid[0]))}")
    ints = {pt: _ints(ans) for pt, ans in answers.items()}
    fitted = [_fit(syms, {pt: ints[pt][i] for pt in grid}) for i in range(len(ints[grid[0]]))]
    for pt in checks:
        env = dict(zip(syms, pt))
        for f, got in zip(fitted, ints[pt]):
            if evaluate(f, env) != got:
                raise SizeDependent(f"a size of the layout is not a polynomial in "
                                    f"{', '.join(syms)}")
    return _rebuild(first, iter(fitted))


def _call(fn: Callable[..., Any], args: tuple, env: dict[str, int]) -> Any:
    try:
        return fn(*evaluate(args, env))
    except SizeDependent:
        raise
    except (NotImplementedError, ValueError) as e:
        raise SizeDependent(f"at {env}: {e}") from e


def _skeleton(x: Any) -> Any:
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return int
    if isinstance(x, (tuple, list)):
        return (type(x), tuple(_skeleton(v) for v in x))
    if isinstance(x, dict):
        return (dict, tuple((k, _skeleton(v)) for k, v in x.items()))
    if _is_record(x):
        return (type(x), tuple(_skeleton(v) for v in x._values()))
    return x


def _ints(x: Any) -> list[int]:
    if isinstance(x, bool):
        return []
    if isinstance(x, int):
        return [x]
    if isinstance(x, (tuple, list)):
        return [i for v in x for i in _ints(v)]
    if isinstance(x, dict):
        return [i for v in x.values() for i in _ints(v)]
    if _is_record(x):
        return [i for v in x._values() for i in _ints(v)]
    return []


def _rebuild(x: Any, fitted: Any) -> Any:
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return next(fitted)
    if isinstance(x, (tuple, list)):
        return type(x)(_rebuild(v, fitted) for v in x)
    if isinstance(x, dict):
        return {k: _rebuild(v, fitted) for k, v in x.items()}
    if _is_record(x):
        return type(x)(*(_rebuild(v, fitted) for v in x._values()))
    return x


def _fit(syms: list[str], values: dict[tuple, int]) -> int | Poly:
    """The polynomial (degree <= 2 per symbol) through ``values`` on the ``_FIT`` grid:
    one 1-D interpolation per symbol, in turn (exact, in fractions)."""
    table: dict[tuple, Fraction] = {pt: Fraction(v) for pt, v in values.items()}
    for axis in range(len(syms)):
        out: dict[tuple, Fraction] = {}
        for pt in table:
            if pt[axis] != _FIT[0]:
                continue
            ys = [table[pt[:axis] + (x,) + pt[axis + 1:]] for x in _FIT]
            for power, c in enumerate(_interpolate(ys)):
                out[pt[:axis] + (power,) + pt[axis + 1:]] = c
        table = out
    terms: dict[Monomial, int] = {}
    for powers, c in table.items():
        if c.denominator != 1:
            raise SizeDependent("a size of the layout is not an integer polynomial")
        mono = tuple(s for s, p in zip(syms, powers) for _ in range(p))
        terms[mono] = terms.get(mono, 0) + int(c)
    return Poly.make(terms)


def _interpolate(ys: list[Fraction]) -> list[Fraction]:
    """Coefficients (c0, c1, c2) of the quadratic through ``(_FIT[i], ys[i])``."""
    (x0, x1, x2), (y0, y1, y2) = _FIT, ys
    d1 = (y1 - y0) / (x1 - x0)
    d2 = ((y2 - y1) / (x2 - x1) - d1) / (x2 - x0)
    # y = y0 + d1 (x - x0) + d2 (x - x0)(x - x1)
    c2 = d2
    c1 = d1 - d2 * (x0 + x1)
    c0 = y0 - d1 * x0 + d2 * x0 * x1
    return [c0, c1, c2]
