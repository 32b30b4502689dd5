"""Walk an IR graph and write it as an ONNX graph: structural nodes here (constants,
attributes, tuples and lists, ``prim::If``/``prim::Loop``), tensor ops through the
``_table.EMITTERS`` table (rows in ``_elementwise``, ``_nn``, ``_shapes``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from scriptmod.ir.types import BoolType, FloatType, IntType, ModuleType, TensorType, Type
from scriptmod.tensor import Tensor

from . import (_conv, _elementwise, _layers, _loss, _nn, _norm, _pooling,  # noqa: F401
               _shapes, _vision)  # (registration of the table's rows)
from . import (_fft, _indexing, _linalg, _math, _products, _rnn, _scans,  # noqa: F401
               _special, _views)
from ._context import ONNX_DTYPES, Context, ExportError, ModuleRef, Sym, scalar_dtype
from ._fold import fold_constants
from ._recompose import Recomposed, recompose, skipped
from ._table import EMITTERS

SCALAR_TYPES = {IntType: D.int64, FloatType: D.float64, BoolType: D.bool_}


class UnsupportedOperatorError(ExportError):
    """An op of the graph has no ONNX form here (torch.onnx's error of the same name)."""


def host_array(t: Tensor) -> np.ndarray:
    data = t._data
    return data.get() if hasattr(data, "get") and not isinstance(data, np.ndarray) else data


def type_dtype(t: Type) -> D.DType | None:
    return t.dtype if isinstance(t, TensorType) else SCALAR_TYPES.get(t)


class Walker:
    """Emits the nodes of a block into the context, keeping each IR value's export value."""

    def __init__(self, cx: Context) -> None:
        self.cx = cx
        self.env: dict[Value, Any] = {}
        self.params: dict[int, Sym] = {}          # id(tensor) -> its initializer

    def block(self, block: Block) -> None:
        matches = recompose(block)
        skip = skipped(matches)
        for node in block:
            if node in skip:
                continue
            self.cx.source = node.source
            target: Node | Recomposed = matches.get(node, node)
            outs = self.node(target)
            for v, value in zip(target.outputs, outs):
                self.env[v] = value

    def node(self, node: Node | Recomposed) -> list:
        ins = [self.env[v] for v in node.inputs]
        kind = node.kind
        if kind == Prim.CONSTANT:
            return [self.constant(node.attrs.get("value"))]
        if kind == Prim.GET_ATTR:
            return [self.attribute(ins[0], node.attrs["name"])]
        if kind in (Prim.LIST_CONSTRUCT, Prim.TUPLE_CONSTRUCT):
            return [list(ins) if kind == Prim.LIST_CONSTRUCT else tuple(ins)]
        if kind in (Prim.LIST_UNPACK, Prim.TUPLE_UNPACK):
            return list(ins[0])
        if kind == Prim.TUPLE_INDEX:
            return [ins[0][ins[1]]]
        if kind == Prim.IF:
            return self.if_(node, ins)                      # type: ignore[arg-type]
        if kind == Prim.LOOP:
            return self.loop(node, ins)                     # type: ignore[arg-type]
        emitter = EMITTERS.get(node.op_name) if kind.startswith("sm::") else None
        if emitter is None:
            raise UnsupportedOperatorError(
                f"onnx.export: {kind} ({node.source or 'no source line'}) has no ONNX form "
                f"at opset {self.cx.opset}")
        return emitter(self.cx, node, ins)                  # type: ignore[arg-type]

    # ---- values ---------------------------------------------------------------------------
    def constant(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return Sym(self.cx.const(np.ascontiguousarray(host_array(value))), value.dtype,
                       value.dim())
        return value

    def attribute(self, owner: Any, name: str) -> Any:
        if not isinstance(owner, ModuleRef):
            raise self.cx.error(f"attribute {name!r} of a value that is not a module")
        path = f"{owner.path}.{name}" if owner.path else name
        value = getattr(owner.obj, name)
        if isinstance(value, Tensor):
            known = self.params.get(id(value))
            if known is None:
                array = np.ascontiguousarray(host_array(value))
                known = self.params[id(value)] = Sym(self.cx.const(array, name=path),
                                                     value.dtype, value.dim())
            return known
        if hasattr(value, "_modules"):
            return ModuleRef(value, path)
        return value

    def output(self, value: Any, t: Type) -> str:
        """``value`` as a fresh name of the IR type ``t`` (ONNX block outputs are made by
        the block itself: an Identity when the value comes from outside it)."""
        dtype = type_dtype(t) or (value.dtype if isinstance(value, Sym) else scalar_dtype(value))
        return self.cx.op("Identity", [self.cx.tensor(value, dtype)])

    # ---- control flow ---------------------------------------------------------------------
    def subgraph(self, block: Block, name: str, params: Sequence[tuple[Value | None, Sym]],
                 outputs: Sequence[tuple[Any, Type]]) -> onnx.GraphProto:
        """``block`` as an ONNX body graph; ``params`` bind its inputs, ``outputs`` (a value
        or an IR value of the block, and the type to give it) are its results."""
        self.cx.open_block()
        for v, sym in params:
            if v is not None:
                self.env[v] = sym
        self.block(block)
        names = [self.output(self.env[o] if isinstance(o, Value) else o, t) for o, t in outputs]
        nodes = self.cx.close_block()
        out_types = [type_dtype(t) for _, t in outputs]
        return helper.make_graph(
            nodes, self.cx.fresh(name), [value_info(s.name, s.dtype, s.rank) for _, s in params],
            [value_info(n, d, _rank(t)) for n, d, (_, t) in zip(names, out_types, outputs)])

    def if_(self, node: Node, ins: list) -> list:
        cond = ins[0]
        if not isinstance(cond, Sym):                       # decided at export: inline it
            block = node.blocks[0 if cond else 1]
            self.block(block)
            return [self.env[v] for v in block.outputs]
        types = [v.type for v in node.outputs]
        branches = [self.subgraph(b, name, [], list(zip(b.outputs, types)))
                    for b, name in zip(node.blocks, ("then", "else"))]
        self.cx.source = node.source
        names = self.cx.op("If", [self.cx.tensor(cond, D.bool_)], outputs=len(types),
                           then_branch=branches[0], else_branch=branches[1])
        return self.results(names, node.outputs)

    def loop(self, node: Node, ins: list) -> list:
        """``prim::Loop(trip, cond, *carried)``, body ``(i, *carried) -> (cond, *carried)``;
        ONNX's body also takes the condition in (unused here)."""
        body = node.blocks[0]
        carried_types = [v.type for v in node.outputs]
        params = [(body.params[0], Sym(self.cx.fresh("iter"), D.int64, 0)),
                  (None, Sym(self.cx.fresh("cond_in"), D.bool_, 0))]
        params += [(p, Sym(self.cx.fresh("carried"), type_dtype(t) or D.float32, _rank(t)))
                   for p, t in zip(body.params[1:], carried_types)]
        outputs = [(body.outputs[0], BoolType)] + list(zip(body.outputs[1:], carried_types))
        graph = self.subgraph(body, "body", params, outputs)
        self.cx.source = node.source
        trip = self.cx.tensor(ins[0], D.int64)
        initial = [self.cx.tensor(v, type_dtype(t)) for v, t in zip(ins[2:], carried_types)]
        names = self.cx.op("Loop", [trip, self.cx.tensor(ins[1], D.bool_), *initial],
                           outputs=len(carried_types), body=graph)
        return self.results(names, node.outputs)

    def results(self, names: Any, outputs: Sequence[Value]) -> list:
        names = [names] if isinstance(names, str) else names
        return [Sym(n, type_dtype(v.type) or D.float32, _rank(v.type))
                for n, v in zip(names, outputs)]


def _rank(t: Type) -> int | None:
    return t.rank if isinstance(t, TensorType) else 0


def value_info(name: str, dtype: D.DType | None, rank: int | None,
               shape: Sequence[Any] | None = None) -> onnx.ValueInfoProto:
    if dtype is None:
        raise ExportError(f"onnx.export: value {name!r} has no known dtype")
    dims = shape if shape is not None else (None if rank is None else [None] * rank)
    return helper.make_tensor_value_info(name, ONNX_DTYPES[dtype], dims)


def build_graph(graph: Graph, module: Any, opset: int, input_names: Sequence[str],
                output_names: Sequence[str] | None, dims: dict[str, dict[int, str]],
                fold: bool) -> onnx.GraphProto:
    """The ONNX graph of ``graph`` (its ``self`` input bound to ``module``); with ``fold``,
    nodes of constants only are evaluated now."""
    walker = Walker(Context(opset))
    inputs = list(graph.inputs)
    if inputs and isinstance(inputs[0].type, ModuleType):
        walker.env[inputs.pop(0)] = ModuleRef(module, "")
    infos = [graph_input(walker, v, name, dims.get(name)) for v, name in zip(inputs, input_names)]
    walker.block(graph.block)
    outs = graph_outputs(walker, graph.outputs, output_names, dims)
    cx = walker.cx
    proto = helper.make_graph(cx.nodes, "scriptmod", infos, outs, initializer=cx.initializers)
    if fold:
        fold_constants(proto, {p.name for p in walker.params.values()}, opset)
    prune(proto)
    return proto


def graph_input(walker: Walker, v: Value, name: str,
                dynamic: dict[int, str] | None) -> onnx.ValueInfoProto:
    t = v.type
    if not isinstance(t, TensorType) or t.dtype is None or t.shape is None:
        raise walker.cx.error(f"input {name!r} is a {t!r}, expected a tensor of known dtype "
                              f"and rank (ONNX graph inputs are tensors)")
    walker.env[v] = Sym(name, t.dtype, t.rank)
    return value_info(name, t.dtype, t.rank, onnx_shape(t.shape, dynamic))


def graph_outputs(walker: Walker, outputs: Sequence[Value], names: Sequence[str] | None,
                  dims: dict[str, dict[int, str]]) -> list[onnx.ValueInfoProto]:
    """Name the graph's results (a tuple output flattened): the node computing a result
    is renamed; a result computed elsewhere (an input, a constant) goes through Identity."""
    cx, results = walker.cx, flatten([walker.env[v] for v in outputs])
    names = list(names or (["output"] if len(results) == 1 else
                           [f"output_{i}" for i in range(len(results))]))
    if len(names) != len(results):
        raise ValueError(f"onnx.export: output_names has {len(names)} name(s), the model "
                         f"returns {len(results)} tensor(s)")
    producers = {o: n for n in cx.nodes for o in n.output}
    renamed: dict[str, str] = {}
    infos = []
    cx.source = None
    for value, name, t in zip(results, names, flatten_types([v.type for v in outputs])):
        dtype = type_dtype(t) or (value.dtype if isinstance(value, Sym) else scalar_dtype(value))
        src = cx.tensor(value, dtype)
        if src in producers and src not in renamed:
            rename(cx.nodes, src, name)
            renamed[src] = name
        else:
            cx.nodes.append(helper.make_node("Identity", [renamed.get(src, src)], [name]))
        shape = onnx_shape(t.shape, dims.get(name)) if isinstance(t, TensorType) and \
            t.shape is not None else None
        infos.append(value_info(name, dtype, getattr(value, "rank", 0), shape))
    return infos


def rename(nodes: Sequence[onnx.NodeProto], old: str, new: str) -> None:
    """Rename the tensor ``old`` everywhere in ``nodes``, their body graphs included."""
    for node in nodes:
        for names in (node.input, node.output):
            for i, n in enumerate(names):
                if n == old:
                    names[i] = new
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                rename(a.g.node, old, new)
                for o in a.g.output:
                    o.name = new if o.name == old else o.name


def prune(graph: onnx.GraphProto) -> None:
    """Drop nodes and initializers nothing reads (a formula left behind by a
    recomposition, a dropped guard, a folded constant's inputs)."""
    needed, keep = {o.name for o in graph.output}, []
    for node in reversed(graph.node):
        if needed & set(node.output):
            keep.append(node)
            needed |= reads(node)
    initializers = [t for t in graph.initializer if t.name in needed]
    del graph.node[:], graph.initializer[:]
    graph.node.extend(keep[::-1])
    graph.initializer.extend(initializers)


def reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads, those its body graphs read from outside included."""
    out = set(node.input)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out |= {i for n in a.g.node for i in reads(n)}
    return out



def flatten(values: Sequence[Any]) -> list:
    out: list = []
    for v in values:
        out += flatten(v) if isinstance(v, (tuple, list)) and not _is_ints(v) else [v]
    return out


def _is_ints(v: Any) -> bool:
    return all(isinstance(x, int) for x in v)


def flatten_types(types: Sequence[Type]) -> list[Type]:
    out: list[Type] = []
    for t in types:
        elements = getattr(t, "elements", None)
        out += [t] if elements is None else flatten_types(elements)
    return out


def onnx_shape(shape: Sequence[Any], dynamic: dict[int, str] | None) -> list[Any]:
    """IR dims as ONNX dims: a symbolic dim is named (``B`` -> ``batch``), an unknown one
    left open, and the dims named in ``dynamic_axes`` take those names."""
    out: list[Any] = [("batch" if d == "B" else d) if d is not None else None for d in shape]
    for axis, name in (dynamic or {}).items():
        out[axis] = name
    return out
