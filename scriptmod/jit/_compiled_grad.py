"""The grad-enabled call of a compiled method: the compiled forward, then one autograd node
(``CompiledFunctionBackward0``) whose backward runs the compiled backward.

The user's code does not change: ``loss.backward()``, ``autograd.grad``, hooks on
parameters and outputs, ``retain_graph`` and accumulation into ``.grad`` go through the
engine as for any node. What the IR cannot differentiate (``_autodiff.NotDifferentiable``),
and calls that write an argument in place or return one, run op by op instead; so does a
backward with ``create_graph=True``, which re-runs the forward op by op from the same inputs
to give gradients with history. ``SCRIPTMOD_LOG=autograd`` says which path a call took and
why.

A specialization typed with symbolic dims (``Float(B, 64)``, a batch class's shared one) gets
one plan for every size of its class: its graphs read their sizes at run time, and what the
autograd node records of the shapes (its leaves' and outputs' metadata) is taken per call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir import log as irlog
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes.effects import is_view
from scriptmod.ir.types import TensorType
from scriptmod.runtime.arrays import NP_DTYPE
from scriptmod.runtime.executable import Executable
from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import Node
from scriptmod.tensor import Tensor, unwrap_tree, wrap_tree
from scriptmod.jit._autodiff import Split, flat_tensor_outputs

TOPIC = "autograd"


@dataclass
class OpByOp:
    """A specialization whose gradient runs op by op, and why (logged once when built)."""

    reason: str


class CompiledGrad:
    """A specialization's forward with saved values, and its backward, both compiled.

    ``compile(graph, name)`` makes an ``Executable``. ``seeded``: the forward that also
    returns the gradients at a unit seed (``_autodiff.unit_seeded``), run instead of the
    plain forward when the method returns a scalar loss; the plain forward and the backward
    are then compiled on first use (a seed other than 1, a profiler), not with the plan."""

    def __init__(self, split: Split, compile: Callable[[Any, str], Executable], name: str,
                 seeded: Executable | None = None, from_state: tuple = (),
                 layout: tuple = ()) -> None:
        self.split, self.name, self.seeded = split, name, seeded
        # per argument, the tensor count of a tuple the graphs take item by item
        # (``_autodiff.flatten_tuple_inputs``), else None; () when there is none
        self.layout = layout if any(n is not None for n in layout) else ()
        # (saved position, module-state index) of the saved values the forward does not
        # return: module tensors, read from the node's ``tensors`` at backward
        self.from_state = from_state
        self._compile = compile
        self._forward: Executable | None = None if seeded is not None else \
            compile(split.forward, name)
        self._backward: Executable | None = None if seeded is not None else \
            compile(split.backward, f"{name}.backward")
        self._init_call_state()

    @property
    def forward(self) -> Executable:
        if self._forward is None:
            self._forward = self._compile(self.split.forward, self.name)
        return self._forward

    @property
    def backward(self) -> Executable:
        if self._backward is None:
            self._backward = self._compile(self.split.backward, f"{self.name}.backward")
        return self._backward

    @backward.setter
    def backward(self, value: Executable) -> None:
        self._backward = value

    def _init_call_state(self) -> None:
        outs = self.split.backward.inputs[-len(self.split.grad_outputs):]
        self._grad_types = [v.type for v in outs]
        self._fixed: tuple | None = None   # (leaf metas, saved leaves), found on first call
        self._held: tuple = (None,)        # see _hold
        self._run, self._error = (self.seeded or self.forward).direct()
        self._watched_state: tuple = ()
        self._n_saved = len(self.split.backward.inputs) - len(self.split.grad_outputs) \
            - len(self.from_state)
        # the graphs have symbolic dims: the shapes the node records are taken per call
        self.symbolic = any(_has_symbolic_dim(v.type) for g in (self.split.forward,
                                                              self.split.backward)
                            for v in g.inputs)
        self._plain: tuple | None = None   # the plain forward's program, once compiled
        n_leaves = len(self.split.leaves)      # the gradients that may need a copy
        self._copy_backward = _shared_outputs(self.split.backward, n_leaves)
        self._copy_unit = () if self.split.seeded is None else \
            _shared_outputs(self.split.seeded, n_leaves)

    def _plain_program(self) -> tuple:
        self._plain = self.forward.direct()
        return self._plain

    def __call__(self, head: tuple, state: tuple, tensors: tuple, fallback: Any,
                 args: Sequence[Any], profiled: bool = False) -> Any:
        """Run the forward; return its outputs, with the backward node attached.
        ``fallback(args)`` runs the forward op by op (for ``create_graph=True``);
        ``profiled``: through the forward's profiled program (a profiler runs)."""
        # the unit-seed forward while the module trains (an evaluation loss computed with
        # grad enabled would pay for gradients it rarely takes)
        seeded = self.seeded is not None and (not head or getattr(head[0], "training", True))
        if profiled:
            run, error = (self.seeded if seeded else self.forward).direct(profiled=True)
        elif seeded or self.seeded is None:
            run, error = self._run, self._error
        else:
            run, error = self._plain or self._plain_program()
        if self.layout:         # leaves and program inputs are the tuples' items
            fallback = functools.partial(_with_args, fallback, args)
            args = flat_args(args, self.layout)
        try:      # the executor checked the arguments: the program directly
            outs = run(*head, *[a._data if isinstance(a, Tensor) else unwrap_tree(a)
                                for a in args], state)
        except Exception as e:
            raise error(e) from None
        n = self.split.n_outputs
        if seeded:
            saved, unit = outs[n:n + self._n_saved], list(outs[n + self._n_saved:])
        else:
            saved, unit = outs[n:], None
        if n == 1:
            o = outs[0]
            out = Tensor._make(o) if type(o) is np.ndarray else wrap_tree(o)
            flat = [out] if type(out) is Tensor else _flat_tensors(out)
        else:
            out = wrap_tree(tuple(outs[:n]))
            flat = _flat_tensors(out)
        fixed = self._fixed or self._fix(saved, args, tensors)
        metas, out_meta = fixed[0], fixed[2]
        if self.symbolic:
            metas = self._leaf_metas(args, tensors)
            out_meta = [(t.shape, t.dtype, "cpu") for t in flat]
        held = self._held
        if held[0] is not tensors:      # module tensors' edges (one AccumulateGrad each, held)
            held = self._hold(tensors, fixed)
        if held[2] is not None:         # every leaf is a module tensor
            edges = held[2]
        else:
            edges = tuple(held[1][i] if kind == "state" else _edge(args[i], self.name)
                          for kind, i in self.split.leaves)
        if fixed[1]:
            watched = held[3] + [args[i] for i in fixed[1]]
            versions = [t._vc[0] for t in watched]
        else:
            watched, versions = held[3], list(map(_first, held[4]))
        ctx = _Ctx((self, saved, watched, versions, out_meta, fallback, args, tensors, unit))
        node = Node("compiled_function", _backward, ctx, edges, metas, len(flat))
        for k in self.split.grad_outputs:
            flat[k]._set_grad_fn(node, k)
        return out

    def _fix(self, saved: list[Any], args: Sequence[Any], tensors: tuple) -> tuple:
        """What every call of this specialization shares: the leaves' (shape, dtype), which
        saved values are module tensors or arguments (their versions are checked at
        backward), and the outputs' metadata (a symbolic plan, whose types have symbolic
        dims, takes the leaves' and outputs' shapes per call instead)."""
        owners = {id(t._data): ("state", j) for j, t in enumerate(tensors)}
        owners.update((id(a._data), ("arg", i)) for i, a in enumerate(args)
                      if isinstance(a, Tensor))
        watched = [("state", j) for _, j in dict.fromkeys(self.from_state)]
        for a in saved:                  # a saved transpose of a weight watches the weight
            while a is not None and id(a) not in owners:
                a = getattr(a, "base", None)
            if a is not None and owners[id(a)] not in watched:
                watched.append(owners[id(a)])
        metas = self._leaf_metas(args, tensors)
        out_meta = [(tuple(v.type.shape), v.type.dtype, "cpu")
                    for v in flat_tensor_outputs(self.split.forward, self.split.n_outputs)]
        self._watched_state = tuple(j for kind, j in watched if kind == "state")
        self._fixed = (metas, tuple(i for kind, i in watched if kind == "arg"), out_meta)
        return self._fixed

    def _leaf_metas(self, args: Sequence[Any], tensors: tuple) -> tuple:
        """(shape, dtype) of each leaf, as the node records them for its inputs."""
        return tuple((tensors[i].shape, tensors[i].dtype) if kind == "state" else
                     (args[i].shape, args[i].dtype) for kind, i in self.split.leaves)

    def _hold(self, tensors: tuple, fixed: tuple) -> tuple:
        """Per module state: the module tensors' edges (all of them, when no argument is a
        leaf) and the saved module tensors whose versions backward checks."""
        state = {j: (tensors[j]._grad_node(), tensors[j]._output_nr)
                 for kind, j in self.split.leaves if kind == "state"}
        every = None if any(kind == "arg" for kind, _ in self.split.leaves) else \
            tuple(state[j] for _, j in self.split.leaves)
        watched = [tensors[j] for j in self._watched_state]
        self._held = (tensors, state, every, watched, [t._vc for t in watched])
        return self._held

    def run_backward(self, ctx: "_Ctx", gs: list[Any]) -> list[Tensor]:
        for t, version in zip(ctx.watched, ctx.versions):
            if t._vc[0] != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: [{t.dtype.short}Tensor {list(t.shape)}], which "
                    f"a compiled {self.name} saved, is at version {t._vc[0]}; expected version "
                    f"{version} instead.")
        grads = []
        for k, t in zip(self.split.grad_outputs, self._grad_types):
            grads.append(_grad_array(gs[k], ctx.out_meta[k][0], t, k))
        unit = ctx.unit
        if unit and grads[0] == 1:
            res = list(unit)
            unit.clear()                      # handed out once: .grad may take the arrays
            return _owned(res, self._copy_unit)
        saved = ctx.saved
        if self.from_state:
            saved = list(saved)
            for p, j in self.from_state:
                saved.insert(p, ctx.tensors[j]._data)
        res = self.backward([*saved, *grads])
        return _owned(res, self._copy_backward)


