"""Running a ScriptModule method: guards, one specialization per input signature, and the
interpreters that execute a specialized graph.

A *signature* is (dtype, shape, device, requires_grad) per tensor argument. The first call
with a signature inlines the method, specializes its types and optimizes it; later calls
with the same signature only run it (``Executor.stats`` counts both). Without autograd the
graph runs on raw arrays; when a gradient is needed it runs op by op through ``dispatch``
so autograd records the same ops eager execution would.

Batch sizes (any dim the trace found symbolic, ``B``): the first size of a *batch class*
(the signature with every symbolic dim of size >= 2 replaced by its name) gets a concrete
specialization, with its whole straight-line code native (``runtime.native``); every other
size of that class shares one *symbolic* specialization, optimized and fused once with ``B``
kept in its types, whose fused kernels take their shapes at run time (``runtime.fusion``).
A new batch size therefore reuses the specialization, its kernels and its plan: it compiles
nothing and keeps nothing per size. The guard of a symbolic specialization checks the
rank, the inner dims and the dtype, and that every dim named alike has one size (>= 2:
sizes 0 and 1 broadcast and empty differently, so they specialize concretely, as in
PyTorch's dynamic shapes). Which specialization serves a size is decided once per class
(the first size seen), so a call's numbers never depend on the order of earlier calls.

An input of another rank than traced re-specializes from the traced graph where its ops
allow it (``_rank``). A submodule with hooks keeps its call in the specialization
(``_boundary``), so the hooks run around its own compiled graph.
"""
from __future__ import annotations

import functools
import operator
from collections import OrderedDict

import numpy as np
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentError, DTypeError, TraceGuardError
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.passes import eliminate_dead_code, inline_calls, propagate_shapes, run_pipeline
from scriptmod.ir.passes.inplace import elide_unobserved_copies
from scriptmod.ir.passes.shapes import ShapePropagationError, extra_handlers
from scriptmod.ir.types import (BoolType, FloatType, IntType, ListType, ModuleType,
                                OptionalType, TensorType, TupleType, Type)
from scriptmod.runtime import profiling
from scriptmod.runtime.errors import article, describe_type, describe_value, op_label, place, \
    shape_text
from scriptmod.runtime.executable import ArrayOps, Executable
from scriptmod.runtime.kernels import KERNELS
from scriptmod.runtime.trees import rebuilt
from scriptmod.runtime.interpreter import OpHandler, evaluate_node
from scriptmod._dispatch import dispatch
from scriptmod.jit import _fastpath, _fuser, _rank
from scriptmod.jit._batch_class import batch_class, named_sizes, typed_in
from scriptmod.jit._batch_dims import pinning_error
from scriptmod.jit._fastpath import MISS
from scriptmod.jit._autodiff import (NotDifferentiable, differentiate, flatten_tuple_inputs,
                                      unit_seeded)
from scriptmod.jit._compiled_grad import TOPIC, CompiledGrad, OpByOp, flat_args
from scriptmod.ir import log as irlog
from scriptmod.jit._boundary import (HOOK_VERSION, BoundaryError, call_boundary, hooked_paths,
                                     kept_calls, module_path)
from scriptmod.autograd import grad_mode
from scriptmod.tensor import Tensor, unwrap_tree, wrap, wrap_tree

MAX_SPECIALIZATIONS = 64   # per method: the least recently used one beyond goes, engines and all
# A compiled backward is built for concrete shapes: one per batch size would compile on every
# new size (130 ms for a small MLP), so the shared specialization of a batch class runs its
# gradient op by op, as eager does (deterministic, nothing compiled per size).
SYMBOLIC_GRAD = ("a batch size other than its class's first: the gradient runs op by op "
                 "(the compiled backward serves the class's first size)")

OPTIMIZE = ["fold_constants", "canonicalize", "eliminate_common_subexpressions",
            "eliminate_dead_code", elide_unobserved_copies, "hoist_loop_invariants"]


@dataclass
class Specialization:
    graph: Graph
    key: tuple
    executable: Executable
    written: tuple[int, ...] = field(init=False)   # arguments written in place (copy_)
    aliased: bool = field(init=False)   # an output is an input, or one value is output twice
    fast: tuple | None = field(default=None, init=False)   # (state, hook version, fast path,
    # the grad call it makes)
    grad_plans: dict = field(default_factory=dict, init=False)  # requires_grad of the module
    # tensors -> CompiledGrad, OpByOp, or None (no output needs a gradient)
    symbolic: bool = False      # shared by the sizes of a batch class (the module docstring)
    first: tuple = ()           # symbolic: ((dim name, size), ...) of the class's first size,
    # which its concrete specialization serves

    def __post_init__(self) -> None:
        self.written = _written_args(self.graph)
        self.aliased = _aliased_outputs(self.graph)


