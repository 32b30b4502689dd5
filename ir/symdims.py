"""Symbolic dims: sizes that are expressions over named sizes (``B``, ``16*B``, ``B*T``,
``T-1``, ``T//2``, ``max(T,8)``), kept as canonical ``str`` so that a dim is still a hashable
value that prints, compares and archives as text.

A dim is an ``int`` (a size), a ``str`` (a symbolic size) or None (unknown). The canonical
text of a symbolic dim is a polynomial with int coefficients over *atoms*: a name, or a
floor division, remainder, ``max`` or ``min`` that no polynomial spells (kept as its own
canonical text). Terms are written highest degree first, then by their atoms' text, the
constant last, without spaces; so equal polynomials give equal strings:

    >>> mul("T", "B"), add(sub("T", 1), 1), floordiv(mul(4, mul("B", "T")), 4)
    ('B*T', 'T', 'B*T')
    >>> floordiv(add("T", 1), 2), maximum("T", 8), mod(mul(2, "T"), 2)
    ('(T+1)//2', 'max(T,8)', 0)
    >>> evaluate("max(T,8)*B-1", {"B": 2, "T": 5})
    15

Every operation takes and gives ``int | str | None``: ints fold to ints, None (unknown) stays
None, and a result too large to be worth a name (``MAX_TEXT`` characters, ``MAX_TERMS``
terms) is None too: unknown is always a correct answer, a wrong symbol never is.

Text from outside (an archive, a printed graph) goes through ``parse``: bounded length and
depth, only names, ints, ``+ - * // %``, unary minus and ``max``/``min`` calls; anything else
raises ``SymDimError``. ``evaluate`` walks the same checked tree (never ``eval``).
"""
from __future__ import annotations

import ast
import functools
import keyword
import re
from typing import Any, Callable, Mapping, Sequence, Union

Dim = Union[int, str, None]
Mono = tuple[str, ...]            # the sorted atoms of a term (a repeated atom is a power)
Poly = dict[Mono, int]            # term -> its coefficient; () is the constant term

MAX_TEXT = 256                     # characters of a symbolic dim
MAX_DEPTH = 32                     # parentheses in its text
MAX_TREE_DEPTH = 96                # nesting of its syntax tree (a sum of products)
MAX_TERMS = 32                     # terms of its polynomial
MAX_ARGS = 8                       # operands of one max/min
MAX_INT = 2 ** 62                  # magnitude of an int inside one
MIN_SIZE = 2                       # every name stands for a size >= 2: sizes 0 and 1
                                   # broadcast and empty differently, so the executor keeps
                                   # them concrete (PyTorch's 0/1 specialization)
EXTREMES = ("max", "min")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SymDimError(ValueError):
    """Text that is not a symbolic dim, or a name ``evaluate`` was not given."""


class _TooLarge(Exception):
    """A result no dim spells within the bounds (the public operations give None)."""


# ---- public operations ------------------------------------------------------------------

def is_name(d: object) -> bool:
    """A dim that is one bare name (``"B"``), not an expression."""
    return isinstance(d, str) and _NAME_RE.fullmatch(d) is not None and d not in EXTREMES \
        and not keyword.iskeyword(d)


def add(a: Dim, b: Dim) -> Dim:
    """``a + b``."""
    return a + b if type(a) is int and type(b) is int else _apply(_add, a, b)


def sub(a: Dim, b: Dim) -> Dim:
    """``a - b``."""
    return a - b if type(a) is int and type(b) is int else _apply(_sub, a, b)


def mul(a: Dim, b: Dim) -> Dim:
    """``a * b``."""
    return a * b if type(a) is int and type(b) is int else _apply(_mul, a, b)


