"""Output containers the IR has no type for: dicts and namedtuples.

A traced method returning a dict or a namedtuple is recorded as returning a tuple of its
values; the container's *structure* (dict keys, the namedtuple class, where they nest inside
tuples and lists) is kept beside the graph and rebuilt around every call's result. Archives
store the structure as JSON (a namedtuple by its name and fields: loading rebuilds a
namedtuple class of that name, never imports the user's class).

    >>> plain, spec = flatten_output({"y": 1, "h": (2, 3)}, strict=False)
    >>> plain
    (1, (2, 3))
    >>> unflatten(plain, spec)
    {'y': 1, 'h': (2, 3)}
"""
from __future__ import annotations

import collections
import functools
import keyword
import os
import sys
import warnings
from typing import Any, Iterator, Sequence, Tuple

from scriptmod.ir.errors import ArgumentError
from scriptmod.ir.types import AnyType, ListType, NamedTupleType, TupleType, Type
from scriptmod.jit._tracer import TracerWarning, TracingError, _is_traced_arg as is_traced_arg
from scriptmod.tensor import Tensor

# A spec is None (the value as the graph returns it) or one of
#   ("dict", keys, children)  ("namedtuple", cls, children)  ("tuple", children)  ("list", children)
Spec = Any

_CONTAINER_HINT = (
    "this is only valid if the container structure does not change based on the module's "
    "inputs. Consider using a constant container instead (e.g. for `list`, use a `tuple` "
    "instead. for `dict`, use a `NamedTuple` instead). If you absolutely need this and know the "
    "side effects, pass strict=False to trace() to allow this behavior.")
MAX_DEPTH = 64
MAX_NODES = 100_000


def _message(kind: str) -> str:
    return (f"Encountering a {kind} at the output of the tracer might cause the trace to be "
            f"incorrect, {_CONTAINER_HINT}")


def flatten_output(out: Any, strict: bool) -> tuple[Any, Spec]:
    """A traced function's result as the graph can return it, and its structure. Under
    ``strict`` a dict raises and a list warns (PyTorch's rules for the top-level output)."""
    if strict:
        kinds = _kinds(out, 0)
        if "dict" in kinds:
            raise TracingError(_message("dict"))
        if "list" in kinds:
            warnings.warn(TracerWarning(_message("list")), stacklevel=caller_stacklevel())
    return flatten(out)


