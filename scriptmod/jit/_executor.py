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

This module keeps the LRU of specializations, the batch classes and the call paths; a
specialization is one ``_specialization.Specialization``, built by ``_specialize``.
"""
from __future__ import annotations

import functools
import operator
from collections import OrderedDict

import numpy as np
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from scriptmod.ir.errors import DTypeError, ShapeError, TraceGuardError
from scriptmod.ir.graph import Node, Prim
from scriptmod.ir.types import BoolType, ModuleType, TensorType
from scriptmod.runtime import profiling
from scriptmod.runtime.trees import rebuilt
from scriptmod.jit import _fastpath, _fuser, _recompiles, _specialize
from scriptmod.jit._batch_class import batch_class, class_dims, is_tensor_entry
from scriptmod.jit._fastpath import MISS
from scriptmod.jit._compiled_grad import TOPIC, CompiledGrad, OpByOp
from scriptmod.ir import log as irlog
from scriptmod.jit._boundary import HOOK_VERSION, BoundaryError, hooked_paths
from scriptmod.jit._specialization import FastPath, Specialization
from scriptmod.jit._specialize import TensorOps, submodule_of_value
from scriptmod.jit._specialize import tensors_of as _tensors_of
from scriptmod.autograd import grad_mode
from scriptmod.tensor import Tensor, unwrap_tree, wrap_tree

MAX_SPECIALIZATIONS = 64   # per method: the least recently used one beyond goes, engines and all


@dataclass
class Executor:
    """Specializes and runs one method of one ScriptModule: the LRU of its specializations
    (built by ``_specialize``), its batch classes, and the call paths (fast, full, grad)."""

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
    _state: _StateSlots | None = field(default=None, init=False, repr=False)  # the module
    # tree's tensor slots (``_state_key``)
    _has_self: tuple | None = field(default=None, init=False, repr=False)  # (method graph,
    # whether it takes self)
    _sym_dims: tuple | None = field(default=None, init=False, repr=False)  # (method graph,
    # its symbolic dims: ``_symbolic_dims``)
    auto: dict[tuple[int, int, int], str] = field(default_factory=dict)  # (argument, rank,
    # dim) -> name: the dims automatic dynamic shapes made symbolic (``_widen``)
    _pinned: set = field(default_factory=set)   # such keys whose symbolic specialization
    # failed to type (a weight's size, a guard pins them): they stay concrete

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
            st = self._state
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
        st = self._state
        tensors = st.tensors() if st is not None else ()
        needs = tuple(t._requires_grad for t in tensors)
        if not any(needs) and not any(a._requires_grad for a in _tensors_of(args)):
            return None
        key = (needs, self._flags(spec))
        plans = spec.grad_plans
        plan = plans.get(key, _UNBUILT)
        if plan is _UNBUILT:
            plan = plans[key] = self._build_grad_plan(spec, args, needs)   # a symbolic one:
            # typed with its class's names, one compiled backward for every size of it
        return plan

    def _flags(self, spec: Specialization) -> tuple:
        """The module bools the graph reads (``training``), as they are now: the backward of
        ``batch_norm`` differs between them, so grad plans are keyed by them."""
        reads = spec.flag_reads
        if reads is None:
            reads = spec.flag_reads = tuple(
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
        st = self._state
        state, tensors = (st.arrays, st.tensors()) if st is not None else ((), ())
        out = plan(head, state, tensors, functools.partial(_run_with_grad, spec, head), args,
                   profiled=bool(profiling.ACTIVE))
        self._install(spec, args, st)
        return out

    def _build_grad_plan(self, spec: Specialization, args: Sequence[Any],
                         needs: tuple[bool, ...]) -> Any:
        where = f"{self.module.original_name}.{self.method}"
        plan = _specialize.compile_grad(self, spec, args, needs)
        if isinstance(plan, OpByOp):
            irlog.log(TOPIC, f"{where}: the gradient runs op by op: {plan.reason}")
        elif irlog.enabled(TOPIC):
            s = plan.split
            irlog.log(TOPIC, f"{where}: compiled backward, {len(s.backward.inputs) - len(s.grad_outputs)} "
                             f"saved values, {s.saved_bytes} bytes saved "
                             f"({s.saved_bytes_unpruned} without recomputation)")
        return plan

    # ---- the fast path --------------------------------------------------------------------
    def _install(self, spec: Specialization, args: Sequence[Any], slots: Any) -> None:
        """Make ``spec`` the fast path (built once per specialization and module state);
        none while a profiler runs (calls take this full path, which profiles them)."""
        if profiling.ACTIVE:
            self.fast = self.module_fast = None
            return
        state = slots.arrays if slots is not None else ()
        grad = self._fast_grad(spec, slots)
        built = spec.fast
        if built is None or built.state is not state or built.hook_version != HOOK_VERSION[0] \
                or built.grad is not grad[1]:
            fn, source = _fastpath.build(spec, args, slots, self.owner, self.has_self,
                                         self.stats, grad)
            built = spec.fast = FastPath(state, HOOK_VERSION[0], fn, grad[1], source)
        self.fast = built.fn
        self.module_fast = built.fn if built.fn is not None and self._module_may_skip() else None

    def _fast_grad(self, spec: Specialization, slots: Any) -> tuple:
        """(requires_grad of the module tensors, the grad call) for the fast path: the
        compiled grad plan of the pattern the module has now, if there is one."""
        if slots is None:
            return ((), None)
        needs = tuple(t._requires_grad for t in slots.tensors())
        flags = self._flags(spec)
        plan = spec.grad_plans.get((needs, flags))
        if not isinstance(plan, CompiledGrad):
            return (needs, None)
        head = (self.owner,) if self.has_self else ()
        state, tensors = slots.arrays, slots.tensors()
        fallback = functools.partial(_run_with_grad, spec, head)
        reads = spec.flag_reads
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

    # ---- what selects a specialization ----------------------------------------------------
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
        found = self._has_self
        if found is None or found[0] is not g:             # cached per method graph
            found = self._has_self = \
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
        st = self._state
        if st is None:
            st = self._state = _StateSlots(self.owner) if self.has_self else None
        if st is None:
            return ()
        key = st.key()
        if key is None:                                  # the tree changed shape: re-find
            st = self._state = _StateSlots(self.owner)
            key = st.key()
            assert key is not None
        return key

    def state_arrays(self) -> tuple:
        """The arrays of the module tree's parameters and buffers, as ``_state_key`` last read
        them (the same tuple object while none changed: ``Executable`` keys on it)."""
        st = self._state
        return st.arrays if st is not None else ()

    def state_index(self) -> Callable[[Node], int | None]:
        """A module tensor's position in the state tuple, from the ``prim::GetAttr`` that
        reads it (None for any other node)."""
        slots = self._state
        paths = slots.index if slots is not None else {}

        def state_index(node: Node) -> int | None:
            path = _specialize.attr_path(node)
            return None if path is None else paths.get(path)
        return state_index

    def specialize(self, args: Sequence[Any]) -> Specialization:
        """The specialization for ``args``: found in the LRU, or built (``_specialize``)."""
        # fused and unfused are cached apart, and so are module states of other dtypes
        hooked = self._hooked if self._hook_version == HOOK_VERSION[0] else self.hooked()
        key = (signature(args), _fuser.variant(), self._state_key(), hooked)
        specs = self.specs
        spec = specs.get(key)
        if spec is not None:
            _touch(specs, key)
            return spec
        start = profiling.clock() if profiling.ACTIVE else 0   # the compile event's start
        dims = self._dims_for(key[0])
        ckey = (batch_class(key[0], dims),) + key[1:] if dims else None
        widened = None if ckey is not None and ckey[0] is not None and ckey in self.classes \
            else self._widen(key, args)
        if widened:                             # a size seen before differs: now symbolic
            dims = self._dims_for(key[0])
            ckey = (batch_class(key[0], dims),) + key[1:] if dims else None
        note = widened[0] if widened else ""
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
                try:
                    spec = _specialize.build(self, args, ckey, class_dims(ckey[0]), first)
                except _UNTYPABLE:
                    if not widened:
                        raise
                    spec = None
                if spec is not None:
                    return self._keep(ckey, spec, start, cause=key, note=note)
                if widened:     # the new dims cannot vary (a weight's size, a guard): pinned
                    self._unwiden(widened[1], ckey)
                    note = _recompiles.pinned_note(
                        [f"dim {j} of {_arg_name(self.arg_names, i)}" for i, _, j in widened[1]])
                else:
                    self._untyped.add(ckey)        # sizes its types cannot check: concrete
            if ckey in self._untyped:
                note += _recompiles.UNTYPED
        spec = _specialize.build(self, args, key)
        return self._keep(key, spec, start, note=note)  # type: ignore[arg-type]

    def _types_at(self, args: Sequence[Any]) -> bool:
        """Whether the method's graph types at the call's own sizes (else the call is an
        error, which its concrete specialization reports: no reason to widen)."""
        types = [_specialize.arg_type(a) for a in args]
        try:
            _specialize.retyped_copy(self, types)
        except _UNTYPABLE:
            return False
        return True

    def _unwiden(self, added: list, ckey: tuple) -> None:
        """Take back dims ``_widen`` just made symbolic, for good (``_pinned``)."""
        for k in added:
            self.auto.pop(k, None)
            self._pinned.add(k)
        self.classes.pop(ckey, None)

    def _widen(self, key: tuple, args: Sequence[Any]) -> tuple[str, list] | None:
        """Automatic dynamic shapes (torch.compile's rule): when a call's signature differs
        from a held concrete specialization's only in sizes, each differing dim that is not
        symbolic yet becomes symbolic (dims of one call that changed from and to the same
        sizes share a name), and the held key becomes its batch class's first size, so this
        call builds the one symbolic specialization every later size shares. Returns the
        ``recompiles`` log's note naming the new symbolic dims and their ``auto`` keys; None
        when automatic dynamic shapes are off (``trace(..., dynamic=False)``) or nothing new
        became symbolic (a dim that once failed to is ``_pinned``)."""
        if self.module.__dict__.get("_dynamic", {}).get(self.method) is False:
            return None
        sig = key[0]
        for old in reversed(self.specs):
            if old[1:] != key[1:] or len(old[0]) != len(sig):
                continue
            diffs = _size_diffs(sig, old[0])
            if not diffs:
                continue
            if not self._types_at(args):
                return None         # this call's sizes are an error: the concrete build says it
            dims = self._dims_for(sig)
            rank = {i: len(sig[i][1]) for i, *_ in diffs}
            new = [(i, j, n, w) for i, j, n, w in diffs
                   if not (i < len(dims) and dims[i] is not None and dims[i][j] is not None)
                   and (i, rank[i], j) not in self._pinned]
            if not new:
                return None
            taken = {d for names in dims if names for d in names if d} | set(self.auto.values())
            by_sizes: dict[tuple[int, int], str] = {}
            said, added = [], []
            for i, j, n, w in new:
                name = by_sizes.get((n, w))
                if name is None:
                    name = by_sizes[(n, w)] = _fresh_name(taken)
                    taken.add(name)
                self.auto[(i, rank[i], j)] = name
                added.append((i, rank[i], j))
                said.append(f"dim {j} of {_arg_name(self.arg_names, i)} is now symbolic "
                            f"({name})")
            ckey = (batch_class(sig, self._dims_for(sig)),) + key[1:]
            if ckey[0] is not None and batch_class(old[0], self._dims_for(old[0])) == ckey[0]:
                self.classes.setdefault(ckey, old)   # its concrete specialization is the first
            return f" (automatic dynamic shapes: {', '.join(said)})", added
        return None

    def _keep(self, key: tuple, spec: Specialization, start: int = 0,
              cause: tuple | None = None, note: str = "") -> Specialization:
        """Add a new specialization to the LRU (evicting the oldest beyond the bound), and
        say why it was built (``cause``: the call's own key, where ``key`` is its batch
        class's) when the ``recompiles`` log is on or a profiler runs (from ``start``)."""
        told = bool(profiling.ACTIVE) or irlog.enabled(_recompiles.TOPIC)
        reason = _recompiles.why(cause or key, self.specs, self.arg_names) + note if told else ""
        self.specs[key] = spec
        self.stats["specializations"] += 1
        evicted = _drop_oldest(self.specs, MAX_SPECIALIZATIONS)
        if told:
            self._tell(spec, reason, evicted, start)
        return spec

    def _tell(self, spec: Specialization, reason: str, evicted: list, start: int) -> None:
        """The ``recompiles`` log lines of a new specialization (and of the ones it evicted),
        and the profiler's compile event naming its cause."""
        where = _specialize.where(self)
        if irlog.enabled(_recompiles.TOPIC):
            irlog.log(_recompiles.TOPIC, _recompiles.new_spec_line(
                where, len(self.specs), reason, spec.symbolic, spec.first))
            for old in evicted:
                irlog.log(_recompiles.TOPIC, _recompiles.evicted_line(
                    where, old, self.arg_names, MAX_SPECIALIZATIONS))
        if profiling.ACTIVE and start:
            kind = "symbolic" if spec.symbolic else "concrete"
            profiling.emit(f"{where}: specialize ({reason})", profiling.COMPILE, start,
                           args={"reason": reason, "specialization": kind})

    def _symbolic_dims(self) -> tuple:
        """Per argument, the names of its declared dims (None where a dim is a size): the
        traced graph's symbolic dims, which a batch class keeps (cached per method graph);
        None when a declared dim is a product (``16*B``), which ties sizes the guard cannot
        check: no batch classes then (each size specializes)."""
        g = self.module._methods[self.method]
        found = self._sym_dims
        if found is None or found[0] is not g:
            skip = 1 if self.has_self else 0
            dims = tuple(tuple(d if isinstance(d, str) else None for d in v.type.shape)
                         if isinstance(v.type, TensorType) and v.type.shape is not None
                         and any(isinstance(d, str) for d in v.type.shape) else None
                         for v in g.inputs[skip:])
            plain = all(d is None or d.isidentifier() for names in dims if names for d in names)
            found = self._sym_dims = (g, dims if plain else None)
        return found[1]

    def _dims_for(self, sig: tuple) -> tuple:
        """Per argument of a call with signature ``sig``, the names of its symbolic dims at
        the call's rank (None where a dim is a size): the declared ones (``_symbolic_dims``)
        and those automatic dynamic shapes named since (``auto``); () when there are none."""
        declared = self._symbolic_dims()
        if declared is None or not (any(declared) or self.auto):
            return ()
        out = []
        for i, entry in enumerate(sig):
            if not is_tensor_entry(entry):
                out.append(None)
                continue
            rank = len(entry[1])
            have = declared[i] if i < len(declared) else None
            names = list(have) if have is not None and len(have) == rank else [None] * rank
            for j in range(rank):
                names[j] = self.auto.get((i, rank, j), names[j])
            out.append(tuple(names) if any(names) else None)
        return tuple(out) if any(out) else ()

    def explain(self, args: Sequence[Any]) -> str:
        """``Specialization.explain`` of the specialization ``args`` select (built if need
        be), with the fast path a call with them installs."""
        spec = self.specialize(args)
        return spec.explain(_fastpath.source(spec, args, self._state, self.has_self))


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


def _drop_oldest(specs: OrderedDict, keep: int) -> list:
    """Evict least recently used specializations beyond ``keep`` (their kernels and buffers
    go with them once no fast path or running call holds them); the keys evicted."""
    evicted = []
    while len(specs) > keep:
        try:
            evicted.append(specs.popitem(last=False)[0])
        except KeyError:
            break
    return evicted


def _size_diffs(sig: tuple, old: tuple) -> list[tuple[int, int, int, int]]:
    """(argument, dim, size, old size) where two signatures' top-level tensors differ only
    in sizes; [] when anything else differs (a dtype, a rank, a non-tensor argument, a
    nested tuple) or a signature has symbolic dims."""
    out = []
    for i, (e, o) in enumerate(zip(sig, old)):
        if e == o:
            continue
        if not (is_tensor_entry(e) and is_tensor_entry(o)) or (e[0], e[2], e[3]) != (
                o[0], o[2], o[3]) or len(e[1]) != len(o[1]):
            return []
        for j, (n, w) in enumerate(zip(e[1], o[1])):
            if not (isinstance(n, int) and isinstance(w, int)):
                return []
            if n != w:
                out.append((i, j, n, w))
    return out


def _fresh_name(taken: set) -> str:
    """The first of ``s0``, ``s1``, ... (PyTorch's names for dynamic sizes) not in ``taken``."""
    k = 0
    while f"s{k}" in taken:
        k += 1
    return f"s{k}"


_STATE_TOKENS: dict[tuple, int] = {}     # full state key -> token (process-wide, only grows
                                         # with distinct module layouts)
_getitem = dict.__getitem__
_ndarray = np.ndarray
_is = operator.is_
_data_of = operator.attrgetter("_data")


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


_UNBUILT = object()
_UNTYPABLE = (ShapeError, DTypeError, TraceGuardError)


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


def _arrays_of(args: Sequence[Any]) -> dict[int, Tensor]:
    return {id(a._data): a for a in args if isinstance(a, Tensor)}


def _same_objects(x: Any, by_array: dict[int, Tensor]) -> Any:
    """Each output array becomes one Tensor: an argument's own, or one shared by its copies."""
    if isinstance(x, Tensor):
        return by_array.setdefault(id(x._data), x)
    if isinstance(x, (tuple, list)):
        return rebuilt(x, (_same_objects(i, by_array) for i in x))
    return x