def neg(a: Dim) -> Dim:
    """``-a``."""
    return _apply(_mul, a, -1)


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b`` (Python's floor division); an exact quotient is a polynomial
    (``(4*B*T)//4`` is ``B*T``, ``(128*B*T)//(4*B)`` is ``32*T``). None for ``// 0``."""
    return None if b == 0 else _apply(lambda p, q: _divide(p, q, "//"), a, b)


def mod(a: Dim, b: Dim) -> Dim:
    """``a % b`` (Python's remainder, with the divisor's sign). None for ``% 0``."""
    return None if b == 0 else _apply(lambda p, q: _divide(p, q, "%"), a, b)


def maximum(*dims: Dim) -> Dim:
    """``max(dims...)``: folded where the operands' differences are constants."""
    sizes = [d for d in dims if type(d) is int]
    if len(sizes) == len(dims):
        return max(sizes)
    return _apply(lambda *ps: _extreme("max", ps), *dims)


def minimum(*dims: Dim) -> Dim:
    """``min(dims...)``: folded where the operands' differences are constants."""
    sizes = [d for d in dims if type(d) is int]
    if len(sizes) == len(dims):
        return min(sizes)
    return _apply(lambda *ps: _extreme("min", ps), *dims)


def ceildiv(a: Dim, b: Dim) -> Dim:
    """``ceil(a / b)`` for ``b > 0``, written ``(a+b-1)//b``."""
    return floordiv(sub(add(a, b), 1), b)


def compare(op: str, a: Dim, b: Dim) -> bool | None:
    """``a <op> b`` for op in ``== != < <= > >=`` where the dims alone decide it (``T+1 > T``;
    ``T-1 >= 1`` as every name is at least ``MIN_SIZE``), else None (a run-time check
    decides)."""
    if a is None or b is None:
        return None
    if type(a) is int and type(b) is int:
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[op]
    ab, ba = lower_bound(sub(a, b)), lower_bound(sub(b, a))    # a - b >= ab, b - a >= ba
    ge = True if ab is not None and ab >= 0 else False if ba is not None and ba > 0 else None
    le = True if ba is not None and ba >= 0 else False if ab is not None and ab > 0 else None
    if op in (">=", "<"):
        return None if ge is None else ge == (op == ">=")
    if op in ("<=", ">"):
        return None if le is None else le == (op == "<=")
    eq = True if ge and le else False if ge is False or le is False else None
    return None if eq is None else eq == (op == "==")


def lower_bound(d: Dim) -> int | None:
    """A size ``d`` is never below, where one follows from every name being at least
    ``MIN_SIZE`` (``T-1`` is at least 1; ``T%4`` at least 0); None where none does (a
    negative coefficient, ``B-T``)."""
    if d is None:
        return None
    return _const(_poly(d)) if isinstance(d, int) else _poly_lower(_poly(d))


def symbols(d: Dim) -> frozenset[str]:
    """The names a dim depends on: ``symbols("B*T-1")`` is ``{"B", "T"}``."""
    if not isinstance(d, str):
        return frozenset()
    names = {n.id for n in ast.walk(_tree(d)) if isinstance(n, ast.Name)}
    return frozenset(names - set(EXTREMES))


def parse(text: str) -> int | str:
    """The canonical dim of ``text`` (``"T*B"`` -> ``"B*T"``, ``"T-T+3"`` -> ``3``); raises
    ``SymDimError`` on anything but a bounded expression of the allowed kinds."""
    if not isinstance(text, str):
        raise SymDimError(f"a symbolic dim must be text, got {type(text).__name__}")
    out = _dim(_poly(text))
    if out is None:
        raise SymDimError(f"symbolic dim {text[:60]!r} is too large")
    return out


def terms(d: str) -> dict[Mono, int] | None:
    """A symbolic dim's polynomial when every atom is a name (``B*T``, ``T-1``: each term's
    sorted names -> its coefficient, ``()`` the constant), for code that computes sizes
    from symbol values (``codegen.sizes``); None when a ``//``, ``%``, ``max`` or ``min``
    atom is left. ``SymDimError`` (a ``ValueError``) for text that is no dim.

        >>> terms("2*B*T-1")
        {('B', 'T'): 2, (): -1}
    """
    p = dict(_poly_of_text(d))
    return p if all(a.isidentifier() for m in p for a in m) else None


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The size ``d`` has when each name has the size ``env`` gives it."""
    if isinstance(d, int):
        return d
    if d is None:
        raise SymDimError("evaluate: the dim is unknown (None)")

    def lookup(name: str) -> int:
        if name not in env:
            raise SymDimError(f"evaluate {d!r}: no size given for {name!r}")
        return int(env[name])
    try:
        return _fold(_tree(d), lookup, _INT_OPS)
    except ZeroDivisionError:
        raise SymDimError(f"evaluate {d!r}: division by zero at {dict(env)}") from None


def dim_factors(d: str) -> tuple[int, str]:
    """A single-name product as (size, name): ``"16*B"`` -> ``(16, "B")``, ``"B"`` ->
    ``(1, "B")``; any other expression is ``(1, d)`` (its names: ``symbols``)."""
    p = _poly(d)
    if len(p) == 1:
        (mono, c), = p.items()
        if len(mono) == 1 and is_name(mono[0]) and c > 0:
            return c, mono[0]
    return 1, d


# ---- polynomials ------------------------------------------------------------------------

def _apply(op: Callable[..., Poly], *dims: Dim) -> Dim:
    """``op`` on the dims' polynomials; None in, None out."""
    if any(d is None for d in dims):
        return None
    try:
        return _dim(op(*(_poly(d) for d in dims)))        # type: ignore[arg-type]
    except (ZeroDivisionError, _TooLarge, SymDimError):
        return None


def _poly(d: int | str) -> Poly:
    return _const_poly(d) if isinstance(d, int) else dict(_poly_of_text(d))


@functools.lru_cache(maxsize=4096)
def _poly_of_text(text: str) -> tuple[tuple[Mono, int], ...]:
    """The polynomial of a dim's text, cached: the same dims come back all the time."""
    try:
        return tuple(_fold(_tree(text), _name_poly, _POLY_OPS).items())
    except (ZeroDivisionError, _TooLarge):
        raise SymDimError(f"symbolic dim {text[:60]!r} divides by zero or is too large"
                          ) from None


def _const(p: Poly) -> int:
    return p.get((), 0)


def _is_const(p: Poly) -> bool:
    return not p or list(p) == [()]


def _const_poly(k: int) -> Poly:
    return {(): k} if k else {}


def _add(p: Poly, q: Poly) -> Poly:
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c}


def _scale(p: Poly, k: int) -> Poly:
    return {m: c * k for m, c in p.items() if c * k}


def _sub(p: Poly, q: Poly) -> Poly:
    return _add(p, _scale(q, -1))


def _mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
    return {m: c for m, c in out.items() if c}


def _atom(text: str) -> Poly:
    return {(text,): 1}


def _dim(p: Poly) -> Dim:
    """A polynomial as a dim: an int, canonical text, or None when it is too large."""
    if _is_const(p):
        return _const(p)
    if len(p) > MAX_TERMS or any(abs(c) > MAX_INT for c in p.values()):
        return None
    text = _text(p)
    try:
        _tree(text)                    # within the bounds ``parse`` reads back
    except SymDimError:
        return None
    return text


def _text(p: Poly) -> str:
    terms = sorted(p.items(), key=lambda t: (not t[0], -len(t[0]), t[0]))
    out = ""
    for i, (mono, c) in enumerate(terms):
        out += ("-" if c < 0 else "+" if i else "") + _term_text(mono, abs(c), c < 0 and not i)
    return out


def _term_text(mono: Mono, c: int, unary_minus: bool) -> str:
    """One term without its sign; a leading unary minus binds tighter than ``//``, so
    ``-(T//2)`` keeps its parentheses where ``B-T//2`` needs none."""
    if not mono:
        return str(c)
    alone = len(mono) == 1 and c == 1 and not unary_minus
    factors = [a if alone or _is_closed(a) else f"({a})" for a in mono]
    return "*".join(([str(c)] if c != 1 else []) + factors)


def _is_closed(atom: str) -> bool:
    """A name or a call: needs no parentheses as a factor (``T//2`` does)."""
    if is_name(atom):
        return True
    if not atom.startswith(EXTREMES) or not atom.endswith(")"):
        return False
    depth = 0
    for i, ch in enumerate(atom[3:], start=3):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i == len(atom) - 1
    return False


def _operand(p: Poly, denominator: bool) -> str:
    """The text of a floor division's (or remainder's) operand, parenthesized unless one
    term can stand there: a product of names and calls on the left, a name or size on the
    right (Python reads ``B*T//2`` as ``(B*T)//2``)."""
    text = _text(p)
    if denominator:
        return text if is_name(text) or text.isdigit() else f"({text})"
    if len(p) == 1 and all(_is_closed(a) for a in next(iter(p))):
        return text
    return f"({text})"


def _divide(p: Poly, q: Poly, op: str) -> Poly:
    """``p // q`` or ``p % q`` as a polynomial, with a new atom for what does not divide.
    By a size k > 0, ``p = k*W + R`` with R's coefficients in [0, k): ``p // k`` is
    ``W + R // k`` and ``p % k`` is ``R % k``, and a constant R folds."""
    if not q:
        raise ZeroDivisionError("symbolic dim divided by zero")
    if not p:
        return {}
    if _is_const(q):
        k = _const(q)
        if k < 0:      # floor(p / -k) == floor(-p / k); p % -k == -((-p) % k)
            inner = _divide(_scale(p, -1), {(): -k}, op)
            return inner if op == "//" else _scale(inner, -1)
        whole = {m: c // k for m, c in p.items() if c // k}
        rest = {m: c % k for m, c in p.items() if c % k}
        if _is_const(rest):
            tail = _const_poly(_const(rest) // k if op == "//" else _const(rest) % k)
        else:
            tail = _atom(f"{_operand(rest, False)}{op}{k}")
        return _add(whole, tail) if op == "//" else tail
    exact = _exact_quotient(p, q)
    if exact is not None:
        return exact if op == "//" else {}
    return _atom(f"{_operand(p, False)}{op}{_operand(q, True)}")


def _exact_quotient(p: Poly, q: Poly) -> Poly | None:
    """``p / q`` when it is a polynomial with int coefficients (q a single term, or p an
    int multiple of q), else None."""
    if len(q) == 1:
        (qm, qc), = q.items()
        out: Poly = {}
        for m, c in p.items():
            rest = list(m)
            for a in qm:
                if a not in rest:
                    return None
                rest.remove(a)
            if c % qc:
                return None
            out[tuple(rest)] = c // qc
        return out
    lead = max(q, key=lambda m: (len(m), m))
    if lead not in p or p[lead] % q[lead]:
        return None
    k = p[lead] // q[lead]
    return _const_poly(k) if not _sub(p, _scale(q, k)) else None


def _poly_lower(p: Poly) -> int | None:
    """A lower bound of ``p`` from its atoms' bounds, where no coefficient is negative."""
    total = 0
    for mono, c in p.items():
        if not mono:
            total += c
            continue
        if c < 0:
            return None
        term = c
        for atom in mono:
            low = _atom_lower(atom)
            if low is None or low < 0:
                return None
            term *= low
        total += term
    return total


@functools.lru_cache(maxsize=4096)
def _atom_lower(atom: str) -> int | None:
    if is_name(atom):
        return MIN_SIZE
    node = _tree(atom)
    if isinstance(node, ast.Call):                 # max: its best operand's; min: the least
        lows = [_poly_lower(_fold(a, _name_poly, _POLY_OPS)) for a in node.args]
        known = [x for x in lows if x is not None]
        if node.func.id == "max":                  # type: ignore[attr-defined]
            return max(known) if known else None
        return min(known) if len(known) == len(lows) else None
    k = node.right.value if isinstance(node, ast.BinOp) and \
        isinstance(node.right, ast.Constant) else None
    if isinstance(k, int) and k > 0:               # canonical atoms divide by sizes > 0
        assert isinstance(node, ast.BinOp)
        if isinstance(node.op, ast.Mod):           # in [0, k)
            return 0
        low = _poly_lower(_fold(node.left, _name_poly, _POLY_OPS))
        return None if low is None else low // k
    return None


def _name_poly(name: str) -> Poly:
    return {(name,): 1}


def _extreme(kind: str, polys: Sequence[Poly]) -> Poly:
    """``max``/``min``: nested calls of the same kind flatten, an operand that another one
    bounds (``max(T-1,1)`` is ``T-1``) drops, and the rest sort by their text."""
    args: list[Poly] = []
    for p in polys:
        args += _extreme_args(kind, p)
    sign = 1 if kind == "max" else -1
    keep: list[Poly] = []
    for p in args:
        if any(_dominates(_scale(_sub(k, p), sign)) for k in keep):
            continue
        keep = [k for k in keep if not _dominates(_scale(_sub(p, k), sign))] + [p]
    if len(keep) == 1:
        return keep[0]
    if len(keep) > MAX_ARGS:
        raise _TooLarge
    texts = sorted((_text(p) if p else "0" for p in keep),
                   key=lambda t: (t.lstrip("-").isdigit(), t))
    return _atom(f"{kind}({','.join(texts)})")


def _dominates(gap: Poly) -> bool:
    low = _poly_lower(gap)
    return low is not None and low >= 0


def _extreme_args(kind: str, p: Poly) -> list[Poly]:
    """The operands of ``p`` when it is one ``kind(...)`` call, else ``[p]``."""
    if len(p) == 1:
        (mono, c), = p.items()
        if c == 1 and len(mono) == 1 and mono[0].startswith(kind + "(") and _is_closed(mono[0]):
            call = _tree(mono[0])
            assert isinstance(call, ast.Call)
            return [_fold(a, _name_poly, _POLY_OPS) for a in call.args]
    return [p]


# ---- checked syntax trees ---------------------------------------------------------------

def _int_divide(op: str) -> Callable[[int, int], int]:
    return (lambda a, b: a // b) if op == "//" else (lambda a, b: a % b)


# how ``_fold`` combines values: (add, sub, mul, neg, floordiv, mod, max/min by kind)
_Ops = tuple
_POLY_OPS: _Ops = (_add, _sub, _mul, lambda p: _scale(p, -1),
                   lambda p, q: _divide(p, q, "//"), lambda p, q: _divide(p, q, "%"),
                   _extreme)
_INT_OPS: _Ops = (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a: -a,
                  _int_divide("//"), _int_divide("%"),
                  lambda kind, xs: max(xs) if kind == "max" else min(xs))
_BINOP_SLOT = {ast.Add: 0, ast.Sub: 1, ast.Mult: 2, ast.FloorDiv: 4, ast.Mod: 5}


@functools.lru_cache(maxsize=4096)
def _tree(text: str) -> ast.expr:
    """The checked syntax tree of a dim's text (raises ``SymDimError``)."""
    if len(text) > MAX_TEXT:
        raise SymDimError(f"symbolic dim of {len(text)} characters (at most {MAX_TEXT})")
    if text.count("(") > MAX_DEPTH:
        raise SymDimError(f"symbolic dim {text[:60]!r} nests too deeply")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SymDimError(f"symbolic dim {text[:60]!r} is not an expression") from None
    _check(tree, text, 0)
    return tree


def _check(node: ast.AST, text: str, depth: int) -> None:
    if depth > MAX_TREE_DEPTH:
        raise SymDimError(f"symbolic dim {text[:60]!r} nests too deeply")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SLOT:
        children: list[ast.AST] = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        children = [node.operand]
    elif isinstance(node, ast.Name) and is_name(node.id):
        return
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        if abs(node.value) > MAX_INT:
            raise SymDimError(f"symbolic dim {text[:60]!r}: {node.value} is too large")
        return
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in EXTREMES and not node.keywords and 1 <= len(node.args) <= MAX_ARGS:
        children = list(node.args)
    else:
        raise SymDimError(f"symbolic dim {text[:60]!r}: {type(node).__name__} is not allowed "
                          f"(names, ints, + - * // %, max and min)")
    for c in children:
        if isinstance(c, ast.Starred):
            raise SymDimError(f"symbolic dim {text[:60]!r}: * unpacking is not allowed")
        _check(c, text, depth + 1)


def _fold(node: ast.AST, leaf: Callable[[str], Any], ops: _Ops) -> Any:
    """Fold a checked tree with ``ops``: polynomials (``leaf`` gives a name's polynomial)
    to build canonical text, or ints (``leaf`` gives a name's size) to evaluate."""
    if isinstance(node, ast.BinOp):
        a, b = _fold(node.left, leaf, ops), _fold(node.right, leaf, ops)
        return ops[_BINOP_SLOT[type(node.op)]](a, b)
    if isinstance(node, ast.UnaryOp):
        inner = _fold(node.operand, leaf, ops)
        return ops[3](inner) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Name):
        return leaf(node.id)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return ops[6](node.func.id, [_fold(a, leaf, ops) for a in node.args])
    assert isinstance(node, ast.Constant) and type(node.value) is int
    return node.value if ops is _INT_OPS else _const_poly(node.value)