@dataclass
class Executor:
    """Specializes and runs one method of one ScriptModule."""

    module: Any
    method: str
    arg_names: list[str]
    specs: OrderedDict[tuple, Specialization] = field(default_factory=OrderedDict)  # LRU
    classes: OrderedDict[tuple, tuple] = field(default_factory=OrderedDict)  # LRU: batch class
    # -> the key of its first size (the one with a concrete specialization)
    _untyped: set = field(default_factory=set)  # batch classes whose symbolic graph has
    # dims of unknown size (data-dependent): each size specializes concretely
    stats: dict[str, int] = field(default_factory=lambda: {"specializations": 0, "calls": 0})
    post_passes: list[Any] = field(default_factory=list)   # e.g. fusion, added by the compiler
    runtime_self: Any = None    # the module the graphs read at run time (default: ``module``)
    _hook_version: int = -1     # HOOK_VERSION when ``_hooked`` was found
    _hooked: tuple = ()         # paths of submodules whose calls stay in the graph (hooks)
    fast: Any = None            # the installed fast path (``_fastpath``): args -> out | MISS
    module_fast: Any = None     # ``fast`` when the module's own call may skip to it (no hooks)

    def __call__(self, args: Sequence[Any]) -> Any:
        fast = self.fast
        if fast is not None:
            out = fast(args)
            if out is not MISS:
                return out
        return self._call(args)

    def _call(self, args: Sequence[Any]) -> Any:
        """The full path: specialize (or find the specialization), then run it with
        autograd or natively, and install its fast path."""
        spec = self.specialize(args)
        self.stats["calls"] += 1
        if spec.written and len(args) > 1:
            _check_written_unaliased(args, spec.written, self.arg_names)
        owner = self.owner
        head = (owner,) if self.has_self else ()
        try:
            if grad_mode.is_grad_enabled():
                plan = self._grad_plan(spec, args)
                if plan is not None:
                    return self._run_grad(plan, spec, head, args)
            st = self.__dict__.get("_state")
            outs = spec.executable([*head, *[a._data if type(a) is Tensor else unwrap_tree(a)
                                             for a in args]], st.arrays if st else ())
            self._install(spec, args, st)
        except BoundaryError as e:     # raised in a hooked submodule call: the user's own error
            err = e.original
        else:
            if len(outs) == 1:
                o = outs[0]
                out = Tensor._make(o) if type(o) is _ndarray else wrap_tree(o)
            else:
                out = wrap_tree(tuple(outs))
            if spec.written:
                out = _written_back(out, args, spec.written)
            return _same_objects(out, _arrays_of(args)) if spec.aliased else out
        raise err

    # ---- grad enabled ---------------------------------------------------------------------
    def _grad_plan(self, spec: Specialization, args: Sequence[Any]) -> Any:
        """The specialization's grad plan for which arguments and module tensors require
        grad now (built on first use), or None when no gradient is needed."""
        st = self.__dict__.get("_state")
        tensors = st.tensors() if st is not None else ()
        needs = tuple(t._requires_grad for t in tensors)
        if not any(needs) and not any(a._requires_grad for a in _tensors_of(args)):
            return None
        key = (needs, self._flags(spec))
        plans = spec.grad_plans
        plan = plans.get(key, _UNBUILT)
        if plan is _UNBUILT:
            plan = plans[key] = OpByOp(SYMBOLIC_GRAD) if spec.symbolic else \
                self._build_grad_plan(spec, args, needs)
            if spec.symbolic:
                irlog.log(TOPIC, f"{self.module.original_name}.{self.method}: {SYMBOLIC_GRAD}")
        return plan

    def _flags(self, spec: Specialization) -> tuple:
        """The module bools the graph reads (``training``), as they are now: the backward of
        ``batch_norm`` differs between them, so grad plans are keyed by them."""
        reads = spec.__dict__.get("_flag_reads")
        if reads is None:
            reads = spec.__dict__["_flag_reads"] = tuple(
                (submodule_of_value(self.owner, n.inputs[0]), n.attrs["name"])
                for n in spec.graph.walk() if n.kind == Prim.GET_ATTR
                and n.output.type == BoolType) if self.has_self else ()
        return tuple(getattr(m, name) for m, name in reads)

    def grad_plan_for(self, args: Sequence[Any]) -> CompiledGrad:
        """The compiled grad plan a grad-enabled call with ``args`` runs (built if need
        be); ``RuntimeError`` naming the reason when that call runs op by op or needs no
        gradient."""
        spec = self.specialize(args)
        plan = self._grad_plan(spec, args)
        if plan is None:
            raise RuntimeError(f"{self.module.original_name}.{self.method}(): no output needs a "
                               f"gradient for these inputs (nothing requires grad)")
        if isinstance(plan, OpByOp):
            raise RuntimeError(f"{self.module.original_name}.{self.method}(): the gradient runs "
                               f"op by op: {plan.reason}")
        return plan

    def _run_grad(self, plan: Any, spec: Specialization, head: tuple,
                  args: Sequence[Any]) -> Any:
        if isinstance(plan, OpByOp):
            return _run_with_grad(spec, head, args)
        st = self.__dict__.get("_state")
        state, tensors = (st.arrays, st.tensors()) if st is not None else ((), ())
        out = plan(head, state, tensors, functools.partial(_run_with_grad, spec, head), args,
                   profiled=bool(profiling.ACTIVE))
        self._install(spec, args, st)
        return out

    def _build_grad_plan(self, spec: Specialization, args: Sequence[Any],
                         needs: tuple[bool, ...]) -> Any:
        where = f"{self.module.original_name}.{self.method}"
        plan = self._compile_grad(spec, args, needs, where)
        if isinstance(plan, OpByOp):
            irlog.log(TOPIC, f"{where}: the gradient runs op by op: {plan.reason}")
        elif irlog.enabled(TOPIC):
            s = plan.split
            irlog.log(TOPIC, f"{where}: compiled backward, {len(s.backward.inputs) - len(s.grad_outputs)} "
                             f"saved values, {s.saved_bytes} bytes saved "
                             f"({s.saved_bytes_unpruned} without recomputation)")
        return plan

    def _compile_grad(self, spec: Specialization, args: Sequence[Any], needs: tuple[bool, ...],
                      where: str) -> Any:
        if spec.written:
            return OpByOp("it writes an argument in place")
        if spec.aliased:
            return OpByOp("it returns an argument, or one value twice")
        if any(a._device_str() != "cpu" for a in _tensors_of(args)):
            return OpByOp("the compiled backward runs on the CPU only")
        skip = 1 if self.has_self else 0
        g, layout = flatten_tuple_inputs(self._optimized(args, spec.key[3], fuse=False), skip)
        args = flat_args(args, layout)
        state_index = self._state_index()

        def leaf_key(v: Value) -> tuple[str, int] | None:
            if v.node.kind == Prim.PARAM:
                i = v.index - skip
                a = args[i] if 0 <= i < len(args) else None
                return ("arg", i) if isinstance(a, Tensor) and a.requires_grad else None
            j = state_index(v.node)
            return ("state", j) if j is not None and needs[j] else None
        def flag(v: Value) -> bool | None:
            value = getattr(submodule_of_value(self.owner, v.node.inputs[0]), v.node.attrs["name"])
            return value if type(value) is bool else None
        fused = spec.key[1] == "fused"
        try:
            split = differentiate(g, leaf_key, flag if self.has_self else lambda v: None,
                                  recompute=fused)
        except NotDifferentiable as e:
            return OpByOp(str(e))
        if split is None:
            return None
        compile_passes = _fuser.compile_passes() if fused else []
        both = unit_seeded(split) if fused else None
        fwd = run_pipeline(split.forward, compile_passes)
        bwd = run_pipeline(split.backward, _grad_passes() + compile_passes)
        split.forward, split.backward = fwd, bwd
        if both is not None:
            # losses expanded first, so that CSE merges the forward's (x - t) with the
            # backward's
            split.seeded = run_pipeline(both, ["expand_losses"] + _grad_passes() +
                                        compile_passes)
        from_state = _saved_from_state(split, state_index) if self.has_self else ()
        seeded = None if split.seeded is None else self._executable(split.seeded, spec.key)

        def compile(g: Graph, name: str) -> Executable:
            if g is split.backward:
                return Executable(g, ArrayOps(), name=name, native=fused)
            return self._executable(g, spec.key)
        return CompiledGrad(split, compile, where, seeded, from_state, layout)

    def _install(self, spec: Specialization, args: Sequence[Any], slots: Any) -> None:
        """Make ``spec`` the fast path (built once per specialization and module state);
        none while a profiler runs (calls take this full path, which profiles them)."""
        if profiling.ACTIVE:
            self.fast = self.module_fast = None
            return
        state = slots.arrays if slots is not None else ()
        grad = self._fast_grad(spec, slots)
        built = spec.fast
        if built is None or built[0] is not state or built[1] != HOOK_VERSION[0] \
                or built[3] is not grad[1]:
            fn = _fastpath.build(spec, args, slots, self.owner, self.has_self, self.stats, grad)
            built = spec.fast = (state, HOOK_VERSION[0], fn, grad[1])
        self.fast = built[2]
        self.module_fast = built[2] if built[2] is not None and self._module_may_skip() else None

    def _fast_grad(self, spec: Specialization, slots: Any) -> tuple:
        """(requires_grad of the module tensors, the grad call) for the fast path: the
        compiled grad plan of the pattern the module has now, if there is one."""
        if slots is None:
            return ((), None)
        needs = tuple(t._requires_grad for t in slots.tensors())
        flags = self._flags(spec)
        plan = None if spec.symbolic else spec.grad_plans.get((needs, flags))
        if not isinstance(plan, CompiledGrad):
            return (needs, None)
        head = (self.owner,) if self.has_self else ()
        state, tensors = slots.arrays, slots.tensors()
        fallback = functools.partial(_run_with_grad, spec, head)
        reads = spec.__dict__["_flag_reads"]
        call = functools.partial(plan, head, state, tensors, fallback)
        if not reads:
            return (needs, call)

        def grad_call(args: Sequence[Any]) -> Any:
            if tuple(getattr(m, name) for m, name in reads) != flags:
                return MISS                     # .train()/.eval() since: the full path
            return call(args)
        return (needs, grad_call)

    def _module_may_skip(self) -> bool:
        """Whether the module's own ``__call__`` may go straight to the fast path: it is the
        module's forward, without hooks (the fast path re-checks ``HOOK_VERSION``), lazy
        build or structured arguments and outputs."""
        from scriptmod.nn._module_hooks import _GLOBAL, has_call_hooks
        m = self.module
        return (self.method == "forward" and self.runtime_self is None
                and not has_call_hooks(m) and not _GLOBAL.any()
                and not m.__dict__.get("_lazy_pending") and m.build_mode != "explicit"
                and "forward" not in m._in_specs and "forward" not in m._out_specs)

    def hooked(self) -> tuple:
        """Paths of the submodules whose calls the specialization keeps (they have hooks);
        looked for again only when a hook was registered or removed anywhere."""
        if self._hook_version != HOOK_VERSION[0]:
            self._hook_version = HOOK_VERSION[0]
            self._hooked = hooked_paths(self.owner) if self.has_self else ()
        return self._hooked

    @property
    def has_self(self) -> bool:
        g = self.module._methods[self.method]
        found = self.__dict__.get("_has_self")
        if found is None or found[0] is not g:             # cached per method graph
            found = self.__dict__["_has_self"] = \
                (g, bool(g.inputs) and isinstance(g.inputs[0].type, ModuleType))
        return found[1]

    @property
    def owner(self) -> Any:
        """The module the graphs read attributes from at run time."""
        return self.module if self.runtime_self is None else self.runtime_self

    def _state_key(self) -> tuple:
        """(dtype, shape, array type) of every parameter and buffer of the module tree:
        ``.double()``, ``.to(device)``, a replaced or resized buffer after tracing must give
        a new specialization, never a kernel built for the old ones.

        Cheap on the hot path: the registry slots (``_parameters``/``_buffers`` dicts and
        names, plus the ``_modules`` slots of the tree) are found once; each call reads the
        current arrays with C-level ``map`` and, when every slot still holds the very same
        array object (identity, with the arrays kept alive so an id cannot be recycled)
        and the same submodules, reuses the key computed for them."""
        st = self.__dict__.get("_state")
        if st is None:
            st = self.__dict__["_state"] = _StateSlots(self.owner) if self.has_self else None
        if st is None:
            return ()
        key = st.key()
        if key is None:                                  # the tree changed shape: re-find
            st = self.__dict__["_state"] = _StateSlots(self.owner)
            key = st.key()
            assert key is not None
        return key

    def _state_arrays(self) -> tuple:
        """The arrays of the module tree's parameters and buffers, as ``_state_key`` last read
        them (the same tuple object while none changed: ``Executable`` keys on it)."""
        st = self.__dict__.get("_state")
        return st.arrays if st is not None else ()

    def specialize(self, args: Sequence[Any]) -> Specialization:
        # fused and unfused are cached apart, and so are module states of other dtypes
        hooked = self._hooked if self._hook_version == HOOK_VERSION[0] else self.hooked()
        key = (signature(args), _fuser.variant(), self._state_key(), hooked)
        specs = self.specs
        spec = specs.get(key)
        if spec is not None:
            _touch(specs, key)
            return spec
        dims = self._symbolic_dims()
        ckey = (batch_class(key[0], dims),) + key[1:] if dims else None
        if ckey is not None and ckey[0] is not None:
            first = self.classes.get(ckey)
            if first is None:                      # the class's first size: concrete
                self.classes[ckey] = key
                _drop_oldest(self.classes, MAX_SPECIALIZATIONS)
            elif first != key and ckey not in self._untyped:   # another size: the shared one
                spec = specs.get(ckey)
                if spec is not None:
                    _touch(specs, ckey)
                    _touch(self.classes, ckey)
                    return spec
                self.check(args)
                graph = self._optimized(args, key[3], symbolic=True)
                if typed_in(graph, {d for names in dims if names for d in names if d is not None}):
                    spec = Specialization(graph, ckey, self._executable(graph, ckey))
                    spec.symbolic, spec.first = True, named_sizes(first[0], dims)
                    specs[ckey] = spec
                    self.stats["specializations"] += 1
                    _drop_oldest(specs, MAX_SPECIALIZATIONS)
                    return spec
                self._untyped.add(ckey)            # sizes its types cannot check: concrete
        self.check(args)
        graph = self._optimized(args, key[3])
        spec = specs[key] = Specialization(graph, key, self._executable(graph, key))
        self.stats["specializations"] += 1
        _drop_oldest(specs, MAX_SPECIALIZATIONS)
        return spec

    def _symbolic_dims(self) -> tuple:
        """Per argument, the names of its declared dims (None where a dim is a size): the
        traced graph's symbolic dims, which a batch class keeps (cached per method graph)."""
        g = self.module._methods[self.method]
        found = self.__dict__.get("_sym_dims")
        if found is None or found[0] is not g:
            skip = 1 if self.has_self else 0
            dims = tuple(tuple(d if isinstance(d, str) else None for d in v.type.shape)
                         if isinstance(v.type, TensorType) and v.type.shape is not None
                         and any(isinstance(d, str) for d in v.type.shape) else None
                         for v in g.inputs[skip:])
            # an input dim declared as a product (16*B) ties sizes the guard cannot check:
            # no batch classes then (each size specializes)
            plain = all(d is None or d.isidentifier() for names in dims if names for d in names)
            found = self.__dict__["_sym_dims"] = (g, dims if any(dims) and plain else ())
        return found[1]

    def _executable(self, graph: Graph, key: tuple) -> Executable:
        """Build the specialization's ``Executable``, handing in the module callbacks."""
        state_index = self._state_index()
        ops = ArrayOps(get_attr=_array_attr, set_attr=_array_set_attr, call_method=_raw_call)
        return Executable(graph, ops, grad_ops=TensorOps(), name=f"{self.module.original_name}."
                          f"{self.method}", state_index=state_index if self.has_self else None,
                          state=self._state_arrays(), native=key[1] == "fused")

    def _state_index(self) -> Callable[[Node], int | None]:
        """A module tensor's position in the state tuple, from the ``prim::GetAttr`` that
        reads it (None for any other node)."""
        slots = self.__dict__.get("_state")
        paths = slots.index if slots is not None else {}

        def state_index(node: Node) -> int | None:
            path = _attr_path(node)
            return None if path is None else paths.get(path)
        return state_index

    def _optimized(self, args: Sequence[Any], keep: tuple = (), fuse: bool = True,
                   symbolic: bool = False) -> Graph:
        g = inlined(self.module, self.method, frozenset(keep))
        for call in list(kept_calls(g)):       # typed through the callee's graph
            callee = call.__dict__["callee"] = inlined(submodule_of(self.module, call),
                                                       call.attrs["name"])
            _refresh_attribute_types(callee, submodule_of(self.owner, call))
        if self.has_self:
            _refresh_attribute_types(g, self.owner)
        head = [g.inputs[0].type] if self.has_self else []
        declared = [v.type for v in g.inputs[len(head):]]
        types: list[Type | None] = head + [_arg_type(a, d) for a, d in zip(args, declared)]
        self._retype(g, types, symbolic)
        passes: list[Any] = [("fold_constants", {"evaluate": evaluate_node})] + OPTIMIZE[1:]
        return run_pipeline(g, passes + list(self.post_passes)
                            + (_fuser.compile_passes() if fuse else []))

    def _retype(self, g: Graph, types: list[Type | None], symbolic: bool = False) -> None:
        """Shape propagation for the call's types; at another rank than traced, only where
        every op can follow it (else a ``ShapeError`` naming the op that pins the rank)."""
        skip = 1 if self.has_self else 0
        changed = _rank.changed_args([v.type for v in g.inputs[skip:]], types[skip:],
                                     self.arg_names)
        traced_ranks = _rank.traced_ranks(g) if changed else {}
        where = f"{self.module.original_name}.{self.method}()"
        traced = [v.type for v in g.inputs]
        try:
            self._propagate(g, types, symbolic)
        except TraceGuardError as e:        # name the argument whose size the guard pins
            raise pinning_error(e, self._retyped_copy, traced[skip:], types[skip:],
                                self.arg_names, where) from None
        except (ShapePropagationError, DTypeError) as e:
            if not changed:
                raise self._blame(e, g, traced, types) from None
            _rank.check_ranks(g, traced_ranks, changed, where)     # an earlier op may pin it
            raise _rank.propagation_error(e, changed, where) from None
        if changed:
            _rank.check_ranks(g, traced_ranks, changed, where)

    def _propagate(self, g: Graph, types: list[Type | None], symbolic: bool = False) -> None:
        propagate_calls(g, types, self.owner, symbolic)

    def _retyped_copy(self, arg_types: list[Type]) -> None:
        """Type a fresh copy of the method's graph from ``arg_types`` (an error's probe)."""
        g = inlined(self.module, self.method)
        if self.has_self:
            _refresh_attribute_types(g, self.owner)
        self._propagate(g, [g.inputs[0].type] * self.has_self + list(arg_types))

    def _blame(self, e: Exception, g: Graph, traced: list, given: list) -> Exception:
        """``e`` (an op's type rule refused the call's types) as an error about the argument
        that reaches that op with a dtype or size other than traced, when there is one."""
        node = getattr(e, "node", None)
        if node is None:
            return _reworded(e, f"{self.module.original_name}.{self.method}()")
        reaching, stack, seen = set(), list(node.inputs), set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v.node.kind == Prim.PARAM:
                reaching.add(v)
            stack.extend(v.node.inputs)
        skip = 1 if self.has_self else 0
        found = _blamed(self.arg_names, [v in reaching for v in g.inputs[skip:]],
                        traced[skip:], given[skip:])
        if found is None:
            return _reworded(e, f"{self.module.original_name}.{self.method}()")
        i, label, was, now, note = found
        err = type(e)(f"{self.module.original_name}.{self.method}(): argument {label} "
                      f"(position {i}): expected {describe_type(was)} as traced{note}, got "
                      f"{describe_type(now)}, which {op_label(node)}{place(node)} refuses: "
                      f"{_refusal(e)}")
        err.node = node                                          # type: ignore[attr-defined]
        return err

    def check(self, args: Sequence[Any]) -> None:
        """Guard: arguments must fit the traced signature (count, kind, rank, dtype kind)."""
        g = self.module._methods[self.method]
        declared = [v.type for v in g.inputs[1 if self.has_self else 0:]]
        if len(args) != len(declared):
            raise ArgumentError(f"{self.module.original_name}.{self.method}(): expected "
                             f"{len(declared)} argument(s) ({', '.join(self.arg_names)}), got {len(args)}")
        for i, (a, t) in enumerate(zip(args, declared)):
            _check_arg(self.module, self.method, self.arg_names[i] if i < len(self.arg_names)
                       else f"arg{i}", i, a, t)


