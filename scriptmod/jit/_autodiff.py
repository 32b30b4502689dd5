"""Autodiff in the IR: split a specialized forward graph into a forward that also returns what
the backward needs, and a backward ``Graph`` built from the one derivative table.

``differentiate`` walks the forward's nodes in reverse and runs each op's rule from
``scriptmod.autograd.derivatives`` (the table eager autograd runs) with a ``Recorder`` on
``TRACERS``: the rule's Tensor ops become nodes of the backward graph, as a traced function's
do. The rules run on zero-filled stand-ins of the forward values; what a rule reads of a
forward value becomes a backward input (a *saved* value). A rule that computes outside the op
registry (convolution and pooling call backward kernels; dropout replays the random draw) or
reads a tensor's data makes the graph ``NotDifferentiable``, and the caller runs op by op.

Saved values are then trimmed by a greedy recompute rule: a saved value made by an
elementwise op is recomputed in the backward from that op's inputs whenever this does not
grow the bytes saved (arguments, module tensors and constants cost nothing: the call holds
them anyway). A chain like GELU's saves only its input, and its recomputation fuses into the
backward's kernels. ``Split.saved_bytes`` and ``Split.saved_bytes_unpruned`` measure it.

A graph typed with symbolic dims (a batch class's shared specialization, ``Float(B, 64)``)
is differentiated at one call's sizes (``example``): the stand-ins have those sizes, every
size a rule reads is a ``TracedInt`` that the backward computes at run time from a
``sm::size`` of one of its inputs, and the backward's types keep the symbolic dims, so one
split serves every size of the class (``_grad_sizes`` says which decisions on sizes a rule
may make).

    >>> import scriptmod as sm
    >>> lin = sm.nn.Linear(4, 3)
    >>> traced = sm.jit.trace(lambda x: lin(x).tanh(), sm.ones(2, 4))
    >>> print(traced.backward_graph_for(sm.ones(2, 4)))      # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Node, Prim, Value, clone_block_body, known_value
from scriptmod.ir.passes import eliminate_dead_code, fold_constants, propagate_shapes
from scriptmod.ir.types import IntType, TensorType, TupleType, Type
from scriptmod.runtime.arrays import NP_DTYPE
from scriptmod import _dispatch
from scriptmod.autograd import grad_mode
from scriptmod.autograd.derivatives import DERIVATIVES
from scriptmod.autograd.engine import _fit
from scriptmod.tensor import Size, Tensor
from scriptmod._traced_int import TracedInt
from scriptmod.jit._grad_sizes import NotDifferentiable, RuleSizes
from scriptmod.jit._tracer import _schema_args, tensor_type

LeafKey = tuple[str, int]      # ("arg", position) or ("state", index into the module state)


@dataclass
class Split:
    """A forward graph and its backward.

    ``forward`` returns the original outputs, then ``saved`` values. ``backward`` takes the
    saved values, then one gradient per entry of ``grad_outputs`` (positions in the flattened
    tensor outputs), and returns one gradient per entry of ``leaves``."""

    forward: Graph
    backward: Graph
    n_outputs: int                      # the forward's own outputs, before the saved ones
    grad_outputs: tuple[int, ...]
    leaves: tuple[LeafKey, ...]
    saved_bytes: int                    # bytes of computed values saved for the backward
    saved_bytes_unpruned: int           # the same, had nothing been recomputed (both at the
    # example call's sizes for a graph with symbolic dims)
    seeded: Graph | None = None         # forward and backward at a unit seed (unit_seeded)


def flat_tensor_outputs(g: Graph, n: int | None = None) -> list[Value]:
    """The tensor outputs among the graph's first ``n`` outputs (default all), depth first
    through tuple and list constructs (the order its results are walked in at run time)."""
    out: list[Value] = []

    def walk(v: Value) -> None:
        if v.node.kind in (Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT):
            for x in v.node.inputs:
                walk(x)
        elif isinstance(v.type, TensorType):
            out.append(v)
    for v in g.outputs[:n]:
        walk(v)
    return out


def flatten_tuple_inputs(g: Graph, skip: int) -> tuple[Graph, tuple[int | None, ...]]:
    """``g`` with each argument that is a tuple of tensors (an LSTM's ``(h, c)``) taken as one
    input per tensor, and per argument after the first ``skip`` inputs its tensor count
    (None: taken as it is). The gradient of a tensor inside a tuple is then a leaf's like any
    argument's, and the compiled forward gets arrays, never the caller's Tensors."""
    layout = tuple(len(v.type.elements) if isinstance(v.type, TupleType) and all(
        isinstance(e, TensorType) for e in v.type.elements) else None for v in g.inputs[skip:])
    if all(n is None for n in layout):
        return g, layout
    flat = Graph()
    env: dict[Value, Value] = {}
    for i, v in enumerate(g.inputs):
        n = layout[i - skip] if i >= skip else None
        if n is None:
            env[v] = flat.add_input(v.type, v.debug_name)
            continue
        assert isinstance(v.type, TupleType)
        items = [flat.add_input(t, f"{v.debug_name or 'arg'}_{k}")
                 for k, t in enumerate(v.type.elements)]
        env[v] = flat.append(flat.create(Prim.TUPLE_CONSTRUCT, items, [v.type])).output
    clone_block_body(g.block, flat.block, env)
    fold_constants(flat)              # the TupleUnpack of each tuple reads its items directly
    eliminate_dead_code(flat)
    return flat, layout


def differentiate(g: Graph, leaf_key: Callable[[Value], LeafKey | None],
                  flags: Callable[[Value], bool | None] = lambda v: None,
                  recompute: bool = True, example: Sequence[Type] | None = None) -> Split | None:
    """Split ``g`` (specialized, optimized, not yet fused). ``leaf_key(v)`` names a graph input
    or ``prim::GetAttr`` value that requires grad; ``flags(v)`` gives the value of a module's
    bool attribute (``training``) read by a ``prim::GetAttr`` that a rule needs, which the
    caller then keys the split on. ``recompute``: apply the recompute rule (it pays where
    the recomputation fuses; unfused, every recomputed op is a pass of its own). None when
    no output needs a gradient.

    ``example``: for a graph typed with symbolic dims, the input types of one call of its
    class (sizes only). The rules run on stand-ins of that call's sizes, and the backward is
    typed with the symbolic dims, reading them at run time (``_grad_sizes``); the bytes saved
    are then measured at the example's sizes."""
    _split_dropout(g)
    needs = _requires_grad(g, leaf_key)
    outs = flat_tensor_outputs(g)
    wanted = tuple(k for k, v in enumerate(outs) if v in needs)
    if not wanted:
        return None
    bw = _Backward(g, needs, flags, None if example is None else _at_example(g, example))
    grads: dict[Value, Tensor] = {}
    for k in wanted:
        g_in = bw.grad_input(outs[k], f"grad_{k}")
        _accumulate(grads, outs[k], g_in)
    with grad_mode.no_grad(), np.errstate(all="ignore"), bw.recording():
        for node in reversed(g.block.nodes):
            if node.is_op and any(o in grads for o in node.outputs):
                with bw.b.like(node):       # backward nodes cite the forward's line and path
                    _node_backward(node, grads, needs, bw)
        leaves = _leaf_grads(g, grads, leaf_key)
    if not leaves:
        return None
    for t in leaves.values():
        bw.b.ret(bw.value_of(t))
    _check_leaf_shapes(g, bw.graph, leaf_key, list(leaves))
    eliminate_dead_code(bw.graph)     # a rule's gradient for an input nobody differentiates
    unpruned = bw.saved_bytes()
    if recompute:
        bw.recompute()
        eliminate_dead_code(bw.graph)
    split = bw.split(wanted, leaves, unpruned)
    _untranspose_products(split.backward)
    return split


def unit_seeded(split: Split) -> Graph | None:
    """The forward and the backward at a unit seed in one graph, for a forward whose only
    differentiable output is a float scalar (a loss): its inputs are the forward's, its
    outputs the forward's (own, then saved), then one gradient per leaf of ``split`` as the
    backward gives them for a gradient of exactly 1. None for any other forward.

    ``loss.backward()`` seeds with 1, so the call can compute the gradients with the loss:
    the recomputation the backward would do is the forward itself (CSE merges the two), and
    the loss's reduction and the gradients' share a row kernel. The backward node then hands
    these out when its gradient is 1, and runs the backward graph for any other (a hook that
    scales it, ``autograd.grad`` with ``grad_outputs``). Built from the graphs before their
    compile passes."""
    outs = flat_tensor_outputs(split.forward, split.n_outputs)
    if len(split.grad_outputs) != 1:
        return None
    t = outs[split.grad_outputs[0]].type
    if not isinstance(t, TensorType) or t.shape != () or not t.dtype.is_floating_point \
            or t.device != "cpu":
        return None
    c, _ = split.forward.copy_with_map()
    *saved_in, seed = split.backward.inputs
    env = dict(zip(saved_in, c.outputs[split.n_outputs:]))
    with Builder(c).insert_into(c.block) as b:
        env[seed] = b.constant(np.ones((), NP_DTYPE[t.dtype]), seed.type)
    clone_block_body(split.backward.block, c.block, env)
    return c


def _untranspose_products(g: Graph) -> None:
    """``transpose(matmul(a, b))`` over the last two dims becomes ``matmul(bᵀ, aᵀ)``: a
    Linear's weight gradient ``(xᵀ g)ᵀ`` comes out as ``gᵀ x``, a contiguous array, not a
    transposed view (the optimizer's fused step and ``.grad`` accumulation want contiguous
    gradients; BLAS takes the transposes as flags). ``canonicalize`` then cancels the
    transposes of transposes this leaves."""
    for node in list(g.block):
        if node.kind != "sm::transpose" or node.inputs[0].node.kind != "sm::matmul":
            continue
        mm = node.inputs[0].node
        a, b = mm.inputs
        rank = len(node.output.type.shape) if isinstance(node.output.type, TensorType) else 0
        dims = {d % rank for d in (node.attrs["dim0"], node.attrs["dim1"])} if rank else set()
        if len(mm.output.uses) != 1 or dims != {rank - 2, rank - 1} or not all(
                isinstance(v.type, TensorType) and len(v.type.shape) >= 2 for v in (a, b)):
            continue
        with Builder(g).insert_before(node) as bld, bld.at_source(mm.source):
            out = bld.op("matmul", bld.op("transpose", b, dim0=-2, dim1=-1),
                         bld.op("transpose", a, dim0=-2, dim1=-1))
        node.output.replace_all_uses_with(out)
        node.destroy()
        mm.destroy()


def _split_dropout(g: Graph) -> None:
    """``dropout(x)`` becomes ``x * dropout_mask(x)`` (the same draw): the backward saves the
    mask, where eager's rule replays the draw from a saved generator state."""
    for node in list(g.block):
        if node.kind != "sm::dropout" or node.attrs["p"] == 1.0:
            continue         # p = 1 gives zeros even for inf inputs: its rule handles it
        x, train = node.inputs
        with Builder(g).insert_before(node) as b, b.at_source(node.source):
            y = b.op("mul", x, b.op("dropout_mask", x, train, p=node.attrs["p"]))
        y.type = node.output.type
        node.output.replace_all_uses_with(y)
        node.destroy()


def _requires_grad(g: Graph, leaf_key: Callable[[Value], LeafKey | None]) -> set[Value]:
    """The values a gradient flows to: leaves, and float outputs of differentiable ops with
    an input among them. A structural node on that path we cannot differentiate raises."""
    needs = {v for v in g.inputs if leaf_key(v) is not None}
    returned = set(g.outputs)
    for n in g.walk():
        if n.kind in _OPAQUE:
            raise NotDifferentiable(f"{n.kind} ({n.source or 'no source'}) runs Python code that "
                                    f"may read module tensors")
    for node in g.block:
        if node.kind == Prim.GET_ATTR:
            if leaf_key(node.output) is not None:
                needs.add(node.output)
            continue
        touched = any(v in needs for n in node.walk() for v in n.inputs)
        if not touched:
            continue
        if node.is_op and not node.blocks:
            if S.NONDIFF in S.REGISTRY[node.op_name].flags:
                continue
            needs.update(o for o in node.outputs if _is_float(o))
        elif node.kind in (Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT) and \
                all(u.user.kind in (Prim.RETURN, Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT)
                    for u in node.output.uses) and _feeds_return(node.output, returned):
            continue
        else:
            raise NotDifferentiable(f"{node.kind} ({node.source or 'no source'}) takes a value "
                                    f"that needs a gradient; only op nodes are differentiated")
    return needs


_OPAQUE = frozenset({Prim.CALL_METHOD, Prim.CALL_FUNCTION})


def _feeds_return(v: Value, returned: set[Value]) -> bool:
    return v in returned or any(_feeds_return(u.user.output, returned) for u in v.uses
                                if u.user.kind != Prim.RETURN)


def _is_float(v: Value) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.dtype is not None and t.dtype.category >= 2


def _accumulate(grads: dict[Value, Tensor], v: Value, g: Tensor) -> None:
    prev = grads.get(v)
    grads[v] = g if prev is None else prev + g


def _node_backward(node: Node, grads: dict[Value, Tensor], needs: set[Value],
                   bw: "_Backward") -> None:
    name = node.op_name
    d = DERIVATIVES.get(name)
    if d is None:
        raise NotDifferentiable(f"sm::{name} has no derivative rule")
    ctx = _RuleCtx(node, bw)
    gs = [grads.get(o) if grads.get(o) is not None else _zeros_like(o, bw) for o in node.outputs]
    try:
        result = d.rule(ctx, gs if len(gs) > 1 else gs[0])
    except NotDifferentiable as e:
        raise NotDifferentiable(f"the derivative of sm::{name} ({node.source or 'no source'}): "
                                f"{e}") from None
    except Exception as e:                   # noqa: BLE001 (a rule that cannot run on stand-ins)
        raise NotDifferentiable(f"the derivative of sm::{name} ({node.source or 'no source'}) "
                                f"could not be built: {type(e).__name__}: {e}") from None
    for v, r, meta in zip(node.inputs, result, ctx.input_meta):
        if r is None or v not in needs or meta is None:
            continue
        _accumulate(grads, v, _fit(r, meta))


def _zeros_like(v: Value, bw: "_Backward") -> Tensor:
    from scriptmod._creation import zeros
    meta = bw.meta(v)
    assert meta is not None
    return zeros(meta[0], dtype=meta[1])


def _leaf_grads(g: Graph, grads: dict[Value, Tensor],
                leaf_key: Callable[[Value], LeafKey | None]) -> dict[LeafKey, Tensor]:
    """Gradients per leaf, summed where one module tensor is read by several GetAttr nodes."""
    out: dict[LeafKey, Tensor] = {}
    sources = list(g.inputs) + [n.output for n in g.block if n.kind == Prim.GET_ATTR]
    for v in sources:
        key = leaf_key(v)
        r = grads.get(v)
        if key is None or r is None:
            continue
        out[key] = r if key not in out else out[key] + r
    return out


def _check_leaf_shapes(g: Graph, backward: Graph, leaf_key: Callable[[Value], LeafKey | None],
                       leaves: list[LeafKey]) -> None:
    """Each leaf's gradient has the leaf's shape in the types, symbolic dims included: a
    size that a rule or an op layer turned into a Python int would show here as a dim of
    the example's size where the leaf has a symbolic one."""
    shapes: dict[LeafKey, Any] = {}
    for v in list(g.inputs) + [n.output for n in g.block if n.kind == Prim.GET_ATTR]:
        key = leaf_key(v)
        if key is not None:
            shapes.setdefault(key, getattr(v.type, "shape", None))
    for key, out in zip(leaves, backward.outputs):
        got = getattr(out.type, "shape", None)
        if got is None or tuple(got) != tuple(shapes[key] or ()):
            raise NotDifferentiable(f"the gradient of {key[0]} {key[1]} has the shape "
                                    f"{got}, not the leaf's {shapes[key]}")


class _RuleCtx:
    """What a rule reads (``_dispatch.Ctx``'s interface), served from the forward graph:
    tensor inputs and outputs are stand-ins that become saved values when a rule uses them."""

    def __init__(self, node: Node, bw: "_Backward") -> None:
        self.attrs = dict(node.attrs)
        self.device = "cpu"
        self.rng = None
        self._node, self._bw = node, bw
        self.input_meta = tuple(bw.meta(v) for v in node.inputs)
        self.out_meta = [(m[0], m[1], "cpu") for m in map(bw.meta, node.outputs)
                         if m is not None]

    @property
    def inputs(self) -> list[Any]:
        return [self._bw.stand_in(v) for v in self._node.inputs]

    @property
    def output(self) -> Any:
        return self._bw.stand_in(self._node.outputs[0])

    @property
    def outputs(self) -> list[Any]:
        return [self._bw.stand_in(o) for o in self._node.outputs]


class _Backward:
    """The backward graph under construction, and the ``TRACERS`` recorder that fills it."""

    def __init__(self, fwd: Graph, needs: set[Value], flags: Callable[[Value], bool | None],
                 example: dict[Value, Value] | None = None) -> None:
        self.fwd, self.needs, self.flags = fwd, needs, flags
        # forward value -> the same value typed at the example call (None: ``fwd`` is concrete)
        self.example = example
        self.graph = Graph()
        self.b = Builder(self.graph)
        self.saved: dict[Value, Value] = {}       # forward value -> backward input
        self.grad_inputs: list[Value] = []
        self._stand_ins: dict[Value, Tensor] = {}
        self.sizes = RuleSizes(self)
        self._dims: dict[str, Value] = {}         # symbolic dim -> its size in the backward

    # ---- inputs -----------------------------------------------------------------------
    def grad_input(self, v: Value, name: str) -> Tensor:
        t = v.type
        assert isinstance(t, TensorType)
        bv = self.b.input(t.with_(requires_grad=False), name)
        self.grad_inputs.append(bv)
        return self._tagged(_zeros(self._concrete(v)), bv)

    def stand_in(self, v: Value) -> Any:
        """A rule's view of forward value ``v``: a tagged stand-in tensor, or a Python value
        the graph fixes (a constant size, a flag; a symbolic size is a ``TracedInt``)."""
        if not isinstance(v.type, TensorType):
            known = known_value(v)
            if known is None and v.node.kind == Prim.GET_ATTR:
                known = self.flags(v)
            if known is None and v.node.kind != Prim.CONSTANT:
                raise NotDifferentiable(f"a derivative rule reads {v.node.kind} "
                                        f"({v.node.source or 'no source'}), known only at run time")
            return self._traced(v, known) if _symbolic(known) else known
        t = self._stand_ins.get(v)
        if t is None:
            t = self._stand_ins[v] = _zeros(self._concrete(v))
            t.__dict__["_fw"] = (self, v)
            t._requires_grad = v in self.needs    # a rule may skip a gradient nobody wants
        return t

    # ---- sizes (``_grad_sizes``) --------------------------------------------------------
    def _concrete(self, v: Value) -> TensorType:
        t = v.type if self.example is None else self.example[v].type
        assert isinstance(t, TensorType)
        return t

    def meta(self, v: Value) -> tuple | None:
        """(shape, dtype) of forward value ``v`` as a rule sees it (symbolic dims traced)."""
        t = v.type
        if not isinstance(t, TensorType):
            return None
        if self.example is None:
            return Size(t.shape), t.dtype
        return self._shape(v, self._concrete(v).shape, False), t.dtype

    def _shape(self, v: Value, example: Sequence[int], backward: bool) -> Size:
        """The sizes of forward value ``v`` (``backward``: of a backward value) whose example
        sizes are ``example``: ``TracedInt`` where its type has a symbolic dim."""
        dims = v.type.shape      # type: ignore[union-attr]
        if dims is None or len(dims) != len(example):
            raise NotDifferentiable(f"a derivative rule reads the shape of a value of type "
                                    f"{v.type!r}, whose rank is not known")
        if all(isinstance(d, int) for d in dims):
            return Size(example)
        return Size(self.sizes.size(n, d, _size_maker(self, v, j, d, backward))
                    for j, (n, d) in enumerate(zip(example, dims)))

    def _traced(self, v: Value, known: Any) -> Any:
        """A non-tensor forward value holding symbolic sizes (``x.size(0)``, a shape list):
        its sizes as ``TracedInt`` of the example call's values."""
        example = known_value(self.example[v]) if self.example is not None else None
        if isinstance(known, str) and isinstance(example, int):
            return self.sizes.size(example, known, _dim_maker(self, known))
        if isinstance(known, list) and isinstance(example, list) and \
                len(known) == len(example) and all(isinstance(e, int) for e in example):
            return [self.sizes.size(e, k, _dim_maker(self, k)) if isinstance(k, str) else k
                    for k, e in zip(known, example)]
        return self._unknown(v)

    def _unknown(self, v: Value) -> Any:
        raise NotDifferentiable(f"a derivative rule reads {v.node.kind} "
                                f"({v.node.source or 'no source'}), a size the graph does not "
                                f"know at the example call")

    def dim_value(self, d: str) -> Value:
        """The size of symbolic dim ``d`` in the backward: a ``sm::size`` of a backward value
        that has it (``_dim_source``), one per dim."""
        v = self._dims.get(d)
        if v is None:
            src, j = self._dim_source(d)
            v = self._dims[d] = self.b.op("size", src, dim=j)
        return v

    def _dim_source(self, d: str) -> tuple[Value, int]:
        """A backward value with dim ``d``, and at which dim: preferably one the call holds
        anyway (a gradient input, a saved argument or module tensor, an argument saved for
        this), else a saved value, else a forward value saved for it."""
        def candidates() -> Iterator[tuple[Value, bool]]:    # (value, whether to save it)
            yield from ((bv, False) for bv in self.grad_inputs)
            yield from ((bv, False) for v, bv in self.saved.items() if _is_free(v))
            yield from ((x, True) for x in self.fwd.inputs)
            yield from ((bv, False) for v, bv in self.saved.items() if not _is_free(v))
            yield from ((o, True) for n in self.fwd.block for o in n.outputs)
        for v, forward in candidates():
            shape = list(getattr(v.type, "shape", None) or ())
            if d in shape:
                return (self._saved_input(v) if forward else v), shape.index(d)
        raise NotDifferentiable(f"no value of the graph has the symbolic dim {d}")

    def _tagged(self, t: Tensor, bv: Value) -> Tensor:
        t.__dict__["_bw"] = (self, bv)
        return t

    def value_of(self, x: Any, arg: S.Arg | None = None) -> Value:
        if isinstance(x, Tensor):
            tag = x.__dict__.get("_bw")
            if tag is not None and tag[0] is self:
                return tag[1]
            fw = x.__dict__.get("_fw")
            if fw is not None and fw[0] is self:
                return self._saved_input(fw[1])
            raise NotDifferentiable("a derivative rule made a tensor outside the op registry "
                                    "(it calls a backward kernel or replays a random draw)")
        if isinstance(x, TracedInt):
            return self.sizes.int_value(self, x)
        if isinstance(x, (list, tuple)) and any(isinstance(i, (Tensor, TracedInt)) for i in x):
            items = [self.value_of(i) for i in x]
            return self.b.list_(items) if isinstance(x, list) else self.b.tuple_(items)
        return self.b.constant(list(x) if isinstance(x, tuple) and arg is not None else x)

    def _saved_input(self, v: Value) -> Value:
        bv = self.saved.get(v)
        if bv is None:
            t = v.type
            assert isinstance(t, TensorType)
            bv = self.saved[v] = self.graph.add_input(t.with_(requires_grad=False),
                                                      f"saved_{len(self.saved)}")
        return bv

    # ---- the recorder (``TRACERS``) ---------------------------------------------------
    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        _dispatch.TRACERS.append(self)
        try:
            yield
        finally:
            _dispatch.TRACERS.remove(self)

    def record(self, name: str, inputs: Sequence[Any], attrs: dict[str, Any], outs: tuple) -> None:
        schema = S.REGISTRY[name]
        args = _schema_args(schema, len(inputs))
        vals = [self.value_of(x, a) for x, a in zip(inputs, args)]
        if any(_symbolic(a, TracedInt) for a in attrs.values()):
            raise NotDifferentiable(f"sm::{name} in a derivative rule takes a symbolic size as "
                                    f"an attribute, which a graph fixes")
        types = _typed(schema, vals, attrs, outs)
        node = self.b.node(schema.kind, vals, types, dict(attrs))
        for o, v in zip(outs, node.outputs):
            if isinstance(o, Tensor):
                self._tagged(o, v)

    def shape_of(self, t: Tensor) -> Size:
        if self.example is not None:
            for key, backward in (("_bw", True), ("_fw", False)):
                tag = t.__dict__.get(key)
                if tag is not None and tag[0] is self:
                    return self._shape(tag[1], t._data.shape, backward)
        return Size(t._data.shape)

    def numel_of(self, t: Tensor) -> int:
        return math.prod(self.shape_of(t)) if self.example is not None else int(t._data.size)

    def on_len(self, t: Tensor, how: str = "len()") -> int:
        n = self.shape_of(t)[0]
        return n._bake(how, True) if isinstance(n, TracedInt) else int(n)

    def on_value_read(self, t: Tensor, what: str) -> None:
        raise NotDifferentiable(f"a derivative rule reads a tensor's value ({what}())")

    def on_inplace(self, t: Tensor, out: Tensor) -> None:
        self._tagged(t, self.value_of(out))

    # ---- saved values -----------------------------------------------------------------
    def _cost(self, v: Value) -> int:
        """Bytes that saving ``v`` holds: nothing for arguments, module tensors, constants."""
        if _is_free(v):
            return 0
        t = self._concrete(v)
        return math.prod(t.shape) * NP_DTYPE[t.dtype].itemsize

    def _live(self) -> list[Value]:
        return [v for v, bv in self.saved.items() if bv.uses]

    def saved_bytes(self) -> int:
        return sum(self._cost(v) for v in self._live())

    def recompute(self) -> None:
        """The greedy rule (module docstring), to a fixed point: a saved value whose
        *frontier* (the values its elementwise and view producers start from) adds no more
        bytes than it holds is recomputed from that frontier."""
        self._clones: dict[Value, Value] = {}
        nodes = self.graph.block.nodes
        self._anchor = nodes[0] if nodes else None      # clones go before it, in order
        changed = True
        while changed:
            changed = False
            live = set(self._live())
            for v in sorted(live, key=self._cost, reverse=True):
                if not self.saved[v].uses or not _recomputable(v.node):
                    continue
                frontier = _frontier(v)
                if sum(self._cost(f) for f in frontier if f not in live) <= self._cost(v):
                    self.saved[v].replace_all_uses_with(self._clone(v))
                    live = set(self._live())
                    changed = True

    def _clone(self, v: Value) -> Value:
        """``v`` computed in the backward from saved values (clones memoized, placed first)."""
        if v in self._clones:
            return self._clones[v]
        node = v.node
        if node.kind != Prim.CONSTANT and not _recomputable(node):
            return self._saved_input(v)
        if node.kind == Prim.CONSTANT:
            clone = self.graph.create(Prim.CONSTANT, [], [v.type], dict(node.attrs))
        else:
            ins = [self._clone(x) if isinstance(x.type, TensorType) else self._constant(x)
                   for x in node.inputs]
            clone = self.graph.create(node.kind, ins, [o.type for o in node.outputs],
                                      dict(node.attrs), node.source)
            clone.scope = node.scope
        out = _place(clone, self._anchor, self.graph).outputs[v.index]
        self._clones[v] = out
        return out

    def _constant(self, x: Value) -> Value:
        value = x.node.attrs.get("value") if x.node.kind == Prim.CONSTANT else known_value(x)
        c = self.graph.create(Prim.CONSTANT, [], [x.type], {"value": value})
        return _place(c, self._anchor, self.graph).output

    # ---- the result -------------------------------------------------------------------
    def split(self, wanted: tuple[int, ...], leaves: dict[LeafKey, Tensor],
              unpruned: int) -> Split:
        kept = [(v, bv) for v, bv in self.saved.items() if bv.uses]
        saved_bytes = self.saved_bytes()
        _reorder_inputs(self.graph, [bv for _, bv in kept] + self.grad_inputs)
        fwd = self.fwd
        n_outputs = len(fwd.outputs)
        for v, _ in kept:
            fwd.register_output(v)
        return Split(fwd, self.graph, n_outputs, wanted, tuple(leaves), saved_bytes, unpruned)


def _typed(schema: S.OpSchema, vals: list[Value], attrs: dict[str, Any],
           outs: tuple) -> list[Type]:
    """The types of a rule's op in the backward, as its schema gives them from the backward's
    types (symbolic dims included). The stand-ins hold zeros: an op whose result's shape
    depends on data (a boolean mask index) would be recorded with the shape zeros give, so
    every size the schema gives must be the stand-in's, and no dim may be unknown."""
    try:
        inferred = schema.infer([v.type for v in vals], attrs, [known_value(v) for v in vals])
    except Exception as e:                   # noqa: BLE001
        raise NotDifferentiable(f"sm::{schema.name} in a derivative rule: {e}") from None
    types: list[Type] = []
    for got, o in zip(inferred, outs):
        if not isinstance(o, Tensor):
            types.append(IntType)
            continue
        want = tensor_type(o)
        if not isinstance(got, TensorType) or got.shape is None or \
                len(got.shape) != len(want.shape) or any(
                d is None or (isinstance(d, int) and d != n) for d, n in zip(got.shape, want.shape)):
            raise NotDifferentiable(f"sm::{schema.name} in a derivative rule has a result whose "
                                    f"shape depends on the data (or is not known for every size)")
        types.append(want.with_(shape=tuple(got.shape)))
    return types


def _recomputable(node: Node) -> bool:
    """Cheap to compute again in the backward: elementwise (pure) ops and views, each of
    whose non-tensor inputs the graph fixes."""
    if not node.is_op or node.blocks:
        return False
    flags = S.REGISTRY[node.op_name].flags
    if S.IMPURE in flags or not (S.ELEMENTWISE in flags or S.VIEW in flags):
        return False
    return all(isinstance(x.type, TensorType) or x.node.kind == Prim.CONSTANT
               or (known_value(x) is not None and not _symbolic(known_value(x)))
               for x in node.inputs)


def _frontier(v: Value) -> set[Value]:
    """The values ``v``'s recomputable producers start from (constants need none)."""
    out: set[Value] = set()
    seen: set[Value] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x.node.kind == Prim.CONSTANT:
            continue
        if _recomputable(x.node):
            stack.extend(i for i in x.node.inputs if isinstance(i.type, TensorType))
        else:
            out.add(x)
    return out


def _is_free(v: Value) -> bool:
    """Held by the call anyway: an argument, a module tensor, a constant, or a view of one."""
    node = v.node
    if node.kind in (Prim.PARAM, Prim.GET_ATTR, Prim.CONSTANT):
        return True
    if node.is_op and S.VIEW in S.REGISTRY[node.op_name].flags:
        return all(_is_free(x) for x in node.inputs if isinstance(x.type, TensorType))
    return False


def _place(node: Node, first: Node | None, graph: Graph) -> Node:
    if first is None:
        return graph.append(node)
    return node.insert_before(first)


def _reorder_inputs(g: Graph, order: list[Value]) -> None:
    """Make ``order`` the graph's inputs, in that order (the others had no uses)."""
    old = list(g.inputs)
    fresh = [g.add_input(v.type, v.debug_name) for v in order]
    for v, new in zip(order, fresh):
        v.replace_all_uses_with(new)
    for v in reversed(old):
        g.block.remove_param(v.index)


def _at_example(g: Graph, example: Sequence[Type]) -> dict[Value, Value]:
    """``g``'s values typed at one call's input types: a copy of ``g`` shape-propagated from
    them, and the map from ``g``'s values to the copy's."""
    copy, env = g.copy_with_map()
    try:
        propagate_shapes(copy, list(example))
    except Exception as e:                   # noqa: BLE001 (it does not type at those sizes)
        raise NotDifferentiable(f"the graph does not type at the example call's sizes: "
                                f"{type(e).__name__}: {e}") from None
    return env


def _symbolic(x: Any, kind: type | tuple[type, ...] = str) -> bool:
    """Whether ``x`` is, or holds, a symbolic size (``kind``: a str dim, a ``TracedInt``)."""
    if isinstance(x, (list, tuple)):
        return any(_symbolic(i, kind) for i in x)
    return isinstance(x, kind)


def _size_maker(bw: "_Backward", v: Value, j: int, d: Any,
                backward: bool) -> Callable[[Any], Value]:
    """How a ``TracedInt`` for dim ``j`` (symbolic ``d``) of ``v`` becomes a backward value:
    a backward value's own ``sm::size``, a forward value's dim through ``dim_value``."""
    if backward:
        return lambda fr: fr.b.op("size", v, dim=j)
    return _dim_maker(bw, d)


def _dim_maker(bw: "_Backward", d: str) -> Callable[[Any], Value]:
    return lambda fr: bw.dim_value(d)


def _zeros(t: TensorType) -> Tensor:
    """A zero-filled stand-in (``np.zeros`` maps untouched pages lazily)."""
    if t.shape is None or not all(type(d) is int for d in t.shape):
        raise NotDifferentiable(f"a value of type {t!r} has a shape known only at run time")
    return Tensor._make(np.zeros(t.shape, dtype=NP_DTYPE[t.dtype]))
