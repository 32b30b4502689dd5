"""The autograd graph and the backward engine.

Every differentiable op call records a ``Node`` (a tensor's ``grad_fn``) holding the
derivative rule of its op, the inputs that rule saves, and edges to the nodes that made its
inputs. ``backward`` walks the graph once in reverse topological order, summing gradients
that meet, reducing them over broadcast dims, and accumulating into leaves' ``.grad``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from scriptmod.autograd import grad_mode

if TYPE_CHECKING:
    from scriptmod.tensor import Tensor

Edge = tuple["Node | None", int]


class SavedTensor:
    """A tensor saved for backward plus the version it had; using it after an in-place
    change is an error, as in PyTorch. A saved *output* keeps no reference to its node (no
    cycle); unpacking reattaches the node so double backward still sees it."""

    __slots__ = ("tensor", "version", "output_nr")

    def __init__(self, t: "Tensor", output_nr: int | None = None) -> None:
        self.output_nr = output_nr
        self.tensor = t if output_nr is None else t.detach()
        self.version = t._vc[0]

    def unpack(self, node: "Node") -> "Tensor":
        if self.output_nr is not None and grad_mode.is_grad_enabled():
            t = self.tensor._alias()
            t._set_grad_fn(node, self.output_nr)
            self._check(node)
            return t
        self._check(node)
        return self.tensor

    def _check(self, node: "Node") -> None:
        if self.tensor._vc[0] != self.version:
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{self.tensor.dtype.short}Tensor {list(self.tensor.shape)}], "
                f"which is output 0 of {node.name()}, is at version {self.tensor._vc[0]}; "
                f"expected version {self.version} instead.")


class Node:
    """A recorded op. ``next_functions`` are (node, output index) per input."""

    __slots__ = ("op", "rule", "ctx", "next_functions", "input_meta", "n_outputs",
                 "pre_hooks", "post_hooks", "_freed", "__weakref__")

    def __init__(self, op: str, rule: Callable, ctx: Any, next_functions: tuple[Edge, ...],
                 input_meta: tuple[Any, ...], n_outputs: int = 1) -> None:
        self.op, self.rule, self.ctx = op, rule, ctx
        self.next_functions = next_functions
        self.input_meta = input_meta      # (shape, dtype) per input, None for non-tensors
        self.n_outputs = n_outputs
        self.pre_hooks: list[Callable] | tuple = ()    # fn(grad_outputs) -> grad_outputs | None
        self.post_hooks: list[Callable] | tuple = ()   # fn(grad_inputs, grad_outputs) -> ...
        self._freed = False                            # (lists once a hook is registered)

    def name(self) -> str:
        return "".join(p.capitalize() for p in self.op.split("_")) + "Backward0"

    def __repr__(self) -> str:
        return f"<{self.name()} object>"

    def register_hook(self, fn: Callable) -> "RemovableHandle":
        if type(self.post_hooks) is tuple:
            self.post_hooks = []
        self.post_hooks.append(fn)
        return RemovableHandle(self.post_hooks, fn)

    def register_prehook(self, fn: Callable) -> "RemovableHandle":
        if type(self.pre_hooks) is tuple:
            self.pre_hooks = []
        self.pre_hooks.append(fn)
        return RemovableHandle(self.pre_hooks, fn)

    def apply(self, grads: list["Tensor | None"]) -> Sequence["Tensor | None"]:
        if self._freed:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time.")
        return self.rule(self.ctx, grads if self.n_outputs > 1 else grads[0])

    def release(self) -> None:
        self.ctx = None
        self._freed = True


class AccumulateGrad(Node):
    """The node of a leaf tensor that requires grad: sums incoming gradients into ``.grad``."""

    __slots__ = ("variable",)

    def __init__(self, variable: "Tensor") -> None:
        super().__init__("accumulate_grad", _no_rule, None, (), ())
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"


def _no_rule(ctx: Any, g: Any) -> tuple:
    return ()


class RemovableHandle:
    """Removes a registered hook. Also a context manager."""

    _next_id = 0

    def __init__(self, container: Any, key: Any) -> None:
        self._container, self._key = container, key
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id

    def remove(self) -> None:
        c, k = self._container, self._key
        if isinstance(c, list):
            if k in c:
                c.remove(k)
        elif isinstance(c, dict):
            c.pop(k, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _topo_order(roots: Sequence[Node]) -> list[Node]:
    """Nodes reachable from ``roots``, each after every node that feeds gradient into it."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in roots]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for nxt, _ in node.next_functions:
            if nxt is not None and id(nxt) not in seen:
                stack.append((nxt, False))
    order.reverse()
    return order