def flat_args(args: Sequence[Any], layout: tuple) -> Sequence[Any]:
    """``args`` with the items of each tuple argument that ``layout`` counts
    (``_autodiff.flatten_tuple_inputs``) in its place."""
    if not layout:
        return args
    out: list[Any] = []
    for a, n in zip(args, layout):
        if n is None:
            out.append(a)
        else:
            out.extend(a)
    return out


def _with_args(fallback: Callable[[Sequence[Any]], Any], args: Sequence[Any],
               _flat: Sequence[Any]) -> Any:
    """The op-by-op forward of a call whose tuples were flattened: the call's own arguments."""
    return fallback(args)


def _shared_outputs(g: Graph, n: int) -> tuple[bool, ...]:
    """Which of ``g``'s last ``n`` outputs (gradients) may share memory with something the
    program keeps or was given: a constant (a gradient folded at the unit seed: d/dx of
    ``x.sum()`` is ones), a graph input, a module tensor, or a view of one. Those are copied
    before they become ``.grad``, which the user may change in place (``clip_grad_norm_``);
    a fusion group's or a non-view op's output is a new array on every run."""
    def fresh(node: Any) -> bool:
        return node.kind == Prim.FUSION_GROUP or (
            node.is_op and not is_view(node) and node.op_name != "index")   # x[0]: a view
    return tuple(not fresh(v.node) for v in g.outputs[len(g.outputs) - n:])


