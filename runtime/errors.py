"""What a user reads when a compiled call fails: the errors the runtime raises, and how an
exception raised while a node runs is worded.

Three kinds, worded apart (``node_failure``):

- an op refused its data (a shape, an index out of range, a dtype): the op in the user's
  terms, the module path and the user's ``file:line``, then the op's own message, as an
  ``InterpreterError`` that is also the op's error class (``ShapeFailure`` is a
  ``ShapeError``, ``IndexFailure`` an ``IndexError``), so that the ``except`` around eager
  code catches it around compiled code too;
- our own invariant broken (a kernel handed what it was not built for, a missing case):
  ``InternalError``, naming the op and the user's line and asking for a report;
- neither carries IR text (value names, node kinds): the failing node's IR line is on the
  exception as ``.node_ir`` and goes to ``SCRIPTMOD_LOG=errors``, the original exception is
  its ``__cause__``.

    >>> from scriptmod.ir.dtypes import float32
    >>> describe_type(TensorType(float32, ("B", 4)))
    'a float32 tensor of shape (B, 4)'
    >>> describe_value(np.zeros((2, 3), np.int64))
    'an int64 tensor of shape (2, 3)'
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from scriptmod.ir import log as irlog
from scriptmod.ir.errors import ArgumentValueError, DeviceError, DTypeError, ShapeError
from scriptmod.ir.graph import Node, Prim
from scriptmod.ir.types import (BoolType, FloatType, IntType, ListType, NoneType, OptionalType,
                                StrType, TensorType, TupleType, Type)

TOPIC = "errors"           # SCRIPTMOD_LOG topic: the IR line of each node that failed
REPORT = "https://github.com/scriptmod/scriptmod/issues"


class InterpreterError(RuntimeError):
    """A node failed at run time; the message names its op and the user's source line."""

    node_ir: str = ""          # the failing node's IR line (for us; never in the message)
    op: str = ""               # the op, as the message names it
    source: str | None = None  # the user's ``file:line`` the node came from


class ShapeFailure(InterpreterError, ShapeError):
    """An op's shape check failed at run time (``narrow`` past the end at this batch size)."""


class DTypeFailure(InterpreterError, DTypeError):
    """An op's dtype check failed at run time."""


class ValueFailure(InterpreterError, ArgumentValueError):
    """An op refused an argument's value at run time (``arange`` with the wrong step sign)."""


class DeviceFailure(InterpreterError, DeviceError):
    """An op's device check failed at run time."""


class IndexFailure(InterpreterError, IndexError):
    """An index out of range at run time (``embedding``, ``gather``, ``x[i]``)."""


class InternalError(InterpreterError):
    """Our bug, met while a node ran: the op and the user's line, and a request to report."""


_FAILURES: tuple[tuple[type, type[InterpreterError]], ...] = (
    (ShapeError, ShapeFailure), (DTypeError, DTypeFailure), (ArgumentValueError, ValueFailure),
    (DeviceError, DeviceFailure), (IndexError, IndexFailure), (ValueError, ValueFailure))

# raised by our code, never by an op refusing a user's data: the invariant was ours
_INTERNAL: tuple[type, ...] = (NotImplementedError, AssertionError, AttributeError, KeyError,
                               NameError, RecursionError, SystemError)

_PY_ERRORS = (ZeroDivisionError, IndexError, KeyError, ValueError, TypeError, OverflowError)


def python_error(node: Node, e: BaseException) -> bool:
    """Whether ``e`` is a Python-value op's own Python error (``a // 0``, ``xs[7]``,
    ``d['z']``): scripted code raises it as is, as the same Python code would."""
    return isinstance(e, _PY_ERRORS) and node.is_op and node.op_name.startswith(
        ("py_", "list_", "dict_", "int_"))


def failure(e: BaseException) -> type[InterpreterError]:
    """The InterpreterError class that is also ``e``'s user-level class, so that ``except
    ShapeError`` around a compiled call catches what it catches around eager code."""
    for user, cls in _FAILURES:
        if isinstance(e, user):
            return cls
    return InterpreterError


def is_internal(e: BaseException) -> bool:
    """Whether ``e``, raised while a node ran, is our invariant broken rather than an op
    refusing the user's data (a ``TypeError`` that is not a ``DTypeError``: the graph's
    types were checked, so a kernel meeting the wrong kind of value is our bug)."""
    if isinstance(e, (ShapeError, DTypeError, ArgumentValueError, DeviceError)):
        return getattr(e, "internal", False)
    return isinstance(e, _INTERNAL) or (isinstance(e, TypeError) and not isinstance(
        e, DTypeError)) or getattr(e, "internal", False)


# ---- the user's terms ---------------------------------------------------------------------