_JIT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's ``jit.trace(...)`` call (the
    first frame outside ``scriptmod/jit``), so that warning filters by module work."""
    level, f = 1, sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_JIT_DIR):
        level, f = level + 1, f.f_back
    return level


def _kinds(x: Any, depth: int) -> set[str]:
    if depth > MAX_DEPTH:
        return set()
    if isinstance(x, dict):
        return {"dict"}.union(*(_kinds(v, depth + 1) for v in x.values()))
    if isinstance(x, (tuple, list)):
        own = {"list"} if isinstance(x, list) else set()
        return own.union(*(_kinds(v, depth + 1) for v in x))
    return set()


def flatten(x: Any, depth: int = 0) -> tuple[Any, Spec]:
    """Dicts become tuples of their values (in key order), namedtuples plain tuples."""
    if depth > MAX_DEPTH:
        raise TracingError(f"the traced output nests containers more than {MAX_DEPTH} deep")
    if isinstance(x, dict):
        for k in x:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TracingError(f"a dict at the output of a traced function must have str or "
                                   f"int keys, got a {type(k).__name__} key {k!r}")
        values, specs = _flatten_items(x.values(), depth)
        return tuple(values), ("dict", tuple(x), specs)
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        values, specs = _flatten_items(x, depth)
        return tuple(values), ("namedtuple", type(x), specs)
    if isinstance(x, (tuple, list)):
        values, specs = _flatten_items(x, depth)
        plain = tuple(values) if isinstance(x, tuple) else values
        if all(s is None for s in specs):
            return (x if all(a is b for a, b in zip(values, x)) else plain), None
        return plain, ("tuple" if isinstance(x, tuple) else "list", specs)
    return x, None


def _flatten_items(items: Any, depth: int) -> tuple[list[Any], tuple[Spec, ...]]:
    pairs = [flatten(v, depth + 1) for v in items]
    return [p[0] for p in pairs], tuple(p[1] for p in pairs)


def unflatten(x: Any, spec: Spec) -> Any:
    """Rebuild the container ``spec`` describes around ``x`` (what the graph returned)."""
    if spec is None:
        return x
    kind, children = spec[0], spec[-1]
    if not isinstance(x, (tuple, list)) or len(x) != len(children):
        raise RuntimeError(f"traced output {type(x).__name__} does not fit the recorded {kind} "
                           f"of {len(children)} item(s)")
    items = [unflatten(v, s) for v, s in zip(x, children)]
    if kind == "dict":
        return dict(zip(spec[1], items))
    if kind == "namedtuple":
        return spec[1](*items)
    return tuple(items) if kind == "tuple" else items


def spec_of_type(t: Type) -> Spec:
    """The structure a scripted method's declared or built result type ``t`` gives its
    output: a ``NamedTuple`` (also inside tuples) comes back as its class, as TorchScript
    returns it."""
    if not isinstance(t, TupleType):
        return None
    children = tuple(spec_of_type(e) for e in t.elements)
    if isinstance(t, NamedTupleType) and isinstance(t.cls, type):
        return ("namedtuple", t.cls, children)
    return None if all(c is None for c in children) else ("tuple", children)


# ---- archives ------------------------------------------------------------------------------
def to_json(spec: Spec) -> Any:
    """``null`` | ``["dict", keys, children]`` | ``["namedtuple", name, fields, children]`` |
    ``["tuple", children]`` | ``["list", children]``."""
    if spec is None:
        return None
    children = [to_json(s) for s in spec[-1]]
    if spec[0] == "dict":
        return ["dict", list(spec[1]), children]
    if spec[0] == "namedtuple":
        cls = spec[1]
        return ["namedtuple", _type_name(cls), list(cls._fields), children]
    return [spec[0], children]


def _type_name(cls: type) -> str:
    name = cls.__name__
    return name if name.isidentifier() and not keyword.iskeyword(name) else "NamedTuple"


def from_json(data: Any, out_type: Type, where: str) -> Spec:
    """A validated spec from an archive; it must fit the graph's output type ``out_type``.
    Raises ``ValueError`` naming ``where``."""
    count = [0]
    return _from_json(data, out_type, where, 0, count)


def _from_json(data: Any, t: Type, where: str, depth: int, count: list[int]) -> Spec:
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise ValueError(f"{where}: the output structure is nested too deep or too large")
    if data is None:
        return None
    if (not isinstance(data, list) or not data or not isinstance(data[0], str)
            or data[0] not in _ARITY or len(data) != _ARITY[data[0]]):
        raise ValueError(f"{where}: expected null or a [kind, ...] list with kind one of "
                         f"{sorted(_ARITY)}, got {str(data)[:80]}")
    kind, children = data[0], data[-1]
    if not isinstance(children, list):
        raise ValueError(f"{where}: the items of a {kind} must be a list")
    if t == AnyType:               # a list of unlike items: unflatten checks each length
        elements = [AnyType] * len(children)
    elif kind == "list":
        if not isinstance(t, ListType):
            raise ValueError(f"{where}: a list structure for an output typed {t!r}")
        elements = [t.element] * len(children)
    else:
        if not isinstance(t, TupleType) or len(t.elements) != len(children):
            raise ValueError(f"{where}: a {kind} of {len(children)} item(s) for an output typed "
                             f"{t!r}")
        elements = list(t.elements)
    specs = tuple(_from_json(c, e, f"{where}[{i}]", depth + 1, count)
                  for i, (c, e) in enumerate(zip(children, elements)))
    if kind == "dict":
        return ("dict", _keys(data[1], len(children), where), specs)
    if kind == "namedtuple":
        return ("namedtuple", _namedtuple_class(*_fields(data[1], data[2], len(children), where)),
                specs)
    return (kind, specs)


_ARITY = {"dict": 3, "namedtuple": 4, "tuple": 2, "list": 2}


def _keys(keys: Any, n: int, where: str) -> tuple:
    if (not isinstance(keys, list) or len(keys) != n   # types first: set() needs hashables
            or not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in keys)
            or len(set(keys)) != n or any(isinstance(k, str) and len(k) > 1000 for k in keys)):
        raise ValueError(f"{where}: dict keys must be {n} distinct strings or integers")
    return tuple(keys)


def _fields(name: Any, fields: Any, n: int, where: str) -> tuple[str, tuple[str, ...]]:
    def ok(s: Any) -> bool:
        return (isinstance(s, str) and s.isidentifier() and not keyword.iskeyword(s)
                and not s.startswith("_") and len(s) <= 255)
    if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and len(name) <= 255):
        raise ValueError(f"{where}: namedtuple name {str(name)[:80]!r} is not an identifier")
    if not isinstance(fields, list) or len(fields) != n or not all(ok(f) for f in fields) \
            or len(set(fields)) != n:
        raise ValueError(f"{where}: namedtuple fields must be {n} distinct identifiers not "
                         f"starting with '_'")
    return name, tuple(fields)


@functools.lru_cache(maxsize=256)
def _namedtuple_class(name: str, fields: tuple[str, ...]) -> type:
    """One class per (name, fields), so that outputs of loaded modules share a type."""
    return collections.namedtuple(name, fields)  # type: ignore[misc]


# ---- structured inputs ---------------------------------------------------------------------
# An argument that is a dict (PyTorch's ``Dict[str, Tensor]``) or a nested tuple/list of
# tensors reaches the graph as its tensor leaves, one graph input each (dict values in the
# traced key order). Its spec has the output format, with ``None`` for a tensor leaf; a
# method's input spec is one ``(name, spec)`` per graph-visible argument (``None``: as is).
InputSpec = Tuple[Tuple[str, Spec], ...]


def flatten_inputs(names: list[str], args: list[Any]) -> tuple[list[str], list[Any],
                                                                 InputSpec | None]:
    """Graph-input names and values for a traced call's arguments, and the input spec
    (``None`` when no argument is structured, the common case)."""
    if not any(_structured(a) for a in args):
        return names, args, None
    leaf_names: list[str] = []
    leaves: list[Any] = []
    spec: list[tuple[str, Spec]] = []
    taken = set(names)
    for name, a in zip(names, args):
        if not _structured(a):
            leaf_names.append(name)
            leaves.append(a)
            if is_traced_arg(a):
                spec.append((name, None))
            continue
        paths: list[list[str]] = []
        s = _flatten_input(a, name, [], leaves, paths, 0)
        leaf_names += [_leaf_name(name, p, taken) for p in paths]
        spec.append((name, s))
    return leaf_names, leaves, tuple(spec)


def _structured(a: Any) -> bool:
    """A dict or nested container holding tensors (a flat tuple of tensors is a graph input
    of its own, as before)."""
    return not is_traced_arg(a) and holds_tensor(a)


def holds_tensor(x: Any) -> bool:
    if isinstance(x, Tensor):
        return True
    if isinstance(x, dict):
        return any(holds_tensor(v) for v in x.values())
    return isinstance(x, (tuple, list)) and any(holds_tensor(v) for v in x)


def _flatten_input(x: Any, where: str, path: list[str], leaves: list[Any],
                   paths: list[list[str]], depth: int) -> Spec:
    if depth > MAX_DEPTH:
        raise TracingError(f"argument {where!r} nests containers more than {MAX_DEPTH} deep")
    if isinstance(x, Tensor):
        leaves.append(x)
        paths.append(path)
        return None
    if isinstance(x, dict):
        for k in x:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TracingError(f"argument {where!r}: a dict input must have str or int keys, "
                                   f"got a {type(k).__name__} key {k!r}")
        return ("dict", tuple(x), tuple(
            _flatten_input(v, where, path + [str(k)], leaves, paths, depth + 1)
            for k, v in x.items()))
    if isinstance(x, (tuple, list)):
        return ("list" if isinstance(x, list) else "tuple", tuple(
            _flatten_input(v, where, path + [str(i)], leaves, paths, depth + 1)
            for i, v in enumerate(x)))
    raise TracingError(f"argument {where!r} holds a value of type {type(x).__name__} "
                       f"({str(x)[:40]}) beside "
                       f"tensors: only Tensors and (possibly nested) Lists, Dicts, and Tuples "
                       f"of Tensors can be traced (PyTorch's rule); leave it out of the example "
                       f"inputs (a default value or a module attribute) or use jit.script")


def _leaf_name(name: str, path: list[str], taken: set[str]) -> str:
    """An identifier for a leaf's graph input: ``d_a`` for ``d["a"]``, ``t_0_1``."""
    parts = [p if p.isidentifier() or p.isdigit() else "k" for p in path]
    base = "_".join([name] + parts)[:200]
    out, n = base, 1
    while out in taken:
        out, n = f"{base}_{n}", n + 1
    taken.add(out)
    return out


