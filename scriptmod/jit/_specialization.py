"""One specialization of a ScriptModule method as one declared object: what selected it (its
key), what runs (the optimized graph and its ``Executable``), the fast path installed for
it, its grad plans, and ``explain()``, the text view of all of them.

``_specialize`` builds one (inline, retype, pipeline, plan); ``_executor`` keeps them in its
LRU and calls them. Everything a specialization holds is a field declared here: no state
rides on IR objects (a kept call's callee graph is in ``callees``, not on the call node).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.types import ModuleType, TensorType
from scriptmod.jit._batch_class import is_tensor_entry
from scriptmod.runtime.errors import article
from scriptmod.runtime.executable import Executable


@dataclass(frozen=True)
class FastPath:
    """The fast path installed for one module state (``_fastpath.build``): rebuilt when the
    state arrays, ``HOOK_VERSION`` or the grad call it makes change."""

    state: tuple                        # the module tree's arrays it was built for
    hook_version: int                   # HOOK_VERSION when built
    fn: Callable[..., Any] | None       # args -> outputs | MISS; None: the full path always
    grad: Any                           # the grad call it makes, or None
    source: str | None                  # the generated guard function's text


@dataclass(eq=False)
class Specialization:
    """One input signature's compiled method (see the module docstring)."""

    graph: Graph                        # the optimized graph
    key: tuple                          # (signature or batch class, fusion variant,
    # module state token, hooked submodule paths)
    executable: Executable
    callees: dict[Node, Graph] = field(default_factory=dict)   # kept call -> its callee,
    # inlined and typed (hooked submodules: ``_boundary``)
    symbolic: bool = False              # shared by the sizes of a batch class
    first: tuple = ()                   # symbolic: ((dim name, size), ...) of the class's
    # first size, which its concrete specialization serves
    where: str = ""                     # "Module.method", for messages and ``explain``
    arg_names: tuple[str, ...] = ()
    written: tuple[int, ...] = field(init=False)   # arguments written in place (copy_)
    aliased: bool = field(init=False)   # an output is an input, or one value is output twice
    fast: FastPath | None = field(default=None, init=False)
    grad_plans: dict[tuple, Any] = field(default_factory=dict, init=False)  # (requires_grad
    # of the module tensors, flags) -> CompiledGrad, OpByOp, or None (no gradient needed)
    flag_reads: tuple | None = field(default=None, init=False)  # ((module, bool attr), ...)
    # the graph reads (``training``): grad plans are keyed by their values

    def __post_init__(self) -> None:
        self.written = written_args(self.graph)
        self.aliased = aliased_outputs(self.graph)

    # the key's parts by name (the key stays a plain tuple: the executor builds one per call
    # on its full path and hashes it)
    @property
    def signature(self) -> tuple:
        """Per argument, what selects this specialization (``_executor.signature``)."""
        return self.key[0]

    @property
    def variant(self) -> str:
        """``"fused"`` or ``"unfused"`` (``_fuser.variant``)."""
        return self.key[1]

    @property
    def hooked(self) -> tuple:
        """Paths of the submodules whose calls it keeps (they have hooks)."""
        return self.key[3]

    def explain(self, fast_source: str | None = None) -> str:
        """Where and how each node runs, and why: the key, the guards, the per-node plan,
        the generated sources (program, native code, fast path: the installed one, else
        ``fast_source``) and the grad plans. ``scriptmod.jit.explain`` is the public door.

            >>> traced = scriptmod.jit.trace(nn.Linear(4, 2), scriptmod.ones(3, 4))
            >>> text = scriptmod.jit.explain(traced, scriptmod.ones(3, 4))
            >>> text.splitlines()[0]
            'specialization of Linear.forward (concrete, fused)'
        """
        kind = "symbolic" if self.symbolic else "concrete"
        parts = [f"specialization of {self.where or self.executable.name} ({kind}, "
                 f"{self.variant})", "key:", *_indented(self._key_lines()),
                 "guards:", *_indented(self._guard_lines()),
                 "plan:", *_indented(_plan_text(self.executable).splitlines())]
        source = self.fast.source if self.fast is not None else fast_source
        if source:
            parts += ["fast path (the guard function a warm call runs first):",
                      *_indented(source.rstrip().splitlines())]
        else:
            parts += ["fast path: none (every call takes the full path: "
                      f"{self._no_fast_path()})"]
        if self.grad_plans:
            parts += ["grad plans:", *_indented(self._grad_lines())]
        return "\n".join(parts) + "\n"

    # ---- explain's sections -------------------------------------------------------------
    def _arg_name(self, i: int) -> str:
        return self.arg_names[i] if i < len(self.arg_names) else f"arg{i}"

    def _key_lines(self) -> list[str]:
        sig, variant, _state, hooked = self.key
        lines = [f"{self._arg_name(i)}: {_describe_entry(e)}" for i, e in enumerate(sig)]
        lines.append(f"fusion: {variant}")
        if self.symbolic:
            first = ", ".join(f"{n} = {s}" for n, s in self.first)
            lines.append(f"batch class: every size of its symbolic dims but the first "
                         f"({first}, which the concrete specialization serves)")
        if hooked:
            lines.append(f"calls kept for their hooks: {', '.join(hooked)}")
        return lines

    def _guard_lines(self) -> list[str]:
        """What a call must match to be served by this specialization."""
        lines = [f"{self._arg_name(i)}: {_guard_of(e)}" for i, e in enumerate(self.signature)]
        if self.symbolic:
            lines.append("symbolic dims: each >= 2, dims named alike of one size")
        lines += ["the module's parameters and buffers: the same arrays (dtype, shape, "
                  "strides) as when built", "no hook registered or removed since built",
                  f"the fusion setting: {self.variant}"]
        return lines

    def _no_fast_path(self) -> str:
        if self.written:
            return "it writes an argument in place"
        if self.aliased:
            return "it returns an argument, or one value twice"
        if self.hooked:
            return "it keeps hooked submodule calls"
        return "not called yet, or an argument of a kind the fast path cannot check"

    def _grad_lines(self) -> list[str]:
        lines = []
        for (needs, flags), plan in self.grad_plans.items():
            pattern = "".join("1" if n else "0" for n in needs) or "-"
            lines.append(f"module tensors requiring grad {pattern}, flags {flags}: "
                         f"{_describe_plan(plan)}")
        return lines


