"""Python source of a function or method -> an IR graph with structured control flow.

One ``FunctionCompiler`` per function: it walks the ``ast`` of the source, keeps an
environment of SSA values per name, and builds nodes with ``ir.builder.Builder``. Control
flow follows TorchScript's shape: ``if`` becomes ``prim::If`` whose outputs are the
variables both branches (re)define; ``for``/``while`` become ``prim::Loop`` carrying the
variables the body assigns. ``break``, ``continue`` and ``return`` inside branches and
loops are rewritten with flags (the "exit transform"): after a statement that may exit,
the rest of the block runs under ``if not <exited>``, and a loop's condition includes
``not broke and not returned``.

Static types: every value has its IR type; a name keeps one type (a variable that changes
type, branches that give different types and a wrong argument type at a call are
``FrontendError``). Tensor shapes are unknown here (``Tensor``); the executor specializes
the graph per input signature, as for traced graphs.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from scriptmod._device import device as Device
from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder, join_types
from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Graph, Node, Prim, Value
from scriptmod.ir.ops import pyfuncs
from scriptmod.ir.types import (AnyType, BoolType, DictType, FloatType, IntType, ListType,
                                ModuleType, NoneType, NumberType, OptionalType, StrType,
                                TensorType, TupleType, Type)
from scriptmod.tensor import Tensor
from . import library
from .annotations import AnnotationError, to_ir_type
from .errors import FrontendError, SourceRange

UNARY_METHODS = frozenset(n for n in S.ops_with(S.UNARY) if not S.get(n).attrs)
_BIN_TENSOR = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
               ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "pow",
               ast.MatMult: "matmul", ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or",
               ast.BitXor: "bitwise_xor"}
_BIN_INT = {ast.Add: "int_add", ast.Sub: "int_sub", ast.Mult: "int_mul",
            ast.FloorDiv: "int_floordiv", ast.Mod: "int_mod"}
_BIN_PY = {ast.Add: "py_add", ast.Sub: "py_sub", ast.Mult: "py_mul", ast.Div: "py_truediv",
           ast.FloorDiv: "py_floordiv", ast.Mod: "py_mod", ast.Pow: "py_pow"}
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


# ---- sugared values: what a name or attribute can be besides an IR value ------------------

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


Sugared = Any   # Value | PyObj | ModuleRef | Method


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


class FunctionCompiler:
    """Compiles one function (or one method of ``module``) to a graph."""

    def __init__(self, fn: Any, ctx: Context, module: Any = None, name: str | None = None) -> None:
        self.fn = fn
        self.ctx = ctx
        self.module = module
        self.name = name or fn.__name__
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise FrontendError(f"cannot script {self.name!r}: its source is not available "
                                f"({e})") from None
        self.lines = lines
        self.first = first
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        tree = ast.parse(textwrap.dedent("".join(lines)))
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not defs:
            raise FrontendError(f"cannot script {self.name!r}: no 'def' found in its source")
        self.fdef = defs[0]
        self.globals = getattr(fn, "__globals__", {})
        self.closure = self._closure()
        self.graph = Graph()
        self.b = Builder(self.graph)
        self.env: dict[str, Value | Sugared] = {}
        self.return_type: Type | None = None
        self.loop_depth = 0
        self.placeholders: set[Value] = set()

    # ---- entry --------------------------------------------------------------------------
    def compile(self) -> Graph:
        f = self.fdef
        if isinstance(f, ast.AsyncFunctionDef):
            raise self.error("async functions are not supported", f)
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            bad = a.vararg or a.kwarg or (a.kwonlyargs or a.posonlyargs)[0]
            raise self.error("*args, **kwargs, keyword-only and positional-only parameters "
                             "are not supported in scripted functions", bad)
        hints = self._hints()
        params = list(a.args)
        if self.module is not None:
            if not params:
                raise self.error("a method needs 'self'", f)
            me = params.pop(0)
            from scriptmod.jit._tracer import class_name
            v = self.b.input(ModuleType(class_name(self.module)), me.arg)
            self.env[me.arg] = ModuleRef(v, self.module)
        self.arg_names = [p.arg for p in params]
        self.defaults = self._defaults(params)
        for p in params:
            t = hints.get(p.arg, TensorType())
            self.env[p.arg] = self.b.input(t, p.arg)
        self.return_type = hints.get("return")
        self.env[RET] = self.const(False)
        exits = self.block(f.body)
        self.b.ret(self._final_return(f, exits))
        return self.graph

    def _defaults(self, params: list[ast.arg]) -> dict[str, Any]:
        """Parameter defaults (None, int, float, bool, str or a tuple of them)."""
        values = getattr(self.fn, "__defaults__", None) or ()
        names = [p.arg for p in params][len(params) - len(values):] if values else []
        out = {}
        for name, v in zip(names, values):
            if not (v is None or type(v) in (int, float, bool, str) or (
                    isinstance(v, tuple) and all(type(i) in (int, float, bool, str)
                                                 for i in v))):
                raise self.error(f"the default of '{name}' must be None, an int, float, bool, "
                                 f"str or a tuple of them, got {type(v).__name__}", self.fdef)
            out[name] = v
        return out

    def _final_return(self, f: ast.FunctionDef, exits: int) -> Value:
        ret = self.env.get(RETVAL)
        if ret is None:                                    # never returns a value: None
            return self.const(None)
        if exits in (Exits.ALWAYS, Exits.TERMINAL) or ret.type == NoneType:
            return ret
        # a path falls off the end, where Python returns None
        raise self.error(f"function '{self.name}' does not return a value on every path (it "
                         f"returns {ret.type!r} on some); add a return at the end", f)

    def _hints(self) -> dict[str, Type]:
        out: dict[str, Type] = {}
        try:
            hints = typing.get_type_hints(self.fn, localns=self.closure)   # as TorchScript
        except Exception as e:                       # a name in an annotation is undefined
            raise self.error(f"cannot resolve the annotations of '{self.name}': {e}",
                             self.fdef) from None
        for k, ann in hints.items():
            node = self.fdef.returns if k == "return" else next(
                (p.annotation for p in self.fdef.args.args if p.arg == k), self.fdef)
            try:
                out[k] = to_ir_type(ann)
            except AnnotationError as e:
                raise self.error(str(e), node or self.fdef) from None
        return out

    def _closure(self) -> dict[str, Any]:
        code = getattr(self.fn, "__code__", None)
        cells = getattr(self.fn, "__closure__", None) or ()
        out = {}
        for name, cell in zip(code.co_freevars if code else (), cells):
            try:
                out[name] = cell.cell_contents
            except ValueError:
                continue
        return out

    # ---- helpers ------------------------------------------------------------------------
    def where(self, node: ast.AST) -> SourceRange:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1].rstrip("\n") if 0 < line <= len(self.lines) else ""
        start = getattr(node, "col_offset", 0) + self.indent
        end_line = getattr(node, "end_lineno", line)
        end = (getattr(node, "end_col_offset", start) + self.indent) if end_line == line \
            else len(text)
        return SourceRange(self.filename, self.first + line - 1, text, start, end)

    def error(self, message: str, node: ast.AST) -> FrontendError:
        return FrontendError(message, self.where(node))

    def source(self, node: ast.AST) -> str:
        import os
        return f"{os.path.basename(self.filename)}:{self.first + getattr(node, 'lineno', 1) - 1}"

    def const(self, value: Any) -> Value:
        return self.b.constant(value, NoneType if value is None else None)

    def op(self, name: str, *args: Any, node: ast.AST | None = None, **attrs: Any) -> Value:
        try:
            return self.b.op(name, *args, **attrs)
        except FrontendError:
            raise
        except Exception as e:
            if node is None:
                raise
            raise self.error(f"{name}: {e}", node) from None

    def value(self, x: Sugared, node: ast.AST) -> Value:
        """``x`` as an IR value (a Python constant becomes a Constant)."""
        if isinstance(x, Value):
            return x
        if isinstance(x, PyObj):
            obj = x.obj
            if obj is None or type(obj) in (int, float, bool, str):
                return self.const(obj)
            if isinstance(obj, DType):
                return self.const(obj)
            if isinstance(obj, Device):
                return self.const(str(obj))
            if isinstance(obj, (tuple, list)) and all(
                    o is None or type(o) in (int, float, bool, str) for o in obj):
                vals = [self.const(o) for o in obj]
                return self.b.tuple_(vals) if isinstance(obj, tuple) else self.b.list_(vals)
            raise self.error(f"a {type(obj).__name__} cannot be used as a value in scripted "
                             f"code", node)
        if isinstance(x, ModuleRef):
            raise self.error("a module cannot be used as a value here (call it, or read one "
                             "of its attributes)", node)
        raise self.error("this cannot be used as a value in scripted code", node)

    # ---- statements ---------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> int:
        """Compile statements in order; returns whether they exit (Exits)."""
        for k, st in enumerate(stmts):
            exits = self.stmt(st)
            if exits in (Exits.ALWAYS, Exits.TERMINAL):
                return exits
            if exits == Exits.MAY and k + 1 < len(stmts):
                rest = stmts[k + 1:]
                cond = self.not_exited(st)
                status: list[int] = []

                def run_rest() -> int:
                    status.append(self.block(rest))
                    return status[0]
                self.if_(cond, run_rest, lambda: Exits.ALWAYS, st)
                # the false branch is the path that already exited
                return Exits.ALWAYS if status[0] in (Exits.ALWAYS, Exits.TERMINAL) else Exits.MAY
            if exits == Exits.MAY:
                return Exits.MAY
        return Exits.NEVER

    def not_exited(self, node: ast.AST) -> Value:
        flags = [self.env[f] for f in _FLAGS if isinstance(self.env.get(f), Value)
                 and self.static_truth(self.env[f]) is not False]
        out: Value | None = None
        for f in flags:
            n = self.op("py_not", f, node=node)
            out = n if out is None else self._and(out, n, node)
        return out if out is not None else self.const(True)

    def _and(self, a: Value, c: Value, node: ast.AST) -> Value:
        (r,) = self.b.if_(a, lambda: [c], lambda: [self.const(False)])
        return r

    def stmt(self, st: ast.stmt) -> int:
        for t, what in _UNSUPPORTED.items():
            if isinstance(st, t):
                raise self.error(f"{what} are not supported in scripted code", st)
        self.b.source = self.source(st)
        method = getattr(self, f"stmt_{type(st).__name__}", None)
        if method is None:
            raise self.error(f"'{type(st).__name__}' statements are not supported in "
                             f"scripted code", st)
        return method(st) or Exits.NEVER

    def stmt_Pass(self, st: ast.Pass) -> int:
        return Exits.NEVER

    def stmt_Expr(self, st: ast.Expr) -> int:
        if isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return Exits.NEVER                                   # a docstring
        self.expr(st.value)
        return Exits.NEVER

    def stmt_Assign(self, st: ast.Assign) -> int:
        v = self.expr(st.value)
        for target in st.targets:
            self.assign(target, v, st.value)
        return Exits.NEVER

    def stmt_AnnAssign(self, st: ast.AnnAssign) -> int:
        if st.value is None:
            raise self.error("a declaration without a value is not supported", st)
        try:
            want = to_ir_type(eval(compile(ast.Expression(st.annotation), "<annotation>",
                                           "eval"), {**self.globals, **self.closure}, {}))
        except Exception as e:
            raise self.error(f"cannot resolve the annotation: {e}", st.annotation) from None
        if isinstance(st.value, ast.Dict) and not st.value.keys and \
                type(want).__name__ == "DictType":
            v: Sugared = self.op("dict_construct", type=repr(want), node=st)   # ``d: Dict = {}``
        else:
            v = self.expr(st.value)
        if isinstance(v, Value) and isinstance(v.type, ListType) and v.type.element == \
                AnyType and isinstance(want, ListType):
            _refine_list(v, want)                            # ``xs: List[int] = []``
        elif isinstance(v, Value) and v.node.kind == Prim.CONSTANT and \
                v.node.attrs.get("value") is None and isinstance(want, OptionalType):
            v.type = want
        self.assign(st.target, v, st.value, declared=want)
        return Exits.NEVER

    def stmt_AugAssign(self, st: ast.AugAssign) -> int:
        if not isinstance(st.target, (ast.Name, ast.Subscript, ast.Attribute)):
            raise self.error("unsupported augmented assignment target", st.target)
        cur = self.expr(st.target)
        rhs = self.expr(st.value)
        out = self.binop(st.op, cur, rhs, st)
        if isinstance(cur, Value) and isinstance(cur.type, TensorType) and isinstance(
                st.target, ast.Name):
            kind = _storage(cur)
            if kind == "argument":
                # an argument updated in place: the caller sees it, as with Python's ``+=``
                out = self.op("copy_", cur, out, node=st)
            elif kind == "shared":
                sym = _OPS_TEXT.get(type(st.op), "?=")
                raise self.error(f"'{st.target.id} {sym} ...' updates in place a tensor that "
                                 f"may share memory with another (a view, an element of a list, "
                                 f"a parameter, a library call's result), which scripted code "
                                 f"does not support yet; write {st.target.id} = "
                                 f"{st.target.id} {sym[:-1]} ...", st)
            # else: a tensor an op of this function made; rebinding its name is the same
        self.assign(st.target, out, st)
        return Exits.NEVER

    def assign(self, target: ast.expr, v: Sugared, node: ast.AST,
               declared: Type | None = None) -> None:
        if isinstance(target, ast.Name):
            if isinstance(v, Value):
                if declared is not None and not _fits(v.type, declared):
                    raise self.error(f"'{target.id}' is declared {declared!r} but assigned "
                                     f"{v.type!r}", node)
                old = self.env.get(target.id)
                if isinstance(old, Value) and not _compatible(old.type, v.type):
                    raise self.error(f"variable '{target.id}' changes type: it was "
                                     f"{old.type!r}, it is assigned {v.type!r}", node)
                _name_after(v, target.id)
            self.env[target.id] = v
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            vals = self.unpack(v, len(target.elts), node)
            for t, x in zip(target.elts, vals):
                self.assign(t, x, node)
            return
        if isinstance(target, ast.Subscript):
            self.store_subscript(target, v, node)
            return
        if isinstance(target, ast.Attribute):
            obj = self.expr(target.value)
            if isinstance(obj, ModuleRef):
                self.b.set_attr(obj.value, target.attr, self.value(v, node))
                return
        raise self.error("unsupported assignment target", target)

    def unpack(self, v: Sugared, n: int, node: ast.AST) -> list[Sugared]:
        if type(v) is tuple:                          # an unrolled loop's (key, module) item
            if len(v) != n:
                raise self.error(f"cannot unpack {len(v)} values into {n}", node)
            return list(v)
        if isinstance(v, PyObj) and isinstance(v.obj, (tuple, list)):
            if len(v.obj) != n:
                raise self.error(f"cannot unpack {len(v.obj)} values into {n}", node)
            return [PyObj(o) for o in v.obj]
        val = self.value(v, node)
        t = val.type
        if isinstance(t, TupleType):
            if len(t.elements) != n:
                raise self.error(f"cannot unpack a tuple of {len(t.elements)} into {n} "
                                 f"names", node)
            if val.node.kind == Prim.TUPLE_CONSTRUCT:
                return list(val.node.inputs)
            return list(self.b.tuple_unpack(val))
        if val.node.kind == "sm::shape":
            return [self.op("size", val.node.inputs[0], dim=k, node=node) for k in range(n)]
        if isinstance(t, ListType):
            return list(self.b.list_unpack(val, n))
        if isinstance(t, TensorType):
            return [self.index_tensor(val, self.const(i), node) for i in range(n)]
        raise self.error(f"cannot unpack a {t!r}", node)

    def store_subscript(self, target: ast.Subscript, v: Sugared, node: ast.AST) -> None:
        obj = self.value(self.expr(target.value), target.value)
        val = self.value(v, node)
        if isinstance(obj.type, ListType):
            self.op("list_set", obj, self.value(self.expr(target.slice), target.slice), val,
                    node=node)
            return
        if type(obj.type).__name__ == "DictType":
            self.op("dict_set", obj, self.value(self.expr(target.slice), target.slice), val,
                    node=node)
            return
        if isinstance(obj.type, TensorType):
            if not isinstance(target.value, ast.Name) or _storage(obj) == "shared":
                raise self.error("a store into a tensor that may share memory with another (a "
                                 "view such as x[0] or x.t(), a parameter, a library call's "
                                 "result) is not supported in scripted code yet; index the "
                                 "base tensor itself (x[0, 1] = v)", target)
            spec, operands = self.index_spec(target.slice, obj)
            if not isinstance(val.type, TensorType):
                if val.type not in (IntType, FloatType, BoolType):
                    raise self.error(f"cannot store a {val.type!r} into a tensor", node)
                val = self.op("full", self.b.list_([], IntType), val, node=node)
            out = self.op("index_put", obj, val, *operands, spec=spec, node=node)
            new = self.op("copy_", obj, out, node=node)
            if isinstance(target.value, ast.Name):
                self.env[target.value.id] = new
            return
        raise self.error(f"cannot assign into a {obj.type!r}", target)

    def stmt_Return(self, st: ast.Return) -> int:
        v = self.const(None) if st.value is None else self.value(self.expr(st.value), st.value)
        if self.return_type is not None and not _fits(v.type, self.return_type):
            hint = (" (Tensor.item() gives a Scalar, as in TorchScript: convert it with "
                    "int() or float())") if v.type == NumberType else ""
            raise self.error(f"function '{self.name}' is annotated to return "
                             f"{self.return_type!r} but returns {v.type!r}{hint}", st)
        old = self.env.get(RETVAL)
        if isinstance(old, Value) and not _compatible(old.type, v.type):
            raise self.error(f"function '{self.name}' returns {old.type!r} on one path and "
                             f"{v.type!r} on another", st)
        self.env[RETVAL] = v
        self.env[RET] = self.const(True)
        return Exits.TERMINAL

    def stmt_Break(self, st: ast.Break) -> int:
        if not self.loop_depth:
            raise self.error("'break' outside a loop", st)
        self.env[BROKE] = self.const(True)
        return Exits.ALWAYS

    def stmt_Continue(self, st: ast.Continue) -> int:
        if not self.loop_depth:
            raise self.error("'continue' outside a loop", st)
        self.env[CONT] = self.const(True)
        return Exits.ALWAYS

    def stmt_Assert(self, st: ast.Assert) -> int:
        cond = self.truth(self.expr(st.test), st.test)
        msg = "" if st.msg is None else st.msg

        def fail() -> int:
            self.raise_("AssertionError", msg, st)
            return Exits.TERMINAL
        refine = self.refinement(st.test)           # ``assert y is not None`` narrows y
        self.if_(cond, lambda: self.block_refined([], refine, True), fail, st)
        return Exits.NEVER

    def stmt_Raise(self, st: ast.Raise) -> int:
        exc = st.exc
        kind, msg = "RuntimeError", None
        if isinstance(exc, ast.Call) and isinstance(exc.func, (ast.Name, ast.Attribute)):
            cls = self.expr(exc.func)
            kind = cls.obj.__name__ if isinstance(cls, PyObj) and isinstance(cls.obj, type) \
                else "RuntimeError"
            msg = exc.args[0] if exc.args else ""
        elif isinstance(exc, (ast.Name, ast.Attribute)):
            cls = self.expr(exc)
            kind = cls.obj.__name__ if isinstance(cls, PyObj) and isinstance(cls.obj, type) \
                else "RuntimeError"
            msg = ""
        elif exc is not None:
            raise self.error("raise takes an exception class or a call of one", exc)
        self.raise_(kind, msg or "", st)
        return Exits.TERMINAL

    def raise_(self, kind: str, msg: Any, node: ast.AST) -> None:
        if isinstance(msg, str):
            self.b.raise_(msg, kind)
            return
        text = self.value(self.expr(msg), msg)
        if text.node.kind == Prim.CONSTANT and isinstance(text.node.attrs.get("value"), str):
            self.b.raise_(text.node.attrs["value"], kind)
            return
        if text.type != StrType:
            text = self.op("py_str", text, node=node)
        self.b.node(Prim.RAISE, [text], [], {"kind": kind, "message": ""})

    # ---- if -----------------------------------------------------------------------------
    def stmt_If(self, st: ast.If) -> int:
        test = self.expr(st.test)
        static = self.static_truth(test)
        if static is not None:                       # ``if x is None`` with x not Optional
            return self.block(st.body if static else st.orelse)
        cond = self.truth(test, st.test)
        refine = self.refinement(st.test)
        return self.if_(cond, lambda: self.block_refined(st.body, refine, True),
                        lambda: self.block_refined(st.orelse, refine, False), st)

    def block_refined(self, stmts: list[ast.stmt], refine: list[tuple[str, bool]],
                      branch: bool) -> int:
        self.narrow(refine, branch)
        return self.block(stmts)

    def narrow(self, refine: list[tuple[str, bool]], branch: bool) -> None:
        """Rebind each Optional that ``refine`` proves not None where the test is ``branch``
        to a value of its element type."""
        for name, when in refine:
            v = self.env.get(name)
            if when == branch and isinstance(v, Value) and isinstance(v.type, OptionalType):
                self.env[name] = _retyped(self, v, v.type.element)

    def refinement(self, test: ast.expr) -> list[tuple[str, bool]]:
        """What a test proves: (x, True) for ``x is not None`` or ``isinstance(x, T)`` of an
        ``Optional[T]`` (x is not None where the test is true), (x, False) for ``x is None``;
        ``and`` proves its operands' true facts,
        ``or`` its operands' false facts; ``not`` swaps."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
                test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            if isinstance(test.ops[0], ast.IsNot):
                return [(test.left.id, True)]
            if isinstance(test.ops[0], ast.Is):
                return [(test.left.id, False)]
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and \
                test.func.id == "isinstance" and len(test.args) == 2 and not test.keywords \
                and isinstance(test.args[0], ast.Name) and self._is_element_type(*test.args):
            return [(test.args[0].id, True)]       # isinstance(x, T), x: Optional[T]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return [(n, not b) for n, b in self.refinement(test.operand)]
        if isinstance(test, ast.BoolOp):
            keep = isinstance(test.op, ast.And)
            return [(n, b) for v in test.values for n, b in self.refinement(v) if b == keep]
        return []

    def _is_element_type(self, name: ast.Name, kind: ast.expr) -> bool:
        """Whether ``kind`` (a class named in the source: ``int``, ``Tensor``, ``sm.Tensor``)
        is the element type of the Optional variable ``name``."""
        v = self.env.get(name.id)
        if not (isinstance(v, Value) and isinstance(v.type, OptionalType)):
            return False
        path = kind
        while isinstance(path, ast.Attribute):
            path = path.value
        if not isinstance(path, ast.Name):
            return False
        try:
            element = to_ir_type(self.static_type(kind))
        except Exception:                     # not a type the frontend knows: no narrowing
            return False
        want = v.type.element
        return element == want or (isinstance(element, TensorType) and
                                   isinstance(want, TensorType))

    def if_(self, cond: Value, then: Callable[[], int], orelse: Callable[[], int],
            node: ast.AST) -> int:
        """A ``prim::If``: both branches compiled from the current environment; the
        variables they both define (or that existed before) become the If's outputs."""
        before = dict(self.env)
        outs: list[tuple[dict, int]] = []
        n = self.b.node(Prim.IF, [cond], [], n_blocks=2)
        for blk, fn in zip(n.blocks, (then, orelse)):
            self.env = dict(before)
            with self.b.insert_into(blk):
                exits = fn()
            outs.append((self.env, exits))
        (e0, x0), (e1, x1) = outs
        merged = dict(before)
        names = [k for k in set(e0) | set(e1) if isinstance(e0.get(k), Value)
                 or isinstance(e1.get(k), Value)]
        yields: list[tuple[str, Value, Value]] = []
        for k in sorted(names):
            a, c = e0.get(k), e1.get(k)
            if a is c:
                if a is not None:
                    merged[k] = a
                continue
            if k in _FLAGS:
                a = a if isinstance(a, Value) else None
                c = c if isinstance(c, Value) else None
                with self.b.insert_into(n.blocks[0]):
                    a = a if a is not None else self.const(False)
                with self.b.insert_into(n.blocks[1]):
                    c = c if c is not None else self.const(False)
            elif k == RETVAL:
                if a is None or c is None:                   # returned on one path only
                    t = (a or c).type
                    with self.b.insert_into(n.blocks[0 if a is None else 1]):
                        filler = self.b.node(Prim.UNINITIALIZED, [], [t]).output
                    a, c = (filler, c) if a is None else (a, filler)
            elif x0 == Exits.TERMINAL and isinstance(c, Value):
                # the then-branch left (return/break/continue/raise): after the If, the
                # variable is the else-branch's, refinements included; the exiting branch
                # yields a placeholder no path reads
                with self.b.insert_into(n.blocks[0]):
                    a = self.b.node(Prim.UNINITIALIZED, [], [c.type]).output
            elif x1 == Exits.TERMINAL and isinstance(a, Value):
                with self.b.insert_into(n.blocks[1]):
                    c = self.b.node(Prim.UNINITIALIZED, [], [a.type]).output
            elif not (isinstance(a, Value) and isinstance(c, Value)):
                merged.pop(k, None)                          # defined on one path only
                continue
            if not _compatible(a.type, c.type):
                raise self.error(f"'{_shown(k)}' is {a.type!r} in one branch and {c.type!r} "
                                 f"in the other", node)
            yields.append((k, a, c))
        for k, a, c in yields:
            n.blocks[0].register_output(a)
            n.blocks[1].register_output(c)
            merged[k] = n.add_output(join_types(a.type, c.type))
        self.env = merged
        if x0 in (Exits.ALWAYS, Exits.TERMINAL) and x1 in (Exits.ALWAYS, Exits.TERMINAL):
            return Exits.TERMINAL if x0 == x1 == Exits.TERMINAL else Exits.ALWAYS
        if x0 != Exits.NEVER or x1 != Exits.NEVER:
            return Exits.MAY
        return Exits.NEVER

    # ---- loops --------------------------------------------------------------------------
    def stmt_While(self, st: ast.While) -> int:
        if st.orelse:
            raise self.error("'else' on a loop is not supported", st)
        return self.loop(None, lambda: self.truth(self.expr(st.test), st.test), None, st.body, st)

    def stmt_For(self, st: ast.For) -> int:
        if st.orelse:
            raise self.error("'else' on a loop is not supported", st)
        it = st.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in (
                "range", "enumerate", "zip") and not self._shadowed(it.func.id):
            fname = it.func.id
            if fname == "range":
                return self.for_range(st, it)
            if it.keywords and not (fname == "enumerate" and [k.arg for k in it.keywords]
                                    == ["start"]):
                raise self.error(f"{fname}() takes iterables here", it)
            seqs = [self.expr(a) for a in it.args]
            if any(isinstance(q, ModuleRef) for q in seqs):     # over modules: unrolled
                return self.unrolled(st, self.zipped_modules(fname, seqs, it))
            if fname == "enumerate":
                return self.for_enumerate(st, it, seqs)
            return self.for_zip(st, it, seqs)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                it.func.attr in ("items", "keys", "values") and not it.args:
            base = self.expr(it.func.value)
            if isinstance(base, ModuleRef):                   # ModuleDict.items() ...
                return self.unrolled(st, self.module_items(base, it.func.attr, it))
        seq = self.expr(it)
        if isinstance(seq, ModuleRef):                        # ModuleList / Sequential
            return self.for_modules(st, seq)
        if isinstance(seq, PyObj) and isinstance(seq.obj, (tuple, list)):
            return self.unrolled(st, [PyObj(o) for o in seq.obj])
        val = self.value(seq, it)
        if isinstance(val.type, TupleType):
            return self.unrolled(st, self.unpack(val, len(val.type.elements), it))
        return self.for_indexed(st, val)

    def _shadowed(self, name: str) -> bool:
        return name in self.env or name in self.globals and self.globals[name] is not \
            getattr(builtins, name, None)

    def for_range(self, st: ast.For, call: ast.Call) -> int:
        args = [self.value(self.expr(a), a) for a in call.args]
        if not 1 <= len(args) <= 3 or call.keywords:
            raise self.error("range() takes 1 to 3 positional arguments", call)
        for a in args:
            if a.type not in (IntType, BoolType):
                raise self.error(f"range() arguments must be int, got {a.type!r}", call)
        if len(args) == 1:
            start, stop, step = self.const(0), args[0], self.const(1)
        else:
            start, stop = args[0], args[1]
            step = args[2] if len(args) == 3 else self.const(1)
        if self.static_value(step) == 1:                  # the common case: no branch
            n = stop if self.static_value(start) == 0 else self.op(
                "int_sub", stop, start, node=call)
            n = self.op("int_max", n, self.const(0), node=call)
        else:
            n = self._range_len(start, stop, step, call)

        def bind(i: Value) -> None:
            x = self.op("int_add", start, self.op("int_mul", i, step), node=call)
            self.assign(st.target, x, st)
        return self.loop(n, None, bind, st.body, st)

    def _range_len(self, start: Value, stop: Value, step: Value, node: ast.AST) -> Value:
        """max(0, ceil((stop - start) / step)) with int ops (step > 0 or < 0)."""
        diff = self.op("int_sub", stop, start, node=node)
        pos = self.op("int_gt", step, self.const(0), node=node)

        def up() -> list[Value]:
            q = self.op("int_floordiv", self.op("int_add", diff, self.op(
                "int_sub", step, self.const(1))), step)
            return [self.op("int_max", q, self.const(0))]

        def down() -> list[Value]:
            q = self.op("int_floordiv", self.op("int_add", diff, self.op(
                "int_add", step, self.const(1))), step)
            return [self.op("int_max", q, self.const(0))]
        (n,) = self.b.if_(pos, up, down)
        return n

    def module_items(self, ref: ModuleRef, kind: str, node: ast.AST) -> list[Any]:
        """A container's children at compile time: a ModuleList's or Sequential's modules;
        a ModuleDict's keys (``kind="keys"``, also iterating the dict itself), values or
        (key, module) pairs."""
        from scriptmod.nn import ModuleDict
        if not library.is_container(ref.module):
            raise self.error(f"a {type(ref.module).__name__} cannot be iterated", node)
        is_dict = isinstance(ref.module, ModuleDict)
        if kind != "values" and not is_dict:
            raise self.error(f"a {type(ref.module).__name__} has no {kind}()", node)
        out: list[Any] = []
        for name, child in ref.module._modules.items():
            if child is None:
                continue
            mod = ModuleRef(self.b.get_attr(ref.value, name, self.module_type(child)), child)
            key = self.const(name)
            out.append({"keys": key, "values": mod, "items": (key, mod)}[kind])
        return out

    def zipped_modules(self, fname: str, seqs: list[Sugared], call: ast.Call) -> list[Any]:
        """``enumerate(self.layers)``, ``zip(self.a, self.b)``: unrolled items (a sequence
        beside the modules that is not a container must have a length known here: a tuple)."""
        from scriptmod.nn import ModuleDict
        lists: list[list[Any]] = []
        for q, a in zip(seqs, call.args):
            if isinstance(q, ModuleRef):
                lists.append(self.module_items(q, "keys" if isinstance(
                    q.module, ModuleDict) else "values", a))
            else:
                v = self.value(q, a)
                if not isinstance(v.type, TupleType):
                    raise self.error(f"{fname}() over modules and a {v.type!r}: only modules "
                                     f"and tuples can be unrolled together", a)
                lists.append(self.unpack(v, len(v.type.elements), a))
        if fname == "enumerate":
            if len(lists) != 1:
                raise self.error("enumerate() takes one iterable here", call)
            start = 0
            if call.keywords:
                start = self.static_value(self.expr(call.keywords[0].value))
                if type(start) is not int:
                    raise self.error("enumerate(start=...) must be a constant int", call)
            return [(self.const(start + i), x) for i, x in enumerate(lists[0])]
        return [tuple(items) for items in zip(*lists)]

    def for_enumerate(self, st: ast.For, call: ast.Call, seqs: list[Sugared]) -> int:
        if len(seqs) != 1:
            raise self.error("enumerate() takes one iterable here", call)
        seq = self.value(seqs[0], call.args[0])
        start = self.value(self.expr(call.keywords[0].value), call) if call.keywords else None
        if not (isinstance(st.target, ast.Tuple) and len(st.target.elts) == 2):
            raise self.error("for i, x in enumerate(...) needs two names", st.target)
        n = self.length(seq, call)

        if start is not None and start.type not in (IntType, BoolType):
            raise self.error(f"enumerate(start=...) must be an int, got {start.type!r}", call)

        def bind(i: Value) -> None:
            k = i if start is None else self.op("int_add", i, start, node=call)
            self.assign(st.target.elts[0], k, st)
            self.assign(st.target.elts[1], self.item(seq, i, call), st)
        return self.loop(n, None, bind, st.body, st)

    def for_zip(self, st: ast.For, call: ast.Call, given: list[Sugared]) -> int:
        seqs = [self.value(q, a) for q, a in zip(given, call.args)]
        if not seqs:
            raise self.error("zip() takes iterables", call)
        n = self.length(seqs[0], call)
        for s in seqs[1:]:
            n = self.op("int_min", n, self.length(s, call), node=call)
        if not (isinstance(st.target, ast.Tuple) and len(st.target.elts) == len(seqs)):
            raise self.error(f"for over zip() of {len(seqs)} needs {len(seqs)} names", st.target)

        def bind(i: Value) -> None:
            for t, s in zip(st.target.elts, seqs):
                self.assign(t, self.item(s, i, call), st)
        return self.loop(n, None, bind, st.body, st)

    def for_indexed(self, st: ast.For, seq: Value) -> int:
        n = self.length(seq, st.iter)

        def bind(i: Value) -> None:
            self.assign(st.target, self.item(seq, i, st.iter), st)
        return self.loop(n, None, bind, st.body, st)

    def for_modules(self, st: ast.For, seq: ModuleRef) -> int:
        from scriptmod.nn import ModuleDict
        kind = "keys" if isinstance(seq.module, ModuleDict) else "values"
        return self.unrolled(st, self.module_items(seq, kind, st.iter))

    def unrolled(self, st: ast.For, items: list[Sugared]) -> int:
        """A loop over a compile-time sequence (modules, a tuple): one body per item."""
        stmts = st.body
        if any(isinstance(n, (ast.Break, ast.Continue)) for s in stmts for n in ast.walk(s)):
            raise self.error("break/continue in a loop over modules or a tuple is not "
                             "supported", st)
        exits = Exits.NEVER
        for item in items:
            self.assign(st.target, item, st)
            e = self.block(stmts)
            if e in (Exits.ALWAYS, Exits.TERMINAL):
                return e
            if e == Exits.MAY:
                raise self.error("return inside a loop over modules or a tuple is not "
                                 "supported", st)
        return exits

    def length(self, seq: Value, node: ast.AST) -> Value:
        if isinstance(seq.type, ListType):
            return self.op("list_len", seq, node=node)
        if isinstance(seq.type, TensorType):
            return self.op("size", seq, dim=0, node=node)
        if isinstance(seq.type, TupleType):
            return self.const(len(seq.type.elements))
        if isinstance(seq.type, DictType):
            return self.op("dict_len", seq, node=node)
        raise self.error(f"cannot iterate over a {seq.type!r}", node)

    def item(self, seq: Value, i: Value, node: ast.AST) -> Value:
        if isinstance(seq.type, ListType):
            return self.op("list_get", seq, i, node=node)
        if isinstance(seq.type, TensorType):
            return self.index_tensor(seq, i, node)
        raise self.error(f"cannot index a {seq.type!r} by a run-time int", node)

    def loop(self, trip: Value | None, cond_fn: Callable[[], Value] | None,
             bind: Callable[[Value], None] | None, body: list[ast.stmt], node: ast.AST) -> int:
        """``prim::Loop``: carries every variable the body assigns that exists before it,
        plus the exit flags."""
        has_return = any(isinstance(n, ast.Return) for s in body for n in ast.walk(s))
        has_break = any(isinstance(n, ast.Break) for s in body for n in _walk_loop_level(s))
        assigned = _assigned_names(body) | ({RET, RETVAL} if has_return else set()) | (
            {BROKE} if has_break else set())
        if isinstance(node, ast.For):
            assigned |= _target_names(node.target)
        outer_broke = self.env.get(BROKE)
        self.env[BROKE] = self.const(False)
        if has_return and RETVAL not in self.env:
            # a placeholder, never returned (the flag guards it), typed once the body is known
            self.env[RETVAL] = self.b.node(Prim.UNINITIALIZED, [],
                                           [self.return_type or AnyType]).output
            self.placeholders.add(self.env[RETVAL])
        carried = [k for k in sorted(assigned) if isinstance(self.env.get(k), Value)]
        init = [self.env[k] for k in carried]
        start_cond = cond_fn() if cond_fn is not None else self.const(True)
        max_trip = trip if trip is not None else self.const(2**63 - 1)
        n = self.b.node(Prim.LOOP, [max_trip, start_cond, *init])
        blk = n.add_block()
        i = blk.add_param(IntType, "i")
        params = [blk.add_param(v.type, None) for v in init]
        outer = dict(self.env)
        self.env = dict(outer)
        self.env.update(zip(carried, params))
        self.loop_depth += 1
        with self.b.insert_into(blk):
            self.env[CONT] = self.const(False)
            if bind is not None:
                bind(i)
            self.block(body)
            self.env.pop(CONT, None)
            go = self.not_stopped(node)
            if cond_fn is not None:
                go_now = go
                (go,) = self.b.if_(go_now, lambda: [cond_fn()], lambda: [self.const(False)])
            outs = []
            for k, p in zip(carried, params):
                v = self.env.get(k)
                if not isinstance(v, Value):
                    raise self.error(f"'{_shown(k)}' is not defined on every path through the "
                                     f"loop body", node)
                if not _compatible(p.type, v.type):
                    raise self.error(f"variable '{_shown(k)}' changes type in the loop: "
                                     f"{p.type!r} before, {v.type!r} after one iteration", node)
                outs.append(v)
            blk.register_output(go)
            for v in outs:
                blk.register_output(v)
        self.loop_depth -= 1
        for p, v0, v1 in zip(params, init, outs):
            if v0 in self.placeholders and v0.type == AnyType:
                v0.type = v1.type
            p.type = join_types(v0.type, v1.type) if v0.type != v1.type else v0.type
        merged = dict(outer)
        for k, p in zip(carried, params):
            merged[k] = n.add_output(p.type)
        merged.pop(BROKE, None)                                # this loop's breaks are done
        if outer_broke is not None:
            merged[BROKE] = outer_broke
        self.env = merged
        if has_return:
            return Exits.MAY
        return Exits.NEVER

    def not_stopped(self, node: ast.AST) -> Value:
        out: Value | None = None
        for f in (BROKE, RET):
            v = self.env.get(f)
            if isinstance(v, Value) and self.static_truth(v) is not False:
                n = self.op("py_not", v, node=node)
                out = n if out is None else self._and(out, n, node)
        return out if out is not None else self.const(True)

    # ---- expressions --------------------------------------------------------------------
    def expr(self, e: ast.expr) -> Sugared:
        for t, what in _UNSUPPORTED.items():
            if isinstance(e, t):
                raise self.error(f"{what} are not supported in scripted code", e)
        method = getattr(self, f"expr_{type(e).__name__}", None)
        if method is None:
            raise self.error(f"'{type(e).__name__}' expressions are not supported in scripted "
                             f"code", e)
        return method(e)

    def expr_Constant(self, e: ast.Constant) -> Sugared:
        if e.value is Ellipsis:
            return PyObj(Ellipsis)
        if e.value is not None and type(e.value) not in (int, float, bool, str):
            raise self.error(f"a {type(e.value).__name__} constant is not supported", e)
        return self.const(e.value)

    def expr_Name(self, e: ast.Name) -> Sugared:
        name = e.id
        if name in self.env:
            v = self.env[name]
            return v
        if name in self.closure:
            return self.python_value(self.closure[name], e)
        if name in self.globals:
            return self.python_value(self.globals[name], e)
        if hasattr(builtins, name):
            return PyObj(getattr(builtins, name))
        raise self.error(f"undefined value {name}", e)

    def python_value(self, obj: Any, e: ast.AST) -> Sugared:
        if obj is None or type(obj) in (int, float, bool, str):
            return self.const(obj)
        if isinstance(obj, Tensor):
            raise self.error("a function may not read a global or closed-over tensor (pass it "
                             "as an argument or make it a module buffer)", e)
        if isinstance(obj, (list, dict, set)):
            raise self.error(f"a closed-over or global {type(obj).__name__} is not supported "
                             f"(it could change between calls); use a tuple constant", e)
        return PyObj(obj)

    def expr_Attribute(self, e: ast.Attribute) -> Sugared:
        base = self.expr(e.value)
        name = e.attr
        if isinstance(base, PyObj) and type(base.obj) is str and (
                f"str.{name}" in pyfuncs.PY_FUNCTIONS or name == "format"):
            return Method(self.const(base.obj), name)         # ``", ".join(parts)``
        if isinstance(base, PyObj):
            try:
                return self.python_value(getattr(base.obj, name), e)
            except AttributeError:
                raise self.error(f"{_pyname(base.obj)} has no attribute {name!r}", e) from None
        if isinstance(base, ModuleRef):
            return self.module_attr(base, name, e)
        val = self.value(base, e.value)
        if isinstance(val.type, TensorType) or val.type == AnyType:
            if name == "shape":
                return self.op("shape", val, node=e)
            if name == "ndim":
                return self.op("dim", val, node=e)
            if name in ("T", "mT", "H", "real", "imag", "data"):
                return self.library_call(f"Tensor.{name}", [val], {}, e, TensorType())
            if name == "dtype":
                return self.op("tensor_dtype", val, node=e)
            if name == "device":
                return self.op("tensor_device", val, node=e)
            if name == "is_cuda":
                return self.op("py_ne", self.op("tensor_device", val, node=e),
                               self.const("cpu"), node=e)
            if name in ("requires_grad", "grad", "is_leaf", "grad_fn"):
                raise self.error(f"Tensor.{name} is not supported in scripted code (autograd "
                                 f"state is not visible to scripted code)", e)
        if name in _PAIR_FIELDS and isinstance(val.type, TupleType) and len(val.type.elements) == 2:
            return self.b.tuple_index(val, _PAIR_FIELDS[name])   # ``x.sort(1).values``
        return Method(val, name)

    def module_attr(self, ref: ModuleRef, name: str, e: ast.AST) -> Sugared:
        mod = ref.module
        d = mod.__dict__
        for reg in ("_parameters", "_buffers"):
            if name in d.get(reg, {}):
                t = d[reg][name]
                if t is None:
                    return self.const(None)
                from scriptmod.jit._tracer import tensor_type
                return self.b.get_attr(ref.value, name, tensor_type(t))
        if name in d.get("_modules", {}):
            child = d["_modules"][name]
            if child is None:
                return self.const(None)
            return ModuleRef(self.b.get_attr(ref.value, name, self.module_type(child)), child)
        if name == "training":
            return self.b.get_attr(ref.value, "training", BoolType)
        cls_attr = getattr(type(mod), name, None)
        if callable(cls_attr) and not isinstance(cls_attr, (staticmethod, classmethod, type)):
            return Method(ref, name)
        try:
            value = getattr(mod, name)
        except AttributeError:
            raise self.error(f"module '{type(mod).__name__}' has no attribute {name!r}",
                             e) from None
        if value is None or type(value) in (int, float, bool, str):
            return self.const(value)
        if isinstance(value, tuple) and all(v is None or type(v) in (int, float, bool, str)
                                            for v in value):
            return PyObj(value)
        raise self.error(f"module attribute '{name}' is a {type(value).__name__}; scripted "
                         f"code reads parameters, buffers, submodules and int/float/bool/str "
                         f"constants", e)

    def module_type(self, mod: Any) -> ModuleType:
        from scriptmod.jit._tracer import class_name
        return ModuleType(class_name(mod))

    def expr_Tuple(self, e: ast.Tuple) -> Sugared:
        items = [self.expr(x) for x in e.elts]
        if all(isinstance(i, PyObj) for i in items):
            return PyObj(tuple(i.obj for i in items))
        return self.b.tuple_([self.value(i, x) for i, x in zip(items, e.elts)])

    def expr_List(self, e: ast.List) -> Sugared:
        vals = [self.value(self.expr(x), x) for x in e.elts]
        t: Type = AnyType
        if vals:
            t = vals[0].type
            for v in vals[1:]:
                if not _compatible(t, v.type):
                    raise self.error(f"list items have different types: {t!r} and "
                                     f"{v.type!r}", e)
                t = join_types(t, v.type)
        return self.fresh_list(self.b.list_(vals, t), e)

    def fresh_list(self, lit: Value, node: ast.AST) -> Value:
        """A list literal is a new list each time it runs (a ListConstruct may be folded to
        one constant list or merged with an equal one): ``list_slice`` copies it, and list
        ops are impure, never folded or merged."""
        out = self.op("list_slice", lit, self.const(None), self.const(None), self.const(None),
                      node=node)
        out.type = lit.type
        return out

    def expr_Dict(self, e: ast.Dict) -> Sugared:
        from scriptmod.ir.types import DictType
        if any(k is None for k in e.keys):
            raise self.error("'**' in a dict literal is not supported", e)
        keys = [self.value(self.expr(k), k) for k in e.keys]   # type: ignore[arg-type]
        vals = [self.value(self.expr(v), v) for v in e.values]
        kt = keys[0].type if keys else StrType
        vt = vals[0].type if vals else AnyType
        for v in vals[1:]:
            vt = join_types(vt, v.type)
        out = self.op("dict_construct", *[x for kv in zip(keys, vals) for x in kv], node=e)
        out.type = DictType(kt, vt)
        return out

    def expr_ListComp(self, e: ast.ListComp) -> Sugared:
        """``[f(x, y) for x in xs if p(x) for y in ys]`` as the loops Python runs: nested
        ``for`` statements, each ``if`` around what follows it, appending to a fresh list."""
        if any(g.is_async for g in e.generators):
            raise self.error("async comprehensions are not supported", e)
        out = self.fresh_list(self.b.list_([], AnyType), e)
        tmp = f"$comp{id(e)}"
        self.env[tmp] = out
        body: list[ast.stmt] = [ast.Expr(value=ast.Call(
            func=ast.Attribute(value=ast.Name(id=tmp, ctx=ast.Load()), attr="append",
                               ctx=ast.Load()), args=[e.elt], keywords=[]))]
        for gen in reversed(e.generators):
            for cond in reversed(gen.ifs):
                body = [ast.If(test=cond, body=body, orelse=[])]
            body = [ast.For(target=gen.target, iter=gen.iter, orelse=[], body=body)]
        (loop,) = body
        for n in ast.walk(loop):
            if not hasattr(n, "lineno"):
                ast.copy_location(n, e)
        ast.fix_missing_locations(loop)
        self.stmt_For(loop)
        res = self.env.pop(tmp)
        return res

    def refined(self, test: ast.expr, branch: bool, fn: Callable[[], Any]) -> Any:
        """``fn()`` with the Optional that ``test`` checks narrowed where ``test`` is
        ``branch`` (``y is not None and y.sum() > 0``: y is a Tensor on the right)."""
        saved = dict(self.env)
        self.narrow(self.refinement(test), branch)
        try:
            return fn()
        finally:
            self.env = saved

    def expr_IfExp(self, e: ast.IfExp) -> Sugared:
        cond = self.truth(self.expr(e.test), e.test)

        def branch(x: ast.expr, holds: bool) -> list[Value]:
            return [self.refined(e.test, holds, lambda: self.value(self.expr(x), x))]
        (r,) = self.b.if_(cond, lambda: branch(e.body, True), lambda: branch(e.orelse, False))
        return r

    def expr_BoolOp(self, e: ast.BoolOp) -> Sugared:
        first = self.truth(self.expr(e.values[0]), e.values[0])
        if len(e.values) == 1:
            return first
        rest = ast.BoolOp(op=e.op, values=e.values[1:])
        ast.copy_location(rest, e.values[1])
        right = lambda holds: [self.refined(e.values[0], holds, lambda: self.truth(  # noqa: E731
            self.expr(rest), rest))]
        if isinstance(e.op, ast.And):
            (r,) = self.b.if_(first, lambda: right(True), lambda: [self.const(False)])
        else:
            (r,) = self.b.if_(first, lambda: [self.const(True)], lambda: right(False))
        return r

    def expr_UnaryOp(self, e: ast.UnaryOp) -> Sugared:
        operand = self.expr(e.operand)
        s = self.static_value(operand)
        if isinstance(e.op, ast.USub) and type(s) in (int, float):
            return self.const(-s)                              # ``-1``: a constant
        v = self.value(operand, e.operand)
        if isinstance(e.op, ast.Not):
            return self.op("py_not", self.truth(v, e.operand), node=e)
        if isinstance(e.op, ast.UAdd):
            return v
        if isinstance(e.op, ast.USub):
            if isinstance(v.type, TensorType):
                return self.op("neg", v, node=e)
            return self.op("int_neg" if v.type == IntType else "py_neg", v, node=e)
        if isinstance(e.op, ast.Invert) and isinstance(v.type, TensorType):
            return self.op("bitwise_not", v, node=e)
        raise self.error("unsupported unary operator", e)

    def expr_BinOp(self, e: ast.BinOp) -> Sugared:
        return self.binop(e.op, self.expr(e.left), self.expr(e.right), e)

    def binop(self, op: ast.operator, a: Sugared, c: Sugared, e: ast.AST) -> Value:
        x, y = self.value(a, e), self.value(c, e)
        if isinstance(x.type, TensorType) or isinstance(y.type, TensorType):
            other = y.type if isinstance(x.type, TensorType) else x.type
            if not isinstance(other, TensorType) and other not in (IntType, FloatType,
                                                                   BoolType, NumberType,
                                                                   AnyType):
                raise self.error(f"unsupported operand types for a tensor operator: "
                                 f"{x.type!r} and {y.type!r}", e)
            name = _BIN_TENSOR.get(type(op))
            if name is None:
                raise self.error("unsupported operator for tensors", e)
            return self.op(name, x, y, node=e)
        if isinstance(x.type, ListType) and isinstance(y.type, ListType) and isinstance(op, ast.Add):
            return self.op("list_concat", x, y, node=e)
        if x.type == IntType and y.type == IntType and type(op) in _BIN_INT:
            return self.op(_BIN_INT[type(op)], x, y, node=e)
        name = _BIN_PY.get(type(op))
        if name is None:
            raise self.error(f"unsupported operator for {x.type!r} and {y.type!r}", e)
        return self.op(name, x, y, node=e)

    def expr_Compare(self, e: ast.Compare) -> Sugared:
        left = self.expr(e.left)
        result: Value | None = None
        for op, right_e in zip(e.ops, e.comparators):
            right = self.expr(right_e)
            r = self.compare(op, left, right, e)
            if result is None:
                result = r if isinstance(r, Value) else self.const(r)
            else:
                rv = r if isinstance(r, Value) else self.const(r)
                (result,) = self.b.if_(self.truth(result, e), lambda: [rv],
                                       lambda: [self.const(False)])
            left = right
        assert result is not None
        return result

    def compare(self, op: ast.cmpop, a: Sugared, c: Sugared, e: ast.AST) -> Value | bool:
        if isinstance(op, (ast.Is, ast.IsNot)):
            static = _static_is(a, c)
            if static is not None:
                return static if isinstance(op, ast.Is) else not static
            v = self.value(a if not _is_none(a) else c, e)
            r = self.op("py_is_none", v, node=e)
            return r if isinstance(op, ast.Is) else self.op("py_not", r, node=e)
        x, y = self.value(a, e), self.value(c, e)
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(y.type, ListType):
                r = self.op("list_contains", y, x, node=e)
            elif type(y.type).__name__ == "DictType":
                r = self.op("dict_contains", y, x, node=e)
            else:
                raise self.error(f"'in' needs a list or dict, got {y.type!r}", e)
            return r if isinstance(op, ast.In) else self.op("py_not", r, node=e)
        if isinstance(x.type, TensorType) or isinstance(y.type, TensorType):
            return self.op(_CMP_TENSOR[type(op)], x, y, node=e)
        if x.type == IntType and y.type == IntType:
            return self.op(_CMP_INT[type(op)], x, y, node=e)
        if isinstance(op, (ast.Eq, ast.NotEq)) and (isinstance(x.type, ListType)
                                                   or isinstance(y.type, ListType)):
            r = self.op("list_eq", x, y, node=e)     # ``x.shape == y.shape``
            return r if isinstance(op, ast.Eq) else self.op("py_not", r, node=e)
        return self.op(_CMP_PY[type(op)], x, y, node=e)

    def static_truth(self, v: Sugared) -> bool | None:
        if isinstance(v, bool):
            return v
        if isinstance(v, Value) and v.node.kind == Prim.CONSTANT and isinstance(
                v.node.attrs.get("value"), bool):
            return v.node.attrs["value"]
        return None

    def truth(self, v: Sugared, node: ast.AST) -> Value:
        if isinstance(v, bool):
            return self.const(v)
        val = self.value(v, node)
        if val.type == BoolType:
            return val
        if isinstance(val.type, ListType):
            return self.op("int_ne", self.op("list_len", val, node=node), self.const(0),
                           node=node)
        if isinstance(val.type, TensorType) or val.type in (IntType, FloatType, StrType) or \
                isinstance(val.type, OptionalType):
            return self.op("py_bool", val, node=node)
        raise self.error(f"cannot use a {val.type!r} as a condition", node)

    def expr_JoinedStr(self, e: ast.JoinedStr) -> Sugared:
        fmt, args = [], []
        for part in e.values:
            if isinstance(part, ast.Constant):
                fmt.append(str(part.value).replace("{", "{{").replace("}", "}}"))
            elif isinstance(part, ast.FormattedValue):
                spec = ""
                if part.format_spec is not None:
                    if not all(isinstance(p, ast.Constant) for p in part.format_spec.values):
                        raise self.error("a computed format spec is not supported", part)
                    spec = ":" + "".join(str(p.value) for p in part.format_spec.values)
                conv = {-1: "", 115: "!s", 114: "!r", 97: "!a"}[part.conversion]
                fmt.append("{" + conv + spec + "}")
                args.append(self.value(self.expr(part.value), part.value))
        return self.op("py_format", self.const("".join(fmt)), *args, node=e)

    def expr_Subscript(self, e: ast.Subscript) -> Sugared:
        base = self.expr(e.value)
        if isinstance(base, PyObj):
            raise self.error("indexing a Python object is not supported", e)
        if isinstance(base, ModuleRef):
            idx = self.expr(e.slice)
            key = self.static_value(idx)
            if key is None:
                raise self.error("a module list is indexed by a constant in scripted code", e)
            names = list(base.module._modules)
            name = names[key] if isinstance(key, int) else key
            child = base.module._modules[name]
            return ModuleRef(self.b.get_attr(base.value, name, self.module_type(child)), child)
        val = self.value(base, e.value)
        t = val.type
        if isinstance(t, TensorType):
            return self.index_tensor_expr(val, e.slice, e)
        if isinstance(t, TupleType):
            idx = self.static_value(self.expr(e.slice))
            if not isinstance(idx, int):
                raise self.error("a tuple is indexed by a constant int", e.slice)
            n = len(t.elements)
            if not -n <= idx < n:
                raise self.error(f"tuple index {idx} out of range for a tuple of {n}", e.slice)
            if val.node.kind == Prim.TUPLE_CONSTRUCT:
                return val.node.inputs[idx % n]
            return self.b.tuple_index(val, idx % n)
        if val.node.kind == "sm::shape" and not isinstance(e.slice, ast.Slice):
            k = self.static_value(self.expr(e.slice))
            if isinstance(k, int) and not isinstance(k, bool):
                return self.op("size", val.node.inputs[0], dim=k, node=e)   # a size, known
        if isinstance(t, ListType):
            if isinstance(e.slice, ast.Slice):
                parts = [self.const(None) if p is None else self.value(self.expr(p), p)
                         for p in (e.slice.lower, e.slice.upper, e.slice.step)]
                return self.op("list_slice", val, *parts, node=e)
            out = self.op("list_get", val, self.value(self.expr(e.slice), e.slice), node=e)
            return out
        if type(t).__name__ == "DictType":
            return self.op("dict_get", val, self.value(self.expr(e.slice), e.slice), node=e)
        if t == StrType:                                  # s[i], s[a:b:c]
            if isinstance(e.slice, ast.Slice):
                parts = [PyObj(None) if p is None else self.expr(p)
                         for p in (e.slice.lower, e.slice.upper, e.slice.step)]
                return self.py_call("str.slice", [val] + parts, {}, e)
            return self.py_call("str.getitem", [val, self.expr(e.slice)], {}, e)
        raise self.error(f"cannot index a {t!r}", e)

    def static_value(self, v: Sugared) -> Any:
        if isinstance(v, PyObj):
            return v.obj
        if isinstance(v, Value) and v.node.kind == Prim.CONSTANT:
            return v.node.attrs.get("value")
        return None

    def index_tensor(self, x: Value, i: Value, node: ast.AST) -> Value:
        spec = (("int", ("input", 0)),)
        return self.op("index", x, i, spec=spec, node=node)

    def index_tensor_expr(self, x: Value, sl: ast.expr, node: ast.AST) -> Value:
        spec, operands = self.index_spec(sl, x)
        return self.op("index", x, *operands, spec=spec, node=node)

    def index_spec(self, sl: ast.expr, x: Value) -> tuple[tuple, list[Value]]:
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        spec: list[tuple] = []
        operands: list[Value] = []

        def part(p: ast.expr | None) -> Any:
            if p is None:
                return None
            v = self.expr(p)
            s = self.static_value(v)
            if isinstance(s, int) and not isinstance(s, bool):
                return s
            val = self.value(v, p)
            if val.type not in (IntType,):
                raise self.error(f"a slice bound must be an int, got {val.type!r}", p)
            operands.append(val)
            return ("input", len(operands) - 1)

        for it in items:
            if isinstance(it, ast.Slice):
                step = part(it.step)
                if isinstance(step, int) and step <= 0:
                    raise self.error("slice step must be greater than zero", it)
                spec.append(("slice", part(it.lower), part(it.upper), step))
                continue
            v = self.expr(it)
            s = self.static_value(v)
            if s is None and isinstance(v, Value) and v.node.kind == Prim.CONSTANT:
                spec.append(("none",))
            elif s is Ellipsis:
                spec.append(("ellipsis",))
            elif isinstance(s, bool):
                raise self.error("indexing with a Python bool is not supported", it)
            elif isinstance(s, int):
                spec.append(("int", s))
            else:
                val = self.value(v, it)
                if val.type == IntType:
                    operands.append(val)
                    spec.append(("int", ("input", len(operands) - 1)))
                elif isinstance(val.type, TensorType):
                    operands.append(val)
                    spec.append(("tensor", len(operands) - 1))
                else:
                    raise self.error(f"cannot index a tensor with a {val.type!r}", it)
        return tuple(spec), operands

    # ---- calls --------------------------------------------------------------------------
    def expr_Call(self, e: ast.Call) -> Sugared:
        callee = self.expr(e.func)
        if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in
                                                                  e.keywords):
            raise self.error("*args and **kwargs in calls are not supported", e)
        if isinstance(callee, PyObj):
            return self.call_python(callee.obj, e)
        if isinstance(callee, ModuleRef):
            return self.call_module(callee, "forward", e)
        if isinstance(callee, Method):
            return self.call_method(callee, e)
        raise self.error("this value is not callable", e)

    def args_of(self, e: ast.Call) -> tuple[list[Sugared], dict[str, Sugared]]:
        return ([self.expr(a) for a in e.args], {k.arg: self.expr(k.value) for k in e.keywords
                                                 if k.arg is not None})

    def call_python(self, obj: Any, e: ast.Call) -> Sugared:
        from scriptmod.jit.frontend import api
        if obj is print:
            args, _ = self.args_of(e)
            vals = [self.value(a, e) for a in args]
            vals = [self.op("py_str", v, node=e) if _holds_tensor(v.type) else v for v in vals]
            self.b.print_(*vals)
            return self.const(None)
        if obj in (len, int, float, bool, str, abs, min, max, isinstance, range, list):
            return self.call_builtin(obj, e)
        if id(obj) in pyfuncs.BY_OBJECT:              # math.sqrt, round, sum, sorted, ...
            args, kwargs = self.args_of(e)
            return self.py_call(pyfuncs.BY_OBJECT[id(obj)], args, kwargs, e)
        if obj is Device:                             # ``sm.device("cpu")``: a constant
            args, kwargs = self.args_of(e)
            known = [self.static_value(a) for a in args]
            if kwargs or any(k is None for k in known):
                raise self.error("device(...) takes constant arguments in scripted code", e)
            try:
                return self.const(str(Device(*known)))
            except (TypeError, ValueError, RuntimeError) as err:
                raise self.error(f"device(): {err}", e) from None
        if obj is api.annotate:
            if len(e.args) != 2:
                raise self.error("annotate(T, value) takes two arguments", e)
            t = to_ir_type(self.static_type(e.args[0]))
            if isinstance(e.args[1], ast.Dict) and not e.args[1].keys and \
                    type(t).__name__ == "DictType":
                return self.op("dict_construct", type=repr(t), node=e)
            v = self.value(self.expr(e.args[1]), e.args[1])
            if isinstance(v.type, ListType) and v.type.element == AnyType and \
                    isinstance(t, ListType):
                _refine_list(v, t)
            elif v.node.kind == Prim.CONSTANT and v.node.attrs.get("value") is None:
                v.type = t
            elif not _fits(v.type, t):
                raise self.error(f"annotate: the value is {v.type!r}, not {t!r}", e)
            return v
        if obj in (api.is_scripting,):
            return self.const(True)
        if obj in (api.is_tracing,):
            return self.const(False)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            raise self.error("exceptions are only raised ('raise E(...)') in scripted code", e)
        if getattr(obj, "_script_unused", False):
            self.b.raise_(f"{obj.__name__} was called, but it is marked @unused",
                          "RuntimeError")
            return self.const(None)
        if getattr(obj, "_script_ignore", False):
            return self.call_ignored(obj, e)
        kind = library.function_kind(obj)
        if kind == "library":
            name = library.public_name(obj)
            if name is None:
                raise self.error(f"'{_pyname(obj)}' is not a public scriptmod function", e)
            return self.call_library(name, e)
        if kind == "python":
            return self.call_user_function(obj, e)
        raise self.error(f"calling '{_pyname(obj)}' is not supported in scripted code", e)

    def call_ignored(self, fn: Any, e: ast.Call) -> Value:
        """A ``jit.ignore``d function: a call into Python at run time (its arguments as
        tensors, its result converted back); the graph cannot be saved."""
        args, kwargs = self.args_of(e)
        try:
            ret = typing.get_type_hints(fn).get("return", Tensor)
            result = to_ir_type(ret)
        except Exception as err:
            raise self.error(f"@ignore'd '{fn.__name__}': cannot read its return annotation "
                             f"({err})", e) from None
        name = library.register_python(fn)
        out = self.library_call(name, args, kwargs, e, result)
        out.node.attrs["python"] = True
        return out

    def static_type(self, e: ast.expr) -> Any:
        try:
            return eval(compile(ast.Expression(e), "<annotation>", "eval"), dict(self.globals),
                        dict(self.closure))
        except Exception as err:
            raise self.error(f"cannot resolve the type: {err}", e) from None

    def call_builtin(self, fn: Any, e: ast.Call) -> Sugared:
        if fn is isinstance:
            v = self.expr(e.args[0])
            t = self.static_type(e.args[1])
            types_ = t if isinstance(t, tuple) else (t,)
            vt = v.type if isinstance(v, Value) else None
            if vt is None:
                return self.const(isinstance(getattr(v, "obj", v), t))
            wants = [to_ir_type(x) for x in types_]
            if isinstance(vt, OptionalType):          # decided at run time: None or not
                inner = any(_fits(vt.element, w) for w in wants)
                none = NoneType in wants
                if inner == none:
                    return self.const(inner)
                is_none = self.op("py_is_none", self.value(v, e), node=e)
                return is_none if none else self.op("py_not", is_none, node=e)
            hit = any(_fits(vt, w) for w in wants)
            return self.const(hit)
        args, kwargs = self.args_of(e)
        if kwargs:
            raise self.error(f"{fn.__name__}() takes no keyword arguments here", e)
        vals = [self.value(a, e) for a in args]
        if fn is list:
            return self.list_of(vals, e)
        if fn is len:
            if vals[0].type == StrType:
                return self.op("str_len", vals[0], node=e)
            return self.length(vals[0], e)
        if fn is bool and isinstance(vals[0].type, ListType):
            return self.truth(vals[0], e)
        if fn in (int, float, bool, str):
            return self.op({int: "py_int", float: "py_float", bool: "py_bool",
                            str: "py_str"}[fn], vals[0], node=e)
        if fn is abs:
            v = vals[0]
            return self.op("abs" if isinstance(v.type, TensorType) else "py_abs", v, node=e)
        if fn in (min, max):
            if len(vals) == 1 and isinstance(vals[0].type, ListType):
                return self.op("list_min" if fn is min else "list_max", vals[0], node=e)
            if len(vals) != 2:
                raise self.error(f"{fn.__name__}() takes two values here", e)
            a, c = vals
            if isinstance(a.type, TensorType) or isinstance(c.type, TensorType):
                return self.op("minimum" if fn is min else "maximum", a, c, node=e)
            if a.type == IntType and c.type == IntType:
                return self.op("int_min" if fn is min else "int_max", a, c, node=e)
            return self.op("py_min" if fn is min else "py_max", a, c, node=e)
        raise self.error(f"{fn.__name__}() is only supported as a for-loop iterator", e)

    def list_of(self, vals: list[Value], e: ast.Call) -> Value:
        """``list()``, ``list(xs)`` (a copy) and ``list(d)`` (its keys), as TorchScript."""
        if not vals:
            return self.fresh_list(self.b.list_([], AnyType), e)
        t = vals[0].type
        if len(vals) == 1 and isinstance(t, ListType):
            return self.fresh_list(vals[0], e)
        if len(vals) == 1 and isinstance(t, DictType):
            return self.op("dict_keys", vals[0], node=e)
        raise self.error(f"list() takes a list or a dict here, got "
                         f"{', '.join(repr(v.type) for v in vals) or 'nothing'}", e)

    def call_method(self, m: Method, e: ast.Call) -> Sugared:
        if isinstance(m.obj, ModuleRef):
            return self.call_module(m.obj, m.name, e)
        obj: Value = m.obj
        args, kwargs = self.args_of(e)
        t = obj.type
        if isinstance(t, ListType):
            if m.name == "append" and len(args) == 1:
                item = self.value(args[0], e)
                if t.element == AnyType:
                    _refine_list(obj, ListType(item.type))     # ``xs = []`` then append
                elif not _compatible(t.element, item.type):
                    raise self.error(f"cannot append a {item.type!r} to a {t!r}", e)
                self.op("list_append", obj, item, node=e)
                return self.const(None)
            if m.name in ("extend", "insert") and t.element == AnyType and args:
                item = self.value(args[-1], e)         # ``xs = []`` then extend/insert
                it = item.type.element if m.name == "extend" and isinstance(
                    item.type, ListType) else item.type
                if it != AnyType:
                    _refine_list(obj, ListType(it))
            if f"list.{m.name}" in pyfuncs.PY_FUNCTIONS:
                return self.py_call(f"list.{m.name}", [obj] + args, kwargs, e)
            raise self.error(f"list.{m.name}() is not supported in scripted code", e)
        if type(t).__name__ == "DictType":
            names = {"keys": "dict_keys", "values": "dict_values", "items": "dict_items"}
            if m.name in names and not args:
                return self.op(names[m.name], obj, node=e)
            if f"dict.{m.name}" in pyfuncs.PY_FUNCTIONS:
                return self.py_call(f"dict.{m.name}", [obj] + args, kwargs, e)
            raise self.error(f"dict.{m.name}() is not supported in scripted code", e)
        if t == StrType:
            if m.name == "format":
                if kwargs:
                    raise self.error("str.format() takes positional arguments here", e)
                vals = [self.value(a, e) for a in args]
                return self.op("py_format", obj, *vals, node=e)
            if f"str.{m.name}" in pyfuncs.PY_FUNCTIONS:
                return self.py_call(f"str.{m.name}", [obj] + args, kwargs, e)
        if isinstance(t, TensorType):
            if m.name in ("size",) and len(args) == 1 and not kwargs:
                d = self.static_value(args[0])
                if isinstance(d, int):
                    return self.op("size", obj, dim=d, node=e)
            if m.name == "size" and not args and not kwargs:
                return self.op("shape", obj, node=e)
            if m.name == "dim" and not args:
                return self.op("dim", obj, node=e)
            if m.name == "numel" and not args:
                return self.op("numel", obj, node=e)
            if m.name == "item" and not args and not kwargs:
                return self.op("item", obj, node=e)
            if m.name in UNARY_METHODS and not args and not kwargs:
                return self.op(m.name, obj, node=e)
            if getattr(Tensor, m.name, None) is None:
                raise self.error(f"Tensor has no method {m.name!r}", e)
            return self.library_call(f"Tensor.{m.name}", [obj] + args, kwargs, e,
                                     _result_type(m.name, args, kwargs))
        raise self.error(f"a {t!r} has no method {m.name!r} in scripted code", e)

    def py_call(self, name: str, args: list[Sugared], kwargs: dict[str, Sugared],
                e: ast.Call) -> Sugared:
        """A row of ``ir.ops.pyfuncs`` (a builtin, ``math`` function or str/list/dict
        method) as one ``py_call`` op; its keywords bind by the row's parameter names."""
        names = _PY_KEYWORDS.get(name, ())
        unknown = set(kwargs) - set(names)
        if unknown:
            raise self.error(f"{name}() got unexpected keyword argument(s) {sorted(unknown)}", e)
        if kwargs:
            fixed = len(args)
            args = list(args)
            for k in names:
                if k in kwargs:
                    while len(args) < fixed + names.index(k):
                        args.append(PyObj(_PY_DEFAULTS[names[len(args) - fixed]]))
                    args.append(kwargs[k])
        vals = [self.value(a, e) for a in args]
        try:                          # the row's own message, not prefixed by the op's name
            pyfuncs.result_type(name, [v.type for v in vals])
        except TypeError as err:
            raise self.error(str(err), e) from None
        return self.op("py_call", *vals, fn=name, node=e)

    def call_library(self, name: str, e: ast.Call) -> Sugared:
        args, kwargs = self.args_of(e)
        short = name.rsplit(".", 1)[1]
        if short in UNARY_METHODS and len(args) == 1 and not kwargs and isinstance(
                args[0], Value) and isinstance(args[0].type, TensorType):
            return self.op(short, args[0], node=e)
        return self.library_call(name, args, kwargs, e, _result_type(short, args[1:], kwargs))

    def library_call(self, name: str, args: list[Sugared], kwargs: dict[str, Sugared],
                     e: ast.AST, result: Type, method: str | None = None) -> Value:
        """A ``prim::CallFunction`` expanded per specialization (``library.expand_call``)."""
        inputs: list[Value] = []

        def entry(a: Sugared) -> Any:
            if isinstance(a, ModuleRef):
                inputs.append(a.value)
                return ["v", len(inputs) - 1]
            s = self.static_value(a)
            if s is not None or (isinstance(a, Value) and a.node.kind == Prim.CONSTANT):
                if isinstance(s, (int, float, bool, str, DType)) or s is None:
                    return ["c", s]
                if isinstance(s, Device):
                    return ["c", str(s)]
                if isinstance(s, (tuple, list)) and all(isinstance(i, (int, float, bool, str))
                                                        or i is None for i in s):
                    return ["c", list(s) if isinstance(s, list) else list(s)]
            inputs.append(self.value(a, e))
            return ["v", len(inputs) - 1]
        spec_args = [entry(a) for a in args]
        spec_kwargs = [[k, entry(v)] for k, v in kwargs.items()]
        attrs: dict[str, Any] = {"name": name, "args": spec_args, "kwargs": spec_kwargs}
        if method:
            attrs["method"] = method
        return self.b.node(Prim.CALL_FUNCTION, inputs, [result], attrs).output

    def call_module(self, ref: ModuleRef, method: str, e: ast.Call) -> Sugared:
        args, kwargs = self.args_of(e)
        if library.is_builtin_layer(ref.module) or "_layer" in ref.module.__dict__:
            # a layer's forward is traced per specialization: its keywords bind there
            return self.call_module_values(ref, method, args, e, kwargs)
        args = self.bind_method(ref, method, args, kwargs, e)
        vals = [self.value(a, e) for a in args]
        return self.call_module_values(ref, method, vals, e)

    def bind_method(self, ref: ModuleRef, method: str, args: list[Sugared],
                    kwargs: dict[str, Sugared], e: ast.Call) -> list[Sugared]:
        """The call's arguments in the method's parameter order (keywords bound by name,
        omitted ones by their defaults), as Python binds them."""
        fn = getattr(type(ref.module), method, None)
        key = f"{type(ref.module).__qualname__}.{method}"
        try:
            sig = inspect.signature(fn)
            bound = sig.bind(None, *args, **kwargs)
        except (TypeError, ValueError) as err:
            raise self.error(f"{key}(): {err}", e) from None
        out: list[Sugared] = []
        for name, p in list(sig.parameters.items())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if bound.arguments.get(name):
                    raise self.error(f"{key}(): *args/**kwargs parameters are not supported "
                                     f"in scripted code", e)
                continue
            if name in bound.arguments:
                out.append(bound.arguments[name])
            elif p.default is not inspect.Parameter.empty:
                out.append(PyObj(p.default))
        return out

    def call_module_values(self, ref: ModuleRef, method: str, vals: list[Sugared],
                           e: ast.AST, kwargs: dict[str, Sugared] | None = None) -> Sugared:
        """A module's method on bound arguments; a built-in layer takes its keywords as
        given (they bind when its forward is traced)."""
        if library.is_builtin_layer(ref.module) or "_layer" in ref.module.__dict__:
            return self.library_call(f"{type(ref.module).__name__}.{method}", [ref] + vals,
                                     kwargs or {}, e, _layer_result(ref.module, method),
                                     method=method)
        if library.is_container(ref.module):            # a Sequential, also nested: unrolled
            from scriptmod.nn import Sequential
            if not isinstance(ref.module, Sequential) or method != "forward":
                raise self.error(f"a {type(ref.module).__name__} cannot be called; iterate "
                                 f"over it", e)
            if len(vals) != 1:
                raise self.error("a Sequential takes one argument", e)
            out: Sugared = vals[0]
            for name, child in ref.module._modules.items():
                if child is None:
                    continue
                sub = ModuleRef(self.b.get_attr(ref.value, name, self.module_type(child)),
                                child)
                out = self.call_module_values(sub, "forward", [self.value(out, e)], e)
            return out
        assert self.ctx.method_graph is not None
        key = f"{type(ref.module).__qualname__}.{method}"
        if key in self.ctx.stack:
            raise self.error(f"recursive call of {key} ({' -> '.join(self.ctx.stack + [key])}) "
                             f"is not supported in scripted code", e)
        self.ctx.stack.append(key)
        try:
            g = self.ctx.method_graph(ref.module, method)
        finally:
            self.ctx.stack.pop()
        params = g.inputs[1:]
        if len(vals) != len(params):
            raise self.error(f"{key}() takes {len(params)} argument(s), got {len(vals)}", e)
        for p, v in zip(params, vals):
            if not _fits(v.type, p.type):
                raise self.error(f"{key}(): argument '{p.debug_name}' must be {p.type!r}, got "
                                 f"{v.type!r}", e)
        (out,) = self.b.call_method(ref.value, method, vals, [g.outputs[0].type])
        return out

    def call_user_function(self, fn: Any, e: ast.Call) -> Sugared:
        args, kwargs = self.args_of(e)
        key = getattr(fn, "__qualname__", fn.__name__)
        if key in self.ctx.stack:
            raise self.error(f"recursive call of {key} ({' -> '.join(self.ctx.stack + [key])}) "
                             f"is not supported in scripted code", e)
        g = self.ctx.functions.get(fn)
        if g is None:
            self.ctx.stack.append(key)
            try:
                g = FunctionCompiler(fn, self.ctx).compile()
            finally:
                self.ctx.stack.pop()
            self.ctx.functions[fn] = g
        names = [v.debug_name for v in g.inputs]
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise self.error(f"{key}(): {err}", e) from None
        vals = []
        for name, p in sig.parameters.items():
            if name in bound.arguments:
                vals.append(self.value(bound.arguments[name], e))
            elif p.default is not inspect.Parameter.empty:
                vals.append(self.value(PyObj(p.default), e))
            else:
                raise self.error(f"{key}(): missing argument '{name}'", e)
        for v, gi, nm in zip(vals, g.inputs, names):
            if not _fits(v.type, gi.type):
                raise self.error(f"{key}(): argument '{nm}' must be {gi.type!r}, got "
                                 f"{v.type!r}", e)
        return _inline(self.b, g, vals)


