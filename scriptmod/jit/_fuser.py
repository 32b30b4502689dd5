"""The fuser switches: whether specializations fuse, the passes that fusing adds, the kernels
a specialization runs, and the kernel thread count.

With fusion on (the default) elementwise ops are grouped by ``fuse_elementwise`` and each
group runs as native code (``runtime.executable.Executable``); with it off
(``fuser(False)`` or ``SCRIPTMOD_DISABLE_FUSION=1``) the same specialization runs unfused on
the reference kernels. The executor keys its specializations by ``variant()`` too, so
toggling takes effect on the next call.

    >>> traced = scriptmod.jit.trace(lambda x: (x * 2).exp() + 1, scriptmod.ones(3, 4))
    >>> x = scriptmod.ones(5, 4)
    >>> with scriptmod.jit.fuser(False):
    ...     y_ref = traced(x)                      # unfused
    >>> bool((traced(x) - y_ref).abs().max() < 1e-5)
    True
    >>> [k.asm for k in scriptmod.jit.kernels_for(traced, x)]
    [...]
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from scriptmod.ir import schema as S
from scriptmod.ir.graph import Node
from scriptmod.ir.types import TensorType
from scriptmod.runtime import threads
from scriptmod.runtime.fusion import FusedKernel
from scriptmod.runtime.targets import target_type

class _Local(threading.local):
    stack: list = []          # class default: a thread that never entered a context (no
                              # AttributeError on the hot path); __enter__ makes its own list


_state = _Local()
_global: dict[str, bool | None] = {"fusion": None}   # None: follow SCRIPTMOD_DISABLE_FUSION
_ENV = "SCRIPTMOD_DISABLE_FUSION"
try:        # os.environ's own storage: a dict lookup instead of ~0.6 µs of encode/decode
    _env_data, _env_key = os.environ._data, os.environ.encodekey(_ENV)  # type: ignore[attr-defined]
    _env_off = (os.environ.encodevalue(""), os.environ.encodevalue("0"))  # type: ignore[attr-defined]
except AttributeError:                   # not CPython's os._Environ: the public interface
    _env_data = None


def _env_disables_fusion() -> bool:
    """``SCRIPTMOD_DISABLE_FUSION`` set to anything but "" or "0" (read on every call, so
    that setting it at run time works, at the cost of one dict lookup)."""
    if _env_data is not None and os.environ._data is _env_data:  # type: ignore[attr-defined]
        v = _env_data.get(_env_key)
        return v is not None and v not in _env_off
    return os.environ.get(_ENV, "") not in ("", "0")


def fusion_enabled() -> bool:
    """Whether new calls run fused (innermost ``fuser`` context, else the global setting)."""
    stack = _state.stack
    if stack:
        return stack[-1]
    if _global["fusion"] is not None:
        return bool(_global["fusion"])
    return not _env_disables_fusion()


class fuser(contextlib.AbstractContextManager):
    """Turn elementwise fusion on or off: as a context manager (this thread, restored on
    exit) or, called and discarded, as a global setter.

        >>> traced = scriptmod.jit.trace(lambda x: x.relu() + 1, scriptmod.ones(2))
        >>> with scriptmod.jit.fuser(False):
        ...     y = traced(scriptmod.ones(2))    # runs the unfused specialization
        >>> setting = scriptmod.jit.fuser(False)     # global: fusion off from now on
        >>> setting.restore()                        # back to the previous global setting

    An explicit global setting takes precedence over ``SCRIPTMOD_DISABLE_FUSION``.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self._previous = _global["fusion"]
        _global["fusion"] = self.enabled

    def __enter__(self) -> "fuser":
        _global["fusion"] = self._previous            # a context is scoped, not global
        if "stack" not in _state.__dict__:
            _state.stack = []
        _state.stack.append(self.enabled)
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.stack.pop()

    def restore(self) -> None:
        """Undo the global form: back to the setting before this call."""
        _global["fusion"] = self._previous


def variant() -> str:
    """What besides the input signature selects a specialization (the executor's cache key)."""
    stack = _state.stack
    if stack:
        return "fused" if stack[-1] else "unfused"
    g = _global["fusion"]
    if g is not None:
        return "fused" if g else "unfused"
    return "unfused" if _env_disables_fusion() else "fused"


def compile_passes() -> list[Any]:
    """Passes run on each specialization after fold/canonicalize/CSE/DCE."""
    if not fusion_enabled():
        return []
    return ["fuse_attention", "expand_losses", "split_reductions", ("fuse_rows", {"supported": _row_fusible}),
            ("fuse_elementwise", {"supported": _fusible})]


def _target(node: Node) -> type | None:
    """The ``runtime.targets`` class for the devices of ``node``'s tensors (no CuPy needed to
    ask it), or None when no target runs them together."""
    devices = {v.type.device for v in list(node.inputs) + node.outputs
               if isinstance(v.type, TensorType)}
    try:
        return target_type(devices)
    except NotImplementedError:
        return None


def _row_fusible(node: Node) -> bool:
    """``fuse_rows``' veto: the node's target has row kernels (the CPU's native programs),
    and it is a row op or an elementwise op codegen lowers for that target."""
    target = _target(node)
    if target is None or not target.row_kernels:
        return False
    return (node.is_op and S.REGISTRY[node.op_name].has(S.ROW)) or target.can_lower(node)


def _fusible(node: Node) -> bool:
    """``fuse_elementwise``' veto: codegen lowers ``node`` for its target (LLVM for CPU
    tensors, CUDA C for CUDA tensors), asked of the target, not of ``runtime.fusion``."""
    target = _target(node)
    return target is not None and target.can_lower(node)


def kernels_for(script_module: Any, *inputs: Any, backward: bool = False) -> list[FusedKernel]:
    """The compiled fusion-group kernels ``script_module`` runs for ``inputs``, in graph
    order; each has ``.llvm_ir``, ``.asm``, ``.spec`` and ``.kernels`` (one per layout).
    Runs the module once (without autograd) so that kernels match the real input layouts.
    ``backward=True``: the kernels of the compiled backward (``backward_graph_for``).

        >>> x = scriptmod.ones(3, 4)
        >>> traced = scriptmod.jit.trace(lambda x: (x * 2).exp() + 1, x)
        >>> ks = scriptmod.jit.kernels_for(traced, x)
        >>> len(ks), "define void" in ks[0].llvm_ir, ks[0].spec.ops[0].op
        (1, True, 'mul')
        >>> print(ks[0].asm)                   # the host's machine code: varies   # doctest: +SKIP
    """
    from scriptmod.autograd import grad_mode
    module = getattr(script_module, "_module", script_module)    # ScriptFunction
    if backward:
        return module.executor("forward").grad_plan_for(
            module._graph_args("forward", inputs)).backward.kernels()
    with grad_mode.no_grad():
        module(*inputs)
    return module.executable_for(*inputs).kernels()


def set_num_threads(n: int) -> None:
    """Threads used by compiled CPU kernels (like ``torch.set_num_threads``). Safe while
    other threads call compiled modules: their calls finish on the pool they started with,
    which is shut down by its last user (``runtime.threads``).

        >>> before = scriptmod.get_num_threads()
        >>> scriptmod.set_num_threads(2); scriptmod.get_num_threads()
        2
        >>> scriptmod.set_num_threads(before)
    """
    threads.set_num_threads(n)


def get_num_threads() -> int:
    """Threads used by compiled CPU kernels.

        >>> scriptmod.get_num_threads() >= 1
        True
    """
    return threads.get_num_threads()
