"""What ``Module`` takes from Ivy's Module: explicit variables, lazy build, ``show_graph``
and weight files.

Explicit variables: ``module(x, v=params)`` (``params`` a dict with ``state_dict``-style
keys) runs ``forward`` with those tensors in place of the stored ones, for this call only;
keys left out keep the stored tensors. It is ``scriptmod.func.functional_call``.

Lazy build. A layer whose parameters depend on the input shape registers
``UninitializedParameter`` (or ``UninitializedBuffer``) members and overrides::

    def _build(self, *inputs, **kwargs) -> bool | None:
        '''Materialize the lazy members from example inputs (``inputs`` is empty when called
        at construction). Return False when the shapes cannot be known yet.'''

``build_mode`` (a class attribute, overridable per class or per instance) says when it runs:

- ``'on_call'`` (default, PyTorch's lazy modules): on the first call, with that call's inputs;
- ``'on_init'``: right after construction (``_build()`` without inputs) when shapes are known
  there, otherwise on the first call; setting it on an instance builds at once;
- ``'explicit'``: only ``module.build(example_input)`` builds; calling an unbuilt module raises.

``built`` is True once no lazy parameter or buffer remains in the module tree.

Ivy's constructor keywords (``v=``, ``buffers=``, ``build_mode=``, ``training=``,
``with_partial_v=``, ``store_vars=``, ``device=``, ``dtype=``), the ``buffers=`` call keyword
and the ``v``/``module_dict``/``device``/``dtype`` attributes: see ``_module_variables``.
``trace_graph`` is tracing under Ivy's name.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Iterator

from scriptmod.autograd import grad_mode
from scriptmod.nn._compiler import compiler
from scriptmod.nn._module_variables import (IVY_KEYWORDS, _accepts_no_inputs, apply_options,
                                            check_options, check_stored, flatten)
from scriptmod.nn.parameter import is_lazy

if TYPE_CHECKING:
    from scriptmod.nn.module import Module

BUILD_MODES = ("on_init", "on_call", "explicit")
_BUILDING = [0]     # > 0 while Module.build runs a forward: every lazy module builds


@contextlib.contextmanager
def _building() -> Iterator[None]:
    _BUILDING[0] += 1
    try:
        yield
    finally:
        _BUILDING[0] -= 1


@functools.lru_cache(maxsize=None)
def _forward_takes(forward: Any) -> frozenset:
    """The parameter names of ``forward``: a ``v`` or ``buffers`` there is the user's own."""
    try:
        return frozenset(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=None)
def _init_takes(init: Any) -> tuple[frozenset, bool]:
    """The keyword names ``init`` declares, and whether it takes ``**kwargs``."""
    try:
        params = inspect.signature(init).parameters
    except (TypeError, ValueError):
        return frozenset(), True
    return frozenset(params), any(p.kind is p.VAR_KEYWORD for p in params.values())


def _pop_ivy_keywords(init: Any, kwargs: dict) -> dict:
    """Ivy's constructor keywords that this ``__init__`` does not take itself (``nn.Linear(2,
    3, v=...)``): Module handles them after construction."""
    names, var_kw = _init_takes(init)
    if var_kw:
        return {}
    return {k: kwargs.pop(k) for k in IVY_KEYWORDS if k in kwargs and k not in names}


def _wrap_init(init: Any) -> Any:
    @functools.wraps(init)
    def __init__(self: "Module", *args: Any, **kwargs: Any) -> None:
        popped = _pop_ivy_keywords(init, kwargs) if kwargs else None
        init(self, *args, **kwargs)
        if popped:
            check_options(popped)
            self.__dict__.setdefault("_ivy_init", {}).update(popped)
        if type(self).__init__ is __init__:
            opts = self.__dict__.pop("_ivy_init", None)
            if opts:
                apply_options(self, opts)
            elif self.build_mode == "on_init":
                self._build_without_inputs()
    __init__._build_wrapped = True  # type: ignore[attr-defined]
    return __init__