# ---- small helpers ----------------------------------------------------------------------

def _inline(b: Builder, g: Graph, args: list[Value]) -> Value:
    from scriptmod.ir.graph import clone_node
    env = dict(zip(g.inputs, args))
    anchor = b._anchor
    for n in g.block:
        clone_node(n, b.graph, env).insert_before(anchor)
    return env[g.outputs[0]]


def _retyped(fc: FunctionCompiler, v: Value, t: Type) -> Value:
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


def _storage(v: Value) -> str:
    """Whose memory a tensor value is: "argument" (an input of the function, possibly
    written in place before), "fresh" (an op of this function allocated it, so no other
    name sees it unless the user bound one) or "shared" (a view, a parameter, an element
    of a list, a library call's result: it may alias something else)."""
    while v.node.kind == "sm::copy_":
        v = v.node.inputs[0]
    n = v.node
    if n.kind == Prim.PARAM:
        if n.owning_block is n.graph.block:
            return "argument"
        loop = n.owning_block.owning_node if n.owning_block is not None else None
        if loop is not None and loop.kind == Prim.LOOP and v.index > 0:
            return _storage(loop.inputs[v.index + 1])      # a carried value: its initial one
        return "shared"
    if n.is_op:
        schema = S.REGISTRY.get(n.op_name)
        if schema is not None and (schema.has(S.ELEMENTWISE) or n.op_name in _FRESH):
            return "fresh"
    if n.kind == Prim.CALL_FUNCTION and not n.attrs.get("method"):
        name = n.attrs.get("name", "").rsplit(".", 1)[-1]
        return "shared" if name in _VIEWS else "fresh"     # a library call: a new tensor
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
    gives ``Tuple[Tensor, Optional[Tensor]]``); a tensor where it has none."""
    ref = module.__dict__.get("_layer")
    try:
        cls = library.layer_class(ref.class_path) if ref is not None else type(module)
        hint = typing.get_type_hints(getattr(cls, method)).get("return")
        return TensorType() if hint is None else to_ir_type(hint)
    except Exception:                                       # noqa: BLE001
        return TensorType()


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
    if name in _INT_RESULTS:
        return IntType
    if name in _BOOL_RESULTS:
        return BoolType
    return TensorType()


__all__ = ["FunctionCompiler", "Context", "FrontendError"]
