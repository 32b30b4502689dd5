"""Executes any IR graph node by node with the reference kernels (NumPy or CuPy arrays).

In the style of ``torch.fx.Interpreter``: one overridable method per node kind, so that
profilers, debuggers and the native executor subclass it.

    >>> from scriptmod.ir import parse
    >>> graph = parse('''graph(%x : Float(2, 3)):
    ...   %y : Float(2) = sm::sum[dim=[1], keepdim=0](%x)
    ...   return (%y)
    ... ''')
    >>> Interpreter(graph).run(np.ones((2, 3), np.float32))
    array([3., 3.], dtype=float32)

Module values (``self`` and submodules) are plain objects: ``prim::GetAttr`` reads
``getattr(obj, name)``, ``prim::SetAttr`` writes with ``setattr``, and ``prim::CallMethod``
asks the ``resolve_method(obj, name) -> Graph`` callback for the callee's graph.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from scriptmod.ir import schema as S
from scriptmod.ir.errors import (ArgumentError, ArgumentValueError, DeviceError, DTypeError,
                                 ShapeError, TraceGuardError)
from scriptmod.ir.graph import Block, Graph, Node, Prim, Value
from .errors import (DeviceFailure, DTypeFailure, IndexFailure, InternalError,  # noqa: F401
                     InterpreterError, ShapeFailure, ValueFailure, failure, node_failure,
                     noted, python_error)
from .kernels import run_kernel

MethodResolver = Callable[[Any, str], Graph]


class OpHandler:
    """How the ops and module accesses of a graph run; the ``Interpreter`` and the
    ``runtime.executable.Executable`` ask it for every node that is not structure. This
    base runs ops with the reference kernels on arrays and reads/writes module attributes
    with ``getattr``/``setattr``; ``ArrayOps`` takes the frontend's callbacks, and the
    frontend's autograd handler runs ops through its dispatcher."""

    def call_op(self, node: Node, args: list[Any]) -> Sequence[Any]:
        """An ``sm::`` op: its outputs, as a sequence."""
        out = run_kernel(node.op_name, args, node.attrs)
        return out if S.REGISTRY[node.op_name].n_outputs > 1 else [out]

    def constant(self, node: Node) -> Any:
        return node.attrs.get("value")

    def get_attr(self, node: Node, obj: Any) -> Any:
        return getattr(obj, node.attrs["name"])

    def set_attr(self, node: Node, obj: Any, value: Any) -> None:
        setattr(obj, node.attrs["name"], value)

    def call_function(self, node: Node, args: list[Any]) -> Any:
        """A ``prim::CallFunction`` left for run time (a Python function scripted code
        calls, ``jit.ignore``): through the frontend's hook, on raw arrays."""
        hook = PYTHON_CALL[0]
        if hook is None:
            raise InterpreterError(f"{node.attrs.get('name')}: no frontend registered a "
                                   f"handler for prim::CallFunction")
        return hook(node, args, True)

    def call_method(self, node: Node, obj: Any, args: list[Any]) -> Sequence[Any]:
        raise InterpreterError(f"prim::CallMethod {node.attrs['name']!r}: no resolve_method "
                               "was given to the interpreter")

    def step(self, node: Node) -> Callable[[list], Any] | None:
        """A faster single-output closure ``f(inputs) -> value`` for ``node``, or None."""
        return None


