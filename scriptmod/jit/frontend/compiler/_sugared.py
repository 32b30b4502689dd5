"""Sugared values: what a name or attribute can be besides an IR value (a Python object
used at compile time, a module, a method before its call), the exit kinds of a block,
and the ``Context`` one ``script`` call shares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from scriptmod.ir.graph import Graph, Value


@dataclass
class PyObj:
    """A Python object used at compile time (a module, a function, a constant container)."""
    obj: Any


@dataclass
class ModuleRef:
    """A module: its IR value (``self`` or a GetAttr chain) and the object."""
    value: Value
    module: Any


@dataclass
class Method:
    """``obj.name`` before the call: a method of a tensor, list, dict or module."""
    obj: Any                # Value or ModuleRef
    name: str


@dataclass
class Conflict:
    """A name whose types differ on the paths that merged (``if_``): not an error until the
    name is read (TorchScript's rule: one type where control flow merges and the value is
    used); ``node`` is the statement that merged them, where the error points."""
    message: str
    node: Any


Sugared = Any   # Value | PyObj | ModuleRef | Method | Conflict


class Exits:
    """Whether statements leave the block: NEVER, MAY, ALWAYS (break/continue, or a path
    that already left), TERMINAL (return or raise: nothing after them in the function runs
    on that path)."""
    NEVER, MAY, ALWAYS, TERMINAL = 0, 1, 2, 3


@dataclass
class Context:
    """What one ``script`` call shares: compiled functions, modules in progress (recursion
    is reported), and the function for each scripted module's methods."""
    functions: dict[Any, Graph] = field(default_factory=dict)
    stack: list[str] = field(default_factory=list)
    method_graph: Callable[[Any, str], Graph] | None = None   # (module, name) -> graph
    # each compiled graph's return, as its callers' alias analysis reads it: ("fresh", None),
    # ("argument", k) (input k of the graph, self included) or ("shared", None)
    returns: dict[int, tuple[str, int | None]] = field(default_factory=dict)
