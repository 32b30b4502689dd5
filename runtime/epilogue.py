"""Fusion groups run as the *epilogue* of the kernel that produces one of their inputs: the
group's kernel applied to each finished block of that kernel's output while it is in cache,
instead of a second pass over memory.

Two producers take an epilogue:

- our float32 GEMM (``runtime.gemm``): a ``matmul`` whose only user is the group
  (``Linear -> GELU``, ``... + residual``);
- our float32 convolution (``runtime.conv``, ``runtime.conv_direct``): a ``conv{1,2,3}d``
  whose only user is the group, or whose only user is an inference ``batch_norm`` whose only
  user is the group (``Conv -> BatchNorm -> ReLU``, ``... + identity``). The BatchNorm is
  folded into the convolution per call when it runs on running statistics (its ``training``
  input false at run time), the way ``jit.freeze`` folds it once.

A ``Source`` names the producer chain (``nodes``, run at the group's line instead of their
own: *deferred*) and the group's input ``slot`` it fills. The program passes the chain's
outside inputs (``inputs``) then the group's inputs, the slot a placeholder; the step runs
the fused kernel where the arrays allow, else each chain node's own step and then the group
(``chain_fallback``): results never depend on which path ran.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir.graph import Node, Prim, Value
from scriptmod.ir.types import TensorType

CONV_OPS = frozenset({"conv1d", "conv2d", "conv3d"})
MAX_SHAPES = 8                # product buffer pools a step keeps (one per shape)


@dataclass(frozen=True, eq=False)
class Source:
    """The producer chain of an epilogue group: ``nodes`` in graph order (the kernel first),
    the last one's output read by the group at input ``slot``; ``kind``: ``gemm`` or
    ``conv``."""
    nodes: tuple[Node, ...]
    slot: int
    kind: str

    @property
    def head(self) -> Node:
        """The node whose kernel runs the epilogue (the matmul or the convolution)."""
        return self.nodes[0]

    @property
    def product(self) -> Value:
        """The value the group reads: never materialized when the fused kernel runs."""
        return self.nodes[-1].output

    def inputs(self) -> list[Value]:
        """The values the chain reads from outside itself, in node then input order."""
        inside = {n.output for n in self.nodes}
        return [v for n in self.nodes for v in n.inputs if v not in inside]


def find(group: Node) -> Source | None:
    """The ``Source`` of fusion group ``group``, or None: a GEMM's
    (``runtime.gemm.epilogue_source``), else a convolution's (``conv_source``)."""
    from .gemm import epilogue_source
    return epilogue_source(group) or conv_source(group)


def f32_cpu(t: Any) -> bool:
    """A float32 CPU tensor type of known rank."""
    return isinstance(t, TensorType) and t.dtype is D.float32 and t.device == "cpu" \
        and t.shape is not None


def elementwise_group(group: Node) -> bool:
    """A fusion group an epilogue can be: one float32 CPU output, no row (reduction) ops."""
    from scriptmod.codegen.rows import has_row_ops
    return group.kind == Prim.FUSION_GROUP and len(group.outputs) == 1 \
        and f32_cpu(group.output.type) and not has_row_ops(group.attrs["subgraph"])


def _only_use(v: Value, user: Node) -> bool:
    return len(v.uses) == 1 and v.uses[0].user is user and v.node.owning_block is user.owning_block


def _is_conv(node: Node) -> bool:
    if not node.is_op or node.op_name not in CONV_OPS or len(node.outputs) != 1:
        return False
    x, w, b = (v.type for v in node.inputs)
    return f32_cpu(node.output.type) and f32_cpu(x) and f32_cpu(w) \
        and (b is None or not isinstance(b, TensorType) or f32_cpu(b))


def conv_source(group: Node) -> Source | None:
    """A convolution (``_is_conv``), or a convolution then a ``batch_norm``, each read only
    by the next, feeding ``group`` (``elementwise_group``) a value of the group's output
    shape. The batch_norm's own arguments are read at run time (it folds only on running
    statistics)."""
    if not elementwise_group(group):
        return None
    shape = tuple(group.output.type.shape)
    for slot, v in enumerate(group.inputs):
        if not _only_use(v, group) or not f32_cpu(v.type) or tuple(v.type.shape) != shape:
            continue
        n = v.node
        if _is_conv(n):
            return Source((n,), slot, "conv")
        if n.is_op and n.op_name == "batch_norm" and _only_use(n.inputs[0], n) \
                and _is_conv(n.inputs[0].node):
            return Source((n.inputs[0].node, n), slot, "conv")
    return None


def batch_norm_source(bn: Node) -> Source | None:
    """A ``batch_norm`` whose input is a convolution read only by it (``_is_conv``), with no
    fusion group after it to take both: the convolution runs at the BatchNorm's line, the
    statistics folded into it per call (``runtime.conv_epilogue``). The Source's slot is the
    BatchNorm's input 0."""
    if not bn.is_op or bn.op_name != "batch_norm" or not f32_cpu(bn.output.type):
        return None
    v = bn.inputs[0]
    if _only_use(v, bn) and _is_conv(v.node):
        return Source((v.node,), 0, "conv")
    return None


def chain_fallback(source: Source, steps: Sequence[Callable[[list], Any]]
                   ) -> Callable[[list], Any]:
    """The chain run node by node (``steps[i]`` the own step of ``source.nodes[i]``), called
    with ``source.inputs()`` values: the product."""
    inside = {n.output: i for i, n in enumerate(source.nodes)}
    plan = []                      # per node: (step, [("arg", j) | ("node", i)])
    j = 0
    for n, st in zip(source.nodes, steps):
        where = []
        for v in n.inputs:
            if v in inside:
                where.append((True, inside[v]))
            else:
                where.append((False, j))
                j += 1
        plan.append((st, where))

    def run(args: list) -> Any:
        outs: list[Any] = []
        for st, where in plan:
            outs.append(st([outs[k] if internal else args[k] for internal, k in where]))
        return outs[-1]
    return run


def run_fused(fk: Any, slot: int, ins: list, shape: tuple[int, ...],
              view: tuple[int, ...], pools: dict, run: Callable[[Any, Any], None]) -> Any:
    """The group's output with the group as the epilogue of a producer kernel, or None
    where the group's launch does not fit (then nothing was computed). ``fk``: the group's
    ``FusedKernel``; ``ins``: its inputs, slot ``slot`` filled here with the product, a
    ``shape`` buffer (from ``pools``, one ``BufferPool`` per shape) seen as ``view``;
    ``run(buffer, epilogue)`` computes the product into the buffer, calling the
    ``runtime.gemm.Epilogue`` on each finished block."""
    import numpy as np
    from .fusion import BufferPool, Launch
    from .gemm import Epilogue
    from .native import data_ptr
    pool = pools.get(shape)
    if pool is None:
        if len(pools) >= MAX_SHAPES:         # many batch sizes: keep the newest only
            pools.clear()
        pool = pools[shape] = BufferPool(shape, np.dtype(np.float32))
    c = pool.take()
    ins[slot] = c.reshape(view)
    launch, arrays = fk.launch_for(ins)
    if type(launch) is not Launch or launch.spec.is_row or len(launch.pools) != 1 \
            or launch.out_shape != tuple(view) or not launch.n:
        return None
    out, = launch.outputs()
    table = (ctypes.c_void_p * (len(arrays) + 1))(*[data_ptr(a) for a in arrays], data_ptr(out))
    meta = (ctypes.c_int64 * max(1, len(launch.meta)))(*launch.meta)
    run(c, Epilogue(launch.kernel.address, ctypes.addressof(table), ctypes.addressof(meta)))
    return out