def _owned(arrays: Sequence[Any], shared: tuple[bool, ...]) -> list[Tensor]:
    return [Tensor._make(np.array(a) if copy else a) for a, copy in zip(arrays, shared)]


def _edge(t: Tensor, name: str) -> tuple:
    if t.grad_fn is not None and t._vc[0] != t._hv:
        from scriptmod._dispatch import _stale_history
        raise _stale_history(f"compiled {name}", t)
    return (t._grad_node(), t._output_nr)


class _Ctx(tuple):
    """What the node keeps between forward and backward (freed by ``Node.release``): a
    tuple, so that the call builds it in C. ``unit``: the gradients at a unit seed, a list
    emptied when handed out, or None."""

    __slots__ = ()
    plan = property(itemgetter(0))
    saved = property(itemgetter(1))
    watched = property(itemgetter(2))
    versions = property(itemgetter(3))
    out_meta = property(itemgetter(4))
    fallback = property(itemgetter(5))
    args = property(itemgetter(6))
    tensors = property(itemgetter(7))
    unit = property(itemgetter(8))

    @property
    def leaves(self) -> list[Tensor]:
        return [self.args[i] if kind == "arg" else self.tensors[i]
                for kind, i in self.plan.split.leaves]


_first = itemgetter(0)


def _backward(ctx: _Ctx, g: Any) -> Sequence[Any]:
    gs = g if isinstance(g, list) else [g]
    if grad_mode.is_grad_enabled():             # create_graph=True: gradients with history
        irlog.log(TOPIC, f"{ctx.plan.name}: create_graph=True, so the backward re-runs the "
                         f"forward op by op (the compiled backward has no history of its own)")
        return _with_history(ctx, gs)
    return ctx.plan.run_backward(ctx, gs)


def _with_history(ctx: _Ctx, gs: list[Any]) -> Sequence[Any]:
    from scriptmod.autograd import grad as autograd_grad
    out = ctx.fallback(ctx.args)          # the forward again, recorded op by op
    flat = _flat_tensors(out)
    keep = [k for k in ctx.plan.split.grad_outputs if gs[k] is not None]
    return autograd_grad([flat[k] for k in keep], ctx.leaves, [gs[k] for k in keep],
                         create_graph=True, allow_unused=True)


def _grad_array(g: Any, shape: Sequence[int], t: TensorType, k: int) -> Any:
    """The gradient of output ``k`` (of this call's ``shape``) as the backward was built
    for: its dtype, C order."""
    if g is None:
        return np.zeros(tuple(shape), dtype=NP_DTYPE[t.dtype])
    a = g._data
    if not isinstance(a, np.ndarray):
        raise TypeError(f"compiled backward: the gradient of output {k} is not a CPU tensor")
    if a.shape != tuple(shape):
        raise RuntimeError(f"compiled backward: the gradient of output {k} has shape "
                           f"{list(a.shape)}; the output has shape {list(shape)}")
    dt = NP_DTYPE[t.dtype]
    if a.dtype != dt or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=dt)
    return a


def _has_symbolic_dim(t: Any) -> bool:
    shape = getattr(t, "shape", None)
    return shape is not None and any(isinstance(d, str) for d in shape)


def _flat_tensors(x: Any) -> list[Tensor]:
    out: list[Tensor] = []

    def walk(v: Any) -> None:
        if isinstance(v, Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            for i in v:
                walk(i)
    walk(x)
    return out
