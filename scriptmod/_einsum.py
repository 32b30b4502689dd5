"""How ``einsum`` lowers: parse the equation (PyTorch's rules and messages), bind the
subscripts to the operands' dims, choose the pair order (``opt_einsum``'s 'optimal' up to four
operands, 'greedy' beyond), and contract each pair with ONE (batched) matmul between a
permute/reshape of each side, the way PyTorch's ``sumproduct_pair`` does, so a traced einsum
is the GEMM path's ``matmul`` and needs no kernel of its own. ``tensordot`` shares the
alignment and matmul helpers. Used by ``scriptmod/_ops_products.py``."""
from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scriptmod.tensor import Tensor

# ---- einsum: parsing ---------------------------------------------------------------------
Labels = tuple  # one operand's subscripts: letters' codes and ELLIPSIS
Shapes = tuple  # the operands' shapes as plain ints
ELLIPSIS = -1000
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def plain(n: Any) -> int:
    """A size's value without recording anything in a trace (planning decisions only)."""
    return int.__int__(n)


def _subscripts(text: str, start: int, who: str) -> Labels:
    """One operand's (or the output's) subscripts; ``start`` is its index in the equation."""
    out: list[int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == ".":
            if ELLIPSIS in out:
                raise RuntimeError(f"einsum(): found '.' for {who} for which an ellipsis was "
                                   f"already found")
            if text[i:i + 3] != "...":
                tail = " (...)" if who == "output" else ""
                raise RuntimeError(f"einsum(): found '.' for {who} that is not part of any "
                                   f"ellipsis{tail}")
            out.append(ELLIPSIS)
            i += 3
            continue
        if c == " ":
            i += 1
            continue
        if c not in _LETTERS:
            raise RuntimeError(f"einsum(): invalid subscript given at index {start + i} in the "
                               f"equation string, subscripts must be in [a-zA-Z]")
        out.append(ord(c))
        i += 1
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _parse(equation: str) -> tuple[tuple[Labels, ...], Labels | None]:
    """``'ij,jk->ik'`` -> the operands' subscripts and the output's (None: implicit)."""
    lhs, arrow, rhs = equation.partition("->")
    terms, pos = [], 0
    for k, text in enumerate(lhs.split(",")):
        terms.append(_subscripts(text, pos, f"operand {k}"))
        pos += len(text) + 1
    if not arrow:
        return tuple(terms), None
    output = _subscripts(rhs, len(lhs) + 2, "output")
    for c in set(output) - {ELLIPSIS}:
        if output.count(c) > 1:
            raise RuntimeError(f"einsum(): output subscript {chr(c)} appears more than once in "
                               f"the output")
        if not any(c in t for t in terms):
            raise RuntimeError(f"einsum(): output subscript {chr(c)} does not appear in the "
                               f"equation for any input operand")
    return tuple(terms), output


def _sublist_equation(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """The sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as an equation string."""
    def letter(n: Any) -> str:
        if n is Ellipsis:
            return "..."
        if isinstance(n, numbers.Integral) and 0 <= n < 26:
            return chr(ord("A") + n)
        if isinstance(n, numbers.Integral) and 26 <= n < 52:
            return chr(ord("a") + n - 26)
        raise ValueError("einsum(): subscript in subscript list is not within the valid range "
                         "[0, 52)")
    terms = ",".join("".join(letter(n) for n in sub) for sub in args[1::2])
    if len(args) % 2:
        return terms + "->" + "".join(letter(n) for n in args[-1]), list(args[:-1:2])
    return terms, list(args[::2])


def _bind(terms: tuple[Labels, ...], output: Labels | None,
          shapes: Shapes) -> tuple[list[list[int]], list[int]]:
    """Each operand's label per dim and the output's labels: ellipsis dims become the labels
    -1, -2, ... counted from the right, so ellipses of different ranks broadcast."""
    if len(shapes) < len(terms):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    if len(shapes) > len(terms):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    bound, n_ell = [], 0
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        named, rank = len(term) - (ELLIPSIS in term), len(shape)
        if ELLIPSIS not in term and named != rank:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) "
                               f"does not match the number of dimensions ({rank}) for "
                               f"operand {k} and no ellipsis was given")
        if named > rank:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) "
                               f"is more than the number of dimensions ({rank}) for operand "
                               f"{k}")
        e = rank - named
        n_ell = max(n_ell, e)
        labels: list[int] = []
        for c in term:
            labels.extend(range(-e, 0) if c == ELLIPSIS else (c,))
        bound.append(labels)
    ell = list(range(-n_ell, 0))
    if output is None:
        counts: dict[int, int] = {}
        for term in terms:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1 and c != ELLIPSIS)
    else:
        out = [d for c in output for d in (ell if c == ELLIPSIS else (c,))]
    return bound, out


