"""``autograd.Function``: user-defined ops with a hand-written backward.

    >>> class Exp(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         y = x.exp(); ctx.save_for_backward(y); return y
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (y,) = ctx.saved_tensors; return g * y
    >>> x = scriptmod.tensor([0.0, 1.0], requires_grad=True)
    >>> Exp.apply(x).sum().backward(); x.grad
    tensor([1.0000, 2.7183])
"""
from __future__ import annotations

from typing import Any

from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import Node, SavedTensor


class FunctionCtx:
    """The ``ctx`` of a custom Function: what forward leaves for backward."""

    def __init__(self) -> None:
        self._saved: list[Any] = []
        self.needs_input_grad: tuple[bool, ...] = ()
        self.materialize_grads = True
        self._non_diff: set[int] = set()
        self.node: Node | None = None

    def save_for_backward(self, *tensors: Any) -> None:
        self._saved = [SavedTensor(t) if t is not None else None for t in tensors]

    @property
    def saved_tensors(self) -> tuple:
        return tuple(s.unpack(self.node) if s is not None else None for s in self._saved)

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors: Any) -> None:
        """Accepted for API compatibility; in-place outputs are tracked by version counters."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


class _Meta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{cls.__name__} is an autograd.Function: call {cls.__name__}.apply(...) "
                           "instead of instantiating it")


class Function(metaclass=_Meta):
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)``."""

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define a static forward(ctx, ...)")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define a static backward(ctx, ...) "
                                  "to be differentiated")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        from scriptmod.tensor import Tensor
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with grad_mode.no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if not (grad_mode.is_grad_enabled() and any(ctx.needs_input_grad)):
            return out
        outs = out if isinstance(out, tuple) else (out,)
        edges = tuple((a._grad_node(), a._output_nr) if isinstance(a, Tensor) and a.requires_grad
                      else (None, 0) for a in args)
        meta = tuple((a.shape, a.dtype) if isinstance(a, Tensor) else None for a in args)
        node = Node(cls.__name__.lower(), _rule(cls), ctx, edges, meta, len(outs))
        ctx.node = node
        wrapped = []
        for k, o in enumerate(outs):
            if isinstance(o, Tensor) and id(o) not in ctx._non_diff and o.dtype.category >= 2:
                o = o if o.grad_fn is None and not o.requires_grad else o.detach()
                o._set_grad_fn(node, k)
            wrapped.append(o)
        _ctx_out_meta(ctx, outs)
        return tuple(wrapped) if isinstance(out, tuple) else wrapped[0]


def _ctx_out_meta(ctx: FunctionCtx, outs: tuple) -> None:
    from scriptmod.tensor import Tensor
    ctx.out_meta = [(o.shape, o.dtype, o._device_str()) if isinstance(o, Tensor) else None
                    for o in outs]


def _rule(cls: type) -> Any:
    def rule(ctx: FunctionCtx, g: Any) -> tuple:
        gs = g if isinstance(g, list) else [g]
        res = cls.backward(ctx, *gs)
        res = res if isinstance(res, tuple) else (res,)
        n = len(ctx.needs_input_grad)
        if len(res) < n:
            raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of "
                               f"gradients (expected {n}, got {len(res)})")
        return res[:n]
    return rule
