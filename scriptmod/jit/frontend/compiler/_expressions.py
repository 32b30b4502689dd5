"""Expressions: names, attributes (of modules, tensors, Python objects), literals,
comprehensions, boolean/unary/binary operators, comparisons, truth values,
f-strings, subscripts and tensor indexing.
"""
from __future__ import annotations

import ast
import builtins
import inspect
from typing import Any, Callable

from scriptmod.ir.builder import join_types
from scriptmod.ir.graph import Prim, Value
from scriptmod.ir.ops import pyfuncs
from scriptmod.ir.types import (AnyType, BoolType, FloatType, IntType, ListType, ModuleType,
                                NamedTupleType, NumberType, OptionalType, StrType, TensorType,
                                TupleType, Type)
from scriptmod.tensor import Tensor
from ._helpers import (_BIN_INT, _BIN_PY, _BIN_TENSOR, _CMP_INT, _CMP_PY, _CMP_TENSOR,
                       _PAIR_FIELDS, _UNSUPPORTED, _compatible, _fits, _is_none, _pyname,
                       _static_is)
from ._sugared import Conflict, Method, ModuleRef, PyObj, Sugared


class ExpressionsMixin:
    """``FunctionCompiler``'s ``expr`` and ``expr_*`` methods."""

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
            if isinstance(v, Conflict):
                raise self.error(v.message, v.node)
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
        if isinstance(val.type, NamedTupleType) and name in val.type.fields:
            return self.b.tuple_index(val, val.type.fields.index(name))   # ``out.boxes``
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
        if isinstance(d.get(name), Tensor):         # a plain tensor attribute: the
            from scriptmod.jit._tracer import tensor_type   # ScriptModule holds it as a
            return self.b.get_attr(ref.value, name, tensor_type(d[name]))   # buffer
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
        if isinstance(value, list) and len({type(v) for v in value}) <= 1 and all(
                type(v) in (int, float, bool, str) for v in value):
            # a list of constants (torchvision's ``Permute.dims``): the list it holds when
            # scripted, a new one per read
            return self.b.list_([self.const(v) for v in value], None if value else AnyType)
        if inspect.ismethod(value) and value.__self__ is mod:
            return Method(ref, value.__func__.__name__)   # ``self.act = self._mish``
        if inspect.isfunction(value) or inspect.isbuiltin(value):
            return PyObj(value)                  # ``self.act = F.gelu``: called as a global
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
        test = self.expr(e.test)
        static = self.static_truth(test)
        if static is not None:                   # only the branch taken is compiled
            return self.expr(e.body if static else e.orelse)
        cond = self.truth(test, e.test)

        def branch(x: ast.expr, holds: bool) -> list[Value]:
            return [self.refined(e.test, holds, lambda: self.value(self.expr(x), x))]
        (r,) = self.b.if_(cond, lambda: branch(e.body, True), lambda: branch(e.orelse, False))
        return r

    def expr_BoolOp(self, e: ast.BoolOp) -> Sugared:
        head = self.expr(e.values[0])
        rest = ast.BoolOp(op=e.op, values=e.values[1:])
        ast.copy_location(rest, e.values[1 if len(e.values) > 1 else 0])
        static = self.static_truth(head)
        if static is not None:
            # a constant operand decides statically, as TorchScript's: ``not
            # jit.is_scripting() and ...`` never compiles what follows (eager-only code)
            if len(e.values) == 1 or static == isinstance(e.op, ast.Or):
                return self.const(static)
            return self.expr_BoolOp(rest)
        first = self.truth(head, e.values[0])
        if len(e.values) == 1:
            return first
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
        if isinstance(e.op, ast.Not) and self.static_truth(operand) is not None:
            return self.const(not self.static_truth(operand))
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
        if isinstance(x.type, ListType) and isinstance(op, ast.Add) \
                and isinstance(y.type, TupleType):
            y = self.tuple_as_list(y, x.type, e)        # ``x.size()[:2] + (a, b)``
        if isinstance(x.type, ListType) and isinstance(y.type, ListType) and \
                isinstance(op, ast.Add):
            return self.op("list_concat", x, y, node=e)
        if isinstance(op, ast.Mult) and ListType in (type(x.type), type(y.type)):
            return self.repeat_list(x, y, e) if isinstance(x.type, ListType) \
                else self.repeat_list(y, x, e)
        if x.type == IntType and y.type == IntType and type(op) in _BIN_INT:
            return self.op(_BIN_INT[type(op)], x, y, node=e)
        name = _BIN_PY.get(type(op))
        if name is None:
            raise self.error(f"unsupported operator for {x.type!r} and {y.type!r}", e)
        return self.op(name, x, y, node=e)

    def tuple_as_list(self, tup: Value, like: ListType, e: ast.AST) -> Value:
        """A tuple whose items fit ``like``'s element, as a list (TorchScript converts a
        homogeneous tuple where a list is expected: ``x.size()[:2] + (a, b)``)."""
        assert isinstance(tup.type, TupleType)
        items = self.b.tuple_unpack(tup) if tup.type.elements else ()
        elem = like.element
        for v in items:
            if elem != AnyType and not _fits(v.type, elem):
                raise self.error(f"cannot add a {tup.type!r} to a {like!r}: the tuple's items "
                                 f"must be {elem!r}", e)
        if elem == AnyType and items:
            elem = items[0].type
            for v in items[1:]:
                elem = join_types(elem, v.type)
        return self.b.list_(list(items), elem)

    def repeat_list(self, lst: Value, times: Value, e: ast.AST) -> Value:
        """``lst * n`` / ``n * lst``: a new list of ``n`` copies of ``lst``'s items."""
        if times.type not in (IntType, BoolType):
            raise self.error(f"a list repeats an int number of times, got {times.type!r}", e)
        return self.op("py_call", lst, times, fn="list.repeat", node=e)

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
            if _is_none(a) or _is_none(c):
                r = self.op("py_is_none", self.value(a if not _is_none(a) else c, e), node=e)
            else:
                r = self.is_bool(self.value(a, e), self.value(c, e), e)
            return r if isinstance(op, ast.Is) else self.op("py_not", r, node=e)
        if isinstance(op, (ast.In, ast.NotIn)) and self.tuple_items(c, e) is not None:
            r = self.contains(a, self.tuple_items(c, e), e)
            return r if isinstance(op, ast.In) else self.op("py_not", r, node=e)
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

    def is_bool(self, x: Value, y: Value, e: ast.AST) -> Value:
        """``x is True`` (``is`` other than with None): of bools, their equality; of a
        value typed Any (a Union) and a bool, whether it is a bool equal to it."""
        if x.type == BoolType and y.type == BoolType:
            return self.op("py_eq", x, y, node=e)
        if {x.type, y.type} == {BoolType, AnyType}:
            other = x if x.type == AnyType else y
            is_bool = self.op("py_call", other, self.const("bool"), fn="isinstance", node=e)
            return self.op("py_and", is_bool, self.op("py_eq", x, y, node=e), node=e)
        raise self.error(f"'is' compares with None, or bools, in scripted code; got "
                         f"{x.type!r} and {y.type!r} (use ==)", e)

    def tuple_items(self, v: Sugared, e: ast.AST) -> list[Sugared] | None:
        """The items of a tuple (a literal, a constant one, or a tuple value), else None."""
        if isinstance(v, PyObj) and isinstance(v.obj, tuple):
            return [PyObj(o) for o in v.obj]
        if isinstance(v, Value) and isinstance(v.type, TupleType):
            return self.unpack(v, len(v.type.elements), e)
        return None

    def contains(self, x: Sugared, items: list[Sugared], e: ast.AST) -> Value:
        """``x in items`` of a tuple: ``x == item`` for each, or-ed left to right (the
        comparisons are pure, so all are made; the first true one decides)."""
        found: Value = self.const(False)
        for item in items:
            eq = self.compare(ast.Eq(), x, item, e)
            eq = eq if isinstance(eq, Value) else self.const(eq)
            if isinstance(eq.type, TensorType):
                eq = self.truth(eq, e)
            (found,) = self.b.if_(found, lambda: [self.const(True)], lambda eq=eq: [eq])
        return found

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
        if isinstance(val.type, TensorType) or val.type in (IntType, FloatType, StrType,
                                                            AnyType) or \
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
            if isinstance(val.type, TensorType):      # a 0-dim tensor, as int (TorchScript)
                val = self.op("py_int", val, node=p)
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
