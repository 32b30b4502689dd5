"""Typing and small helpers shared by the sections of ``FunctionCompiler``: the operator
and unsupported-syntax tables, the exit-flag names, type fitting (``_fits``,
``_compatible``), storage and aliasing (``_storage``, ``_refine_list``), names a loop
assigns, and the result types of library calls.
"""
from __future__ import annotations

import ast
import typing
from typing import Any

from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim, Value
from scriptmod.ir.types import (AnyType, BoolType, DictType, FloatType, IntType, ListType,
                                NoneType, OptionalType, TensorType, TupleType, Type)
from .. import library
from ..annotations import to_ir_type
from ._aliasing import VIEW_CALLS
from ._sugared import ModuleRef, PyObj, Sugared


# ---- tables: operators, unsupported syntax, exit flags -------------------------------

UNARY_METHODS = frozenset(n for n in S.ops_with(S.UNARY) if not S.get(n).attrs)
_BIN_TENSOR = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
               ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "pow",
               ast.MatMult: "matmul", ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or",
               ast.BitXor: "bitwise_xor"}
_BIN_INT = {ast.Add: "int_add", ast.Sub: "int_sub", ast.Mult: "int_mul",
            ast.FloorDiv: "int_floordiv", ast.Mod: "int_mod"}
_BIN_PY = {ast.Add: "py_add", ast.Sub: "py_sub", ast.Mult: "py_mul", ast.Div: "py_truediv",
           ast.FloorDiv: "py_floordiv", ast.Mod: "py_mod", ast.Pow: "py_pow",
           ast.BitAnd: "py_and", ast.BitOr: "py_or", ast.BitXor: "py_xor"}
_CMP_TENSOR = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
               ast.GtE: "ge"}
_CMP_INT = {ast.Eq: "int_eq", ast.NotEq: "int_ne", ast.Lt: "int_lt", ast.LtE: "int_le",
            ast.Gt: "int_gt", ast.GtE: "int_ge"}
_CMP_PY = {ast.Eq: "py_eq", ast.NotEq: "py_ne", ast.Lt: "py_lt", ast.LtE: "py_le",
           ast.Gt: "py_gt", ast.GtE: "py_ge"}
_UNSUPPORTED = {ast.With: "'with' statements", ast.AsyncWith: "'async with' statements",
                ast.Try: "'try' blocks", ast.Lambda: "lambdas", ast.GeneratorExp: "generators",
                ast.Yield: "generators ('yield')", ast.YieldFrom: "generators ('yield from')",
                ast.Global: "'global' declarations", ast.Nonlocal: "'nonlocal' declarations",
                ast.ClassDef: "class definitions", ast.FunctionDef: "nested functions",
                ast.AsyncFunctionDef: "async functions", ast.Await: "'await'",
                ast.SetComp: "set comprehensions", ast.DictComp: "dict comprehensions",
                ast.Set: "set literals", ast.Delete: "'del' statements",
                ast.Import: "imports", ast.ImportFrom: "imports", ast.Starred: "starred "
                "expressions", ast.NamedExpr: "assignment expressions (':=')"}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "'try' blocks"
if hasattr(ast, "Match"):
    _UNSUPPORTED[ast.Match] = "'match' statements"

_OPS_TEXT = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=",
             ast.Mod: "%=", ast.Pow: "**=", ast.MatMult: "@="}
RET, RETVAL, BROKE, CONT = "$returned", "$retval", "$broke", "$continued"
_FLAGS = (RET, BROKE, CONT)



# ---- small helpers ----------------------------------------------------------------------

def _inline(b: Builder, g: Graph, args: list[Value]) -> Value:
    from scriptmod.ir.graph import clone_node
    env = dict(zip(g.inputs, args))
    anchor = b._anchor
    for n in g.block:
        clone_node(n, b.graph, env).insert_before(anchor)
    return env[g.outputs[0]]


def _retyped(fc: Any, v: Value, t: Type) -> Value:          # fc: a FunctionCompiler
    """``v`` seen as ``t`` (an Optional refined by ``is not None``): a copy through a
    one-output If would cost a node; the frontend retypes through a no-op TupleIndex."""
    tup = fc.b.tuple_([v])
    out = fc.b.tuple_index(tup, 0)
    out.type = t
    return out


_FRESH = frozenset({"matmul", "clone", "cat", "stack", "full", "softmax", "log_softmax", "sum",
                    "mean", "amax", "amin", "prod", "var", "cumsum", "logsumexp", "where",
                    "index_put", "arange", "rand", "randn", "randint", "eye", "linspace",
                    "sort", "topk", "randperm"})


