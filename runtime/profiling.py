"""What ``scriptmod.profiler`` records, at the layer that runs the code.

A running profiler puts one ``Recorder`` in ``ACTIVE``; code that can be profiled checks
``ACTIVE`` once, on a path that costs more than the check (an ``Executable`` called outside
its fast path, an eager op), and otherwise runs as if no profiler existed. An ``Executable``
then runs its *profiled program*: the same Python steps and the same compiled native steps,
but each native step as a call of its own, with a clock read around each step
(``Executable.profiled_program``).

An event is one row ``(name, category, start_ns, end_ns, thread, source, shapes, args)``;
the profiler turns the rows into events, averages, tables and traces.

    >>> rec = Recorder(record_shapes=True)
    >>> ACTIVE.append(rec)
    >>> start = clock(); emit("my_range", USER, start, "model.py:3", [[2, 3]])
    >>> ACTIVE.remove(rec)
    >>> name, cat, t0, t1, thread, source, shapes, args = rec.rows[0]
    >>> name, cat, t1 >= t0, source, shapes
    ('my_range', 'user_annotation', True, 'model.py:3', [[2, 3]])
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from scriptmod.ir.graph import Node, Prim
from scriptmod.ir.types import TensorType

clock = time.perf_counter_ns

# event categories (the ``cat`` of a Chrome trace event)
CALL = "compiled_call"            # one call of a compiled graph (forward or backward)
COMPILE = "compile"               # building a profiled program (its first call only)
FUSION = "fusion_group"           # an elementwise fusion group's native kernel
REDUCTION = "reduction"           # a row group's kernel (softmax, layer_norm, sums)
GEMM = "gemm"                     # a matmul: a BLAS call or an inline loop
KERNEL = "kernel"                 # another native kernel (a reshape's copy)
PYTHON = "python"                 # a node that runs in Python (reference kernel, control)
OP = "cpu_op"                     # an eager op (``dispatch``)
USER = "user_annotation"          # ``record_function``

Row = tuple  # (name, category, start_ns, end_ns, thread, source, shapes, args)


class Recorder:
    """The rows of one profiling run. ``record_shapes``: keep input shapes; ``stack``: a
    function giving the user's ``file:line`` for an eager op (``with_stack``); ``sync``:
    called before an event ends (CUDA: wait for the device, so a step's time covers its
    kernels)."""

    def __init__(self, record_shapes: bool = False,
                 stack: Callable[[], str | None] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.record_shapes, self.stack, self.sync = record_shapes, stack, sync
        self.rows: list[Row] = []


ACTIVE: list[Recorder] = []


def emit(name: str, category: str, start: int, source: str | None = None,
         shapes: list | None = None, args: dict | None = None) -> None:
    """One event from ``start`` (a ``clock()`` reading) to now, for every active recorder."""
    for rec in ACTIVE:
        if rec.sync is not None:
            rec.sync()
        end = clock()
        rec.rows.append((name, category, start, end, threading.get_native_id(), source,
                         shapes if rec.record_shapes else None, args))


def event(name: str, category: str, source: str | None = None, shapes: list | None = None,
          args: dict | None = None) -> Callable[[int], None]:
    """``emit`` with everything but the start bound (generated programs call it per step)."""
    def end(start: int) -> None:
        emit(name, category, start, source, shapes, args)
    return end


# ---- what a node is, for the profiler --------------------------------------------------------

def node_label(node: Node) -> str:
    """``FusionGroup(add, relu)`` for a fusion group (its ops), ``prim::CallMethod[fc1]``
    for a kept call, the node's kind (``sm::matmul``) for the rest."""
    if node.kind == Prim.FUSION_GROUP:
        ops = [n.op_name for n in node.attrs["subgraph"].nodes if n.kind != Prim.CONSTANT]
        return f"FusionGroup({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})"
    if node.kind == Prim.CALL_METHOD:
        return f"{node.kind}[{node.attrs['name']}]"
    return node.kind


def input_shapes(node: Node) -> list:
    """Its inputs' static shapes, torch's ``input_shapes`` form (``[]`` for a non-tensor)."""
    return [list(v.type.shape) if isinstance(v.type, TensorType) and v.type.shape is not None
            else [] for v in node.inputs]


def group_category(node: Node) -> str:
    from scriptmod.codegen.rows import has_row_ops
    return REDUCTION if has_row_ops(node.attrs["subgraph"]) else FUSION


def python_step_event(node: Node, kernel: Any = None) -> Callable[[int], None]:
    """The event of a node the program runs as a Python step; ``kernel``: the group's
    ``FusedKernel`` when a fusion group runs compiled (split over the thread pool)."""
    if node.kind == Prim.FUSION_GROUP and kernel is not None:
        cat, args = group_category(node), {"kernel": kernel.name, "runs": "thread pool"}
    else:
        cat, args = PYTHON, None
    return event(node_label(node), cat, node.source, input_shapes(node), args)


def epilogue_step_event(nodes: Any, consumer: Node, kernel: Any = None) -> Callable[[int], None]:
    """The event of a producer chain run at its consumer's line (``runtime.epilogue``: our
    GEMM, or our convolution, an implicit GEMM, with the consumer's group as its epilogue or
    a BatchNorm folded in): one ``GEMM`` event named by the chain and the consumer
    (``sm::conv2d + sm::batch_norm + FusionGroup(relu)``), at the producer's source line."""
    name = " + ".join(node_label(n) for n in (*nodes, consumer))
    args = {"epilogue": kernel.name} if kernel is not None else None
    return event(name, GEMM, nodes[0].source, input_shapes(nodes[0]), args)


def _size(v: Any) -> int | str:
    """A step's size for an event's args: an int, or a symbolic size's text (``16*B``)."""
    return v if isinstance(v, int) else str(v)


def native_step_event(node: Node, step: Any) -> Callable[[int], None]:
    """The event of one step of a native segment (a ``codegen.native`` Kernel or GemmStep)."""
    from scriptmod.codegen.llvm_ir import kernel_name
    from scriptmod.codegen.native import GemmStep
    if isinstance(step, GemmStep):
        blas = f"cblas_{'s' if step.dtype.itemsize == 4 else 'd'}gemm"
        kind = {True: "inline gemm", False: blas, None: f"inline gemm or {blas}"}[step.inline]
        args = {"kernel": kind, **{f: _size(getattr(step, f)) for f in ("m", "n", "k", "batch")}}
        cat = GEMM
    else:
        args = {"kernel": kernel_name(step.spec), "n": _size(step.n)}
        cat = group_category(node) if node.kind == Prim.FUSION_GROUP else KERNEL
    return event(node_label(node), cat, node.source, input_shapes(node), args)