def _indented(lines: list[str]) -> list[str]:
    return ["  " + line for line in lines]


def _plan_text(ex: Executable) -> str:
    """The executable's own per-node plan (``Executable.explain``); a node list with the
    fusion groups marked where it has none."""
    explain = getattr(ex, "explain", None)
    if explain is not None:
        return explain()
    lines = []
    for i, node in enumerate(ex.graph.walk()):
        step = "fusion group" if node.kind == Prim.FUSION_GROUP else "python"
        lines.append(f"{i}: {node.kind}  step={step}")
    return "\n".join(lines)


def _describe_entry(e: tuple) -> str:
    """One argument's entry of a signature (``_executor.signature``) or batch class."""
    if is_tensor_entry(e):
        dtype, shape, device, grad = e
        dims = ", ".join(str(d) for d in shape)
        return f"Tensor {getattr(dtype, 'name', dtype)} ({dims}) on {device}" + \
            (", requires grad" if grad else "")
    if len(e) == 2 and e[0] is type(None):
        return "None"
    if len(e) == 2 and isinstance(e[0], type):
        return e[0].__name__ + (f" = {e[1]}" if e[1] is not None else "")
    return "(" + ", ".join(_describe_entry(x) for x in e) + ")"


def _guard_of(e: tuple) -> str:
    if is_tensor_entry(e):
        return f"a Tensor of exactly this dtype, shape, device and requires_grad " \
               f"({_describe_entry(e)})"
    if len(e) == 2 and e[0] is type(None):
        return "None"
    if len(e) == 2 and isinstance(e[0], type):
        what = article(e[0].__name__)
        return f"{what} equal to {e[1]}" if e[1] is not None else what
    return "a tuple, each item as in the key"


def _describe_plan(plan: Any) -> str:
    if plan is None:
        return "no output needs a gradient"
    reason = getattr(plan, "reason", None)
    if reason is not None:
        return f"op by op through autograd ({reason})"
    split = plan.split
    return (f"compiled backward, {len(split.backward.inputs) - len(split.grad_outputs)} saved "
            f"values, {split.saved_bytes} bytes saved")


def written_args(g: Graph) -> tuple[int, ...]:
    """Positions of the arguments that ``sm::copy_`` writes into (in-place ops on them)."""
    skip = 1 if g.inputs and isinstance(g.inputs[0].type, ModuleType) else 0
    pos = {v: i - skip for i, v in enumerate(g.inputs)}
    return tuple(sorted({pos[n.inputs[0]] for n in g.walk()
                         if n.kind == "sm::copy_" and n.inputs[0] in pos}))


def aliased_outputs(g: Graph) -> bool:
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
