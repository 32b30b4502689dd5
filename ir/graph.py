"""The SSA graph: ``Graph`` > ``Block`` > ``Node`` > ``Value``.

Every value has one producer node; block parameters are the outputs of the block's hidden
``prim::Param`` node and block outputs are the inputs of its hidden ``prim::Return`` node, so
that use lists cover them uniformly. Nodes of a block form a doubly linked ring closed by the
return node, which makes insertion, removal and moving O(1).

    >>> from scriptmod.ir.dtypes import float32
    >>> from scriptmod.ir.types import TensorType
    >>> g = Graph()
    >>> x = g.add_input(TensorType(float32, (2,)), "x")
    >>> n = g.append(g.create("sm::neg", [x], [TensorType(float32, (2,))]))
    >>> g.register_output(n.output)
    0
    >>> print(g)
    graph(%x : Float(2)):
      %0 : Float(2) = sm::neg(%x)
      return (%0)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from .dtypes import DType
from .types import ListType, NoneType, StrType, TensorType, Type


class Prim:
    """Kinds of the structural nodes; op nodes are ``sm::<op name>``."""

    PARAM = "prim::Param"
    RETURN = "prim::Return"
    CONSTANT = "prim::Constant"
    GET_ATTR = "prim::GetAttr"
    SET_ATTR = "prim::SetAttr"
    CALL_METHOD = "prim::CallMethod"
    LIST_CONSTRUCT = "prim::ListConstruct"
    LIST_UNPACK = "prim::ListUnpack"
    TUPLE_CONSTRUCT = "prim::TupleConstruct"
    TUPLE_UNPACK = "prim::TupleUnpack"
    TUPLE_INDEX = "prim::TupleIndex"
    IF = "prim::If"
    LOOP = "prim::Loop"
    FUSION_GROUP = "prim::FusionGroup"
    RAISE = "prim::RaiseException"
    PRINT = "prim::Print"
    UNINITIALIZED = "prim::Uninitialized"  # a typed placeholder no path reads (scripted code)
    CALL_FUNCTION = "prim::CallFunction"   # a library function by name, expanded per
                                           # specialization (scripted code; see jit.frontend)


OP_NAMESPACE = "sm"
SIDE_EFFECT_KINDS = frozenset({Prim.SET_ATTR, Prim.CALL_METHOD, Prim.RAISE, Prim.PRINT,
                               Prim.CALL_FUNCTION})
_KIND_RE = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*$")
_NAME_RE = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)*$")


class IRError(Exception):
    """Misuse of the graph API (dangling uses, bad kinds, bad attribute values)."""


@dataclass(frozen=True, eq=False)
class Use:
    """``user.inputs[index]`` is the value."""

    user: "Node"
    index: int


class Value:
    """An SSA value: produced by ``node.outputs[index]``, typed, with a use list."""

    __slots__ = ("type", "node", "index", "uses", "_debug_name")

    def __init__(self, node: "Node", index: int, type: Type, name: str | None = None) -> None:
        self.type = type
        self.node = node
        self.index = index
        self.uses: list[Use] = []
        self._debug_name: str | None = None
        self.debug_name = name

    @property
    def debug_name(self) -> str | None:
        return self._debug_name

    @debug_name.setter
    def debug_name(self, name: str | None) -> None:
        if name is not None and (not _NAME_RE.match(name) or name.isdigit()):
            raise IRError(f"debug name {name!r}: expected an identifier such as 'x' or 'x.1'")
        self._debug_name = name

    @property
    def is_param(self) -> bool:
        return self.node.kind == Prim.PARAM

    @property
    def owning_block(self) -> "Block | None":
        return self.node.owning_block

    def replace_all_uses_with(self, other: "Value") -> None:
        """Point every user of ``self`` at ``other`` (``self`` keeps no uses)."""
        for use in list(self.uses):
            use.user.replace_input(use.index, other)

    def replace_uses_if(self, other: "Value", keep: Callable[[Use], bool]) -> None:
        for use in list(self.uses):
            if not keep(use):
                use.user.replace_input(use.index, other)

    def __repr__(self) -> str:
        return f"%{self._debug_name or '?'} : {self.type!r}"


class Node:
    """One operation. Create nodes with ``Graph.create`` and place them with ``insert_*``."""

    # declared, so nothing outside the IR can hang runtime state on a node (issue 36)
    __slots__ = ("graph", "kind", "_inputs", "outputs", "attrs", "blocks", "owning_block", "prev",
                 "next", "source", "scope")

    def __init__(self, graph: "Graph", kind: str, attrs: dict[str, Any] | None = None,
                 source: str | None = None) -> None:
        if not _KIND_RE.match(kind):
            raise IRError(f"node kind {kind!r}: expected 'namespace::name'")
        self.graph = graph
        self.kind = kind
        self._inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = {}
        self.blocks: list[Block] = []
        self.owning_block: Block | None = None
        self.prev: Node | None = None
        self.next: Node | None = None
        self.source = source
        self.scope: str | None = None   # module path it came from ("fc1", "layers.0.attn")
        for k, v in (attrs or {}).items():
            self.set_attr(k, v)

    # ---- inputs and outputs --------------------------------------------------------------
    @property
    def inputs(self) -> tuple[Value, ...]:
        return tuple(self._inputs)

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise IRError(f"{self.kind} has {len(self.outputs)} outputs, expected exactly 1")
        return self.outputs[0]

    def add_input(self, v: Value) -> Value:
        return self.insert_input(len(self._inputs), v)

    def insert_input(self, i: int, v: Value) -> Value:
        self._drop_uses_from(i)
        self._inputs.insert(i, v)
        self._add_uses_from(i)
        return v

    def replace_input(self, i: int, v: Value) -> None:
        old = self._inputs[i]
        old.uses[:] = [u for u in old.uses if not (u.user is self and u.index == i)]
        self._inputs[i] = v
        v.uses.append(Use(self, i))

    def replace_input_with(self, old: Value, new: Value) -> None:
        for i, v in enumerate(self._inputs):
            if v is old:
                self.replace_input(i, new)

    def remove_input(self, i: int) -> None:
        self._drop_uses_from(i)
        self._inputs.pop(i)
        self._add_uses_from(i)

    def remove_all_inputs(self) -> None:
        self._drop_uses_from(0)
        self._inputs.clear()

    def _drop_uses_from(self, start: int) -> None:
        # Use records hold positions, so shifting inputs rewrites the records after ``start``.
        for v in self._inputs[start:]:
            v.uses[:] = [u for u in v.uses if not (u.user is self and u.index >= start)]

    def _add_uses_from(self, start: int) -> None:
        for j in range(start, len(self._inputs)):
            self._inputs[j].uses.append(Use(self, j))

    def add_output(self, type: Type, name: str | None = None) -> Value:
        v = Value(self, len(self.outputs), type, name)
        self.outputs.append(v)
        return v

    def remove_output(self, i: int) -> None:
        if self.outputs[i].uses:
            raise IRError(f"{self.kind}: cannot remove output {i}, it still has uses")
        del self.outputs[i]
        for j, v in enumerate(self.outputs):
            v.index = j

    def add_block(self) -> "Block":
        b = Block(self.graph, self)
        self.blocks.append(b)
        return b

    # ---- attributes ----------------------------------------------------------------------
    def set_attr(self, name: str, value: Any) -> None:
        """Attributes are typed data; a tensor payload is allowed only as a Constant value."""
        if not (self.kind == Prim.CONSTANT and name == "value"):
            check_attr_value(value, f"{self.kind}[{name}]")
        self.attrs[name] = value

    @property
    def namespace(self) -> str:
        return self.kind.split("::")[0]

    @property
    def op_name(self) -> str:
        return self.kind.split("::")[1]

    @property
    def is_op(self) -> bool:
        return self.namespace == OP_NAMESPACE

    # ---- placement -----------------------------------------------------------------------
    def insert_before(self, other: "Node") -> "Node":
        """Place this (unplaced) node right before ``other``; returns self."""
        if self.owning_block is not None:
            raise IRError(f"{self.kind} is already in a block; use move_before")
        if other.kind == Prim.PARAM or other.owning_block is None:
            raise IRError("insert_before: the anchor node is not in a block")
        prev = other.prev
        assert prev is not None
        self.prev, self.next = prev, other
        prev.next = self
        other.prev = self
        self.owning_block = other.owning_block
        return self

    def insert_after(self, other: "Node") -> "Node":
        if other.kind == Prim.RETURN:
            raise IRError("insert_after: cannot insert after a block's return")
        if other.owning_block is None:
            raise IRError("insert_after: the anchor node is not in a block")
        anchor = other.owning_block.return_node.next if other.kind == Prim.PARAM else other.next
        assert anchor is not None
        return self.insert_before(anchor)

    def _unlink(self) -> None:
        assert self.prev is not None and self.next is not None
        self.prev.next = self.next
        self.next.prev = self.prev
        self.prev = self.next = None
        self.owning_block = None

    def move_before(self, other: "Node") -> None:
        self._unlink()
        self.insert_before(other)

    def move_after(self, other: "Node") -> None:
        self._unlink()
        self.insert_after(other)

    def destroy(self) -> None:
        """Remove the node; its outputs must be unused (replace their uses first)."""
        for v in self.outputs:
            if v.uses:
                raise IRError(f"cannot destroy {self.kind}: output {v.index} still has "
                              f"{len(v.uses)} use(s)")
        for b in self.blocks:
            b.destroy()
        self.remove_all_inputs()
        if self.owning_block is not None:
            self._unlink()

    def is_before(self, other: "Node") -> bool:
        """True when ``self`` comes earlier in the same block."""
        n = self.next
        while n is not None and n.kind != Prim.RETURN:
            if n is other:
                return True
            n = n.next
        return False

    def walk(self) -> Iterator["Node"]:
        """This node then every node nested in its blocks, in order."""
        yield self
        for b in self.blocks:
            yield from b.walk()

    def __repr__(self) -> str:
        from .printer import describe
        return describe(self)


_ATTR_SCALARS = (bool, int, float, str, type(None), DType)


def check_attr_value(value: Any, where: str) -> None:
    if isinstance(value, _ATTR_SCALARS) or isinstance(value, Graph):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            check_attr_value(item, where)
        return
    raise IRError(f"{where}: attribute values are int, float, bool, str, None, dtypes, graphs "
                  f"or lists/tuples of those; got {type(value).__name__}")


class Block:
    """An ordered list of nodes with parameters and outputs (phis of If/Loop)."""

    __slots__ = ("graph", "owning_node", "param_node", "return_node")

    def __init__(self, graph: "Graph", owning_node: Node | None) -> None:
        self.graph = graph
        self.owning_node = owning_node
        self.param_node = Node(graph, Prim.PARAM)
        self.return_node = Node(graph, Prim.RETURN)
        self.param_node.owning_block = self
        self.return_node.owning_block = self
        self.return_node.prev = self.return_node.next = self.return_node

    @property
    def params(self) -> tuple[Value, ...]:
        return tuple(self.param_node.outputs)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.return_node.inputs

    def add_param(self, type: Type, name: str | None = None) -> Value:
        return self.param_node.add_output(type, name)

    def remove_param(self, i: int) -> None:
        self.param_node.remove_output(i)

    def register_output(self, v: Value) -> int:
        self.return_node.add_input(v)
        return len(self.return_node.inputs) - 1

    def remove_output(self, i: int) -> None:
        self.return_node.remove_input(i)

    def replace_output(self, i: int, v: Value) -> None:
        self.return_node.replace_input(i, v)

    def __iter__(self) -> Iterator[Node]:
        """Nodes in order; safe against removing the node just yielded."""
        n = self.return_node.next
        while n is not None and n is not self.return_node:
            nxt = n.next
            yield n
            n = nxt

    @property
    def nodes(self) -> list[Node]:
        return list(self)

    def append(self, node: Node) -> Node:
        return node.insert_before(self.return_node)

    def prepend(self, node: Node) -> Node:
        assert self.return_node.next is not None
        return node.insert_before(self.return_node.next)

    def walk(self) -> Iterator[Node]:
        for n in self:
            yield from n.walk()

    def destroy(self) -> None:
        """Drop every node; uses from outside the block must be gone already."""
        self.return_node.remove_all_inputs()
        for n in reversed(self.nodes):
            n.destroy()

    def index_in_owner(self) -> int:
        assert self.owning_node is not None
        return next(i for i, b in enumerate(self.owning_node.blocks) if b is self)


class Graph:
    """A method body: one top block whose params are the inputs.

        >>> from scriptmod.ir.types import IntType
        >>> g = Graph(); x = g.add_input(IntType, "n"); g.register_output(x)
        0
    """

    __slots__ = ("block",)

    def __init__(self) -> None:
        self.block = Block(self, None)

    @property
    def inputs(self) -> tuple[Value, ...]:
        return self.block.params

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.block.outputs

    @property
    def nodes(self) -> list[Node]:
        return self.block.nodes

    def add_input(self, type: Type, name: str | None = None) -> Value:
        return self.block.add_param(type, name)

    def register_output(self, v: Value) -> int:
        return self.block.register_output(v)

    def create(self, kind: str, inputs: Sequence[Value] = (), output_types: Sequence[Type] = (),
               attrs: dict[str, Any] | None = None, source: str | None = None,
               n_blocks: int = 0) -> Node:
        """A new node, not yet placed (see ``append`` and ``Node.insert_before``)."""
        n = Node(self, kind, attrs, source)
        for v in inputs:
            n.add_input(v)
        for t in output_types:
            n.add_output(t)
        for _ in range(n_blocks):
            n.add_block()
        return n

    def append(self, node: Node) -> Node:
        return self.block.append(node)

    def walk(self) -> Iterator[Node]:
        """Every node, nested blocks included, in program order."""
        return self.block.walk()

    def copy(self) -> "Graph":
        return self.copy_with_map()[0]

    def copy_with_map(self) -> tuple["Graph", dict[Value, Value]]:
        """A deep copy and the map from this graph's values to the copy's."""
        g = Graph()
        env: dict[Value, Value] = {}
        for v in self.inputs:
            env[v] = g.add_input(v.type, v.debug_name)
        clone_block_body(self.block, g.block, env)
        return g, env

    def __str__(self) -> str:
        from .printer import print_graph
        return print_graph(self)

    def __repr__(self) -> str:
        return str(self)

    @property
    def code(self) -> str:
        from .code import python_code
        return python_code(self)


def clone_node(node: Node, graph: Graph, env: dict[Value, Value]) -> Node:
    """Copy ``node`` (and its blocks) into ``graph``, mapping inputs through ``env``.

    Inputs not in ``env`` are kept as they are. The new outputs are added to ``env``.
    The copy is not placed.
    """
    attrs = {k: (v.copy() if isinstance(v, Graph) else v) for k, v in node.attrs.items()}
    new = Node(graph, node.kind, None, node.source)
    new.scope = node.scope
    new.attrs = attrs
    for v in node.inputs:
        new.add_input(env.get(v, v))
    for v in node.outputs:
        env[v] = new.add_output(v.type, v.debug_name)
    for b in node.blocks:
        nb = new.add_block()
        for p in b.params:
            env[p] = nb.add_param(p.type, p.debug_name)
        clone_block_body(b, nb, env)
    return new


def module_path(v: Value) -> tuple[Value, str]:
    """(root value, dotted path) of a module value built by a ``prim::GetAttr`` chain:
    ``(%self, "encoder.layers.0")``."""
    names: list[str] = []
    while v.node.kind == Prim.GET_ATTR:
        names.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    return v, ".".join(reversed(names))


def join_scope(outer: str | None, inner: str | None) -> str | None:
    """The module path of a node with path ``inner`` inside a callee called from ``outer``."""
    return ".".join(p for p in (outer, inner) if p) or None


def common_scope(scopes: Iterable[str | None]) -> str | None:
    """The innermost module path that contains all of ``scopes`` (a fusion group's)."""
    common: list[str] | None = None
    for scope in scopes:
        parts = scope.split(".") if scope else []
        if common is None:
            common = parts
            continue
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return ".".join(common) if common else None


def clone_block_body(src: Block, dst: Block, env: dict[Value, Value]) -> None:
    """Append copies of ``src``'s nodes to ``dst`` and register the mapped outputs."""
    for n in src:
        dst.append(clone_node(n, dst.graph, env))
    for v in src.outputs:
        dst.register_output(env.get(v, v))


# node kind -> what it computes on Python ints (the ``int_*`` size ops register here), so
# that a size computed from concrete shapes is known before constant folding
VALUE_RULES: dict[str, Callable[..., Any]] = {}
# node kind -> ``rule(attrs, *args)`` on plain Python scalars (int, float, bool, str): the
# Python-value ops register here, so that ``float("-inf")`` or ``math.sqrt(x.size(-1))`` in
# scripted code is a known argument of a library call
PLAIN_VALUE_RULES: dict[str, Callable[..., Any]] = {}
# node kind -> ``rule(attrs, *args)`` on sizes where one is symbolic (a str dim of
# ``ir.symdims``): ``int_add``, ``py_floordiv``, ``max``... give symbolic dims (``T-1``),
# comparisons True/False where the dims decide them, else None
SYMBOLIC_VALUE_RULES: dict[str, Callable[..., Any]] = {}


# list ops whose value is known when their (list and scalar) arguments are: a condition on
# shapes (``mask.shape[:-1] != x.shape[:-2]``) is then decided by the input types
LIST_VALUE_RULES: dict[str, Callable[..., Any]] = {}


_LIST_READS = frozenset(f"{OP_NAMESPACE}::{n}" for n in (
    "list_get", "list_len", "list_contains", "list_slice", "list_concat", "list_eq"))


def _frozen_list(v: Value) -> bool:
    """A list of sizes no one can change: an ``sm::shape`` (or a slice or concatenation of
    such) that only list reads use. A list literal is not: appends change it later."""
    n = v.node
    if n.kind not in (f"{OP_NAMESPACE}::shape", f"{OP_NAMESPACE}::list_slice",
                      f"{OP_NAMESPACE}::list_concat"):
        return False
    lists = [x for x in n.inputs if isinstance(x.type, ListType)]
    return all(u.user.kind in _LIST_READS for u in v.uses) and (
        n.kind == f"{OP_NAMESPACE}::shape" or all(_frozen_list(x) for x in lists))


def _plain_known(a: Any, v: Value) -> bool:
    """A known Python value: a scalar, or a frozen list of them."""
    if isinstance(a, list):
        return _frozen_list(v) and all(type(i) in (int, float, bool, str) for i in a)
    return type(a) in (int, float, bool, str)


def known_value(v: Value) -> Any:
    """The Python value of ``v`` when the graph fixes it, else None.

    Lists built by ``prim::ListConstruct`` give lists whose unknown items are None, an
    ``sm::size`` of a tensor with a known (possibly symbolic) dim gives that dim, an
    ``sm::dim`` of a tensor of known rank that rank, ``sm::shape`` of concrete sizes the
    shape, list ops of known lists (``LIST_VALUE_RULES``), ``sm::py_is_none`` of a value typed
    ``NoneType`` or ``Tensor`` (not Optional) its answer, a ``prim::If`` of a known condition
    its taken branch's value, and an
    ``int_*`` op of known ints gives its result; of symbolic sizes, the symbolic size
    (``SYMBOLIC_VALUE_RULES``: ``size(x, 1) - 1`` is ``T-1``).
    """
    n = v.node
    listy = LIST_VALUE_RULES.get(n.kind)
    if listy is not None:
        args = [known_value(x) for x in n.inputs]
        if not all(_plain_known(a, x) or a is None and x.type == NoneType
                   for a, x in zip(args, n.inputs)):
            return None
        try:
            return listy(*args)
        except Exception:                # noqa: BLE001  (the kernel raises when it runs)
            return None
    rule = VALUE_RULES.get(n.kind)
    plain = PLAIN_VALUE_RULES.get(n.kind)
    if rule is not None or plain is not None:
        args = [known_value(x) for x in n.inputs]
        if _symbolic_sizes(n.inputs, args):
            return _symbolic_value(n, args)
        if rule is not None and all(type(a) is int for a in args):
            try:
                return rule(*args)
            except ArithmeticError:      # // 0: the kernel raises when it runs
                return None
        if plain is None or not all(type(a) in (int, float, bool, str) for a in args):
            return None
        try:
            return plain(n.attrs, *args)
        except Exception:                # noqa: BLE001  (the kernel raises when it runs)
            return None
    if n.kind == Prim.CONSTANT:
        return n.attrs.get("value")
    if n.kind == Prim.LIST_CONSTRUCT:
        return [known_value(x) for x in n.inputs]
    if n.kind == Prim.TUPLE_CONSTRUCT:
        return tuple(known_value(x) for x in n.inputs)
    if n.kind in (f"{OP_NAMESPACE}::tensor_dtype", f"{OP_NAMESPACE}::tensor_device"):
        t = n.inputs[0].type                  # fixed by the specialization's input types
        if n.kind.endswith("dtype"):
            return getattr(t, "dtype", None)
        return getattr(t, "device", None) if getattr(t, "dtype", None) is not None else None
    if n.kind == Prim.IF:             # a branch the condition picks: its value, if known
        taken = known_value(n.inputs[0])
        return known_value(n.blocks[0 if taken else 1].outputs[v.index]) \
            if type(taken) is bool else None
    if n.kind == f"{OP_NAMESPACE}::py_is_none":    # ``x is None`` the types decide
        t = n.inputs[0].type
        return True if t == NoneType else False if isinstance(t, TensorType) else None
    if n.kind == f"{OP_NAMESPACE}::shape":         # every size fixed: the shape
        shape = getattr(n.inputs[0].type, "shape", None)
        return list(shape) if shape is not None and all(type(d) is int for d in shape) \
            else None
    if n.kind == f"{OP_NAMESPACE}::dim":           # the rank: fixed by the input types
        shape = getattr(n.inputs[0].type, "shape", None)
        return len(shape) if shape is not None else None
    if n.kind == f"{OP_NAMESPACE}::size":
        shape = getattr(n.inputs[0].type, "shape", None)
        dim = n.attrs.get("dim")
        if shape is not None and isinstance(dim, int) and -len(shape) <= dim < len(shape):
            return shape[dim]
    return None


def _symbolic_sizes(inputs: Sequence[Value], args: Sequence[Any]) -> bool:
    """Whether an argument is a symbolic size: a str known value of a value not typed
    ``str`` (text concatenates: ``"a" + "b"``; sizes add: ``B + T``)."""
    return any(type(a) is str and x.type != StrType for x, a in zip(inputs, args))


def _symbolic_value(n: Node, args: Sequence[Any]) -> Any:
    """The rule's symbolic size, comparison, or None (an argument that is not a size)."""
    rule = SYMBOLIC_VALUE_RULES.get(n.kind)
    if rule is None or not all(type(a) in (int, str) for a in args):
        return None
    try:
        return rule(n.attrs, *args)
    except (ValueError, TypeError, ArithmeticError):    # symdims.SymDimError is a ValueError
        return None


def owning_graph_blocks(node: Node) -> list[Block]:
    """The chain of blocks from the node's block up to the graph's top block."""
    out: list[Block] = []
    b = node.owning_block
    while b is not None:
        out.append(b)
        b = b.owning_node.owning_block if b.owning_node is not None else None
    return out