class _StateSlots:
    """Where the module tree keeps its tensors, for ``Executor._state_key``."""

    def __init__(self, root: Any) -> None:
        self.t_regs: list[dict] = []
        self.t_names: list[str] = []
        self.t_paths: list[str] = []
        self.m_regs: list[dict] = []
        self.m_names: list[str] = []
        self._walk(root, set())
        self.mods = tuple(map(_getitem, self.m_regs, self.m_names))
        self.index = {p: i for i, p in enumerate(self.t_paths)}   # dotted path -> position
        self.last: tuple | None = None                   # (arrays, key)
        self._tensors: tuple[tuple, tuple] = ((), ())    # (arrays, the Tensors holding them)
        self.arrays: tuple = ()                          # the arrays the last key() read

    def _walk(self, mod: Any, seen: set[int], prefix: str = "") -> bool:
        """Record ``mod``'s tensor slots and those of its subtree; True if it has any (the
        slot of a tensor-free submodule is not watched: the graph reads nothing there)."""
        if id(mod) in seen:
            return False
        seen.add(id(mod))
        found = False
        for reg_name in ("_parameters", "_buffers"):
            reg = mod.__dict__.get(reg_name) or {}
            for name, t in reg.items():
                if t is not None:
                    self.t_regs.append(reg)
                    self.t_names.append(name)
                    self.t_paths.append(prefix + name)
                    found = True
        subs = mod.__dict__.get("_modules") or {}
        for name, child in subs.items():
            if child is not None and self._walk(child, seen, f"{prefix}{name}."):
                self.m_regs.append(subs)
                self.m_names.append(name)
                found = True
        return found

    def tensors(self) -> tuple:
        """The module tree's parameters and buffers (the Tensors), in state order: the same
        tuple object while every slot holds the same Tensor (a Parameter re-wrapped around
        the same array is another Tensor, with its own ``.grad``)."""
        found = tuple(map(_getitem, self.t_regs, self.t_names))
        cached = self._tensors[1]
        if len(cached) == len(found) and all(map(_is, found, cached)):
            return cached
        self._tensors = (self.arrays, found)
        return found

    def key(self) -> tuple | None:
        """The state key, or None when a submodule or tensor slot changed (rebuild)."""
        try:
            if not all(map(_is, map(_getitem, self.m_regs, self.m_names), self.mods)):
                return None
            arrays = tuple(map(_data_of, map(_getitem, self.t_regs, self.t_names)))
        except (KeyError, AttributeError):
            return None
        last = self.last
        if last is not None and all(map(_is, arrays, last[0])):
            return last[1]
        # the paths and strides too: native code reads these arrays by position and layout
        full = (tuple(self.t_paths),) + tuple((a.dtype, a.shape, type(a), a.strides)
                                               for a in arrays)
        # a small token stands for the full key in the specialization key (hashing ~50
        # nested items per call costs more than the rest of the lookup)
        key = _STATE_TOKENS.setdefault(full, len(_STATE_TOKENS))
        self.last = (arrays, key)
        self.arrays = arrays
        return key