def op_label(node: Node) -> str:
    """The op as the user wrote it: ``matmul``, ``Tensor.narrow``, ``fused mul, add``."""
    if node.is_op:
        return node.op_name
    if node.kind == Prim.FUSION_GROUP:
        sub = node.attrs.get("subgraph")
        ops = [n.op_name for n in sub.walk() if n.is_op] if sub is not None else []
        return f"fused {', '.join(dict.fromkeys(ops))}" if ops else "a fused group"
    if node.kind in (Prim.CALL_FUNCTION, Prim.CALL_METHOD):
        return str(node.attrs.get("name", "a call"))
    return {Prim.IF: "if", Prim.LOOP: "loop", Prim.GET_ATTR: "attribute read",
            Prim.SET_ATTR: "attribute write", Prim.LIST_UNPACK: "unpacking",
            Prim.TUPLE_UNPACK: "unpacking", Prim.TUPLE_INDEX: "tuple index",
            Prim.RAISE: "raise"}.get(
        node.kind, node.kind.split("::")[-1])


def place(node: Node) -> str:
    """`` in fc at model.py:12``: the module path and the user's line, where known."""
    scope = f" in {node.scope}" if getattr(node, "scope", None) else ""
    return scope + (f" at {node.source}" if node.source else "")


def article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeio" else f"a {word}"


def shape_text(shape: Any) -> str:
    """``(2, 3)``, ``(4,)``, ``()``: a Python tuple's spelling, symbolic dims by name."""
    dims = [str(d) for d in shape]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


def describe_type(t: Type | None) -> str:
    """A type in the user's terms: ``a float32 tensor of shape (B, 4)``, ``an int``."""
    if isinstance(t, TensorType):
        dtype = article(f"{t.dtype.name} tensor") if t.dtype is not None else "a tensor"
        shape = f" of shape {shape_text(t.shape)}" if t.shape is not None else ""
        device = f" on {t.device}" if t.device not in (None, "cpu") else ""
        return dtype + shape + device
    if isinstance(t, TupleType):
        return f"a tuple of ({', '.join(describe_type(e) for e in t.elements)})"
    if isinstance(t, OptionalType):
        return f"{describe_type(t.element)} or None"
    if isinstance(t, ListType):
        return "a list"
    simple = {IntType: "an int", FloatType: "a float", BoolType: "a bool", StrType: "a str",
              NoneType: "None"}
    for k, text in simple.items():
        if t == k:
            return text
    return "a value" if t is None else f"a {t}"


def describe_value(a: Any) -> str:
    """A run-time value in the user's terms: an array is the tensor that holds it."""
    if isinstance(a, np.generic):
        return f"{article(str(a.dtype))} scalar"
    if hasattr(a, "dtype") and hasattr(a, "shape") and type(a).__module__.split(".")[0] in (
            "numpy", "cupy"):
        return f"{article(f'{a.dtype} tensor')} of shape {shape_text(a.shape)}"
    if a is None:
        return "None"
    if isinstance(a, (tuple, list)):
        return f"a {type(a).__name__} of {len(a)}"
    return article(type(a).__name__)


# ---- one node failed ------------------------------------------------------------------------

def worded(err: BaseException, user: str | None = None, internal: bool = False) -> BaseException:
    """``err`` marked for ``node_failure``: ``user`` is its message in the user's terms (the
    raise site's own names a kernel), ``internal`` that it means our invariant broke."""
    err.user_message = user                             # type: ignore[attr-defined]
    err.internal = internal                             # type: ignore[attr-defined]
    return err


def noted(node: Node, e: BaseException) -> BaseException:
    """``e`` as the program raised it (its own ``raise``, or a Python error such as ``xs[7]``,
    worded as Python words it), with a note, shown under its traceback, naming the user's
    line: the traceback itself passes through the runtime, not the user's code."""
    if node.source and not getattr(e, "scriptmod_noted", False):
        e.add_note(f"(raised by {op_label(node)}{place(node)}, in compiled code)")
        e.scriptmod_noted = True                        # type: ignore[attr-defined]
    return e


def node_failure(node: Node, e: BaseException) -> InterpreterError:
    """The exception to raise for ``e``, raised while ``node`` ran (see the module doc)."""
    from scriptmod.ir.printer import describe
    op = op_label(node)
    if is_internal(e):
        err: InterpreterError = InternalError(
            f"internal error in scriptmod while running {op}{place(node)} "
            f"({type(e).__name__}); this is a bug in scriptmod, not in your code: please "
            f"report it ({REPORT}) with the output of SCRIPTMOD_LOG=errors")
    else:
        err = failure(e)(f"{op}{place(node)}: {_own_message(node, e)}")
    err.op, err.source = op, node.source
    try:
        err.node_ir = describe(node)
    except Exception:                                   # noqa: BLE001 - a detached node
        err.node_ir = node.kind
    irlog.log(TOPIC, f"{op}{place(node)} failed: {type(e).__name__}: {e}\n    {err.node_ir}")
    return err


_IR_NAMES = re.compile(r"%[\w.?]+")


def _own_message(node: Node, e: BaseException) -> str:
    """``e``'s message without the op name it repeats (``embedding: index 7 ...``); the
    class name kept where the new class does not say it (a ``ZeroDivisionError``)."""
    msg = getattr(e, "user_message", None) or str(e).split("\n    %")[0]   # (a pass's IR line)
    name = node.op_name if node.is_op else op_label(node).split(".")[-1]
    for prefix in (f"{name}: ", f"{name}(): "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if failure(e) is InterpreterError and not isinstance(e, RuntimeError):
        msg = f"{type(e).__name__}: {msg}"
    return _IR_NAMES.sub("a value", msg)
