"""Load-time checks that a rebuilt archive can be called: each method typed from its
declared inputs as its first call will be, loops bounded, built-in layers complete. Whatever
would fail inside a call (an ``InterpreterError``, a ``ShapePropagationError``, an attribute
a layer's ``forward`` reads) is an ``ArchiveError`` at load instead."""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Any

from scriptmod.ir.graph import Graph, Prim, known_value
from scriptmod.ir.verify import types_agree
from scriptmod.jit import _archive_format as A
from scriptmod.jit._archive_format import ArchiveError
from scriptmod.jit._script_module import ScriptModule

_WHILE_TRIPS = 2**63 - 1          # the trip count the script frontend gives a ``while`` loop


def check_types(root: ScriptModule, manifest: dict[str, Any]) -> None:
    """Each method, with its calls inlined as a call inlines them, is typed from its declared
    input types by shape propagation, as the first call will be: an op refusing its inputs'
    types, or outputs that do not fit the declared ones, would fail inside a call, so the
    archive is refused now. Loops must be bounded (``check_loops``)."""
    objs = _module_objects(root, manifest)
    for (i, meth) in A.iter_methods(manifest):
        mod, name, where = objs[i], meth["name"], A.graph_entry(i, meth["name"])
        declared = mod._methods[name]
        check_loops(declared, where)
        try:
            g = _typed(mod, name)
        except RecursionError:
            raise ArchiveError(f"{where}: the method's graph nests too deeply to type") from None
        except Exception as e:      # any failure here is one a call would meet
            raise ArchiveError(f"{where}: the method's types do not check from its declared "
                               f"inputs: {type(e).__name__}: {e}") from None
        _check_expansions(declared, g, where)
        for k, (v, d) in enumerate(zip(g.outputs, declared.outputs)):
            if not types_agree(d.type, v.type):
                raise ArchiveError(f"{where}: output {k} is declared {d.type!r} but its ops give "
                                   f"{v.type!r}")


def _typed(mod: ScriptModule, name: str) -> Graph:
    """``mod.<name>`` inlined, its attributes typed from the loaded tensors, then typed from
    its declared inputs (scripted library calls expanded where their types are known)."""
    from scriptmod.jit._specialize import typed_inlined
    return typed_inlined(mod, name)


_BROKEN = ("AttributeError", "NameError", "KeyError")


def _check_expansions(declared: Graph, typed: Graph, where: str) -> None:
    """A library or layer call that expanded into a raise of a missing attribute or name
    (a layer whose saved configuration or parameters lack what its ``forward`` reads) is a
    broken archive, not a program that raises."""
    def raises(g: Graph) -> list[str]:
        return [n.attrs.get("message", "") for n in g.walk()
                if n.kind == Prim.RAISE and n.attrs.get("kind") in _BROKEN]
    new = raises(typed)
    if len(new) > len(raises(declared)):
        raise ArchiveError(f"{where}: a library call fails on the saved module: {new[-1]}")


def _module_objects(root: ScriptModule, manifest: dict[str, Any]) -> list[ScriptModule]:
    """The rebuilt module of each manifest entry (by its first path from the root)."""
    objs: dict[int, ScriptModule] = {manifest["root"]: root}
    stack = [manifest["root"]]
    while stack:
        i = stack.pop()
        for c in manifest["modules"][i]["submodules"]:
            if c["module"] is not None and c["module"] not in objs:
                objs[c["module"]] = objs[i]._modules[c["name"]]
                stack.append(c["module"])
    return [objs[i] for i in range(len(manifest["modules"]))]


def check_loops(g: Graph, where: str) -> None:
    """A loop with a constant trip count runs at most ``LIMITS.max_trip_count`` rounds; a
    ``while`` loop (the frontend's unbounded trip count) must have a condition that can turn
    false. (Traced graphs have no loops; a scripted ``while`` over run-time values can run
    long, but only runs the graph's ops.)"""
    for n in g.walk():
        if n.kind != Prim.LOOP:
            continue
        trips = known_value(n.inputs[0])
        endless = known_value(n.inputs[1]) is True and known_value(
            n.blocks[0].outputs[0]) is True
        if type(trips) is int and trips > A.LIMITS.max_trip_count and (
                trips != _WHILE_TRIPS or endless):
            raise ArchiveError(f"{where}: a prim::Loop runs {trips} rounds"
                               + (" and its condition never turns false" if endless else "")
                               + f" (the limit for a constant trip count is "
                               f"{A.LIMITS.max_trip_count})")


def check_layer_members(ref: Any, entry: dict[str, Any]) -> None:
    """A built-in layer's ``forward`` finds every attribute it reads that its ``__init__``
    sets (a parameter, buffer, submodule or configuration value of the entry): a layer saved
    without one would fail inside a call."""
    from scriptmod.jit.frontend.library import layer_class
    have = set(ref.config) | {p["name"] for k in ("parameters", "buffers", "submodules")
                              for p in entry[k]}
    cls = layer_class(ref.class_path)
    where = f"manifest: layer {entry['path'] or '<root>'!r} ({ref.class_path})"
    missing = sorted(_layer_needs(cls) - have)
    if missing:
        raise ArchiveError(f"{where} lacks {missing}, which its forward reads")
    for k, kinds in _plain_arguments(cls).items():
        v = ref.config.get(k)
        if k in ref.config and (not isinstance(v, kinds) or (type(v) is bool
                                                             and bool not in kinds)):
            raise ArchiveError(f"{where}: configuration {k!r} is {v!r}; its constructor takes "
                               f"{' or '.join(t.__name__ for t in kinds)}")


_PLAIN = {"int": (int,), "float": (float, int), "bool": (bool,), "str": (str,)}


@functools.lru_cache(maxsize=None)
def _plain_arguments(cls: type) -> dict[str, tuple[type, ...]]:
    """Constructor arguments annotated plainly ``int``, ``float``, ``bool`` or ``str``."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in params:
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation,
                                                                         "__name__", None)
        if ann in _PLAIN:
            out[p.name] = _PLAIN[ann]
    return out


@functools.lru_cache(maxsize=None)
def _layer_needs(cls: type) -> frozenset[str]:
    """``self.<name>`` reads in ``cls.forward`` of names the class's ``__init__`` sets
    (assigned, or registered by a string name), from the installed source."""
    from scriptmod.nn.module import Module
    read = _self_attributes(cls.forward, ast.Load) if cls.forward is not Module.forward else set()
    inits = [k.__dict__["__init__"] for k in cls.__mro__
             if "__init__" in k.__dict__ and k not in (Module, object)]
    set_ = set().union(*(_self_attributes(f, ast.Store) for f in inits))
    return frozenset(n for n in read & set_
                     if not isinstance(inspect.getattr_static(cls, n, None), property))


def _self_attributes(fn: Any, ctx: type) -> set[str]:
    """Names ``fn`` reads (``ast.Load``) or sets (``ast.Store``: assigned, or registered by
    ``register_parameter``/``register_buffer`` with a string) as ``self.<name>``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "self" and isinstance(node.ctx, ctx):
            out.add(node.attr)
        elif ctx is ast.Store and isinstance(node, ast.Call) \
                and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("register_parameter", "register_buffer") \
                and node.args and isinstance(node.args[0], ast.Constant):
            out.add(str(node.args[0].value))
    return out