def _touch(specs: OrderedDict, key: tuple) -> None:
    """Mark ``key`` most recently used (C-level OrderedDict calls: atomic under the GIL, so
    threads specializing at once need no lock; a key another thread just evicted is fine)."""
    try:
        specs.move_to_end(key)
    except KeyError:
        pass


def _drop_oldest(specs: OrderedDict, keep: int) -> None:
    """Evict least recently used specializations beyond ``keep`` (their kernels and buffers
    go with them once no fast path or running call holds them)."""
    while len(specs) > keep:
        try:
            specs.popitem(last=False)
        except KeyError:
            break


_STATE_TOKENS: dict[tuple, int] = {}     # full state key -> token (process-wide, only grows
                                         # with distinct module layouts)
_getitem = dict.__getitem__
_ndarray = np.ndarray
_is = operator.is_
_data_of = operator.attrgetter("_data")


def propagate_calls(g: Graph, types: Sequence[Type | None], owner: Any,
                    symbolic: bool = False) -> Graph:
    """Type ``g`` from ``types``, its scripted library calls expanded where their input
    types are known (the executor, archive checks, batch dims and save's re-typing share it)."""
    if not any(n.kind == Prim.CALL_FUNCTION for n in g.walk()):
        return propagate_shapes(g, list(types), keep_symbolic=symbolic)
    from scriptmod.jit.frontend.library import expansion_handlers
    with extra_handlers(expansion_handlers(owner)):
        return propagate_shapes(g, list(types), keep_symbolic=symbolic)


