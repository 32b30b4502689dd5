"""Export a traced or scripted model to ONNX (``pip install scriptmod[onnx]``).

    >>> import scriptmod as sm
    >>> from scriptmod import nn
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8)).eval()
    >>> traced = sm.jit.trace(model, sm.randn(2, 4))
    >>> proto = sm.onnx.export(traced, "model.onnx", input_names=["x"], opset_version=20)
    >>> [n.op_type for n in proto.graph.node if n.op_type != "Identity"]
    ['Transpose', 'MatMul', 'Add', 'Gelu', 'LayerNormalization']
    >>> proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    'batch'
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

try:
    import onnx
except ImportError as e:                       # the optional extra is not installed
    raise ImportError("scriptmod.onnx needs the onnx package: pip install scriptmod[onnx]") \
        from e

from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.types import TensorType

from ._context import ExportError
from ._export import UnsupportedOperatorError, build_graph

__all__ = ["export", "ExportError", "UnsupportedOperatorError", "MIN_OPSET"]

MIN_OPSET = 17        # LayerNormalization; Gelu is a single op from opset 20


def export(model: Any, f: Any, args: Any = None, *, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None,
           dynamic_axes: Mapping[str, Any] | None = None, opset_version: int = MIN_OPSET,
           do_constant_folding: bool = True) -> "onnx.ModelProto":
    """Write ``model`` to ``f`` (a path or a binary file object) as an ONNX model and return
    the ``onnx.ModelProto``, checked by ``onnx.checker.check_model``.

    ``model`` is a ``ScriptModule`` from ``jit.trace`` or ``jit.script``; a plain
    ``nn.Module`` is traced with ``args`` first (as ``torch.onnx.export`` does). A traced
    model is exported from its un-fused ``inlined_graph``, so its symbolic batch dim ``B``
    becomes the dynamic ONNX dim ``"batch"``; ``args`` is not needed. A scripted model is
    specialized to ``args`` (required), so its dims are those of ``args`` and its loops and
    branches become ONNX ``Loop`` and ``If``.

    Parameters and buffers become initializers named by their ``state_dict`` names.
    Activations our IR decomposes come back as one ONNX op: LayerNorm as
    ``LayerNormalization``, GELU as ``Gelu`` (opset 20 on; ONNX's Erf/Tanh formula before),
    SiLU as ``Swish`` (opset 24 on), LeakyReLU, ELU, PReLU, and Hardtanh/ReLU6 as ``Clip``.
    Fusion groups never reach ONNX: the graph exported is the un-fused one.
    ``dynamic_axes`` names more dims, as in torch: ``{"x": {1: "seq"}}`` or ``{"x": [1]}``.
    Sizes and scalars known at export time are always folded; ``do_constant_folding`` also
    evaluates ONNX nodes of constants only (never of parameters, which keep their names;
    ONNX Runtime folds a weight's transpose when it loads the model).
    """
    opset = _check_opset(opset_version)
    module, example = _script_module(model, args)
    graph = _graph_to_export(module, example)
    tensor_inputs = [v for v in graph.inputs if not _is_self(v)]
    names = _input_names(input_names, tensor_inputs)
    dims = _dynamic_axes(dynamic_axes, names, output_names)
    body = build_graph(graph, module, opset, names, output_names, dims,
                       fold=bool(do_constant_folding))
    proto = onnx.helper.make_model(
        body, producer_name="scriptmod", opset_imports=[onnx.helper.make_opsetid("", opset)])
    proto.ir_version = onnx.helper.find_min_ir_version_for(list(proto.opset_import))
    onnx.checker.check_model(proto, full_check=True)
    onnx.save_model(proto, f)
    return proto


def _check_opset(opset: Any) -> int:
    newest = onnx.defs.onnx_opset_version()
    if type(opset) is not int or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"onnx.export: opset_version must be an int from {MIN_OPSET} to "
                         f"{newest} (this onnx), got {opset!r}")
    return opset


def _script_module(model: Any, args: Any) -> tuple[Any, tuple | None]:
    from scriptmod import jit, nn
    from scriptmod.tensor import Tensor
    example = None if args is None else (args,) if isinstance(args, Tensor) else tuple(args)
    if isinstance(model, jit.ScriptModule):
        return model, example
    if isinstance(model, nn.Module):
        if example is None:
            raise TypeError("onnx.export: an nn.Module is traced before export: pass its "
                            "example inputs as args (or export jit.trace(model, ...))")
        return jit.trace(model, example), example
    raise TypeError(f"onnx.export: model must be a ScriptModule (jit.trace / jit.script) or "
                    f"an nn.Module, got {type(model).__name__}")


def _is_self(v: Any) -> bool:
    return type(v.type).__name__ == "ModuleType"


def _graph_to_export(module: Any, example: tuple | None) -> Graph:
    """The un-fused graph: a traced model's ``inlined_graph`` (symbolic batch dim kept);
    a scripted one's specialization to ``example`` (library calls expanded, types known)."""
    graph = module.inlined_graph
    typed = all(isinstance(v.type, TensorType) and v.type.dtype is not None and
                v.type.shape is not None for v in graph.inputs if not _is_self(v))
    if typed and not any(n.kind == Prim.CALL_FUNCTION for n in graph.walk()):
        return graph
    if example is None:
        raise TypeError(f"onnx.export: {module.original_name} is scripted: pass example "
                        f"inputs as args (it is exported for their dtypes and shapes)")
    import scriptmod as sm
    from scriptmod.jit import _specialize
    with sm.no_grad():
        return _specialize.optimized(module.executor("forward"), list(example), fuse=False)


def _input_names(names: Sequence[str] | None, inputs: Sequence[Any]) -> list[str]:
    given = list(names or [])
    if len(given) > len(inputs):
        raise ValueError(f"onnx.export: input_names has {len(given)} names, the model takes "
                         f"{len(inputs)} input(s)")
    return given + [v.debug_name or f"input_{i}" for i, v in enumerate(inputs)][len(given):]


def _dynamic_axes(axes: Mapping[str, Any] | None, inputs: Sequence[str],
                  outputs: Sequence[str] | None) -> dict[str, dict[int, str]]:
    """torch's ``dynamic_axes``: ``{name: {axis: dim_name}}`` or ``{name: [axis, ...]}``."""
    out: dict[str, dict[int, str]] = {}
    known = set(inputs) | set(outputs or ["output"])
    for name, spec in (axes or {}).items():
        if name not in known:
            raise ValueError(f"onnx.export: dynamic_axes names {name!r}, which is not an "
                             f"input or output name ({', '.join(sorted(known))})")
        if isinstance(spec, Mapping):
            out[name] = {int(k): str(v) for k, v in spec.items()}
        else:
            out[name] = {int(k): f"{name}_dynamic_axes_{i + 1}" for i, k in enumerate(spec)}
    return out
