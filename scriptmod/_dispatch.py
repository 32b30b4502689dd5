"""``dispatch``: the one path every tensor op takes.

It binds attributes against the op's schema, runs the reference kernel, wraps the result,
records an autograd node when a gradient is needed, and tells an active tracer (``jit``)
what happened. The per-call path is kept to a handful of dict lookups: eager overhead on a
(1, 64) ``add`` is a few microseconds above NumPy's own.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir.dtypes import SCALAR_INTS, scalar_overflow
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.ir.ops.rules import broadcast_shapes
from scriptmod.ir.schema import ELEMENTWISE, FACTORY, IMPURE, NONDIFF, REGISTRY, VIEW, OpSchema
from scriptmod.runtime import profiling
from scriptmod.runtime import random as rng
from scriptmod.runtime.kernels import run_kernel
from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import Node, SavedTensor

# An active tracer (scriptmod.jit) pushes itself here; see ``Tracer.record``.
TRACERS: list[Any] = []


class TracingError(RuntimeError):
    """Tracing cannot produce a correct graph (``strict=True`` data-dependent control flow, an
    op whose result shape depends on values). Defined here, below ``jit``, so that ops refuse
    a trace without importing it; ``scriptmod.jit.TracingError`` is this class."""
    __module__ = "scriptmod.jit"

_gstate = grad_mode._state
_PROFILING = profiling.ACTIVE        # a running ``scriptmod.profiler``: ops are timed
_clock = profiling.clock


class Ctx:
    """What a derivative rule sees: saved inputs/outputs, attributes, input metadata."""

    __slots__ = ("_saved", "_saved_out", "attrs", "input_meta", "out_meta", "rng", "device", "node")

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs
        self._saved: list[Any] = []
        self._saved_out: list[SavedTensor] = []
        self.rng: Any = None
        self.node: Node | None = None

    @property
    def inputs(self) -> list[Any]:
        return [s.unpack(self.node) if type(s) is SavedTensor else s for s in self._saved]

    @property
    def output(self) -> Any:
        return self._saved_out[0].unpack(self.node)

    @property
    def outputs(self) -> list[Any]:
        return [s.unpack(self.node) for s in self._saved_out]


class _OpInfo:
    __slots__ = ("schema", "defaults", "attr_names", "view", "nondiff", "impure", "deriv", "n_out",
                 "plain", "scalars")

    def __init__(self, schema: OpSchema) -> None:
        self.schema = schema
        self.attr_names = frozenset(a.name for a in schema.attrs)
        required = [a for a in schema.attrs if a.default is _REQUIRED]
        self.defaults = None if required else {a.name: a.default for a in schema.attrs}
        self.view = VIEW in schema.flags
        self.nondiff = NONDIFF in schema.flags
        self.impure = IMPURE in schema.flags
        self.n_out = schema.n_outputs
        self.plain = self.n_out == 1 and not self.view   # result needs no view bookkeeping
        # takes its Python numbers as PyTorch's Scalars (int64 or uint64, else OverflowError),
        # unlike the script frontend's Python-int ops (py_add)
        self.scalars = bool(schema.flags & {ELEMENTWISE, FACTORY})


from scriptmod.ir.schema import REQUIRED as _REQUIRED  # noqa: E402

_INFO: dict[str, _OpInfo] = {n: _OpInfo(s) for n, s in REGISTRY.items()}
_Tensor: Any = None   # scriptmod.tensor.Tensor, set when that module loads
_make: Any = None     # its _make, bound once
_ND = np.ndarray
_derivatives: dict[str, Any] = {}


def _bind(info: _OpInfo, attrs: dict[str, Any] | None) -> dict[str, Any]:
    if not attrs:
        if info.defaults is not None:
            return dict(info.defaults)
        return info.schema.bind_attrs({})
    if info.scalars:
        for v in attrs.values():
            if type(v) is int and v not in SCALAR_INTS:
                raise scalar_overflow(v, info.schema.name)
    return info.schema.bind_attrs(attrs)


def dispatch(name: str, inputs: Sequence[Any], attrs: dict[str, Any] | None = None,
             inplace: bool = False) -> Any:
    """Run op ``name`` on ``inputs`` (Tensors, numbers, int lists, None) with ``attrs``."""
    start = _PROFILING and _clock()      # a falsy [] while no profiler runs
    info = _INFO[name]
    defaults = info.defaults
    attrs = dict(defaults) if not attrs and defaults is not None else _bind(info, attrs)
    T = _Tensor
    arrays = []
    needs_grad = False
    for x in inputs:
        if isinstance(x, T):
            arrays.append(x._data)
            if x._requires_grad:
                needs_grad = True
        else:
            if type(x) is int and x not in SCALAR_INTS and info.scalars:
                raise scalar_overflow(x, name)
            arrays.append(x)
    record = needs_grad and _gstate.enabled and not info.nondiff
    snapshot = rng.get_state(_device_of(inputs)) if record and info.impure else None
    try:
        out = run_kernel(name, arrays, attrs)
    except (ValueError, TypeError, IndexError, RuntimeError) as e:
        raise _explain(name, e, inputs) from None
    if info.plain and type(out) is _ND:   # the common case, inlined: one fresh array
        result = _make(out)
        outs: tuple = (result,)
    elif info.n_out == 1:
        result = _wrap(out, info, inputs)
        outs = (result,)
    else:
        result = outs = tuple(_wrap(o, info, inputs) for o in out)
    if record:
        _record(name, info, inputs, attrs, outs, snapshot, inplace)
    if TRACERS:
        TRACERS[-1].record(name, inputs, attrs, outs)
    if start:
        _op_event(name, start, inputs)
    return result


def _op_event(name: str, start: int, inputs: Sequence[Any]) -> None:
    """The profiler's event of one eager op: its input shapes, and the user's line when
    the profiler records stacks."""
    rec = _PROFILING[-1]
    shapes = [list(x.shape) if isinstance(x, _Tensor) else [] for x in inputs] \
        if rec.record_shapes else None
    profiling.emit(f"sm::{name}", profiling.OP, start, rec.stack() if rec.stack else None,
                   shapes)


def _wrap(arr: Any, info: _OpInfo, inputs: Sequence[Any]) -> Any:
    if not hasattr(arr, "shape") or isinstance(arr, _Tensor):
        return arr     # ints from size(); a tensor an op took out of a list or dict
    t = _Tensor._make(arr)
    if info.view and isinstance(inputs[0], _Tensor):
        t._vc = inputs[0]._vc       # views share the version counter of their base
        t._base = inputs[0]._base if inputs[0]._base is not None else inputs[0]
    return t


def _device_of(inputs: Sequence[Any]) -> str:
    for x in inputs:
        if isinstance(x, _Tensor):
            return x._device_str()
    return "cpu"


def _record(name: str, info: _OpInfo, inputs: Sequence[Any], attrs: dict[str, Any],
            outs: tuple, snapshot: Any, inplace: bool) -> None:
    d = _derivatives.get(name)
    if d is None:
        raise NotImplementedError(f"the derivative for {name!r} is not implemented")
    ctx = Ctx(attrs)
    ctx.rng = snapshot
    ctx.device = _device_of(inputs)
    T = _Tensor
    saves = range(len(inputs)) if d.saves == "all" else d.saves
    saved: list[Any] = [None] * len(inputs)
    for i in saves:
        if i < len(inputs):
            x = inputs[i]
            if isinstance(x, T):
                saved[i] = SavedTensor(x.detach().clone() if (inplace and i == 0) else x)
            else:
                saved[i] = x
    ctx._saved = saved
    edges, meta = [], []
    for x in inputs:
        if isinstance(x, T) and x._requires_grad:
            if x.grad_fn is not None and x._vc[0] != x._hv:
                raise _stale_history(name, x)
            edges.append((x._grad_node(), x._output_nr))
            meta.append((x.shape, x.dtype))
        else:
            edges.append((None, 0))
            meta.append(None if not isinstance(x, T) else (x.shape, x.dtype))
    ctx.input_meta = tuple(meta)
    node = Node(name, d.rule, ctx, tuple(edges), ctx.input_meta, len(outs))
    ctx.node = node
    ctx.out_meta = [(o.shape, o.dtype, o._device_str()) for o in outs]
    for k, o in enumerate(outs):
        if o.dtype.category >= 2:       # only floating and complex results carry gradients
            o._set_grad_fn(node, k)
    if d.saves_output:
        ctx._saved_out = [SavedTensor(o, k) for k, o in enumerate(outs)]


def _stale_history(name: str, x: Any) -> RuntimeError:
    return RuntimeError(
        f"{name}(): an input of shape {list(x.shape)} (output of {x.grad_fn.name()}) shares "
        "memory with a view or base that was modified by an in-place operation, so its autograd "
        "history no longer describes its values. Call .clone() before the in-place operation, "
        "or use the out-of-place form.")


def _explain(name: str, e: Exception, inputs: Sequence[Any]) -> Exception:
    """Re-raise an error with the op's name and the shapes it was given."""
    msg = str(e)
    if "could not be broadcast" in msg:
        shapes = [tuple(x.shape) for x in inputs if isinstance(x, _Tensor)]
        try:
            broadcast_shapes(*shapes)
        except ValueError as b:
            msg = str(b)
    if not msg.startswith(name):
        msg = f"{name}(): {msg}"
    return _error_class(e, msg)(msg)


_SHAPE_WORDS = ("broadcast", "shape", "size", "dimension")
_DTYPE_WORDS = ("ufunc", "dtype", "cast")


def _error_class(e: Exception, msg: str) -> type:
    """NumPy's shape and dtype complaints become ``ShapeError``/``DTypeError`` (RuntimeErrors,
    as in PyTorch); every other error keeps its class."""
    low = msg.lower()
    if type(e) is ValueError and any(w in low for w in _SHAPE_WORDS):
        return ShapeError
    if isinstance(e, TypeError) and not isinstance(e, DTypeError) and \
            any(w in low for w in _DTYPE_WORDS):
        return DTypeError
    return type(e)


def set_tensor_class(cls: Any) -> None:
    global _Tensor, _make
    _Tensor, _make = cls, cls._make


def set_derivatives(table: dict[str, Any]) -> None:
    _derivatives.clear()
    _derivatives.update(table)


def unary(name: str) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        return dispatch(name, (self,))
    method.__name__ = name
    method.__doc__ = f"Elementwise ``{name}``; see ``scriptmod.{name}``."
    return method