def _name_after(v: Value, variable: str) -> None:
    """The first variable a value is assigned to names it in printouts and logs (``%h``)."""
    if v.debug_name is None and v.node.kind not in (Prim.PARAM, Prim.CONSTANT) \
            and variable.isascii() and not variable.startswith("_"):
        v.debug_name = variable


def _storage(v: Value, aliases: dict[Value, Value | None] | None = None) -> str:
    """Whose memory a tensor value is: "argument" (an input of the function, possibly
    written in place before), "fresh" (an op of this function allocated it, so no other
    name sees it unless the user bound one) or "shared" (a view, a parameter, an element
    of a list, a library call's result: it may alias something else). ``aliases``: module
    calls' results the compiler knows (``FunctionCompiler.aliases``: None for a fresh
    tensor, else the argument it may share memory with)."""
    while v.node.kind == "sm::copy_":
        v = v.node.inputs[0]
    if aliases is not None and v in aliases:
        alias = aliases[v]
        return "fresh" if alias is None else _storage(alias, aliases)
    n = v.node
    if n.kind == Prim.UNINITIALIZED:     # a placeholder on a path that returned: never read
        return "fresh"
    if n.kind == Prim.TUPLE_INDEX and n.inputs[0].node.kind == Prim.TUPLE_CONSTRUCT:
        return _storage(n.inputs[0].node.inputs[n.attrs["index"]], aliases)   # (``_retyped``)
    if n.kind == Prim.IF:                # either branch's: an argument or a fresh tensor
        kinds = {_storage(blk.outputs[v.index], aliases) for blk in n.blocks}
        return "shared" if "shared" in kinds else "argument" if "argument" in kinds else \
            "fresh"                      # (``if not inplace: img = img.clone()``)
    if n.kind == Prim.PARAM:
        if n.owning_block is n.graph.block:
            return "argument"
        loop = n.owning_block.owning_node if n.owning_block is not None else None
        if loop is not None and loop.kind == Prim.LOOP and v.index > 0:
            return _storage(loop.inputs[v.index + 1], aliases)   # a carried value: its first
        return "shared"
    if n.is_op:
        schema = S.REGISTRY.get(n.op_name)
        if schema is not None and (schema.has(S.ELEMENTWISE) or n.op_name in _FRESH):
            return "fresh"
    if n.kind == Prim.CALL_FUNCTION and not n.attrs.get("method"):
        name = n.attrs.get("name", "").rsplit(".", 1)[-1]
        if name not in _VIEWS:
            return "fresh"                                 # a library call: a new tensor
        base = n.inputs[0] if n.inputs and n.attrs.get("args", [])[:1] == [["v", 0]] else None
        # a true view of a tensor this function made is no one else's either (a write
        # through it reaches its base: ``_aliasing``); a conversion (``.float()``) may be the
        # tensor itself or a copy, so a write into it stays refused
        return "fresh" if base is not None and name in VIEW_CALLS and \
            _storage(base, aliases) == "fresh" else "shared"
    return "shared"


# library calls whose result may be (or share memory with) an argument
_VIEWS = frozenset({"view", "view_as", "reshape", "reshape_as", "t", "T", "mT", "H", "transpose",
                    "swapaxes", "swapdims", "permute", "expand", "expand_as", "narrow",
                    "select", "squeeze", "unsqueeze", "flatten", "unflatten", "movedim",
                    "chunk", "split", "unbind", "tensor_split", "detach", "contiguous", "to",
                    "type", "type_as", "float", "double", "half", "int", "long", "bool",
                    "as_strided", "diagonal", "real", "imag", "data", "__getitem__", "cpu",
                    "cuda", "requires_grad_", "view_as_real", "view_as_complex", "align_as",
                    "ravel", "squeeze_", "unsqueeze_"})


