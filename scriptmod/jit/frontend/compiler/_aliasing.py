"""In-place writes in scripted code, with eager's aliasing: ``y.add_(1)`` where ``z = y``
names the same tensor, and writes through views, ``row = x[0]; row.mul_(2)``,
``x.t()[0] = v``, ``x[1:][0] += 1`` (issue 42).

A scripted graph is functional between its writes: a value is what its node computed, and
a write is ``copy_(dst, src)`` (or an in-place library call, which expands to one), whose
output is ``dst``'s storage after the write. So an in-place update (``mutated``):

- rebinds every name bound to the written value to the new one, so that later reads see
  the write whatever name they use (``z = y; y += 1`` changes ``z`` too, as in eager);
- where the written value is a view of a base tensor, writes the base through, as eager's
  shared storage does, and takes every other named view of that base again from the
  written base (``a = x[0]; b = x[:, 0]; a.fill_(1)`` changes ``b[0]``).

Views are basic-index results (ints, slices, None, ``...``) and the library calls that
always share their input's storage (``VIEW_CALLS``). The base is written through by
replaying the chain of views on an index tensor: ``idx = arange(base.numel())`` viewed as
``base`` and taken through the same views gives each element of the view its flat
position in the base, and ``base.view(-1)[idx.view(-1)] = new.expand_as(idx)`` writes them
back: one scatter per write, whatever the chain.

Items of a list of views (``a, b = x.chunk(2)``, ``x.unbind(0)[i]``) are views too.
Not covered, where scripted code refuses the write or keeps its value: ``reshape``/
``flatten``/``contiguous``/``to`` results of a tensor a name holds, which share storage only
for some inputs, and views stored into a list the program builds.
"""
from __future__ import annotations

import ast
from typing import Any, Tuple, Union

from scriptmod.ir.graph import Node, Prim, Value
from scriptmod.ir.types import ListType, TensorType
from ._sugared import PyObj

# library calls whose result always shares its first argument's storage
VIEW_CALLS = frozenset({"view", "view_as", "t", "T", "mT", "transpose", "swapaxes",
                        "swapdims", "permute", "expand", "expand_as", "narrow", "select",
                        "squeeze", "unsqueeze", "movedim", "moveaxis", "diagonal", "unflatten",
                        "detach", "as_strided"})
# library calls whose result is a list of views of their first argument
LIST_VIEW_CALLS = frozenset({"chunk", "split", "unbind", "tensor_split", "split_with_sizes",
                             "hsplit", "vsplit", "dsplit"})
_BASIC_INDEX = frozenset({"int", "slice", "none", "ellipsis"})
# in-place Tensor methods that do not write the tensor's values
_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_", "resize_",
                         "squeeze_", "unsqueeze_", "transpose_", "t_", "as_strided_",
                         "set_", "grad_"})


def writes_in_place(method: str) -> bool:
    """Whether ``Tensor.<method>`` writes its tensor's values in place (``add_``,
    ``copy_``, ``fill_``, ``clamp_``, ...)."""
    return method.endswith("_") and not method.startswith("_") and method not in _NOT_WRITES


# a step of a view chain: a view node, or (a list read, which output) of a list of views
Step = Union[Node, Tuple[Node, int]]


def view_chain(v: Value) -> tuple[Value, list[Step]] | None:
    """``v`` as a chain of views of a base tensor: the base and the steps from it to ``v``,
    or None where ``v`` is no view (``copy_``'s output is the tensor written, a base). A
    step is a view node, or an item of a list of views (``a, b = x.chunk(2)``,
    ``x.unbind(0)[i]``): the read of the list and which of its outputs."""
    chain: list[Step] = []
    while True:
        n = v.node
        if _is_view_node(n):
            chain.append(n)
            v = n.inputs[0]
        elif n.kind in (Prim.LIST_UNPACK, "sm::list_get") and _is_list_of_views(
                n.inputs[0].node):
            chain.append((n, v.index))
            v = n.inputs[0].node.inputs[0]
        else:
            return (v, chain[::-1]) if chain else None


