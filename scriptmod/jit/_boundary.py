"""Hooks on the submodules of a compiled module: their calls kept as boundaries.

A specialization normally inlines every submodule call. A submodule with hooks of its own
(forward, forward pre-, full backward) — every submodule while a global module hook is set —
keeps its ``prim::CallMethod``: at run time the call goes through ``Module.__call__``, so its
hooks run around its own compiled graph with the arguments eager code would pass, and what a
hook returns is what the rest of the (still compiled, still fused) graph reads.
``HOOK_VERSION`` (bumped by every hook registration and removal) is compared once per call,
so finding the hooked submodules costs nothing until a hook changes.

    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__(); self.fc1 = nn.Linear(4, 3)
    ...     def forward(self, x):
    ...         return self.fc1(x) + 1
    >>> x = scriptmod.ones(2, 4)
    >>> traced = scriptmod.jit.trace(Net(), x)
    >>> h = traced.fc1.register_forward_hook(lambda m, args, out: scriptmod.zeros_like(out))
    >>> traced(x)                # fc1's output replaced by the hook, as in eager
    tensor([[1., 1., 1.],
            [1., 1., 1.]])
    >>> h.remove()               # back to the fully inlined, fused specialization
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.types import TensorType, TupleType, Type
from scriptmod.nn import _module_hooks as hooks
from scriptmod.runtime.interpreter import InterpreterError
from scriptmod.tensor import Tensor, unwrap_tree, wrap_tree
from scriptmod.jit._structure import flatten, unflatten_inputs

HOOK_VERSION = hooks.HOOK_VERSION


def hooked_paths(root: Any) -> tuple[str, ...]:
    """Dotted paths of the submodules of ``root`` whose calls run through Python."""
    every = hooks._GLOBAL.any()
    return tuple(sorted(name for name, m in root.named_modules(remove_duplicate=False)
                        if name and (every or hooks.has_call_hooks(m))))


def module_path(v: Value) -> tuple[Value, str]:
    """(root value, dotted path) of a module value built by a ``prim::GetAttr`` chain."""
    names: list[str] = []
    while v.node.kind == Prim.GET_ATTR:
        names.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    return v, ".".join(reversed(names))


def kept_calls(g: Graph) -> Iterator[Node]:
    return (n for n in g.walk() if n.kind == Prim.CALL_METHOD)


class BoundaryError(InterpreterError):
    """Carries an exception raised inside a kept call (a hook's, the callee's) past the
    interpreters, which wrap everything else; the executor re-raises ``original``."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def call_boundary(node: Node, mod: Any, args: Sequence[Any], raw: bool) -> list[Any]:
    """Call submodule ``mod`` through ``Module.__call__`` (hooks included); ``raw``: the
    arguments and the result are arrays (the no-autograd path), else Tensors."""
    ins = [wrap_tree(a) for a in args] if raw else list(args)
    in_spec = getattr(mod, "_in_specs", {}).get(node.attrs["name"])
    if in_spec is not None:               # a dict argument: the hooks see the dict
        ins = unflatten_inputs(ins, in_spec)
    try:
        with _method_as_forward(mod, node.attrs["name"]):
            out = flatten(mod(*ins))[0]     # a dict/namedtuple result: the tuple the graph has
        _check_result(node, mod, out)
    except Exception as e:
        raise BoundaryError(e) from e
    return [unwrap_tree(out) if raw else out]


@contextlib.contextmanager
def _method_as_forward(mod: Any, method: str) -> Iterator[None]:
    """A submodule traced with several graphs (``forward__1``...) runs the one this call
    recorded, still under ``Module.__call__``'s hooks."""
    if method == "forward" or not hasattr(mod, "_methods"):
        yield
        return
    mod.__dict__["forward"] = lambda *a, **k: mod._run(method, a, k)
    try:
        yield
    finally:
        mod.__dict__.pop("forward", None)


def _check_result(node: Node, mod: Any, out: Any) -> None:
    """The graph after the call was specialized for the output type the callee's graph
    gives; a hook that changes shape or dtype gets a clear error, not a stale shape."""
    problem = _mismatch(node.outputs[0].type, out)
    if problem is None:
        return
    name = getattr(mod, "original_name", type(mod).__name__)
    at = f" (called at {node.source})" if node.source else ""
    cls = DTypeError if "dtype" in problem else ShapeError
    raise cls(f"the hooked call of submodule {name}{at} returned {problem}: the compiled graph "
              f"around a hooked submodule is specialized for the output its own graph gives. "
              f"A hook may change values, not the output's shape, dtype or structure.")


def _mismatch(t: Type, out: Any) -> str | None:
    if isinstance(t, TensorType):
        if not isinstance(out, Tensor):
            return f"a {type(out).__name__} where a Tensor {t!r} was expected"
        if t.dtype is not None and out.dtype is not t.dtype:
            return f"dtype {out.dtype.name} where {t.dtype.name} was expected"
        shape = tuple(out._data.shape)
        if t.shape is not None and (len(shape) != len(t.shape) or any(
                isinstance(w, int) and w != s for w, s in zip(t.shape, shape))):
            return f"shape {shape} where {t.shape} was expected"
        return None
    if isinstance(t, TupleType):
        if not isinstance(out, tuple) or len(out) != len(t.elements):
            return f"a {type(out).__name__} where a tuple of {len(t.elements)} was expected"
        for e, o in zip(t.elements, out):
            problem = _mismatch(e, o)
            if problem is not None:
                return problem
    return None


