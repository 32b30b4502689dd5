"""``scriptmod.jit.freeze`` and ``optimize_for_inference``: a compiled module whose
parameters, buffers and flags are constants of its graphs (PyTorch's ``torch.jit.freeze``).

Freezing inlines each kept method, replaces every module attribute it only reads by a
constant (``ir.passes.freeze_attributes``) holding the value itself (a tensor constant is the
parameter's or buffer's own array, as PyTorch's frozen module shares the original's storage),
and folds what became constant (``fold_constants`` through the registry's kernels; a folded
view of a tensor constant, such as a Linear's ``W^T``, is a view of the same array). Then
``run_frozen_optimizations`` removes eval-mode dropout and, with ``optimize_numerics``,
folds BatchNorm into the preceding convolution or linear layer. The normal fusion and
codegen pipeline compiles the frozen graph per call signature, as for any ScriptModule.

A scripted module's layer calls (``prim::CallFunction``) expand only per call signature
(``jit.frontend``): the frozen module keeps a copy of those layers, and each specialization
is frozen after the expansion (``_FreezeExpanded``).
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Sequence

from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import run_pipeline
from scriptmod.ir.passes.freeze import KEEP, attribute_path, freeze_attributes
from scriptmod.ir.types import ModuleType
from scriptmod.jit._retype import current_inlined
from scriptmod.jit._script_module import RecursiveScriptModule, ScriptModule, building
from scriptmod.nn.module import Module
from scriptmod.runtime.interpreter import evaluate_node
from scriptmod.tensor import Tensor

_SCALARS = (bool, int, float, str, type(None))
_FOLD = ("fold_constants", {"evaluate": evaluate_node})
_TRAINING_OPS = ("sm::dropout", "sm::batch_norm")


def freeze(mod: ScriptModule, preserved_attrs: Sequence[str] | None = None,
           optimize_numerics: bool = True) -> ScriptModule:
    """A frozen copy of the eval-mode ScriptModule ``mod``: its parameters, buffers and
    attributes are constants of ``forward``'s graph (and of the methods named in
    ``preserved_attrs``; attributes named there stay attributes). As in PyTorch, the frozen
    module shares the original's tensors: an in-place edit of a parameter or buffer
    (``p.data.add_(1)``, ``p.add_(1)`` under ``no_grad``) reaches it, except where freezing
    computed a new value from it (BatchNorm folded into a convolution, arithmetic on
    parameters alone); assigning a new tensor (``m.weight = ...``, ``p.data = ...``) does not.
    ``optimize_numerics`` also folds BatchNorm into the preceding Conv2d/Linear, which may
    change results in the last bits. Like PyTorch's, a frozen module has no ``training``
    flag until ``train()``/``eval()`` sets one: its graphs run as they were frozen.

        >>> model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU()).eval()
        >>> x = scriptmod.randn(3, 4)
        >>> frozen = scriptmod.jit.freeze(scriptmod.jit.trace(model, x))
        >>> list(frozen.parameters())
        []
        >>> [n.kind for n in frozen.graph.nodes if n.kind != "prim::Constant"]
        ['sm::matmul', 'sm::add', 'sm::relu']
        >>> bool(scriptmod.allclose(frozen(x), model(x), atol=1e-6))
        True
        >>> lin = nn.Linear(4, 2).eval()
        >>> frozen = scriptmod.jit.freeze(scriptmod.jit.trace(lin, x))
        >>> with scriptmod.no_grad():
        ...     _ = lin.bias.add_(1.0)          # an in-place edit of the original reaches it
        >>> bool(scriptmod.allclose(frozen(x), lin(x), atol=1e-6))
        True
    """
    if not isinstance(mod, ScriptModule):
        raise RuntimeError("Freezing expects a ScriptModule as input. Please use "
                           "scriptmod.jit.script or scriptmod.jit.trace to compile your "
                           f"'nn.Module' (got {type(mod).__name__}).")
    if getattr(mod, "training", False):        # a frozen module has no flag
        raise RuntimeError("Freezing is currently only implemented for modules in eval mode. "
                           "Please call .eval() on your module before freezing.")
    preserved = _check_preserved(mod, preserved_attrs)
    methods = [m for m in dict.fromkeys(["forward", *preserved]) if m in mod._methods]
    attrs = [p for p in preserved if p not in mod._methods]
    read = _Snapshot(mod).read
    # typed for the tensors the module holds now (it may have been cast since it was traced)
    graphs = {m: run_pipeline(freeze_attributes(current_inlined(mod, m), read, keep=attrs),
                              [_FOLD, "eliminate_dead_code"]) for m in methods}
    return run_frozen_optimizations(_frozen_module(mod, graphs), optimize_numerics)


def run_frozen_optimizations(mod: ScriptModule, optimize_numerics: bool = True,
                             preserved_methods: Sequence[str] | None = None) -> ScriptModule:
    """Optimize a frozen module's graphs in place: eval-mode dropout goes, constant
    subgraphs fold, and with ``optimize_numerics`` BatchNorm folds into the preceding
    Conv2d/Linear (elsewhere it becomes a fusible ``x * scale + shift``). Scripted layer
    calls get the same passes in each specialization, after they expand. Returns ``mod``.
    ``preserved_methods`` is accepted for PyTorch's signature: every method is optimized."""
    passes = _frozen_passes(optimize_numerics)
    for graph in mod._methods.values():
        run_pipeline(graph, passes)
    if any(n.kind == Prim.CALL_FUNCTION for g in mod._methods.values() for n in g.walk()):
        mod.__dict__["_specialized_passes"] = [_FreezeExpanded(mod, optimize_numerics)]
    mod._executors.clear()              # specializations of the graphs as they were
    return mod