def bind_keywords(owner: str, names: Sequence[str], args: Sequence[Any],
                  kwargs: dict[str, Any], defaults: dict[str, Any] | None = None) -> list[Any]:
    """``args``, then the remaining ``names`` taken from ``kwargs`` (consumed) or
    ``defaults``; an ``ArgumentError`` naming a missing or unknown keyword."""
    takes = ", ".join(names) or "no arguments"
    values = list(args)
    for name in names[len(args):]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif defaults is not None and name in defaults:
            values.append(defaults[name])
        else:
            raise ArgumentError(f"{owner} missing argument {name!r} (it takes {takes})")
    if kwargs:
        raise ArgumentError(f"{owner} got unexpected keyword argument(s) {sorted(kwargs)} "
                            f"(it takes {takes})")
    return values


def bind_structured(owner: str, spec: InputSpec, args: Sequence[Any],
                    kwargs: dict[str, Any]) -> list[Any]:
    """A call's arguments flattened against the recorded input spec; ``ArgumentError``
    naming the argument when one is missing or does not fit. A dict may hold more keys
    than traced (PyTorch reads the traced keys and ignores the rest)."""
    if len(args) > len(spec):
        raise ArgumentError(f"{owner}: expected at most {len(spec)} argument(s) "
                            f"({', '.join(n for n, _ in spec)}), got {len(args)}")
    values = bind_keywords(owner, [n for n, _ in spec], args, kwargs)
    out: list[Any] = []
    for (name, s), v in zip(spec, values):
        if s is None:
            out.append(v)
        else:
            _leaves_of(v, s, f"{owner}: argument {name!r}", name, out)
    return out