def _is_list_of_views(n: Node) -> bool:
    return n.kind == Prim.CALL_FUNCTION and not n.attrs.get("method") and bool(n.inputs) and \
        str(n.attrs.get("name", "")).rsplit(".", 1)[-1] in LIST_VIEW_CALLS and \
        n.attrs.get("args", [])[:1] == [["v", 0]]


def _is_view_node(n: Node) -> bool:
    if n.is_op and n.op_name == "index":
        return all(part[0] in _BASIC_INDEX for part in n.attrs.get("spec", ()))
    if n.kind == Prim.CALL_FUNCTION and not n.attrs.get("method") and n.inputs:
        name = str(n.attrs.get("name", "")).rsplit(".", 1)[-1]
        return name in VIEW_CALLS and n.attrs.get("args", [])[:1] == [["v", 0]]
    return False


class AliasingMixin:
    """``FunctionCompiler``'s in-place writes (see the module's docstring)."""

    env: dict[str, Any]
    b: Any

    def mutated(self, old: Value, new: Value, node: ast.AST) -> Value:
        """``old``'s storage now holds ``new``: every name of ``old`` sees it, a base ``old``
        is a view of is written through, and the named views of the written tensor are
        taken again from it. Returns the value that is now ``old``."""
        chain = view_chain(old)
        if chain is None:
            base, views, written = old, [], new
        else:
            base, views = chain
            written = self._write_back(base, views, new, node)
        now = {id(base): written}                  # a value -> the value it is now
        if chain is not None:
            now[id(old)] = self._replay(written, views)
        for name, v in list(self.env.items()):
            if not isinstance(v, Value):
                continue
            if id(v) not in now:
                again = self._taken_again(v, base, written)
                if again is None:
                    continue
                now[id(v)] = again
            self.env[name] = now[id(v)]
        return now[id(old)]

    def _taken_again(self, v: Value, base: Value, written: Value) -> Value | None:
        """``v`` taken again from ``written`` where it is a view of ``base``, or a list of
        views of it (``pieces = y.split(1)``); else None."""
        if isinstance(v.type, TensorType):
            chain = view_chain(v)
            return self._replay(written, chain[1]) if chain and chain[0] is base else None
        if isinstance(v.type, ListType) and _is_list_of_views(v.node):
            src = v.node.inputs[0]
            root, steps = view_chain(src) or (src, [])
            if root is base:
                return self._again(v.node, self._replay(written, steps), [v.type]).output
        return None

    def _replay(self, x: Value, views: list[Step]) -> Value:
        """The views of ``views`` taken again from ``x`` (their other inputs and attributes
        as they were)."""
        for step in views:
            if isinstance(step, Node):
                x = self._again(step, x, [TensorType()]).output
                continue
            read, k = step
            call = read.inputs[0].node
            items = self._again(call, x, [call.output.type]).output
            x = self._again(read, items, [TensorType()] * len(read.outputs)).outputs[k]
        return x

    def _again(self, n: Node, x: Value, types: list[Any]) -> Node:
        """A copy of ``n`` that reads ``x`` in place of its first input."""
        return self.b.node(n.kind, [x, *n.inputs[1:]], types, dict(n.attrs))

    def _write_back(self, base: Value, views: list[Step], new: Value,
                    node: ast.AST) -> Value:
        """``base`` with the elements the view chain ``views`` selects replaced by ``new``,
        written into ``base``'s storage (``copy_``)."""
        call = self.library_call                                   # type: ignore[attr-defined]
        op = self.op                                               # type: ignore[attr-defined]
        t, flat = TensorType(), PyObj(-1)
        idx = call("scriptmod.arange", [op("numel", base, node=node)], {}, node, t)
        idx = self._replay(call("Tensor.view_as", [idx, base], {}, node, t), views)
        values = call("Tensor.reshape", [call("Tensor.expand_as", [new, idx], {}, node, t),
                                         flat], {}, node, t)
        positions = call("Tensor.reshape", [idx, flat], {}, node, t)
        scattered = op("index_put", call("Tensor.reshape", [base, flat], {}, node, t), values,
                       positions, spec=(("tensor", 0),), node=node)
        return op("copy_", base, call("Tensor.view_as", [scattered, base], {}, node, t),
                  node=node)