class IvyMixin:
    """Explicit variables, lazy build, ``show_graph``, ``save_weights``/``load_weights``."""

    build_mode: str = "on_call"
    _lazy_pending: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mode = cls.__dict__.get("build_mode")
        if mode is not None and mode not in BUILD_MODES:
            raise ValueError(f"{cls.__name__}.build_mode must be one of {BUILD_MODES}, got {mode!r}")
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_build_wrapped", False):
            cls.__init__ = _wrap_init(init)   # type: ignore[misc]

    @staticmethod
    def _check_build_mode(mode: Any) -> None:
        if mode not in BUILD_MODES:
            raise ValueError(f"build_mode must be one of {BUILD_MODES}, got {mode!r}")

    # ---- lazy build -----------------------------------------------------------------------
    def _build(self, *inputs: Any, **kwargs: Any) -> bool | None:
        """Override in a lazy layer: materialize ``UninitializedParameter`` members from the
        example inputs; return False when shapes are not known yet."""
        return None

    def _own_lazy(self) -> bool:
        return any(t is not None and is_lazy(t)
                   for t in (*self._parameters.values(), *self._buffers.values()))

    @property
    def built(self) -> bool:
        """True when no parameter or buffer of the module tree waits for its shape."""
        return not any(m._own_lazy() for m in self.modules())

    def _try_build(self, args: tuple, kwargs: dict) -> bool:
        ok = self._build(*args, **kwargs) is not False and not self._own_lazy()
        if ok:
            object.__setattr__(self, "_lazy_pending", False)
        return ok

    def _build_without_inputs(self) -> bool:
        for m in self.modules():
            if m._own_lazy() and _accepts_no_inputs(m._build):
                m._try_build((), {})
        return self.built

    def build(self, *args: Any, **kwargs: Any) -> "Module":
        """Build every lazy member: from example inputs (one forward pass under ``no_grad``;
        hooks run as in any call) or, without inputs, from what the constructor knew.

            >>> m = nn.LazyLinear(3); m.build_mode = "explicit"
            >>> m.build(scriptmod.randn(2, 5)).weight.shape
            scriptmod.Size([3, 5])
        """
        if self.built:
            return self
        if args or kwargs:
            with _building(), grad_mode.no_grad():
                self(*args, **kwargs)
        elif not self._build_without_inputs():
            lazy = [name or type(self).__name__ for name, m in self.named_modules() if m._own_lazy()]
            raise ValueError(f"{type(self).__name__}.build(): cannot infer the shapes of "
                             f"{', '.join(lazy)} without example inputs; call "
                             "build(example_input, ...)")
        return self

    def _maybe_build(self, args: tuple, kwargs: dict) -> None:
        if self.build_mode == "explicit" and not _BUILDING[0] and not self.built:
            raise RuntimeError(f"{type(self).__name__} is not built: its build_mode is 'explicit', "
                               "so call .build(example_input) before calling it")
        if self._lazy_pending and self._own_lazy():
            if not self._try_build(args, kwargs):
                raise RuntimeError(f"{type(self).__name__}: _build() could not infer the shapes "
                                   "of its lazy parameters from the call's inputs")

    # ---- explicit variables -------------------------------------------------------------
    def _pop_variables(self, kwargs: dict) -> Mapping | None:
        """The ``v=``/``buffers=`` of a call (nested or dotted dicts) as one flat dict."""
        out: dict[str, Any] = {}
        for key in ("v", "buffers"):
            given = kwargs.get(key)
            if given is None or not isinstance(given, Mapping) \
                    or key in _forward_takes(type(self).forward):
                continue
            del kwargs[key]
            flat = flatten(given)
            if key == "buffers":
                self._check_buffer_names(flat)
            out.update(flat)
        if not out and "_unstored" in self.__dict__:
            check_stored(self)
        return out or None

    def _check_buffer_names(self, flat: dict[str, Any]) -> None:
        names = {n for n, _ in self.named_buffers(remove_duplicate=False)}
        unknown = sorted(set(flat) - names)
        if unknown:
            raise KeyError(f"{type(self).__name__}(..., buffers=...): {', '.join(unknown)} "
                           f"{'is not a buffer' if len(unknown) == 1 else 'are not buffers'} of "
                           f"this module (its buffers: {sorted(names)})")

    # ---- tracing -------------------------------------------------------------------------
    def trace_graph(self, *inputs: Any, args: Any = None, kwargs: dict[str, Any] | None = None,
                    **trace_kwargs: Any) -> Any:
        """Ivy's name for tracing: ``m.trace_graph(x)``, ``m.trace_graph(x, y)`` or Ivy's
        ``m.trace_graph(args=(x, y), kwargs={...})`` return ``scriptmod.jit.trace(m, ...)``,
        the ScriptModule (``trace_kwargs`` such as ``check_trace`` go to ``jit.trace``).
        Without inputs, as in Ivy, the module is traced on its first call instead
        (``Module.compile``) and ``m`` itself is returned; a ScriptModule returns itself.

            >>> traced = nn.Linear(4, 2).trace_graph(scriptmod.ones(3, 4))
            >>> type(traced).__name__, traced(scriptmod.ones(5, 4)).shape
            ('ScriptModule', scriptmod.Size([5, 2]))
        """
        if inputs and args is not None:
            raise TypeError("trace_graph(): pass the example inputs either positionally or as "
                            "args=(...), not both")
        if args is None and inputs:
            args = inputs[0] if len(inputs) == 1 else tuple(inputs)
        if args is None and not kwargs:
            self.compile(**trace_kwargs)  # type: ignore[attr-defined]
            return self
        jit = compiler("trace_graph")
        if isinstance(self, jit.script_module):
            return self     # already a traced graph (PyTorch: tracing a ScriptModule is a no-op)
        if isinstance(args, list):
            args = tuple(args)
        return jit.trace(self, args, example_kwarg_inputs=kwargs or None, **trace_kwargs)

    # ---- graph drawing -----------------------------------------------------------------
    def show_graph(self, *example_inputs: Any, fname: str | None = None) -> str:
        """Trace with ``example_inputs`` (a ScriptModule uses its own ``graph``) and return
        the graph as DOT text; ``fname`` ending in .dot/.gv, .svg or .png also writes it
        (SVG and PNG need Graphviz's ``dot`` program)."""
        graph = getattr(self, "graph", None) if not example_inputs else None
        if graph is None:
            jit = compiler("show_graph")
            if not example_inputs:
                raise ValueError("show_graph(*example_inputs): pass inputs to trace the module with")
            graph = jit.trace(self, example_inputs if len(example_inputs) > 1
                              else example_inputs[0]).graph
        try:
            from scriptmod.ir.nxview import to_dot
        except ImportError as e:
            raise RuntimeError(f"show_graph needs ir.nxview.to_dot, which is missing: {e}") from e
        dot = to_dot(graph)
        if fname is not None:
            _write_graph(dot, fname)
        return dot

    # ---- weight files -------------------------------------------------------------------
    def save_weights(self, path: Any) -> None:
        """Write ``state_dict()`` (tensors only) to a safetensors file."""
        from scriptmod.serialization import save_safetensors
        tensors = {k: v for k, v in self.state_dict().items() if not k.endswith("_extra_state")}
        save_safetensors(tensors, path)

    def load_weights(self, path: Any, strict: bool = True) -> Any:
        """Load a safetensors file (ours or any other producer's) with ``load_state_dict``."""
        from scriptmod.serialization import load_safetensors
        return self.load_state_dict(load_safetensors(path), strict=strict)


def _write_graph(dot: str, fname: str) -> None:
    import shutil
    import subprocess
    ext = str(fname).rsplit(".", 1)[-1].lower()
    if ext in ("dot", "gv"):
        with open(fname, "w") as f:
            f.write(dot)
        return
    if ext not in ("svg", "png", "pdf"):
        raise ValueError(f"show_graph(fname={fname!r}): expected a .dot, .gv, .svg, .png or .pdf name")
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(f"show_graph(fname={fname!r}): writing .{ext} needs Graphviz's 'dot' "
                           "program on PATH; use a .dot file name to get the DOT text instead")
    subprocess.run([exe, f"-T{ext}", "-o", str(fname)], input=dot.encode(), check=True)