def typed_inlined(module: Any, method: str, types: Sequence[Type] | None = None) -> Graph:
    """``module.<method>`` inlined, its attribute reads typed from the module's tensors now,
    then typed from ``types`` (its declared inputs when None)."""
    g = inlined(module, method)
    _refresh_attribute_types(g, module)
    return propagate_calls(g, [v.type for v in g.inputs] if types is None else types, module)


def _refresh_attribute_types(g: Graph, owner: Any) -> None:
    """GetAttr of a tensor gets the type the attribute has now (it may have been cast)."""
    for node in g.walk():
        if node.kind == Prim.GET_ATTR and isinstance(node.output.type, TensorType):
            value = getattr(submodule_of_value(owner, node.inputs[0]), node.attrs["name"])
            if isinstance(value, Tensor):
                node.output.type = TensorType(value.dtype, tuple(value._data.shape),
                                              value._device_str(), False)


def submodule_of_value(root: Any, v: Value) -> Any:
    """The module object a module-typed value stands for (a GetAttr chain from self)."""
    path: list[str] = []
    while v.node.kind == Prim.GET_ATTR:
        path.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    mod = root
    for name in reversed(path):
        mod = getattr(mod, name)
    return mod


def _check_arg(mod: Any, method: str, name: str, pos: int, a: Any, t: Type) -> None:
    _check_value(f"{mod.original_name}.{method}(): argument '{name}", f"' (position {pos})", a, t)


