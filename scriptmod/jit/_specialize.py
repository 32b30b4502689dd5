"""Building one ``Specialization`` of a ScriptModule method for a call's arguments: inline
its submodule calls, type it for the arguments (``retype``: at another rank than traced,
only where every op follows, ``_rank``), run the optimization pipeline, and plan its
``Executable``. Also the compiled backward of a specialization (``compile_grad``) and the
argument guard (``check_args``).

The executor (``_executor``) decides *which* specialization a call needs (its LRU and batch
classes) and calls it; everything here runs once per specialization, never on a warm call.
The method being specialized is a ``Site`` (the executor itself).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentError, DTypeError, TraceGuardError
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.passes import eliminate_dead_code, inline_calls, propagate_shapes, run_pipeline
from scriptmod.ir.passes.inplace import elide_unobserved_copies
from scriptmod.ir.passes.shapes import ShapePropagationError, callee_handlers, extra_handlers
from scriptmod.ir.types import (BoolType, FloatType, IntType, ListType, NoneType, OptionalType,
                                TensorType, TupleType, Type)
from scriptmod.runtime.errors import article, describe_type, describe_value, op_label, place, \
    shape_text
from scriptmod.runtime.executable import ArrayOps, Executable
from scriptmod.runtime.interpreter import OpHandler, evaluate_node
from scriptmod.runtime.kernels import KERNELS
from scriptmod._dispatch import dispatch
from scriptmod.jit import _fuser, _rank
from scriptmod.jit._autodiff import NotDifferentiable, differentiate, flatten_tuple_inputs, \
    unit_seeded
from scriptmod.jit._batch_class import class_dims, named_sizes, typed_in
from scriptmod.jit._batch_dims import pinning_error
from scriptmod.jit._boundary import call_boundary, kept_calls, module_path
from scriptmod.jit._compiled_grad import CompiledGrad, OpByOp, flat_args
from scriptmod.jit._specialization import Specialization
from scriptmod.tensor import Tensor, wrap

OPTIMIZE = ["fold_constants", "canonicalize", "eliminate_common_subexpressions",
            "eliminate_dead_code", elide_unobserved_copies, "hoist_loop_invariants"]


class Site(Protocol):
    """The method being specialized, as the executor knows it."""

    module: Any
    method: str
    arg_names: list[str]
    post_passes: list[Any]

    @property
    def owner(self) -> Any: ...
    @property
    def has_self(self) -> bool: ...
    def state_index(self) -> Callable[[Node], int | None]: ...
    def state_arrays(self) -> tuple: ...


def where(site: Site) -> str:
    return f"{site.module.original_name}.{site.method}"


def build(site: Site, args: Sequence[Any], key: tuple, dims: tuple = (),
          first: tuple | None = None) -> Specialization | None:
    """The specialization of ``site`` for ``args`` under ``key``. A symbolic one (``first``:
    the key of its batch class's first size, ``dims`` the method's symbolic dims) is None
    when its types cannot check every size of the class (the caller specializes each size)."""
    check_args(site, args)
    callees: dict[Node, Graph] = {}
    graph = optimized(site, args, key[3], symbolic=first is not None, callees=callees,
                      names=dims if first is not None else ())
    if first is not None and not typed_in(
            graph, {d for names in dims if names for d in names if d is not None}):
        return None
    return Specialization(graph, key, executable(site, graph, key), callees,
                          symbolic=first is not None,
                          first=named_sizes(first[0], dims) if first is not None else (),
                          where=where(site), arg_names=tuple(site.arg_names))


def optimized(site: Site, args: Sequence[Any], keep: tuple = (), fuse: bool = True,
              symbolic: bool = False, callees: dict[Node, Graph] | None = None,
              names: tuple = ()) -> Graph:
    """``site``'s method inlined (the calls of the submodules at paths ``keep`` kept, their
    callee graphs put in ``callees``), typed for ``args`` and optimized. ``names``: per
    argument, the symbolic dims' names (None per size) a symbolic specialization types the
    arguments with (its batch class's); without them a symbolic one keeps the declared
    names."""
    g = inlined(site.module, site.method, frozenset(keep))
    callees = {} if callees is None else callees
    for call in list(kept_calls(g)):       # typed through the callee's graph
        callee = callees[call] = inlined(submodule_of(site.module, call), call.attrs["name"])
        refresh_attribute_types(callee, submodule_of(site.owner, call))
    if site.has_self:
        refresh_attribute_types(g, site.owner)
    head = [g.inputs[0].type] if site.has_self else []
    declared = [v.type for v in g.inputs[len(head):]]
    types: list[Type | None] = head + [arg_type(a, d) for a, d in zip(args, declared)]
    if names:
        types = head + [named_type(t, n) for t, n in zip(types[len(head):], names)] \
            + types[len(head) + len(names):]
    retype(site, g, types, symbolic and not names, callees)
    return run_pipeline(g, optimize_passes() + list(site.post_passes)
                        + (_fuser.compile_passes() if fuse else []))


def optimize_passes() -> list[Any]:
    """Fold (with the reference kernels), canonicalize, CSE, DCE, copy elision, hoisting."""
    return [("fold_constants", {"evaluate": evaluate_node})] + OPTIMIZE[1:]


def executable(site: Site, graph: Graph, key: tuple) -> Executable:
    """Plan the specialization's ``Executable``, handing in the module callbacks."""
    ops = ArrayOps(get_attr=_array_attr, set_attr=_array_set_attr, call_method=_raw_call)
    return Executable(graph, ops, grad_ops=TensorOps(), name=where(site),
                      state_index=site.state_index() if site.has_self else None,
                      state=site.state_arrays(), native=key[1] == "fused")


# ---- typing for the call ----------------------------------------------------------------------

def retype(site: Site, g: Graph, types: list[Type | None], symbolic: bool = False,
           callees: dict[Node, Graph] | None = None) -> None:
    """Shape propagation for the call's types; at another rank than traced, only where
    every op can follow it (else a ``ShapeError`` naming the op that pins the rank)."""
    callees = callees or {}
    skip = 1 if site.has_self else 0
    changed = _rank.changed_args([v.type for v in g.inputs[skip:]], types[skip:],
                                 site.arg_names)
    traced_ranks = _rank.traced_ranks(g, callees) if changed else {}
    at = f"{where(site)}()"
    traced = [v.type for v in g.inputs]
    try:
        propagate_calls(g, types, site.owner, symbolic, callees)
    except TraceGuardError as e:        # name the argument whose size the guard pins
        raise pinning_error(e, lambda arg_types: retyped_copy(site, arg_types), traced[skip:],
                            types[skip:], site.arg_names, at) from None
    except (ShapePropagationError, DTypeError) as e:
        if not changed:
            raise blame(site, e, g, traced, types) from None
        _rank.check_ranks(g, traced_ranks, changed, at, callees)   # an earlier op may pin it
        raise _rank.propagation_error(e, changed, at) from None
    if changed:
        _rank.check_ranks(g, traced_ranks, changed, at, callees)


def retyped_copy(site: Site, arg_types: list[Type]) -> None:
    """Type a fresh copy of the method's graph from ``arg_types`` (an error's probe)."""
    g = inlined(site.module, site.method)
    if site.has_self:
        refresh_attribute_types(g, site.owner)
    propagate_calls(g, [g.inputs[0].type] * site.has_self + list(arg_types), site.owner)


def propagate_calls(g: Graph, types: Sequence[Type | None], owner: Any,
                    symbolic: bool = False, callees: dict[Node, Graph] | None = None) -> Graph:
    """Type ``g`` from ``types``, its scripted library calls expanded where their input
    types are known, each kept call (a key of ``callees``) through its callee graph (the
    executor, archive checks, batch dims and save's re-typing share it)."""
    handlers = callee_handlers(callees) if callees else {}
    if any(n.kind == Prim.CALL_FUNCTION for n in g.walk()):
        from scriptmod.jit.frontend.library import expansion_handlers
        handlers = {**handlers, **expansion_handlers(owner)}
    if not handlers:
        return propagate_shapes(g, list(types), keep_symbolic=symbolic)
    with extra_handlers(handlers):
        return propagate_shapes(g, list(types), keep_symbolic=symbolic)


def named_type(t: Type | None, names: tuple | None) -> Type | None:
    """A tensor type with the dims ``names`` gives (a name, or None to keep the size)."""
    if names is None or not isinstance(t, TensorType) or t.shape is None \
            or len(t.shape) != len(names):
        return t
    return t.with_(shape=tuple(d if n is None else n for d, n in zip(t.shape, names)))


def arg_type(a: Any, declared: Type | None = None) -> Type | None:
    """The type a call's argument gives its graph input; a list for an input declared a
    list (scripted code) stays a list, of the declared element type."""
    if isinstance(a, Tensor):
        return TensorType(a.dtype, tuple(a._data.shape), a._device_str(), a.requires_grad)
    if a is None and isinstance(declared, OptionalType):
        return NoneType         # (the call's signature has it): ``if x is not None`` folds
    inner = declared.element if isinstance(declared, OptionalType) else declared
    if isinstance(inner, (ListType,)) or type(inner).__name__ == "DictType":
        return inner if a is not None else declared
    if isinstance(a, (tuple, list)):
        # a scripted ``Tuple[int, float, str]`` types its items as declared
        decl = inner.elements if isinstance(inner, TupleType) and len(inner.elements) == len(
            a) else (None,) * len(a)
        return TupleType(tuple(arg_type(x, d) or d for x, d in zip(a, decl)))  # type: ignore
    if declared in (FloatType, BoolType) and type(a) in (int, float, bool):
        return declared
    return IntType if isinstance(a, int) else None


# ---- inlining and the module tree -------------------------------------------------------------

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


def typed_inlined(module: Any, method: str, types: Sequence[Type] | None = None) -> Graph:
    """``module.<method>`` inlined, its attribute reads typed from the module's tensors now,
    then typed from ``types`` (its declared inputs when None)."""
    g = inlined(module, method)
    refresh_attribute_types(g, module)
    return propagate_calls(g, [v.type for v in g.inputs] if types is None else types, module)


def refresh_attribute_types(g: Graph, owner: Any) -> None:
    """GetAttr of a tensor gets the type the attribute has now (it may have been cast)."""
    for node in g.walk():
        if node.kind == Prim.GET_ATTR and isinstance(node.output.type, TensorType):
            value = getattr(submodule_of_value(owner, node.inputs[0]), node.attrs["name"])
            if isinstance(value, Tensor):
                node.output.type = TensorType(value.dtype, tuple(value._data.shape),
                                              value._device_str(), False)


def submodule_of(root: Any, call: Node) -> Any:
    """The module a ``prim::CallMethod`` calls, by walking its GetAttr chain back to self."""
    return submodule_of_value(root, call.inputs[0])


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


def attr_path(node: Node) -> str | None:
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


# ---- errors: the argument to blame ------------------------------------------------------------

def blame(site: Site, e: Exception, g: Graph, traced: list, given: list) -> Exception:
    """``e`` (an op's type rule refused the call's types) as an error about the argument
    that reaches that op with a dtype or size other than traced, when there is one."""
    node = getattr(e, "node", None)
    if node is None:
        return _reworded(e, f"{where(site)}()")
    reaching, stack, seen = set(), list(node.inputs), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.node.kind == Prim.PARAM:
            reaching.add(v)
        stack.extend(v.node.inputs)
    skip = 1 if site.has_self else 0
    found = _blamed(site.arg_names, [v in reaching for v in g.inputs[skip:]],
                    traced[skip:], given[skip:])
    if found is None:
        return _reworded(e, f"{where(site)}()")
    i, label, was, now, note = found
    err = type(e)(f"{where(site)}(): argument {label} (position {i}): expected "
                  f"{describe_type(was)} as traced{note}, got {describe_type(now)}, which "
                  f"{op_label(node)}{place(node)} refuses: {_refusal(e)}")
    err.node = node                                          # type: ignore[attr-defined]
    return err


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


def _reworded(e: Exception, at: str) -> Exception:
    """A type rule's refusal that no argument explains, as the user reads it: the method,
    the op, its module path and line, the rule's own words (the IR line goes to
    ``.node_ir``)."""
    node = getattr(e, "node", None)
    text = f"{op_label(node)}{place(node)}: " if node is not None else ""
    err = type(e)(f"{at}: {text}{_refusal(e)}")
    err.node = node                                          # type: ignore[attr-defined]
    err.node_ir = str(e).split("\n    ", 1)[-1] if "\n    " in str(e) else ""  # type: ignore
    return err


def _differs(was: TensorType, now: TensorType) -> bool:
    """Whether ``now`` has another dtype than ``was``, or another size where ``was`` has one."""
    return was.dtype != now.dtype or (was.shape is not None and now.shape is not None and (
        len(was.shape) != len(now.shape) or any(isinstance(a, int) and a != b
                                               for a, b in zip(was.shape, now.shape))))


# ---- the argument guard -----------------------------------------------------------------------

def check_args(site: Site, args: Sequence[Any]) -> None:
    """Guard: arguments must fit the traced signature (count, kind, rank, dtype kind)."""
    g = site.module._methods[site.method]
    declared = [v.type for v in g.inputs[1 if site.has_self else 0:]]
    names = site.arg_names
    if len(args) != len(declared):
        raise ArgumentError(f"{where(site)}(): expected {len(declared)} argument(s) "
                            f"({', '.join(names)}), got {len(args)}")
    for i, (a, t) in enumerate(zip(args, declared)):
        name = names[i] if i < len(names) else f"arg{i}"
        _check_value(f"{where(site)}(): argument '{name}", f"' (position {i})", a, t)


def _check_value(head: str, tail: str, a: Any, t: Type) -> None:
    """``a`` against its declared or traced type ``t``; a tuple's items one by one (named
    ``'hc[0]'``), so that native code never meets a value of another kind."""
    at = head + tail
    if isinstance(t, TensorType):
        if not isinstance(a, Tensor):
            traced = f" ({describe_type(t)} when traced)" if t.dtype is not None else ""
            raise ArgumentError(f"{at}: expected a Tensor, got {_given(a)}{traced}")
        if t.dtype is not None and (a.dtype.category >= D.FLOAT) != (t.dtype.category >= D.FLOAT):
            kind = "a floating-point" if t.dtype.category >= D.FLOAT else "an integer or bool"
            raise DTypeError(f"{at}: expected {kind} tensor (traced with {describe_type(t)}), "
                             f"got {_given(a)}")
    elif t == IntType and not isinstance(a, int):
        raise ArgumentError(f"{at}: expected an int, got {_given(a)}")
    elif isinstance(t, TupleType):
        if not (isinstance(a, (tuple, list)) and len(a) == len(t.elements)):
            raise ArgumentError(f"{at}: expected a tuple of {len(t.elements)} "
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


# ---- the compiled backward --------------------------------------------------------------------

def compile_grad(site: Site, spec: Specialization, args: Sequence[Any],
                 needs: tuple[bool, ...]) -> Any:
    """``spec``'s grad plan for the module tensors requiring grad as in ``needs``: a
    ``CompiledGrad`` (forward and backward split and compiled), an ``OpByOp`` naming why
    it runs op by op, or None when no output needs a gradient. A symbolic ``spec`` gets
    graphs typed with its class's symbolic dims, built from ``args`` (one call of the class,
    whose sizes the derivative rules run at) and serving every size of the class."""
    if spec.written:
        return OpByOp("it writes an argument in place")
    if spec.aliased:
        return OpByOp("it returns an argument, or one value twice")
    if any(a._device_str() != "cpu" for a in tensors_of(args)):
        return OpByOp("the compiled backward runs on the CPU only")
    skip = 1 if site.has_self else 0
    names = class_dims(spec.signature) if spec.symbolic else ()   # as ``build`` typed it
    g, layout = flatten_tuple_inputs(optimized(site, args, spec.hooked, fuse=False,
                                               symbolic=spec.symbolic, names=names), skip)
    args = flat_args(args, layout)
    state_index = site.state_index()

    def leaf_key(v: Value) -> tuple[str, int] | None:
        if v.node.kind == Prim.PARAM:
            i = v.index - skip
            a = args[i] if 0 <= i < len(args) else None
            return ("arg", i) if isinstance(a, Tensor) and a.requires_grad else None
        j = state_index(v.node)
        return ("state", j) if j is not None and needs[j] else None

    def flag(v: Value) -> bool | None:
        value = getattr(submodule_of_value(site.owner, v.node.inputs[0]), v.node.attrs["name"])
        return value if type(value) is bool else None
    fused = spec.variant == "fused"
    try:
        split = differentiate(g, leaf_key, flag if site.has_self else lambda v: None,
                              recompute=fused,
                              example=_example_types(g, args, skip) if spec.symbolic else None)
    except NotDifferentiable as e:
        return OpByOp(str(e))
    if split is None:
        return None
    _optimize_split(split, fused)
    from_state = _saved_from_state(split, state_index) if site.has_self else ()
    seeded = None if split.seeded is None else executable(site, split.seeded, spec.key)

    def compile(g: Graph, name: str) -> Executable:
        if g is split.backward:
            return Executable(g, ArrayOps(), name=name, native=fused)
        return executable(site, g, spec.key)
    return CompiledGrad(split, compile, where(site), seeded, from_state, layout)


def _example_types(g: Graph, args: Sequence[Any], skip: int) -> list[Type]:
    """``g``'s input types with each tensor argument's sizes as this call has them."""
    return [v.type.with_(shape=tuple(a._data.shape))
            if i >= skip and isinstance(v.type, TensorType) and isinstance(a, Tensor) else v.type
            for i, (v, a) in enumerate(zip(g.inputs, [None] * skip + list(args)))]


def _optimize_split(split: Any, fused: bool) -> None:
    """Optimize the forward, backward (and unit-seed forward) graphs of ``split`` in place."""
    compile_passes = _fuser.compile_passes() if fused else []
    both = unit_seeded(split) if fused else None
    fwd = run_pipeline(split.forward, compile_passes)
    bwd = run_pipeline(split.backward, optimize_passes() + compile_passes)
    split.forward, split.backward = fwd, bwd
    if both is not None:
        # losses expanded first, so that CSE merges the forward's (x - t) with the backward's
        split.seeded = run_pipeline(both, ["expand_losses"] + optimize_passes() +
                                    compile_passes)


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


def tensors_of(args: Sequence[Any]) -> list[Tensor]:
    """The tensors of a call's arguments, those inside a tuple or list argument included."""
    out: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, (tuple, list)):
            out += tensors_of(a)
    return out


# ---- the module callbacks of the array path ---------------------------------------------------

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
    """``obj.name = value`` from compiled code: a tensor attribute is written in place (the
    compiled graphs and their specializations hold its storage), so the value must have its
    shape and dtype; a different one is an error, never a broadcast into the old shape."""
    cur = getattr(obj, name)
    if isinstance(cur, Tensor):
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape != cur._data.shape or dtype != cur._data.dtype:
            raise RuntimeError(
                f"attribute '{name}' of {type(obj).__name__}: compiled code writes a tensor "
                f"attribute in place, so the new value must keep its shape "
                f"{tuple(cur._data.shape)} and dtype {cur.dtype}; got shape "
                f"{None if shape is None else tuple(shape)}, dtype {dtype}")
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