def _label_sizes(bound: list[list[int]], shapes: Shapes) -> dict[int, int]:
    """Each label's size (the largest of its dims: size 1 broadcasts), checking agreement."""
    sizes: dict[int, int] = {}
    for k, (labels, shape) in enumerate(zip(bound, shapes)):
        mine: dict[int, int] = {}
        for lab, n in zip(labels, shape):
            if lab in mine and mine[lab] != n:
                raise RuntimeError(f"einsum(): subscript {_name(lab)} is repeated for operand "
                                   f"{k} but the sizes don't match, {mine[lab]} != {n}")
            mine[lab] = n
        for lab, n in mine.items():
            seen = sizes.get(lab, 1)
            if n != 1 and seen != 1 and n != seen:
                raise RuntimeError(f"einsum(): subscript {_name(lab)} has size {n} for operand "
                                   f"{k} which does not broadcast with previously seen size "
                                   f"{seen}")
            sizes[lab] = n if n != 1 else seen
    return sizes


def _name(label: int) -> str:
    return chr(label) if label > 0 else "..."


# ---- einsum: lowering, planned on labels and run on tensors ------------------------------
@dataclass(frozen=True)
class Side:
    """What one operand goes through before a product, each step None when not needed: an
    index dropping size-1 dims, a sum over dims (keeping the dtype, as einsum does), a
    permutation, an index adding size-1 dims."""
    drop: tuple | None = None
    sum: list[int] | None = None
    perm: list[int] | None = None
    new: tuple | None = None


@dataclass(frozen=True)
class Step:
    """One contraction: operands ``i`` and ``j`` (removed; the result is appended) through
    their sides, then ``kind``: 'mul' (nothing contracted: a broadcast product), 'dot'
    (multiply, sum the last ``nct`` dims) or 'matmul' (``matmul_pair``)."""
    i: int
    j: int
    a: Side
    b: Side
    kind: str
    nb: int
    nlo: int
    nct: int


@dataclass(frozen=True)
class Program:
    """einsum for one equation and operand shapes: per operand the dim pairs whose
    diagonals it takes and its pre-sum, the contractions, the output's alignment."""
    diagonals: tuple[tuple[tuple[int, int], ...], ...]
    prep: tuple[Side, ...]
    steps: tuple[Step, ...]
    final: Side


def _diagonals(labels: list[int]) -> tuple[tuple[tuple[int, int], ...], list[int]]:
    """The (i, j) dims of each repeated label, in order, and the labels after: each diagonal
    replaces its two dims by one at the end."""
    pairs = []
    while len(set(labels)) < len(labels):
        lab = next(l for l in labels if labels.count(l) > 1)
        i = labels.index(lab)
        j = labels.index(lab, i + 1)
        pairs.append((i, j))
        labels = [l for k, l in enumerate(labels) if k not in (i, j)] + [lab]
    return tuple(pairs), labels


def _side(labels: list[int], order: list[int] | None, drop: set[int] = frozenset(),
          summed: set[int] = frozenset()) -> tuple[Side, list[int]]:
    """The ``Side`` dropping ``drop``, summing ``summed`` and aligning to ``order`` (None:
    keep the order), with the labels after it."""
    cut = None
    if drop & set(labels):
        cut = tuple(0 if l in drop else slice(None) for l in labels)
        labels = [l for l in labels if l not in drop]
    dims = [d for d, l in enumerate(labels) if l in summed] or None
    labels = [l for l in labels if l not in summed]
    if order is None:
        return Side(cut, dims), labels
    perm = [labels.index(l) for l in order if l in labels]
    new = tuple(slice(None) if l in labels else None for l in order)
    return Side(cut, dims, perm if perm != list(range(len(perm))) else None,
                new if None in new else None), list(order)


def apply(x: Tensor, side: Side) -> Tensor:
    """Run one ``Side`` on ``x``."""
    if side.drop is not None:
        x = x[side.drop]
    if side.sum is not None:
        x = x.sum(side.sum, dtype=x.dtype)
    if side.perm is not None:
        x = x.permute(side.perm)
    return x if side.new is None else x[side.new]


def align(x: Tensor, labels: list[int], order: list[int]) -> Tensor:
    """``x`` with its dims permuted to ``order``, a size-1 dim where it lacks a label."""
    return apply(x, _side(labels, order)[0])