def _check_value(head: str, tail: str, a: Any, t: Type) -> None:
    """``a`` against its declared or traced type ``t``; a tuple's items one by one (named
    ``'hc[0]'``), so that native code never meets a value of another kind."""
    where = head + tail
    if isinstance(t, TensorType):
        if not isinstance(a, Tensor):
            traced = f" ({describe_type(t)} when traced)" if t.dtype is not None else ""
            raise ArgumentError(f"{where}: expected a Tensor, got {_given(a)}{traced}")
        if t.dtype is not None and (a.dtype.category >= D.FLOAT) != (t.dtype.category >= D.FLOAT):
            kind = "a floating-point" if t.dtype.category >= D.FLOAT else "an integer or bool"
            raise DTypeError(f"{where}: expected {kind} tensor (traced with {describe_type(t)}), "
                             f"got {_given(a)}")
    elif t == IntType and not isinstance(a, int):
        raise ArgumentError(f"{where}: expected an int, got {_given(a)}")
    elif isinstance(t, TupleType):
        if not (isinstance(a, (tuple, list)) and len(a) == len(t.elements)):
            raise ArgumentError(f"{where}: expected a tuple of {len(t.elements)} "
                                f"({', '.join(describe_type(e) for e in t.elements)}), "
                                f"got {_given(a)}")
        for k, (item, et) in enumerate(zip(a, t.elements)):
            _check_value(f"{head}[{k}]", tail, item, et)


def _given(a: Any) -> str:
    """What the caller passed, in their terms."""
    if isinstance(a, Tensor):
        device = f" on {a._device_str()}" if a._device_str() != "cpu" else ""
        return f"{article(a.dtype.name + ' tensor')} of shape {shape_text(a.shape)}{device}"
    cls = type(a)
    if cls.__module__ != "builtins" and cls.__module__.split(".")[0] in ("numpy", "torch"):
        hint = " (convert it with scriptmod.from_numpy)" if cls.__module__ == "numpy" else ""
        return f"a {cls.__module__.split('.')[0]}.{cls.__name__}{hint}"
    return describe_value(a)


def _tensors_of(args: Sequence[Any]) -> list[Tensor]:
    """The tensors of a call's arguments, those inside a tuple or list argument included."""
    out: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, (tuple, list)):
            out += _tensors_of(a)
    return out


def signature(args: Sequence[Any]) -> tuple:
    out = []
    for a in args:
        if type(a) is Tensor:                       # the common case, without calls
            d = a._data
            out.append((a.dtype, d.shape, "cpu" if type(d) is _ndarray else a._device_str(),
                        a._requires_grad))
        elif isinstance(a, Tensor):
            out.append((a.dtype, a._data.shape, a._device_str(), a.requires_grad))
        elif isinstance(a, (tuple, list)):
            out.append(signature(a))
        else:
            out.append((type(a), a if isinstance(a, int) else None))
    return tuple(out)


def _blamed(names: Sequence[str], reaches: list[bool], traced: list, given: list) -> Any:
    """The first argument (tuple item) that reaches the refusing op with a dtype or size
    other than traced, or with a size other than an earlier argument gave its symbolic dim
    (``B``): (position, 'label', traced type, given type, note), or None."""
    bound: dict[str, tuple[int, str]] = {}          # symbolic dim -> (size, whose)
    for i, (was_arg, now_arg) in enumerate(zip(traced, given)):
        name = names[i] if i < len(names) else f"arg{i}"
        for label, was, now in _tensor_pairs(f"'{name}", was_arg, now_arg):
            clash = _clash(was, now, bound, f"{label}'")
            if reaches[i] and (_differs(was, now) or clash):
                return i, f"{label}'", was, now, clash
    return None


def _clash(was: TensorType, now: TensorType, bound: dict[str, tuple[int, str]],
           label: str) -> str:
    """`` (with B = 2 from 'x')`` when ``now`` gives a symbolic dim of ``was`` another size
    than an earlier argument did; records the sizes it gives first."""
    if was.shape is None or now.shape is None or len(was.shape) != len(now.shape):
        return ""
    for d, n in zip(was.shape, now.shape):
        if isinstance(d, str) and isinstance(n, int):
            size, whose = bound.setdefault(d, (n, label))
            if size != n:
                return f" (with {d} = {size} from {whose})"
    return ""


def _tensor_pairs(label: str, was: Any, now: Any) -> Any:
    """(label, traced type, given type) per tensor of an argument (a tuple's items too)."""
    if isinstance(was, TupleType) and isinstance(now, TupleType):
        for k, (w, n) in enumerate(zip(was.elements, now.elements)):
            yield from _tensor_pairs(f"{label}[{k}]", w, n)
    elif isinstance(was, TensorType) and isinstance(now, TensorType):
        yield label, was, now


