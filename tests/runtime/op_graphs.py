"""Op-table samples (``op_cases``) as IR graphs: array inputs become typed graph inputs, dicts
``dict_construct`` nodes, everything else (Python numbers, None, lists) constants, attributes
bound by the builder.
Shared by the interpreter, CUDA-shim and CUDA-runtime suites.

    >>> g, arrays = op_graph("add", (np.ones((2, 3), np.float32), 2.0), {})   # doctest: +SKIP
    >>> Interpreter(g).run(*arrays)                                            # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph
from scriptmod.ir.types import TensorType
from scriptmod.runtime.arrays import from_np_dtype
from scriptmod.runtime.executable import Executable


def tensor_type(a: np.ndarray, device: str = "cpu") -> TensorType:
    """The exact type of a sample array (dtype, concrete shape)."""
    return TensorType(from_np_dtype(a.dtype), tuple(int(d) for d in a.shape), device)


def add_op(b: Builder, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
           device: str = "cpu") -> list[np.ndarray]:
    """Graph inputs for the arrays of ``inputs``, one ``op`` node, its outputs registered;
    returns the arrays in graph-input order."""
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    first = len(b.graph.inputs)
    vals = iter([b.input(tensor_type(a, device), f"x{first + i}") for i, a in enumerate(arrays)])
    args = [next(vals) if isinstance(x, np.ndarray) else _dict(b, x) if isinstance(x, dict) else x
            for x in inputs]
    out = b.op(op, *args, **attrs)
    b.ret(*(out if isinstance(out, tuple) else (out,)))
    return arrays


def _dict(b: Builder, d: dict) -> Any:
    """A dict input as a ``dict_construct`` node: the IR has no dict constants."""
    return b.op("dict_construct", *[x for kv in d.items() for x in kv])


def op_graph(op: str, inputs: Sequence[Any], attrs: dict[str, Any],
             device: str = "cpu") -> tuple[Graph, list[np.ndarray]]:
    """A graph holding one ``op`` node; returns (graph, the arrays to run it with)."""
    g = Graph()
    return g, add_op(Builder(g), op, inputs, attrs, device)


Item = tuple[str, Sequence[Any], dict[str, Any]]


def group_graph(items: Sequence[Item], device: str = "cpu") -> tuple[Graph, list[np.ndarray]]:
    """A graph holding ONE ``prim::FusionGroup`` computing every ``(op, inputs, attrs)``
    item (one node each, every output a group output); returns (graph, arrays)."""
    sub = Graph()
    sb = Builder(sub)
    arrays = [a for op, ins, attrs in items for a in add_op(sb, op, ins, attrs, device)]
    g = Graph()
    b = Builder(g)
    outer = [b.input(v.type, f"a{i}") for i, v in enumerate(sub.inputs)]
    for v in b.fusion_group(sub, outer):
        g.register_output(v)
    return g, arrays


_EXECUTABLES: dict[int, tuple] = {}


def compiled(g: Graph) -> Executable:
    """The ``Executable`` of graph ``g`` (one per graph, like a specialization), with every
    fusion group run through its ``FusedKernel`` (``native=False``): the fusion tests are
    about the kernels, not the whole-graph native entry (tests/runtime/test_executable.py)."""
    hit = _EXECUTABLES.get(id(g))
    if hit is None or hit[0] is not g:
        hit = _EXECUTABLES[id(g)] = (g, Executable(g, native=False))
    return hit[1]


def fused_kernel(node: Any) -> Any:
    """The ``FusedKernel`` of a fusion-group node of a graph run through ``compiled``."""
    return compiled(node.graph).fused_kernel(node)