def _sum_to(g: "Tensor", shape: tuple[int, ...]) -> "Tensor":
    """Reduce a gradient over the dims that broadcasting added or expanded."""
    # ranks first: a symbolic size (jit._grad_sizes) then meets only the same dim's size
    if len(g.shape) == len(shape) and tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    dims = list(range(lead)) + [i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1]
    if dims:
        g = g.sum(dim=dims, keepdim=True)
    if lead:
        g = g.reshape(shape)
    elif tuple(g.shape) != tuple(shape):
        g = g.reshape(shape)
    return g


def _fit(g: "Tensor", meta: Any) -> "Tensor":
    shape, dtype = meta
    g = _sum_to(g, shape)
    return g if g.dtype is dtype else g.to(dtype)


def run_backward(roots: Sequence["Tensor"], grads: Sequence["Tensor"], retain_graph: bool,
                 create_graph: bool, inputs: Sequence["Tensor"] | None = None,
                 allow_unused: bool = False, accumulate: bool = True) -> list["Tensor | None"]:
    """Propagate ``grads`` from ``roots``. With ``accumulate=False`` (autograd.grad), the
    gradients of ``inputs`` are returned instead of accumulated into ``.grad``."""
    root_nodes = [r._grad_node() for r in roots]
    capture: dict[tuple[int, int], int] = {}
    if inputs is not None:
        for i, t in enumerate(inputs):
            n = t._grad_node()
            if n is None:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
            capture[(id(n), 0 if isinstance(n, AccumulateGrad) else t._output_nr)] = i
    results: list[Any] = [None] * (len(inputs) if inputs is not None else 0)
    pending: dict[int, list[Any]] = {}
    for node, g, r in zip(root_nodes, grads, roots):
        if node is None:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        slot = pending.setdefault(id(node), [None] * max(node.n_outputs, 1))
        k = 0 if isinstance(node, AccumulateGrad) else r._output_nr
        slot[k] = g if slot[k] is None else slot[k] + g
    with grad_mode.set_grad_enabled(create_graph):
        for node in _topo_order([n for n in root_nodes if n is not None]):
            gs = pending.pop(id(node), None)
            if gs is None:
                continue
            _run_node(node, gs, pending, capture, results, accumulate, retain_graph)
    if inputs is not None and not allow_unused:
        for i, r in enumerate(results):
            if r is None:
                raise RuntimeError(f"One of the differentiated Tensors (input {i}) appears to not "
                                   "have been used in the graph. Set allow_unused=True if this "
                                   "is the desired behavior.")
    return results


def _run_node(node: Node, gs: list[Any], pending: dict[int, list[Any]],
              capture: dict[tuple[int, int], int], results: list[Any], accumulate: bool,
              retain_graph: bool) -> None:
    for hook in node.pre_hooks:
        out = hook(tuple(gs))
        if out is not None:
            gs = list(out)
    for k, g in enumerate(gs):
        idx = capture.get((id(node), k))
        if idx is not None:
            results[idx] = g
    if isinstance(node, AccumulateGrad):
        if accumulate and gs[0] is not None:
            node.variable._accumulate(gs[0])
        return
    if all(g is None for g in gs):
        return
    if node.n_outputs > 1:
        gs = [g if g is not None else _zeros_for(node, k) for k, g in enumerate(gs)]
    grad_in = list(node.apply(gs))
    for hook in node.post_hooks:
        out = hook(tuple(grad_in), tuple(gs))
        if out is not None:
            grad_in = list(out)
    if not retain_graph:
        node.release()
    for (nxt, k), g, meta in zip(node.next_functions, grad_in, node.input_meta):
        if nxt is None or g is None or meta is None:
            continue
        g = _fit(g, meta)
        slot = pending.setdefault(id(nxt), [None] * max(nxt.n_outputs, 1))
        slot[k] = g if slot[k] is None else slot[k] + g


def _zeros_for(node: Node, k: int) -> Any:
    shape, dtype, device = node.ctx.out_meta[k]
    from scriptmod._creation import zeros   # autograd.engine sits below the tensor core
    return zeros(shape, dtype=dtype, device=device)
