"""``fuse_attention``: the unfused attention chain of a traced graph becomes one
``sm::attention`` op, which runs as one native kernel per thread on float32 CPU tensors
(``runtime.attention``): the ``L x S`` score matrix of each head is never written to memory.

The chain is what ``scaled_dot_product_attention`` and ``MultiheadAttention`` trace to::

    scores = matmul(q, transpose(k, -2, -1))      # the last two dims swapped
    scores = mul(scores, c) | div(scores, c)      # optional, c a Python number
    scores = add(scores, mask)                    # optional, either operand order
    out    = matmul(softmax(scores, dim=-1), v)

Heads of every size fuse, symbolic ones too (a causal mask of run-time length: the kernel
takes its sizes per call, and the executor's step checks ``runtime.attention.supported``
per call, running the unfused chain where it says no). The rule that kept heads of at most 128 x 128 scores on the
batched GEMMs was measured against a kernel fighting OpenBLAS's spinning workers; with their
spin cut short (``runtime.blas.set_spin``), the softmax's exp cheaper and the per-call plan
cached, the fused op ties the batched chain at 2 x 4 heads of 16 x 16 and wins from
8 x 4 heads of 32 x 32 up (8 x 4 x 128 x 128: 1.21 against 1.39-1.49 ms).

Every intermediate must have no other use (a softmax that a backward saves, or that
``need_weights`` returns, stays as it is), the tensors must be float32 on the CPU, and the
mask must not widen the scores (``add``'s result has the scores' shape). ``div`` by ``c``
becomes ``scale = 1 / c``. Run it before ``split_reductions`` and ``fuse_rows``, which would
otherwise take the softmax into a row kernel.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%q : Float(2, 4, 256, 64), %k : Float(2, 4, 256, 64), %v : Float(2, 4, 256, 64)):
    ...   %kt : Float(2, 4, 64, 256) = sm::transpose[dim0=-2, dim1=-1](%k)
    ...   %s : Float(2, 4, 256, 256) = sm::matmul(%q, %kt)
    ...   %c : float = prim::Constant[value=0.125]()
    ...   %x : Float(2, 4, 256, 256) = sm::mul(%s, %c)
    ...   %p : Float(2, 4, 256, 256) = sm::softmax[dim=-1](%x)
    ...   %o : Float(2, 4, 256, 64) = sm::matmul(%p, %v)
    ...   return (%o)
    ... ''')
    >>> print(fuse_attention(g), end="")
    graph(%q : Float(2, 4, 256, 64), %k : Float(2, 4, 256, 64), %v : Float(2, 4, 256, 64)):
      %0 : NoneType = prim::Constant[value=None]()
      %o : Float(2, 4, 256, 64) = sm::attention[scale=0.125](%q, %k, %v, %0)
      return (%o)
"""
from __future__ import annotations

from ..builder import Builder
from ..dtypes import float32
from ..graph import Graph, Node, Prim, Value
from ..types import TensorType
from .dce import eliminate_dead_code
from .pipeline import register_pass



def fuse_attention(graph: Graph) -> Graph:
    """Rewrite, in place, each attention chain (see the module docstring)."""
    for node in list(graph.walk()):
        if node.kind != "sm::matmul" or node.owning_block is None:
            continue
        match = _match(node)
        if match is None:
            continue
        q, k, v, mask, scale = match
        out = node.outputs[0]
        with Builder(graph, node.source, node.scope).insert_before(node) as b:
            fused = b.op("attention", q, k, v, mask, scale=scale)
        fused.debug_name, out.debug_name = out.debug_name, None
        out.replace_all_uses_with(fused)
        node.destroy()
    return eliminate_dead_code(graph)


def _only_use(v: Value, node: Node) -> bool:
    return len(v.uses) == 1 and v.uses[0].user is node


def _shape(v: Value) -> tuple | None:
    """The static shape of a float32 CPU tensor value, else None."""
    t = v.type
    if isinstance(t, TensorType) and t.dtype is float32 and t.device == "cpu" \
            and t.shape is not None:
        return tuple(t.shape)
    return None


def _number(v: Value) -> float | None:
    value = v.node.attrs.get("value") if v.node.kind == Prim.CONSTANT else None
    if type(value) not in (int, float):
        return None
    return float(value)    # type: ignore[arg-type]


def _match(out: Node) -> tuple[Value, Value, Value, Value | None, float] | None:
    p, v = out.inputs
    soft = p.node
    if soft.kind != "sm::softmax" or not _only_use(p, out) or soft.attrs.get("dtype") is not None:
        return None
    x = soft.inputs[0]
    xs = _shape(x)
    if xs is None or _shape(v) is None or soft.attrs.get("dim") not in (-1, len(xs) - 1):
        return None
    if len(xs) < 2:
        return None
    mask: Value | None = None
    if x.node.kind == "sm::add" and _only_use(x, soft) and len(x.node.inputs) == 2:
        found = _split_mask(x.node, xs)
        if found is None:
            return None
        x, mask = found
    scale = 1.0
    user = x.uses[0].user if len(x.uses) == 1 else None
    if x.node.kind in ("sm::mul", "sm::div") and len(x.node.inputs) == 2 and user is not None:
        c = _number(x.node.inputs[1])
        if c is None or (x.node.kind == "sm::div" and c == 0.0):
            return None
        scale = c if x.node.kind == "sm::mul" else 1.0 / c
        x = x.node.inputs[0]
    mm = x.node
    if mm.kind != "sm::matmul" or len(x.uses) != 1:
        return None
    q, kt = mm.inputs
    tr, ks = kt.node, _shape(kt)
    if tr.kind != "sm::transpose" or _shape(q) is None or ks is None or len(ks) < 2:
        return None
    if {d % len(ks) for d in (tr.attrs["dim0"], tr.attrs["dim1"])} != {len(ks) - 2, len(ks) - 1}:
        return None
    k = tr.inputs[0]
    if not len(_shape(q) or ()) == len(ks) == len(_shape(v) or ()):
        return None
    return q, k, v, mask, scale


def _split_mask(add: Node, xs: tuple) -> tuple[Value, Value] | None:
    """``(scores, mask)`` of ``add(scores, mask)`` in either order: the scores come from a
    matmul (or its scaling) and have the sum's shape; the mask is no wider."""
    a, c = add.inputs
    for scores, m in ((a, c), (c, a)):
        ms = _shape(m)
        if scores.node.kind in ("sm::matmul", "sm::mul", "sm::div") \
                and _shape(scores) == xs and ms is not None and len(ms) <= len(xs) \
                and _only_use(scores, add):
            return scores, m
    return None


register_pass("fuse_attention", fuse_attention)