def _refine_list(v: Value, t: ListType) -> None:
    """An empty list literal's element type, learnt from its first append: set on the
    literal and on every loop parameter and output carrying it."""
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if id(x) in seen or not (isinstance(x.type, ListType) and x.type.element == AnyType):
            continue
        seen.add(id(x))
        x.type = t
        node = x.node
        if node.kind == "sm::list_slice":
            stack.append(node.inputs[0])
        if node.kind == Prim.PARAM and node.owning_block is not None:     # a loop parameter
            loop = node.owning_block.owning_node
            if loop is not None and loop.kind == Prim.LOOP and x.index > 0:
                stack.append(loop.inputs[x.index + 1])
                if x.index - 1 < len(loop.outputs):       # (added once the body is done)
                    stack.append(loop.outputs[x.index - 1])
        elif node.kind == Prim.LOOP:
            stack.append(node.blocks[0].params[x.index + 1])
        for u in x.uses:
            if u.user.kind == Prim.LOOP and u.index >= 2:
                stack.append(u.user.blocks[0].params[u.index - 1])
                if u.index - 2 < len(u.user.outputs):
                    stack.append(u.user.outputs[u.index - 2])
            elif u.user.kind == Prim.RETURN and u.user.owning_block is not None:
                owner = u.user.owning_block.owning_node
                if owner is not None and owner.kind == Prim.LOOP and 1 <= u.index <= len(
                        owner.outputs):
                    stack.append(owner.outputs[u.index - 1])


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(
                    n.value, ast.Name):
                out.add(n.value.id)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(
                    n.func.value, ast.Name) and n.func.attr == "append":
                out.add(n.func.value.id)
    return out


def _walk_loop_level(st: ast.stmt):
    """The nodes of ``st`` outside nested loops (a nested loop's break is its own)."""
    stack: list[ast.AST] = [st]
    while stack:
        n = stack.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (ast.For, ast.While)):
                stack.append(c)


def _target_names(t: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}


def _holds_tensor(t: Type) -> bool:
    """Whether a value of type ``t`` may hold a tensor: printed through ``py_str``, which
    shows arrays as eager tensors, also inside tuples, lists and dicts."""
    if isinstance(t, TensorType) or t == AnyType:
        return True
    if isinstance(t, TupleType):
        return any(_holds_tensor(e) for e in t.elements)
    if isinstance(t, (ListType, OptionalType)):
        return _holds_tensor(t.element)
    return isinstance(t, DictType) and _holds_tensor(t.value)


def _fits(have: Type, want: Type) -> bool:
    if want == AnyType or have == AnyType or have == want:
        return True
    if isinstance(want, TensorType):
        return isinstance(have, TensorType)
    if isinstance(want, OptionalType):
        return have == NoneType or _fits(have, want.element) or (
            isinstance(have, OptionalType) and _fits(have.element, want.element))
    if want == FloatType:
        return have in (IntType, FloatType)
    if isinstance(want, ListType) and isinstance(have, ListType):
        return have.element == AnyType or _fits(have.element, want.element)
    if isinstance(want, TupleType) and isinstance(have, TupleType):
        return len(want.elements) == len(have.elements) and all(
            _fits(h, w) for h, w in zip(have.elements, want.elements))
    return type(have).__name__ == type(want).__name__ == "DictType" and have == want


def _compatible(a: Type, c: Type) -> bool:
    """Two types one variable may hold on different paths (same kind; shapes may differ)."""
    if a == c or AnyType in (a, c):
        return True
    if isinstance(a, TensorType) and isinstance(c, TensorType):
        return True
    if NoneType in (a, c):
        other = c if a == NoneType else a
        return isinstance(other, OptionalType) or isinstance(other, TensorType)
    if isinstance(a, OptionalType) or isinstance(c, OptionalType):
        ia = a.element if isinstance(a, OptionalType) else a
        ic = c.element if isinstance(c, OptionalType) else c
        return _compatible(ia, ic)
    if isinstance(a, ListType) and isinstance(c, ListType):
        return AnyType in (a.element, c.element) or _compatible(a.element, c.element)
    if isinstance(a, TupleType) and isinstance(c, TupleType):
        return len(a.elements) == len(c.elements) and all(
            _compatible(x, y) for x, y in zip(a.elements, c.elements))
    return False


def _static_is(a: Sugared, c: Sugared) -> bool | None:
    """``x is None`` decided by types: a value that cannot be None is not None."""
    none_a, none_c = _is_none(a), _is_none(c)
    if none_a and none_c:
        return True
    if not (none_a or none_c):
        return None
    other = c if none_a else a
    if isinstance(other, (ModuleRef, PyObj)):     # a submodule, a Python constant: not None
        return False
    t = other.type if isinstance(other, Value) else None
    if t is None or t == AnyType or isinstance(t, OptionalType):
        return None
    return t == NoneType


def _is_none(v: Sugared) -> bool:
    if isinstance(v, PyObj):
        return v.obj is None
    return isinstance(v, Value) and v.node.kind == Prim.CONSTANT and v.type == NoneType