def _refusal(e: Exception) -> str:
    """A type rule's refusal without the place and IR line the pass put around it."""
    node = getattr(e, "node", None)
    msg = str(e).split("\n")[0]
    if node is not None and node.source and msg.startswith(f"{node.source}: "):
        msg = msg[len(node.source) + 2:]
    if node is not None and node.is_op and msg.startswith(f"{node.op_name}: "):
        msg = msg[len(node.op_name) + 2:]
    return msg


def _reworded(e: Exception, where: str) -> Exception:
    """A type rule's refusal that no argument explains, as the user reads it: the method,
    the op, its module path and line, the rule's own words (the IR line goes to
    ``.node_ir``)."""
    node = getattr(e, "node", None)
    text = f"{op_label(node)}{place(node)}: " if node is not None else ""
    err = type(e)(f"{where}: {text}{_refusal(e)}")
    err.node = node                                          # type: ignore[attr-defined]
    err.node_ir = str(e).split("\n    ", 1)[-1] if "\n    " in str(e) else ""  # type: ignore
    return err


def _differs(was: TensorType, now: TensorType) -> bool:
    """Whether ``now`` has another dtype than ``was``, or another size where ``was`` has one."""
    return was.dtype != now.dtype or (was.shape is not None and now.shape is not None and (
        len(was.shape) != len(now.shape) or any(isinstance(a, int) and a != b
                                               for a, b in zip(was.shape, now.shape))))


def _arg_type(a: Any, declared: Type | None = None) -> Type | None:
    """The type a call's argument gives its graph input; a list for an input declared a
    list (scripted code) stays a list, of the declared element type."""
    if isinstance(a, Tensor):
        return TensorType(a.dtype, tuple(a._data.shape), a._device_str(), a.requires_grad)
    inner = declared.element if isinstance(declared, OptionalType) else declared
    if isinstance(inner, (ListType,)) or type(inner).__name__ == "DictType":
        return inner if a is not None else declared
    if isinstance(a, (tuple, list)):
        # a scripted ``Tuple[int, float, str]`` types its items as declared
        decl = inner.elements if isinstance(inner, TupleType) and len(inner.elements) == len(
            a) else (None,) * len(a)
        return TupleType(tuple(_arg_type(x, d) or d for x, d in zip(a, decl)))  # type: ignore
    if declared in (FloatType, BoolType) and type(a) in (int, float, bool):
        return declared
    return IntType if isinstance(a, int) else None



_UNBUILT = object()


def _saved_from_state(split: Any, state_index: Callable[[Node], int | None]) -> tuple:
    """The saved values that are module tensors (a ``prim::GetAttr`` the module state holds),
    as (saved position, state index): the forward (and the unit-seed forward) stop returning
    them, and the backward reads them from the module tensors its node holds. Removed from
    the graphs in place."""
    n = split.n_outputs
    found = []
    for p, v in enumerate(split.forward.outputs[n:]):
        if v.node.kind == Prim.GET_ATTR and isinstance(v.type, TensorType):
            j = state_index(v.node)
            if j is not None:
                found.append((p, j))
    for g in (split.forward, split.seeded):
        if g is not None and found:
            for p, _ in reversed(found):
                g.block.remove_output(n + p)
            eliminate_dead_code(g)
    return tuple(found)


def _grad_passes() -> list[Any]:
    return [("fold_constants", {"evaluate": evaluate_node})] + OPTIMIZE[1:]


def _run_with_grad(spec: Specialization, head: tuple, args: Sequence[Any]) -> Any:
    """Op by op through autograd. An argument written in place is read through a clone, as
    eager's in-place activations do, so that the values backward saved are not overwritten."""
    ops = TensorOps()
    if spec.written:
        args = list(args)
        for i in spec.written:
            if isinstance(args[i], Tensor) and args[i].requires_grad:
                clone = args[i].clone()
                ops.originals[id(clone)] = args[i]
                args[i] = clone
    outs = spec.executable.run_autograd([*head, *args], ops)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _written_args(g: Graph) -> tuple[int, ...]:
    """Positions of the arguments that ``sm::copy_`` writes into (in-place ops on them)."""
    skip = 1 if g.inputs and isinstance(g.inputs[0].type, ModuleType) else 0
    pos = {v: i - skip for i, v in enumerate(g.inputs)}
    return tuple(sorted({pos[n.inputs[0]] for n in g.walk()
                         if n.kind == "sm::copy_" and n.inputs[0] in pos}))


def _check_written_unaliased(args: Sequence[Any], written: tuple[int, ...],
                             names: Sequence[str]) -> None:
    """The graph reads every argument's value as passed: an argument it writes in place must
    not be another one, or a view of the same base, which eager would read after the write."""
    for i in written:
        a = args[i]
        for j, b in enumerate(args):
            if j != i and isinstance(a, Tensor) and isinstance(b, Tensor) \
                    and _storage_root(a) is _storage_root(b):
                raise RuntimeError(
                    f"argument {_arg_name(names, i)} is written in place by the traced code and "
                    f"shares memory with argument {_arg_name(names, j)} (one tensor passed "
                    f"twice, or a view of it); the trace would read {_arg_name(names, j)}'s "
                    f"old value. Pass a clone (x.clone()) for one of them.")


def _storage_root(t: Tensor) -> Tensor:
    return t._base if t._base is not None else t


def _arg_name(names: Sequence[str], i: int) -> str:
    return repr(names[i]) if i < len(names) else f"#{i}"


def _written_back(out: Any, args: Sequence[Any], written: tuple[int, ...]) -> Any:
    """The caller's tensors changed in place: bump their versions, and return the tensor
    itself where an output is its storage (``relu_(x) is x``, as in eager)."""
    by_array = {}
    for i in written:
        a = args[i]
        if isinstance(a, Tensor):
            a._vc[0] += 1
            by_array[id(a._data)] = a
    return _same_objects(out, by_array)