def _plan_pair(i: int, j: int, a: tuple[list[int], dict[int, int]],
               b: tuple[list[int], dict[int, int]],
               keep: set[int]) -> tuple[Step, tuple[list[int], dict[int, int]]]:
    """One contraction of two operands (labels, sizes): labels kept (later operands or the
    output need them) and shared are batch dims, shared and not kept are contracted; ONE
    matmul of ``(batch, lo, k) @ (batch, k, ro)`` does it, as PyTorch's bmm does. A size-1
    contracted dim against a larger one is dropped on its side and summed on the other."""
    (la, sa), (lb, sb) = a, b
    shared = set(la) & set(lb) - keep
    drop_a = {l for l in shared if sa[l] == 1 and sb[l] != 1}
    drop_b = {l for l in shared if sb[l] == 1 and sa[l] != 1}
    la2 = [l for l in la if l not in drop_a]
    lb2 = [l for l in lb if l not in drop_b]
    sum_a, sum_b = set(la2) - set(lb2) - keep, set(lb2) - set(la2) - keep
    la2 = [l for l in la2 if l not in sum_a]
    lb2 = [l for l in lb2 if l not in sum_b]
    batch = [l for l in la2 if l in lb2 and l in keep]
    ct = [l for l in la2 if l in lb2 and l not in keep]
    lo = [l for l in la2 if l not in lb2]
    ro = [l for l in lb2 if l not in la2]
    if not ct:
        kind, order_a, order_b, out = "mul", batch + lo + ro, batch + lo + ro, batch + lo + ro
    elif batch and not lo and not ro:
        kind, order_a, order_b, out = "dot", batch + ct, batch + ct, batch
    else:
        kind, order_a, order_b, out = "matmul", batch + lo + ct, batch + ct + ro, batch + lo + ro
    side_a = _side(la, order_a, drop_a, sum_a)[0]
    side_b = _side(lb, order_b, drop_b, sum_b)[0]
    sizes = {l: max(sa.get(l, 1), sb.get(l, 1)) for l in out}
    return Step(i, j, side_a, side_b, kind, len(batch), len(lo), len(ct)), (out, sizes)


def _program(bound: list[list[int]], shapes: Shapes, out: list[int],
             path: list[tuple[int, int]]) -> Program:
    """The ``Program`` of einsum: diagonals, pre-sums of labels only one operand has, the
    contractions in ``path``'s order, the output's alignment."""
    wanted = set(out)
    diagonals, ops = [], []
    for labels, shape in zip(bound, shapes):
        pairs, after = _diagonals(labels)
        diagonals.append(pairs)
        ops.append((after, dict(zip(labels, shape))))
    prep = []
    for k, (labels, sizes) in enumerate(ops):
        others = wanted.union(*(l for m, (l, _) in enumerate(ops) if m != k))
        side, labels = _side(labels, None, summed=set(labels) - others)
        prep.append(side)
        ops[k] = (labels, sizes)
    steps = []
    for i, j in path:
        rest = [o for k, o in enumerate(ops) if k not in (i, j)]
        step, result = _plan_pair(i, j, ops[i], ops[j], wanted.union(*(l for l, _ in rest)))
        steps.append(step)
        ops = rest + [result]
    return Program(tuple(diagonals), tuple(prep), tuple(steps), _side(ops[0][0], out)[0])


def _prod(sizes: Sequence[Any]) -> Any:
    """The product of sizes (traced sizes stay traced)."""
    out: Any = 1
    for n in sizes:
        out = out * n
    return out


def matmul_pair(a: Tensor, b: Tensor, nb: int, nlo: int, nct: int) -> Tensor:
    """``a`` (batch, lo..., k...) times ``b`` (batch, k..., ro...) as one matmul, the lo, k
    and ro groups flattened only where they are not single dims already."""
    lo_sizes, ro_sizes = a.shape[nb:nb + nlo], b.shape[nb + nct:]
    k = _prod(a.shape[nb + nlo:])
    if nlo != 1 or nct != 1:
        a = a.reshape(*a.shape[:nb], _prod(lo_sizes), k)
    if len(ro_sizes) != 1 or nct != 1:
        b = b.reshape(*b.shape[:nb], k, _prod(ro_sizes))
    r = a.matmul(b)
    if nlo != 1 or len(ro_sizes) != 1:
        r = r.reshape(*r.shape[:nb], *lo_sizes, *ro_sizes)
    return r


# ---- einsum: pair order ------------------------------------------------------------------
def _volume(labels: frozenset[int], sizes: dict[int, int]) -> int:
    return math.prod(sizes[l] for l in labels)


def _after(sets: list[frozenset[int]], i: int, j: int,
           output: frozenset[int]) -> tuple[list[frozenset[int]], frozenset[int]]:
    """The operand label sets after contracting ``i`` with ``j`` (result appended last), and
    every label of the pair."""
    rest = [s for k, s in enumerate(sets) if k not in (i, j)]
    union = sets[i] | sets[j]
    return rest + [union & output.union(*rest)], union