class Interpreter:
    """Runs ``graph``; ``ops`` (an ``OpHandler``) runs its ops and module accesses.
    Override a method below to change how one kind of structure node runs."""

    def __init__(self, graph: Graph, resolve_method: MethodResolver | None = None,
                 ops: OpHandler | None = None) -> None:
        self.graph = graph
        self.resolve_method = resolve_method
        self.ops = ops if ops is not None else _DEFAULT_OPS
        self.env: dict[Value, Any] = {}

    # ---- driving --------------------------------------------------------------------------
    def run(self, *args: Any) -> Any:
        """Outputs of the graph for ``args``: one value, or a tuple for several outputs."""
        outs = self.run_graph(self.graph, list(args))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_graph(self, graph: Graph, args: list[Any]) -> list[Any]:
        if len(args) != len(graph.inputs):
            raise TypeError(f"graph takes {len(graph.inputs)} argument(s), got {len(args)}")
        saved, self.env = self.env, dict(zip(graph.inputs, args))
        try:
            return self.run_block(graph.block)
        finally:
            self.env = saved

    def run_block(self, block: Block) -> list[Any]:
        """Run the block's nodes in order; returns the block's output values."""
        for node in block:
            outs = self.run_node(node)
            for v, x in zip(node.outputs, outs):
                self.env[v] = x
        return [self.env[v] for v in block.outputs]

    def run_node(self, node: Node) -> Sequence[Any]:
        args = [self.env[v] for v in node.inputs]
        method = DISPATCH.get(node.kind)
        try:
            if method is not None:
                return getattr(self, method)(node, args)
            return self.call_op(node, args)
        except (InterpreterError, RaisedException, TraceGuardError):
            raise
        except Exception as e:
            if getattr(e, "scripted_raise", False) or python_error(node, e):
                raise noted(node, e)                    # the program's own raise or error
            raise node_failure(node, e) from e

    # ---- one method per kind -------------------------------------------------------------
    def call_op(self, node: Node, args: list[Any]) -> Sequence[Any]:
        """An ``sm::`` op, through ``ops``."""
        if not node.is_op:
            raise NotImplementedError(f"the interpreter cannot run {node.kind}")
        return self.ops.call_op(node, args)

    def constant(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [self.ops.constant(node)]

    def get_attr(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [self.ops.get_attr(node, args[0])]

    def set_attr(self, node: Node, args: list[Any]) -> Sequence[Any]:
        self.ops.set_attr(node, args[0], args[1])
        return []

    def call_method(self, node: Node, args: list[Any]) -> Sequence[Any]:
        if self.resolve_method is None:
            return self.ops.call_method(node, args[0], args[1:])
        callee = self.resolve_method(args[0], node.attrs["name"])
        return self.run_graph(callee, args)

    def list_construct(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [list(args)]

    def tuple_construct(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [tuple(args)]

    def unpack(self, node: Node, args: list[Any]) -> Sequence[Any]:
        values = list(args[0])
        if len(values) != len(node.outputs):
            raise ValueError(f"expected {len(node.outputs)} values to unpack, got {len(values)}")
        return values

    def tuple_index(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [args[0][node.attrs["index"]]]

    def if_(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return self.run_block(node.blocks[0] if bool(args[0]) else node.blocks[1])

    def loop(self, node: Node, args: list[Any]) -> Sequence[Any]:
        body = node.blocks[0]
        trip, cond, carried = args[0], bool(args[1]), list(args[2:])
        i = 0
        while cond and i < trip:
            for p, x in zip(body.params, [i] + carried):
                self.env[p] = x
            outs = self.run_block(body)
            cond, carried = bool(outs[0]), outs[1:]
            i += 1
        return carried

    def fusion_group(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return self.run_graph(node.attrs["subgraph"], args)

    def raise_exception(self, node: Node, args: list[Any]) -> Sequence[Any]:
        """Python's own exception when ``kind`` names a builtin one (``ValueError``), else
        ``RaisedException``; the message is the node's input when it has one (an f-string
        computed at run time), else its ``message`` attribute."""
        kind = node.attrs.get("kind", "RuntimeError")
        message = str(args[0]) if args else node.attrs.get("message", "")
        raise raised(kind, message)

    def uninitialized(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [None]

    def call_function(self, node: Node, args: list[Any]) -> Sequence[Any]:
        return [self.ops.call_function(node, args)]

    def print_(self, node: Node, args: list[Any]) -> Sequence[Any]:
        print(*args)
        return []


def raised(kind: str, message: str) -> Exception:
    """The exception a ``prim::RaiseException`` raises (marked ``scripted_raise``: error
    mappers pass it through unchanged)."""
    cls = RAISABLE.get(kind)
    if cls is not None:
        err: Exception = cls(message)
    else:
        err = RaisedException(kind, message)
    err.scripted_raise = True              # type: ignore[attr-defined]
    return err


def _raisable() -> dict[str, type[Exception]]:
    """Exception classes a ``prim::RaiseException`` raises by name: Python's own, and the
    op errors (``DTypeError`` is a ``RuntimeError`` and a ``TypeError``, as in eager)."""
    import builtins
    found = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type)
             and issubclass(cls, Exception)}
    found.update((c.__name__, c) for c in (ShapeError, DTypeError, ArgumentError,
                                           ArgumentValueError, DeviceError))
    return found


RAISABLE = _raisable()


class RaisedException(Exception):
    """A ``prim::RaiseException`` ran: carries the Python exception class name and message."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


_DEFAULT_OPS = OpHandler()

DISPATCH: dict[str, str] = {
    Prim.CONSTANT: "constant", Prim.GET_ATTR: "get_attr", Prim.SET_ATTR: "set_attr",
    Prim.CALL_METHOD: "call_method", Prim.LIST_CONSTRUCT: "list_construct",
    Prim.TUPLE_CONSTRUCT: "tuple_construct", Prim.LIST_UNPACK: "unpack",
    Prim.TUPLE_UNPACK: "unpack", Prim.TUPLE_INDEX: "tuple_index", Prim.IF: "if_",
    Prim.LOOP: "loop", Prim.FUSION_GROUP: "fusion_group", Prim.RAISE: "raise_exception",
    Prim.PRINT: "print_", Prim.UNINITIALIZED: "uninitialized",
    Prim.CALL_FUNCTION: "call_function",
}

# (node, args, raw) -> result: how a prim::CallFunction that stays in the graph runs (the
# script frontend installs it; ``raw``: args are arrays, else the frontend's tensors)
PYTHON_CALL: list[Any] = [None]


def evaluate_node(node: Node, inputs: list[Any]) -> list[Any]:
    """Run one op node on concrete inputs: the evaluator ``ir.passes.fold_constants`` takes."""
    return list(_DEFAULT_OPS.call_op(node, list(inputs)))


def run_graph(graph: Graph, *args: Any, resolve_method: MethodResolver | None = None) -> Any:
    """Shorthand for ``Interpreter(graph, resolve_method).run(*args)``."""
    return Interpreter(graph, resolve_method).run(*args)