def _aliased_outputs(g: Graph) -> bool:
    """Whether the graph returns one of its inputs or one value twice: the caller then gets
    the very same Tensor objects, as in eager (``y, y`` or ``return x``)."""
    leaves: list[Value] = []
    stack = list(g.outputs)
    while stack:
        v = stack.pop()
        if v.node.kind in (Prim.TUPLE_CONSTRUCT, Prim.LIST_CONSTRUCT):
            stack.extend(v.node.inputs)
        else:
            leaves.append(v)
    tensors = [v for v in leaves if isinstance(v.type, TensorType)]
    return len(set(tensors)) < len(tensors) or bool(set(tensors) & set(g.inputs))


def _arrays_of(args: Sequence[Any]) -> dict[int, Tensor]:
    return {id(a._data): a for a in args if isinstance(a, Tensor)}


def _same_objects(x: Any, by_array: dict[int, Tensor]) -> Any:
    """Each output array becomes one Tensor: an argument's own, or one shared by its copies."""
    if isinstance(x, Tensor):
        return by_array.setdefault(id(x._data), x)
    if isinstance(x, (tuple, list)):
        return rebuilt(x, (_same_objects(i, by_array) for i in x))
    return x



def submodule_of(root: Any, call: Node) -> Any:
    """The module a ``prim::CallMethod`` calls, by walking its GetAttr chain back to self."""
    return submodule_of_value(root, call.inputs[0])


def inlined(module: Any, method: str, keep: frozenset[str] = frozenset(),
            prefix: str = "") -> Graph:
    """A copy of ``module.method``'s graph with every submodule call inlined (callees are
    inlined first, so each call is resolved relative to the graph it appears in), except
    the calls of the submodules at the dotted paths in ``keep`` (hooked: see ``_boundary``).
    A callee without calls (``prefix`` set) is its own graph: ``inline_calls`` clones it
    into the caller and never changes it, so copying it first would be wasted."""
    src = module._methods[method]
    if prefix and not any(n.kind == Prim.CALL_METHOD for n in src.walk()):
        return src
    g = src.copy()

    def resolve(call: Node) -> Graph | None:
        root, path = module_path(call.inputs[0])
        if root is not g.inputs[0]:            # kept inside a callee inlined just now
            return None
        full = prefix + path
        if full in keep:
            return None
        return inlined(submodule_of(module, call), call.attrs["name"], keep, full + ".")
    inline_calls(g, resolve)
    return g


def _attr_path(node: Node) -> str | None:
    """``"0.weight"`` for a ``prim::GetAttr`` chain from the graph's ``self``; else None."""
    names: list[str] = []
    v = node.output
    while v.node.kind == Prim.GET_ATTR:
        names.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    g = node.graph
    if not g.inputs or v is not g.inputs[0]:
        return None
    return ".".join(reversed(names))


# ---- the module callbacks of the array path --------------------------------------------------

def _raw_call(node: Node, mod: Any, args: list) -> list:
    return call_boundary(node, mod, args, raw=True)


def _array_attr(obj: Any, name: str) -> Any:
    """``getattr(obj, name)``, unwrapped to its array for a Tensor. For a module whose class
    defines no attribute of that name, ``getattr`` would end in ``Module.__getattr__``'s
    registry search: do that search directly (no failed lookup); ``ScriptModule.__getattr__``
    differs from it only for names its class defines."""
    cls = type(obj)
    fast = _PLAIN.get((cls, name))
    if fast is None:
        fast = _PLAIN[(cls, name)] = _plain_module(cls, name)
    v = _registry_get(obj.__dict__, name) if fast else _MISSING
    if v is _MISSING:
        v = getattr(obj, name)
    return v._data if isinstance(v, Tensor) else v


_PLAIN: dict[tuple[type, str], bool] = {}
_MISSING = object()


def _plain_module(cls: type, name: str) -> bool:
    from scriptmod.nn.module import Module
    from scriptmod.jit._script_module import ScriptModule
    return (issubclass(cls, Module) and cls.__getattr__ in (Module.__getattr__,
                                                            ScriptModule.__getattr__)
            and not hasattr(cls, name))


def _registry_get(d: dict, name: str) -> Any:
    """What ``getattr`` finds on a Module: the instance dict, then parameters, buffers,
    submodules (the order of ``Module.__getattr__``)."""
    if name in d:
        return d[name]
    for registry in ("_parameters", "_buffers", "_modules"):
        members = d.get(registry)
        if members is not None and name in members:
            return members[name]
    return _MISSING


def _array_set_attr(obj: Any, name: str, value: Any) -> None:
    cur = getattr(obj, name)
    if isinstance(cur, Tensor):
        cur._data[...] = value
        cur._vc[0] += 1
    else:
        setattr(obj, name, value)


_CONTAINER_OPS = ("list_", "dict_", "py_call")


class TensorOps(OpHandler):
    """Runs ops through ``dispatch``, so autograd records every op (one per call: it maps
    the clones read in place of arguments written in place back to the arguments)."""

    def __init__(self) -> None:
        self.originals: dict[int, Tensor] = {}

    def call_method(self, node: Node, obj: Any, args: list) -> list:
        return call_boundary(node, obj, args, raw=False)

    def call_function(self, node: Node, args: list) -> Any:
        from scriptmod.jit.frontend.library import call_python
        return call_python(node, args, raw=False)

    def call_op(self, node: Node, args: list[Any]) -> Sequence[Any]:
        if node.kind == "sm::copy_":      # the caller's tensor, with eager's checks and history
            dst = self.originals.get(id(args[0]), args[0])
            return [dst.copy_(args[1])]
        if node.op_name.startswith(_CONTAINER_OPS):
            # a list or dict holds the Tensors themselves (their history with them), not
            # their arrays: ``outs.append(h)`` then ``stack(outs)`` is differentiable
            return [KERNELS[node.op_name](np, *args, **node.attrs)]
        out = dispatch(node.op_name, args, node.attrs)
        return list(out) if isinstance(out, tuple) else [out]

    def constant(self, node: Node) -> Any:
        v = node.attrs.get("value")
        return wrap(v) if hasattr(v, "shape") and hasattr(v, "dtype") else v

    def set_attr(self, node: Node, obj: Any, value: Any) -> None:
        name = node.attrs["name"]
        cur = getattr(obj, name)
        if isinstance(cur, Tensor):
            cur.data = value.detach()
        else:
            setattr(obj, name, value)