def _frozen_passes(optimize_numerics: bool) -> list[Any]:
    passes: list[Any] = ["remove_dropout", _FOLD]
    if optimize_numerics:
        passes += ["fold_batchnorm", _FOLD]
    # a folded view of a parameter (a Linear's W^T) stays a view of its array: in-place
    # edits of the original reach it, as the constant itself does
    return passes + ["eliminate_common_subexpressions", "eliminate_dead_code"]


class _FreezeExpanded:
    """Scripted layer calls (``prim::CallFunction``) expand per call signature against the
    layer, so a frozen scripted module keeps a copy of each such layer, and every
    specialization freezes what the expanded calls read (run after expansion)."""

    def __init__(self, frozen: ScriptModule, optimize_numerics: bool) -> None:
        self.read = _Snapshot(frozen).read
        self.passes = _frozen_passes(optimize_numerics)
        self.__name__ = "freeze_expanded_calls"

    def __call__(self, graph: Graph) -> Graph:
        return run_pipeline(freeze_attributes(graph, self.read), self.passes)


def optimize_for_inference(mod: ScriptModule,
                           other_methods: Sequence[str] | None = None) -> ScriptModule:
    """Freeze ``mod`` (put in eval mode first, as PyTorch does) unless it is frozen already,
    then run every frozen optimization: eval-mode dropout removed, BatchNorm folded, constant
    subgraphs folded. ``other_methods`` are methods to keep besides ``forward``.

        >>> model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout()).eval()
        >>> x = scriptmod.randn(2, 3, 8, 8)
        >>> fast = scriptmod.jit.optimize_for_inference(scriptmod.jit.trace(model, x))
        >>> [n.kind for n in fast.graph.nodes if n.kind != "prim::Constant"]
        ['sm::conv2d']
    """
    if not isinstance(mod, ScriptModule):
        raise RuntimeError("optimize_for_inference expects a ScriptModule as input. Please "
                           "use scriptmod.jit.script or scriptmod.jit.trace to compile your "
                           f"'nn.Module' (got {type(mod).__name__}).")
    if not is_frozen(mod):
        mod = freeze(mod.eval(), preserved_attrs=other_methods)
    run_frozen_optimizations(mod)
    for name, graph in mod._methods.items():
        _check_no_training(graph, f"{mod.original_name}.{name}")
    return mod


def is_frozen(mod: Any) -> bool:
    """Whether ``mod`` came from ``freeze`` (in this process)."""
    return bool(getattr(mod, "__dict__", {}).get("_frozen"))


def _check_preserved(mod: ScriptModule, names: Sequence[str] | None) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"freeze(): preserved_attrs must be a list of attribute or method "
                        f"names (str), got {names!r}")
    for name in names:
        if name not in mod._methods and _lookup(mod, name) is _MISSING:
            raise RuntimeError(f"freeze(): preserved_attrs names {name!r}, which is neither a "
                               f"compiled method nor an attribute of {mod.original_name} "
                               f"(Unknown name: {name})")
    return list(names)