def _leaves_of(x: Any, spec: Spec, where: str, path: str, out: list[Any]) -> None:
    if spec is None:
        if not isinstance(x, Tensor):
            raise ArgumentError(f"{where}: expected a Tensor at {path}, got {type(x).__name__}")
        out.append(x)
        return
    kind, children = spec[0], spec[-1]
    if kind == "dict":
        if not isinstance(x, dict):
            raise ArgumentError(f"{where}: expected a dict with keys {list(spec[1])} at {path} "
                                f"(as traced), got {type(x).__name__}")
        missing = [k for k in spec[1] if k not in x]
        if missing:
            raise ArgumentError(f"{where}: the dict at {path} lacks key(s) {missing} (traced "
                                f"with keys {list(spec[1])}, got {list(x)})")
        for k, s in zip(spec[1], children):
            _leaves_of(x[k], s, where, f"{path}[{k!r}]", out)
        return
    if not isinstance(x, (tuple, list)) or len(x) != len(children):
        got = f"a {type(x).__name__} of {len(x)}" if isinstance(x, (tuple, list)) \
            else f"a {type(x).__name__}"
        raise ArgumentError(f"{where}: expected a {kind} of {len(children)} item(s) at {path} "
                            f"(as traced), got {got}")
    for i, (v, s) in enumerate(zip(x, children)):
        _leaves_of(v, s, where, f"{path}[{i}]", out)


def unflatten_inputs(leaves: Sequence[Any], spec: InputSpec) -> list[Any]:
    """The arguments a call with ``spec`` passes, rebuilt from the graph's leaf inputs (a
    hooked submodule call runs through ``Module.__call__`` with what eager code passed)."""
    it = iter(leaves)
    return [next(it) if s is None else _rebuild(it, s) for _, s in spec]


def _rebuild(it: Iterator[Any], spec: Spec) -> Any:
    if spec is None:
        return next(it)
    items = [_rebuild(it, s) for s in spec[-1]]
    if spec[0] == "dict":
        return dict(zip(spec[1], items))
    return items if spec[0] == "list" else tuple(items)


def leaf_count(spec: Spec) -> int:
    return 1 if spec is None else sum(leaf_count(s) for s in spec[-1])


def input_spec_to_json(spec: InputSpec) -> Any:
    """``[[name, structure], ...]``, one per graph-visible argument."""
    return [[name, to_json(s)] for name, s in spec]


def input_spec_from_json(data: Any, n_inputs: int, where: str) -> InputSpec:
    """A validated input spec from an archive: distinct identifier names, structures as for
    outputs (no namedtuples), leaves adding up to the graph's ``n_inputs`` inputs. Raises
    ``ValueError`` naming ``where``."""
    if not isinstance(data, list) or len(data) > n_inputs:
        raise ValueError(f"{where}: expected a list of at most {n_inputs} [name, structure] "
                         f"pairs, got {str(data)[:80]}")
    out: list[tuple[str, Spec]] = []
    for i, pair in enumerate(data):
        if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str)
                or not pair[0].isidentifier() or len(pair[0]) > 255):
            raise ValueError(f"{where}[{i}]: expected [identifier, structure], got "
                             f"{str(pair)[:80]}")
        spec = from_json(pair[1], AnyType, f"{where}[{i}]")
        if _has_namedtuple(spec):
            raise ValueError(f"{where}[{i}]: an input structure has no namedtuples")
        out.append((pair[0], spec))
    if len({n for n, _ in out}) != len(out):
        raise ValueError(f"{where}: argument names must be distinct")
    total = sum(leaf_count(s) for _, s in out)
    if total != n_inputs:
        raise ValueError(f"{where}: the structures hold {total} tensor(s), the graph takes "
                         f"{n_inputs} input(s)")
    return tuple(out)


def _has_namedtuple(spec: Spec) -> bool:
    return spec is not None and (spec[0] == "namedtuple" or
                                 any(_has_namedtuple(s) for s in spec[-1]))
