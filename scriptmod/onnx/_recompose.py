"""Find the activations and norms our layers decompose into primitives (GELU's erf and tanh
forms, LayerNorm's mean/var/rsqrt) and give them back as one op, so that ONNX gets
``Gelu`` / ``LayerNormalization`` instead of their formulas.

A match is a ``Recomposed`` node standing in for the last node of the formula; the formula's
other nodes are left to dead-code elimination of the exported graph (they are skipped when
nothing outside the match reads them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from scriptmod.ir.graph import Block, Node, Prim, Value


@dataclass(eq=False)
class Recomposed:
    """Duck-types the part of ``Node`` that emitters read."""

    op_name: str
    inputs: tuple[Value, ...]
    outputs: list[Value]
    attrs: dict[str, Any]
    source: str | None
    covered: list[Node] = field(default_factory=list)   # the formula's nodes

    @property
    def kind(self) -> str:
        return f"sm::{self.op_name}"


def _producer(v: Value, op: str) -> Node | None:
    return v.node if v.node.kind == f"sm::{op}" else None


def _const(v: Value) -> float | None:
    n = v.node
    value = n.attrs.get("value") if n.kind == Prim.CONSTANT else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _with_const(node: Node | None, c: float) -> Value | None:
    """For ``node = a * b`` (or a + b) with one side the constant ``c``: the other side."""
    if node is None or len(node.inputs) != 2:
        return None
    for k, other in ((0, 1), (1, 0)):
        got = _const(node.inputs[k])
        if got is not None and math.isclose(got, c, rel_tol=1e-6):
            return node.inputs[other]
    return None


def _pairs(node: Node) -> Iterable[tuple[Value, Value]]:
    a, b = node.inputs
    return ((a, b), (b, a))


def _gelu_erf(root: Node) -> Recomposed | None:
    """``(0.5 * x) * erfc(x * -1/sqrt(2))``."""
    for half, tail in _pairs(root):
        m, e = _producer(half, "mul"), _producer(tail, "erfc")
        x = _with_const(m, 0.5)
        inner = _producer(e.inputs[0], "mul") if e is not None else None
        if x is not None and _with_const(inner, -math.sqrt(0.5)) is x:
            return Recomposed("gelu", (x,), root.outputs, {"approximate": "none"},
                              root.source, [m, e, inner])          # type: ignore[list-item]
    return None


def _gelu_tanh(root: Node) -> Recomposed | None:
    """``x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 * x*x*x))`` (tanh(u) = 2 sigmoid(2u) - 1)."""
    for x, s in _pairs(root):
        sig = _producer(s, "sigmoid")
        two = _producer(sig.inputs[0], "mul") if sig is not None else None
        u = _with_const(two, 2.0)
        scaled = _producer(u, "mul") if u is not None else None
        w = _with_const(scaled, math.sqrt(2 / math.pi))
        add = _producer(w, "add") if w is not None else None
        if add is None or x not in add.inputs:
            continue
        k = add.inputs[1] if add.inputs[0] is x else add.inputs[0]
        cube = _with_const(_producer(k, "mul"), 0.044715)
        cube_node = _producer(cube, "mul") if cube is not None else None
        sq = _producer(cube_node.inputs[0], "mul") if cube_node is not None else None
        if cube_node is not None and sq is not None and cube_node.inputs[1] is x \
                and sq.inputs == (x, x):
            covered = [sig, two, scaled, add, k.node, cube_node, sq]
            return Recomposed("gelu", (x,), root.outputs, {"approximate": "tanh"}, root.source,
                              covered)                        # type: ignore[arg-type]
    return None


def _trailing_dims(node: Node | None) -> list[int] | None:
    """The dims of a keepdim ``mean`` over the last k dims, as ``[-k, ..., -1]``."""
    if node is None or not node.attrs.get("keepdim") or node.attrs.get("dim") is None:
        return None
    rank = node.inputs[0].type.rank                             # type: ignore[attr-defined]
    if rank is None:
        return None
    dims = sorted(d - rank if d >= 0 else d for d in node.attrs["dim"])
    return dims if dims == list(range(-len(dims), 0)) else None


def _layer_norm(root: Node) -> Recomposed | None:
    """``d * rsqrt(mean(d*d) + eps)`` with ``d = x - mean(x)``, then ``* w`` and ``+ b``."""
    for d, r in _pairs(root):
        sub, rs = _producer(d, "sub"), _producer(r, "rsqrt")
        add = _producer(rs.inputs[0], "add") if rs is not None else None
        if sub is None or add is None:
            continue
        var = next((_producer(v, "mean") for v in add.inputs if _producer(v, "mean")), None)
        eps = next((_const(v) for v in add.inputs if _const(v) is not None), None)
        sq = _producer(var.inputs[0], "mul") if var is not None else None
        mean = _producer(sub.inputs[1], "mean")
        dims = _trailing_dims(mean)
        if (sq is None or sq.inputs != (d, d) or eps is None or dims is None or mean is None
                or mean.inputs[0] is not sub.inputs[0] or _trailing_dims(var) != dims):
            continue
        match = Recomposed("layer_norm", (sub.inputs[0],), root.outputs,
                           {"axis": dims[0], "eps": eps}, root.source,
                           [root, sub, rs, add, var, sq, mean])  # type: ignore[list-item]
        return _affine(match, len(dims))
    return None


def _affine(match: Recomposed, k: int) -> Recomposed:
    """Take in the ``* weight`` and ``+ bias`` of an affine LayerNorm when nothing else
    reads the normalized value."""
    for op in ("mul", "add"):
        (out,) = match.outputs
        user = out.uses[0].user if len(out.uses) == 1 else None
        if user is None or user.kind != f"sm::{op}":
            break
        param = user.inputs[1] if user.inputs[0] is out else user.inputs[0]
        x_shape = getattr(match.inputs[0].type, "shape", None)
        if x_shape is None or getattr(param.type, "shape", None) != tuple(x_shape[-k:]):
            break
        match.inputs = match.inputs + (param,)
        match.attrs[{"mul": "weight", "add": "bias"}[op]] = len(match.inputs) - 1
        match.covered.append(user)
        match.outputs = user.outputs
        match.source = user.source
    return match


def _silu(root: Node) -> Recomposed | None:
    """``x * sigmoid(x)``."""
    for x, s in _pairs(root):
        sig = _producer(s, "sigmoid")
        if sig is not None and sig.inputs[0] is x:
            return Recomposed("silu", (x,), root.outputs, {}, root.source, [sig])
    return None


def _compared(cond: Value, op: str) -> tuple[Value, float] | None:
    """``x <op> c`` for a constant ``c``: ``(x, c)``."""
    node = _producer(cond, op)
    c = _const(node.inputs[1]) if node is not None else None
    return None if c is None else (node.inputs[0], c)      # type: ignore[union-attr]


def _negative_slope(root: Node) -> Recomposed | None:
    """``where(x > 0, x, x * a)``: LeakyReLU for a constant ``a``, PReLU for a tensor;
    ``where(x > 0, x, a * expm1(clamp(x, max=0)))``: ELU."""
    cond, pos, neg = root.inputs
    hit = _compared(cond, "gt")
    mul = _producer(neg, "mul")
    if hit is None or hit != (pos, 0.0) or mul is None:
        return None
    x, alpha = pos, _const_operand(mul)
    covered = [cond.node, mul]
    if alpha is None:
        if x not in mul.inputs:
            return None
        slope = mul.inputs[1] if mul.inputs[0] is x else mul.inputs[0]
        return Recomposed("prelu", (x, slope), root.outputs, {}, root.source, covered)
    other = _with_const(mul, alpha)
    if other is x:
        return Recomposed("leaky_relu", (x,), root.outputs, {"alpha": alpha}, root.source,
                          covered)
    em1 = _producer(other, "expm1") if other is not None else None
    clamp = _producer(em1.inputs[0], "clamp") if em1 is not None else None
    if clamp is not None and clamp.inputs[0] is x and clamp.attrs.get("max") == 0.0 \
            and clamp.attrs.get("min") is None:
        return Recomposed("elu", (x,), root.outputs, {"alpha": alpha}, root.source,
                          covered + [em1, clamp])               # type: ignore[list-item]
    return None


def _const_operand(node: Node) -> float | None:
    return next((c for c in map(_const, node.inputs) if c is not None), None)


def _clip(root: Node) -> Recomposed | None:
    """Hardtanh ``where(x >= hi, hi, where(x <= lo, lo, x))``; ReLU6
    ``where(x >= 6, 6, relu(x))``."""
    cond, high, inner = root.inputs
    upper = _compared(cond, "ge")
    if upper is None or _const(high) != upper[1]:
        return None
    x, hi = upper
    relu, low = _producer(inner, "relu"), _producer(inner, "where")
    if relu is not None and relu.inputs[0] is x:
        return Recomposed("clip", (x,), root.outputs, {"min": 0.0, "max": hi}, root.source,
                          [cond.node, relu])
    if low is None:
        return None
    lower = _compared(low.inputs[0], "le")
    if lower is not None and lower[0] is x and _const(low.inputs[1]) == lower[1] \
            and low.inputs[2] is x:
        return Recomposed("clip", (x,), root.outputs, {"min": lower[1], "max": hi},
                          root.source, [cond.node, low, low.inputs[0].node])
    return None


PATTERNS: dict[str, list[Callable[[Node], Recomposed | None]]] = {
    "sm::mul": [_gelu_erf, _gelu_tanh, _layer_norm, _silu],
    "sm::where": [_negative_slope, _clip],
}


def recompose(block: Block) -> dict[Node, Recomposed]:
    """Matches in ``block`` (not its sub-blocks), keyed by the node that emits each: the
    node computing the match's output. Formula nodes read from outside are kept."""
    found: dict[Node, Recomposed] = {}
    taken: set[Node] = set()
    for node in block.nodes:
        if node in taken:
            continue
        for pattern in PATTERNS.get(node.kind, ()):
            match = pattern(node)
            if match is not None:
                last = match.outputs[0].node
                found[last] = match
                taken.update(match.covered)
                break
    return found


def skipped(matches: dict[Node, Recomposed]) -> set[Node]:
    """Formula nodes no longer needed: every reader of their outputs is inside the match."""
    out: set[Node] = set()
    for last, match in matches.items():
        inside = set(match.covered) | {last}
        needed = [n for n in match.covered if n is not last and any(
            u.user not in inside for v in n.outputs for u in v.uses)]
        keep: set[Node] = set()
        while needed:                       # and the formula nodes those read
            n = needed.pop()
            if n not in keep:
                keep.add(n)
                needed += [v.node for v in n.inputs if v.node in inside]
        out |= inside - keep - {last}
    return out