_MISSING = object()


def _lookup(mod: Any, path: str) -> Any:
    obj = mod
    for name in path.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            return _MISSING
    return obj


class _Snapshot:
    """The values attribute reads become: a tensor's own array (shared with the original,
    as PyTorch's frozen constants are), scalars and tuples of scalars as they are now."""

    def __init__(self, root: ScriptModule) -> None:
        self.root = root

    def read(self, path: str) -> Any:
        value = _lookup(self.root, path)
        if isinstance(value, Tensor):
            return value._data
        if isinstance(value, _SCALARS) or (isinstance(value, tuple) and all(
                isinstance(v, _SCALARS) for v in value)):
            return value
        return KEEP


def _frozen_module(mod: ScriptModule, graphs: dict[str, Graph]) -> ScriptModule:
    """A new ScriptModule running ``graphs``, holding copies of the attributes they still
    read (preserved, written, or not constant) in a skeleton of ``mod``'s tree."""
    # torch's frozen module is a RecursiveScriptModule (its repr, and its messages' name)
    frozen = RecursiveScriptModule(mod.original_name, mod._qualified_name, graphs,
                          {m: mod._arg_names[m] for m in graphs if m in mod._arg_names},
                          {m: mod._out_specs.get(m) for m in graphs},
                          {m: mod._in_specs.get(m) for m in graphs})
    frozen._defaults = {m: d for m, d in mod._defaults.items() if m in graphs}
    shared = {id(t): t for t in (*mod.parameters(), *mod.buffers())}
    with building():
        for path in sorted(_read_paths(graphs.values())):
            _share_attribute(mod, frozen, path, shared)
    frozen.__dict__.pop("training", None)   # PyTorch's has none until train()/eval()
    frozen.__dict__["_frozen"] = True
    return frozen


def _read_paths(graphs: Iterable[Graph]) -> set[str]:
    """Attribute paths the graphs still read: leaves of GetAttr chains, and modules that a
    call receives (scripted layer calls expand against the module)."""
    out: set[str] = set()
    for g in graphs:
        for node in g.walk():
            if node.kind != Prim.GET_ATTR:
                continue
            path = attribute_path(node.output)
            leaf = not isinstance(node.output.type, ModuleType) or any(
                u.user.kind != Prim.GET_ATTR for u in node.output.uses)
            if path is not None and leaf:
                out.add(path)
    return out


def _share_attribute(src_root: Module, dst_root: Module, path: str,
                     shared: dict[int, Tensor]) -> None:
    """Put the attribute at ``path`` into the frozen tree: the original's own Parameter or
    buffer (PyTorch shares them), a copy of a module whose tensors are the original's, a
    copy of any other value."""
    *owners, name = path.split(".")
    src, dst = src_root, dst_root
    for part in owners:
        src = getattr(src, part)
        if part not in dst._modules:
            setattr(dst, part, _skeleton(src))
        dst = dst._modules[part]
    if name in src._parameters:
        dst.register_parameter(name, src._parameters[name])
    elif name in src._buffers:
        dst.register_buffer(name, src._buffers[name],
                            persistent=name not in src._non_persistent_buffers_set)
    elif name in src._modules:
        setattr(dst, name, copy.deepcopy(src._modules[name], dict(shared)))
    else:
        setattr(dst, name, copy.deepcopy(getattr(src, name)))


def _skeleton(src: Module) -> ScriptModule:
    """An empty ScriptModule standing for ``src`` on a path to a kept attribute."""
    name = getattr(src, "original_name", type(src).__name__)
    out = ScriptModule(name, getattr(src, "_qualified_name", name))
    out.__dict__.pop("training", None)     # as the frozen root: no flag of its own
    return out


def _check_no_training(graph: Graph, where: str) -> None:
    for node in graph.walk():
        if node.kind in _TRAINING_OPS:
            train = node.inputs[1 if node.kind == "sm::dropout" else 5]
            if not (train.node.kind == Prim.CONSTANT and train.node.attrs.get("value") is False):
                raise RuntimeError(
                    f"optimize_for_inference: {where} runs {node.kind[4:]} in training mode "
                    f"(at {node.source or 'unknown source'}): a submodule was in training "
                    f"mode when the module was frozen. Call .eval() before freezing.")