def _optimal_path(sets: list[frozenset[int]], output: frozenset[int],
                  sizes: dict[int, int]) -> tuple[int, list[tuple[int, int]]]:
    """The pair order of least total work (``opt_einsum``'s 'optimal'), and that work."""
    if len(sets) == 1:
        return 0, []
    best: tuple[int, list[tuple[int, int]]] | None = None
    for i, j in itertools.combinations(range(len(sets)), 2):
        rest, union = _after(sets, i, j, output)
        cost, path = _optimal_path(rest, output, sizes)
        cost += _volume(union, sizes)
        if best is None or cost < best[0]:
            best = (cost, [(i, j)] + path)
    assert best is not None
    return best


def _greedy_path(sets: list[frozenset[int]], output: frozenset[int],
                 sizes: dict[int, int]) -> list[tuple[int, int]]:
    """``opt_einsum``'s 'greedy': each step the pair whose result shrinks the total most."""
    def score(sets: list[frozenset[int]], pair: tuple[int, int]) -> tuple[int, int]:
        rest, union = _after(sets, *pair, output)
        grow = _volume(rest[-1], sizes) - sum(_volume(sets[k], sizes) for k in pair)
        return grow, _volume(union, sizes)
    path = []
    while len(sets) > 1:
        i, j = min(itertools.combinations(range(len(sets)), 2),
                   key=functools.partial(score, sets))
        path.append((i, j))
        sets = _after(sets, i, j, output)[0]
    return path


def _pair_order(sets: list[frozenset[int]], output: frozenset[int],
                sizes: dict[int, int]) -> list[tuple[int, int]]:
    if len(sets) <= 2:
        return [(0, 1)] if len(sets) == 2 else []
    if len(sets) <= 4:
        return _optimal_path(sets, output, sizes)[1]
    return _greedy_path(sets, output, sizes)


# ---- einsum ------------------------------------------------------------------------------
def operands_of(args: tuple) -> tuple[str, list[Tensor]]:
    """The equation and the operands of any of einsum's three call forms."""
    if len(args) < 2:
        raise ValueError("einsum(): must specify the equation string and at least one operand, "
                         "or at least one operand and its subscripts list")
    if isinstance(args[0], Tensor):
        equation, operands = _sublist_equation(args)
    elif isinstance(args[0], str):
        equation, operands = args[0], list(args[1:])
    else:
        raise TypeError(f"einsum(): argument 'equation' must be str, not "
                        f"{type(args[0]).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    for k, x in enumerate(operands):
        if not isinstance(x, Tensor):
            raise TypeError(f"einsum(): operand {k} must be a Tensor, not {type(x).__name__}")
    return equation, operands


def same_dtype(operands: Sequence[Tensor]) -> None:
    first = operands[0].dtype
    for x in operands[1:]:
        if x.dtype is not first:
            raise RuntimeError(f"expected scalar type {first.short} but found {x.dtype.short}")


@functools.lru_cache(maxsize=1024)
def plan(equation: str, shapes: Shapes) -> Program:
    """What einsum does for these operand shapes (each call with them reuses it)."""
    terms, output = _parse(equation)
    bound, out = _bind(terms, output, shapes)
    sizes = _label_sizes(bound, shapes)
    wanted = frozenset(out)
    sets = [frozenset(l) for l in bound]
    sets = [s & wanted.union(*(o for m, o in enumerate(sets) if m != k))
            for k, s in enumerate(sets)]
    return _program(bound, shapes, out, _pair_order(sets, wanted, sizes))


def _diagonal(x: Tensor, i: int, j: int) -> Tensor:
    """The diagonal of dims ``i`` and ``j`` of ``x`` as its last dim: the two dims move
    last and flatten, and a stride ``n + 1`` slice picks the diagonal."""
    n = x.shape[i]
    return x.movedim((i, j), (-2, -1)).flatten(-2)[..., ::n + 1]


def run(equation: str, operands: list[Tensor]) -> Tensor:
    """``einsum(equation, *operands)``: the planned ``Program`` run on the operands."""
    prog = plan(equation, tuple(tuple(int.__int__(n) for n in x.shape) for x in operands))
    same_dtype(operands)
    ops = list(operands)
    for k, (pairs, side) in enumerate(zip(prog.diagonals, prog.prep)):
        x = ops[k]
        for i, j in pairs:
            x = _diagonal(x, i, j)
        ops[k] = apply(x, side)
    for st in prog.steps:
        a, b = apply(ops[st.i], st.a), apply(ops[st.j], st.b)
        ops = [o for k, o in enumerate(ops) if k not in (st.i, st.j)]
        if st.kind == "mul":
            ops.append(a * b)
        elif st.kind == "dot":
            prod = a * b
            ops.append(prod.sum(list(range(st.nb, st.nb + st.nct)), dtype=prod.dtype))
        else:
            ops.append(matmul_pair(a, b, st.nb, st.nlo, st.nct))
    return apply(ops[0], prog.final)
