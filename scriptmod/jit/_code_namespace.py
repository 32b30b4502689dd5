"""``code_namespace``: the globals that make a compiled module's ``.code`` run as Python.

PyTorch runs a TorchScript module's ``.code`` with ``{"torch": torch, "CONSTANTS": consts}``;
ours names a few more things (``ops.sm.add``, ``dtypes.float32``, ``F.gelu``), all of which
this namespace holds, each running eagerly on Tensors (``dispatch``: autograd records them).
"""
from __future__ import annotations

import builtins
import types
import typing
from typing import Any, Callable

import numpy as np

from scriptmod._device import device
from scriptmod._dispatch import dispatch
from scriptmod.ir import dtypes as D
from scriptmod.ir import schema as S
from scriptmod.ir.code import annotation
from scriptmod.ir.graph import OP_NAMESPACE, Graph, Prim
from scriptmod.ir.types import ModuleType
from scriptmod.nn import functional as F
from scriptmod.jit._specialize import _CONTAINER_OPS
from scriptmod.jit._script_module import (ConstMap, ScriptFunction, ScriptMethod, ScriptModule,
                                          _with_constants)
from scriptmod.runtime.interpreter import RAISABLE
from scriptmod.runtime.kernels import KERNELS
from scriptmod.tensor import Tensor, unwrap_tree


class OpNamespace:
    """``ops.sm``: each op of the registry by name, called as ``.code`` prints it
    (``ops.sm.sum(x, dim=[-1], keepdim=False)``: inputs, then attributes as keywords)."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in S.REGISTRY:
            raise AttributeError(f"ops.{self._namespace} has no op {name!r}")
        op = _op(name)
        setattr(self, name, op)            # looked up once per name
        return op

    def __dir__(self) -> list[str]:
        return sorted(S.REGISTRY)


def _op(name: str) -> Callable[..., Any]:
    """Op ``name`` on Tensors and Python values, as the compiled module's eager twin runs it
    (``jit._specialize.TensorOps``): lists and dicts hold the Tensors themselves, ``copy_``
    writes into its first input."""
    if name.startswith(_CONTAINER_OPS):
        kernel = KERNELS[name]
        return lambda *inputs, **attrs: kernel(np, *inputs, **attrs)
    if name == "copy_":
        return lambda dst, src, **attrs: dst.copy_(src)
    if name in _TEXT_OPS:               # text of tensors inside tuples and lists: their arrays
        kernel = KERNELS[name]
        return lambda *inputs, **attrs: kernel(np, *unwrap_tree(list(inputs)), **attrs)

    def op(*inputs: Any, **attrs: Any) -> Any:
        return dispatch(name, inputs, attrs)
    op.__name__ = op.__qualname__ = name
    return op


_TEXT_OPS = ("py_str", "py_format")
OPS = types.SimpleNamespace(**{OP_NAMESPACE: OpNamespace(OP_NAMESPACE)})
DTYPES = types.SimpleNamespace(**D.BY_NAME)


def _uninitialized() -> None:
    """A value scripted code assigns on a path that never reads it (``prim::Uninitialized``)."""
    return None


def _base_namespace() -> dict[str, Any]:
    import scriptmod   # the whole package as ``torch``: imported here, it imports this module
    ns: dict[str, Any] = {
        "ops": OPS, "dtypes": DTYPES, "torch": scriptmod, "F": F,
        "Tensor": Tensor, "List": typing.List, "Tuple": typing.Tuple,
        "Optional": typing.Optional, "Any": typing.Any, "Device": device,
        "dtype": D.DType, "number": typing.Union[int, float], "uninitialized": _uninitialized,
    }
    # ``raise ShapeError(...)``: the op errors a scripted raise may name beside Python's own
    ns.update((k, cls) for k, cls in RAISABLE.items() if not hasattr(builtins, k))
    return ns


def code_namespace(module: ScriptModule | ScriptMethod | ScriptFunction) -> dict[str, Any]:
    """The globals to ``exec`` a compiled module's ``.code`` in (PyTorch runs its ``.code``
    with ``{"torch": torch, "CONSTANTS": consts}``). It holds every name the code uses:
    ``ops`` (``ops.sm.add(a, b)`` runs the op ``add`` eagerly on Tensors), ``CONSTANTS``
    (``.code_with_constants``' tensors), ``dtypes``, ``torch`` (``scriptmod``), ``F``
    (``scriptmod.nn.functional``), the annotation names, and any ``jit.ignore``'d function
    a scripted graph calls. The ``exec`` defines ``forward(self, ...)`` (a method's own
    name for ``traced.encode``, a function's name for a traced function); called with the
    module as ``self`` and the same arguments, it returns what the module returns, control
    flow included, with autograd recording every op.

        >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
        >>> x = scriptmod.randn(2, 4)
        >>> traced = scriptmod.jit.trace(model, x)
        >>> ns = scriptmod.jit.code_namespace(traced)
        >>> exec(traced.code, ns)
        >>> bool(scriptmod.allclose(ns["forward"](traced, x), traced(x)))
        True

    Pass ``traced.encode`` for another method's ``traced.encode.code``. A method whose
    arguments or result are dicts or nested containers prints, like its ``graph``, the
    function of their leaves: it takes ``d_a, d_b`` for a dict ``d`` and returns a tuple.
    """
    graph, name = _graph_and_name(module)
    ns = _base_namespace()
    ns["CONSTANTS"] = _constants(graph, name)
    ns.update(_python_functions(graph))
    ns.update(_module_annotations(graph))
    return ns


def _graph_and_name(module: Any) -> tuple[Graph, str]:
    if isinstance(module, ScriptModule):
        return module.graph, module._code_name()
    if isinstance(module, (ScriptMethod, ScriptFunction)):
        return module.graph, module.name
    raise TypeError(f"code_namespace(): module must be a ScriptModule, one of its methods "
                    f"(traced.encode) or a traced function, got {type(module).__name__}")


def _constants(graph: Graph, name: str) -> ConstMap:
    return _with_constants(graph, name)[1]


def _python_functions(graph: Graph) -> dict[str, Any]:
    """The ``jit.ignore``'d functions scripted code calls, by the name ``.code`` gives them."""
    from scriptmod.jit.frontend.library import _PYTHON
    out: dict[str, Any] = {}
    for node in graph.walk():
        fname = node.attrs.get("name", "") if node.kind == Prim.CALL_FUNCTION else ""
        if fname.startswith("python:") and fname in _PYTHON:
            out[fname.rsplit(".", 1)[-1]] = _PYTHON[fname]
    return out


def _module_annotations(graph: Graph) -> dict[str, Any]:
    """A module-typed parameter is annotated with its class's short name (``Linear``)."""
    return {annotation(v.type): ScriptModule for v in graph.inputs
            if isinstance(v.type, ModuleType)}
