"""Library calls at symbolic types: a scripted ``x.reshape(b * t, d)``, ``self.fc(h)`` or
``F.gelu(h)`` whose tensor arguments have symbolic dims (``Float(B, T, 16)``) or whose int
arguments are symbolic sizes (``b * t`` is ``B*T``) expands once for every size of its
symbols, as a traced call does (issue 37).

The function is traced on stand-ins at a concrete *binding* of the symbols (sizes >= 2, none
equal to another size of the call), its symbolic int arguments as int graph inputs of the
trace, wired to the int values of the scripted graph (so ``b * t`` is computed at run time,
never baked). Sizes the function reads from its tensors are ``sm::size`` of them, so the
spliced ops follow the call's symbolic types when the host graph types them.

A library function that bakes a size (``range(n)`` unrolled, ``int(n)``, an op attribute
computed from a shape, a branch on a size) records something else at another binding: the
call is traced at two bindings, and the expansion is refused unless both record the same
ops. It is refused too when the spliced ops do not type at the symbolic types or leave a
guard the symbols do not decide. A refused call stays a run-time library call
(``library.expand_call``), so the symbolic specialization does not type and the executor
specializes each size concretely, as before.

The first binding of ``B`` and ``T`` for a call whose symbolic dims are ``B*T`` and ``T-1``
and whose other sizes are 16 and 13 (13 is taken, and ``T = 17`` would make ``T-1`` 16):

    >>> sorted(_binding(["B", "T"], ["B*T", "T-1"], {16, 13}, _POOLS[0][0]).items())
    [('B', 17), ('T', 19)]
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from scriptmod._traced_int import TracedInt
from scriptmod.ir.graph import Graph, Node, Value, known_value
from scriptmod.ir.printer import is_payload
from scriptmod.ir.symdims import evaluate, symbols
from scriptmod.jit._tracer import Tracer
from scriptmod.tensor import Tensor
from .errors import FrontendError
from .library import SymbolicSize, SymbolicTensor, _module_of, _Refused, _swap, \
    insert_clones, replace_call, resolve, trace_function, trace_layer, zeros_of

# The two bindings a call is traced at, tried in this order: odd primes (no size divides
# another) against twice primes (even, and of another residue modulo 3: code whose ops
# depend on those records differently at the two), then sizes with many divisors (for code
# that splits a size: heads, patches, halves).
_POOLS = (((11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61),
           (22, 26, 34, 38, 46, 58, 62, 74, 82, 86, 94, 106, 118, 122)),
          ((24, 36, 48, 60, 72, 84, 96, 108), (40, 80, 120, 160, 200, 240, 280, 320)))
_MAX_STANDIN = 1 << 24                    # elements of one stand-in tensor


def expand_symbolic(node: Node, owner: Any, args: list, kwargs: dict,
                    tensors: dict[Value, Any], sizes: dict[Value, SymbolicSize],
                    where: str) -> list[Node]:
    """Splice the call's ops traced at a binding of its symbols (the module docstring);
    a ``FrontendError`` saying why when it cannot serve every size of them."""
    name = node.attrs["name"]
    record = _recorder(node, owner, args, kwargs, tensors, sizes, where)
    shapes = [t.type.shape for t in tensors.values() if isinstance(t, SymbolicTensor)]
    dims = [d for shape in shapes for d in shape if isinstance(d, str)] + \
        [s.dim for s in sizes.values()]
    names = sorted(set().union(*(symbols(d) for d in dims)))
    fixed = {d for t in tensors.values() for d in _shape(t) if type(d) is int} | \
        {a for a in _leaves(args, kwargs) if type(a) is int}
    refused: BaseException | None = None
    for pools in _POOLS:
        pair = [_binding(names, dims, fixed, pool) for pool in pools]
        if None in pair or any(math.prod(evaluate(d, env) for d in s) > _MAX_STANDIN
                               for env in pair for s in shapes):   # type: ignore[arg-type]
            continue
        try:
            (first, inputs), (second, _) = record(pair[0]), record(pair[1])
        except _Refused as e:            # no such sizes for it (T must be even, say)
            refused = e.original
            continue
        if _recording(first) != _recording(second):
            raise FrontendError(f"{where}: {name} fixes a size of {', '.join(names)} (it records "
                                f"other ops at other sizes): each size specializes")
        return _checked_splice(node, first, inputs, names, where)
    why = refused or f"no sizes for them keep its stand-ins under {_MAX_STANDIN} elements"
    raise FrontendError(f"{where}: {name} does not trace at sizes of {', '.join(names)} "
                        f"({why}): each size specializes")


Recorder = Callable[[dict[str, int]], tuple[Graph, list[Value]]]


def _recorder(node: Node, owner: Any, args: list, kwargs: dict, tensors: dict[Value, Any],
              sizes: dict[Value, SymbolicSize], where: str) -> Recorder:
    """binding -> (the call traced with its symbols at those sizes, the host Values its
    graph inputs stand for)."""
    method = node.attrs.get("method")
    if method and sizes:
        raise FrontendError(f"{where}: {node.attrs['name']}: a layer call's int argument is a "
                            f"symbolic size ({', '.join(s.dim for s in sizes.values())})")
    module = _module_of(owner, node.inputs[0], where) if method else None
    fn = None if method else resolve(node.attrs["name"])

    def record(env: dict[str, int]) -> tuple[Graph, list[Value]]:
        tracer = Tracer(None)
        bound = {v: _standin_at(t, env) for v, t in tensors.items()}
        swap: dict[int, Any] = {id(t): bound[v] for v, t in tensors.items()}
        swap.update({id(s): TracedInt(evaluate(s.dim, env), tracer, _unbound(s.dim, where),
                                      s.dim) for s in sizes.values()})
        a = [_swap(x, swap) for x in args]
        kw = {k: _swap(x, swap) for k, x in kwargs.items()}
        if module is not None:
            graph, inputs = trace_layer(module, method, a, kw, bound, where)
            return graph, [node.inputs[0]] + inputs
        given = list(bound.values()) + [swap[id(s)] for s in sizes.values()]
        return trace_function(fn, a, kw, given, tracer), list(bound) + list(sizes)   # type: ignore
    return record


def _standin_at(t: Any, env: dict[str, int]) -> Tensor:
    if not isinstance(t, SymbolicTensor):
        return t                                   # a concrete stand-in serves every binding
    return zeros_of(t.type, tuple(evaluate(d, env) for d in t.type.shape))  # type: ignore


def _unbound(dim: str, where: str) -> Callable[[Any], Value]:
    def make(frame: Any) -> Value:
        raise FrontendError(f"{where}: the symbolic size {dim} reaches a nested call")
    return make


def _shape(t: Any) -> tuple:
    if isinstance(t, SymbolicTensor):
        return t.type.shape                        # type: ignore[return-value]
    return tuple(t.shape) if isinstance(t, Tensor) else ()


def _leaves(args: list, kwargs: dict) -> Iterator[Any]:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from _leaves(list(a), {})
        else:
            yield a


def _binding(names: Sequence[str], dims: Sequence[Any], fixed: set,
             pool: Sequence[int]) -> dict[str, int] | None:
    """``names`` bound to consecutive sizes of ``pool``: every dim of the call >= 2, and,
    where the pool allows, no dim equal to a fixed size of the call or to another dim (a
    library's unrecorded ``if a == b`` then decides as at most sizes). None when none is."""
    values = [v for v in pool if v not in fixed]
    k = len(names)
    envs = [dict(zip(names, values[i:i + k])) for i in range(len(values) - k + 1)]
    valid = [e for e in envs if all(v >= 2 for v in _values(dims, e))]
    clean = [e for e in valid if _distinct(_values(set(dims), e), fixed)]
    return (clean or valid or [None])[0]


def _values(dims: Iterable[Any], env: dict[str, int]) -> list[int]:
    return [evaluate(d, env) for d in dims]


def _distinct(values: list[int], fixed: set) -> bool:
    return len(set(values)) == len(values) and not set(values) & fixed


def _recording(g: Graph) -> list:
    """What ``g`` records, apart from its types: per node its kind, attributes and the
    positions of its inputs among the values defined before it (two traces of one call
    at two bindings record the same ops exactly when this is equal)."""
    number: dict[Value, int] = {v: i for i, v in enumerate(g.inputs)}
    out: list = []

    def block(nodes: Iterable[Node]) -> None:
        for n in nodes:
            out.append((n.kind, sorted((k, _attr(v)) for k, v in n.attrs.items()),
                        [number.get(v, -1) for v in n.inputs], len(n.outputs)))
            for b in n.blocks:
                number.update((p, len(number)) for p in b.params)
                block(b)
                out.append([number.get(v, -1) for v in b.outputs])
            number.update((o, len(number)) for o in n.outputs)
    block(g.block)
    out.append([number.get(v, -1) for v in g.outputs])
    return out


def _attr(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_attr(v) for v in value]
    if isinstance(value, Graph):
        return _recording(value)
    if is_payload(value):                          # a tensor constant: its bytes
        data = value.get() if not isinstance(value, np.ndarray) and hasattr(value, "get") \
            else np.asarray(value)
        return str(data.dtype), data.shape, data.tobytes()
    if isinstance(value, float):
        return "float", repr(value)                # nan equals itself here
    return type(value).__name__, value


def _checked_splice(node: Node, g: Graph, inputs: list[Value], names: list[str],
                    where: str) -> list[Node]:
    """Splice ``g`` and type its ops at the call's symbolic types; taken back (the call
    stays) when they do not type or a guard among them is not decided for every size."""
    from scriptmod.ir.passes.shapes import type_node      # noqa: PLC0415
    made, result = insert_clones(node, g, inputs, where)
    try:
        for n in made:
            type_node(n)
        undecided = [n.attrs.get("what", "a size check") for m in made for n in m.walk()
                     if n.kind == "sm::guard" and known_value(n.inputs[0]) is not True]
        if undecided:
            raise FrontendError(f"{where}: {node.attrs['name']} checks {undecided[0]}, which "
                                f"holds only at some sizes of {', '.join(names)}")
    except Exception as e:
        for n in reversed(made):
            n.destroy()
        if isinstance(e, FrontendError):
            raise
        raise FrontendError(f"{where}: {node.attrs['name']} does not type at the symbolic "
                            f"sizes: {e}") from e
    replace_call(node, result, made)
    return made