def _shown(name: str) -> str:
    return {RETVAL: "the return value", RET: "return", BROKE: "break"}.get(name, name)


def _pyname(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or \
        type(obj).__name__


# keyword parameters of ``ir.ops.pyfuncs`` rows (after the positional ones), with defaults
_PY_KEYWORDS = {"sorted": ("reverse",), "list.sort": ("reverse",),
                "str.split": ("sep", "maxsplit")}
_PY_DEFAULTS = {"reverse": False, "sep": None, "maxsplit": -1}

_PAIR_RESULTS = frozenset({"sort", "topk", "kthvalue", "mode", "var_mean", "std_mean",
                           "aminmax", "cummax", "cummin", "frexp", "slogdet"})
_PAIR_WITH_DIM = frozenset({"max", "min", "median", "nanmedian"})
_PAIR_FIELDS = {"values": 0, "indices": 1}     # torch.return_types' (values, indices)
_LIST_RESULTS = frozenset({"chunk", "split", "unbind", "tensor_split", "split_with_sizes"})
_INT_RESULTS = frozenset({"dim", "numel", "ndimension", "nelement", "element_size",
                          "get_device"})
_BOOL_RESULTS = frozenset({"is_contiguous", "is_floating_point", "equal", "allclose",
                           "is_complex", "is_nonzero"})


def _layer_result(module: Any, method: str) -> Type:
    """What a built-in layer's method returns, by its annotation (``MultiheadAttention``
    gives ``Tuple[Tensor, Optional[Tensor]]``); a tensor where it has none. A pooling layer
    built with ``return_indices=True`` returns (values, indices)."""
    if method == "forward" and getattr(module, "return_indices", False) is True:
        return TupleType((TensorType(), TensorType()))
    ref = module.__dict__.get("_layer")
    try:
        cls = library.layer_class(ref.class_path) if ref is not None else type(module)
        hint = typing.get_type_hints(getattr(cls, method)).get("return")
        return TensorType() if hint is None else to_ir_type(hint)
    except Exception:                                       # noqa: BLE001
        return TensorType()


_UNIQUE_FLAGS = {"unique": ("sorted", "return_inverse", "return_counts"),
                 "unique_consecutive": ("return_inverse", "return_counts")}


def _static_true(v: Any) -> bool:
    """Whether a call argument is the constant True."""
    if isinstance(v, PyObj):
        return v.obj is True
    return isinstance(v, Value) and v.node.kind == Prim.CONSTANT and \
        v.node.attrs.get("value") is True


def _result_type(name: str, rest: list[Any] | None = None,
                 kwargs: dict[str, Any] | None = None) -> Type:
    """What a library call returns, as far as the frontend must know before expansion
    (the rest is a tensor; expansion gives the precise type). ``rest``: the arguments after
    the tensor (``x.max(1)`` and ``sm.max(x, dim=1)`` give (values, indices), ``x.max(y)``
    a tensor)."""
    pair = TupleType((TensorType(), TensorType()))
    if name in _PAIR_RESULTS:
        return pair
    if name in _PAIR_WITH_DIM and ("dim" in (kwargs or {}) or (rest and isinstance(
            rest[0], Value) and rest[0].type in (IntType, BoolType)) or (
            rest and isinstance(rest[0], PyObj) and type(rest[0].obj) is int)):
        return pair
    if name in _LIST_RESULTS:
        return ListType(TensorType())
    if name == "nonzero" and _static_true((kwargs or {}).get("as_tuple")):
        return ListType(TensorType())          # one index tensor per dim (TorchScript's type)
    if name == "where" and rest is not None and len(rest) == 0 and not kwargs:
        return ListType(TensorType())          # where(cond): nonzero(cond, as_tuple=True)
    if name in _UNIQUE_FLAGS:                  # (values, inverse?, counts?)
        flags = _UNIQUE_FLAGS[name]
        given = [(kwargs or {}).get(f, rest[k] if rest and k < len(rest) else None)
                 for k, f in enumerate(flags) if f != "sorted"]
        extra = sum(_static_true(v) for v in given)
        if extra:
            return TupleType(tuple(TensorType() for _ in range(1 + extra)))
    if name in _INT_RESULTS or (name in ("size", "stride") and (rest or kwargs)):
        return IntType                          # ``x.size(d)`` of a run-time ``d``: an int
    if name in _BOOL_RESULTS:
        return BoolType
    return TensorType()
