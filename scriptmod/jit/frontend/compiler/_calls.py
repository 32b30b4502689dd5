"""Calls: of Python builtins and ``math``, ``jit`` helpers, ``@ignore``d functions,
methods of lists, dicts, strings and tensors, scriptmod library functions
(``prim::CallFunction``), modules and their methods, and user functions (inlined).
"""
from __future__ import annotations

import ast
import builtins
import collections
import inspect
import typing
import warnings
from typing import Any

from scriptmod._device import device as Device
from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Prim, Value
from scriptmod.ir.ops import pyfuncs
from scriptmod.ir.types import (AnyType, BoolType, DictType, FloatType, IntType, ListType,
                                NamedTupleType, NoneType, OptionalType, StrType, TensorType, Type)
from scriptmod.tensor import Tensor
from .. import library
from ..annotations import is_namedtuple_class, to_ir_type
from ._helpers import (UNARY_METHODS, _PY_DEFAULTS, _PY_KEYWORDS, _compatible, _fits,
                       _holds_tensor, _inline, _layer_result, _pyname, _refine_list, _result_type,
                       _storage)
from ._aliasing import view_chain, writes_in_place
from ._sugared import Method, ModuleRef, PyObj, Sugared


class CallsMixin:
    """``FunctionCompiler``'s ``expr_Call`` and ``call_*`` methods."""

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
        if obj in (dict, collections.OrderedDict) and len(e.args) == 1 and not e.keywords:
            args, _ = self.args_of(e)          # ``OrderedDict([(k, v) for ...])``: a dict
            return self.py_call("dict.from_pairs", args, {}, e)
        if obj in (len, int, float, bool, str, abs, min, max, isinstance, range, list):
            return self.call_builtin(obj, e)
        if obj is api.jit_isinstance:
            return self.call_builtin(isinstance, e)
        if id(obj) in pyfuncs.BY_OBJECT:              # math.sqrt, round, sum, sorted, ...
            args, kwargs = self.args_of(e)
            return self.py_call(pyfuncs.BY_OBJECT[id(obj)], args, kwargs, e)
        if obj is warnings.warn:
            return self.call_warn(e)
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
            return self.unused_call(obj, obj.__name__)
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
        if type(obj).__name__ == "ScriptFunction":
            return self.call_script_function(obj, e)
        if is_namedtuple_class(obj):
            return self.construct_namedtuple(obj, e)
        raise self.error(f"calling '{_pyname(obj)}' is not supported in scripted code", e)

    def construct_namedtuple(self, cls: type, e: ast.Call) -> Value:
        """``Out(a, scores=b)`` of a ``NamedTuple`` class: a tuple typed with its fields
        (TorchScript's NamedTuple), defaults filled in, each item checked against its
        field's annotation (a tensor keeps the shape it has)."""
        t = to_ir_type(cls)
        fields: tuple[str, ...] = cls._fields            # type: ignore[attr-defined]
        args, kwargs = self.args_of(e)
        if len(args) > len(fields):
            raise self.error(f"{cls.__name__}() takes {len(fields)} fields, got {len(args)} "
                             f"positional arguments", e)
        given = dict(zip(fields, args))
        for k, a in kwargs.items():
            if k not in fields or k in given:
                raise self.error(f"{cls.__name__}(): {'unknown' if k not in fields else 'repeated'}"
                                 f" field {k!r}", e)
            given[k] = a
        defaults = getattr(cls, "_field_defaults", {})
        items, types_ = [], []
        for f, want in zip(fields, t.elements):
            if f not in given and f not in defaults:
                raise self.error(f"{cls.__name__}(): missing field {f!r}", e)
            v = self.value(given[f] if f in given else PyObj(defaults[f]), e)
            if not _fits(v.type, want):
                raise self.error(f"{cls.__name__}(): field {f!r} must be {want!r}, got "
                                 f"{v.type!r}", e)
            items.append(v)
            types_.append(v.type if isinstance(want, TensorType) else want)
        named = NamedTupleType(tuple(types_), t.name, t.fields, t.cls)
        return self.b.node(Prim.TUPLE_CONSTRUCT, items, [named]).output

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
            if vt == AnyType and all(w in _CLASS_NAMES for w in wants):   # a Union
                return self.op("py_call", self.value(v, e), self.const(",".join(
                    _CLASS_NAMES[w] for w in wants)), fn="isinstance", node=e)
            hit = any(_fits(vt, w) for w in wants)
            return self.const(hit)
        args, kwargs = self.args_of(e)
        if kwargs:
            raise self.error(f"{fn.__name__}() takes no keyword arguments here", e)
        if fn is len and len(args) == 1 and isinstance(args[0], ModuleRef) and \
                library.is_container(args[0].module):
            return self.const(len(args[0].module))     # ``len(self.blocks)``: fixed
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
            out = self.library_call(f"Tensor.{m.name}", [obj] + args, kwargs, e,
                                    _result_type(m.name, args, kwargs))
            if writes_in_place(m.name) and isinstance(out.type, TensorType):
                return self.mutated(obj, out, e)    # names, and a base obj is a view of
            return out
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

    def call_warn(self, e: ast.Call) -> Sugared:
        """``warnings.warn(message, category=UserWarning, stacklevel=1)``: a ``py_call`` that
        warns each time it runs (as TorchScript's); the category one of Python's warning
        classes, passed by name."""
        args, kwargs = self.args_of(e)
        try:
            bound = inspect.signature(warnings.warn).bind(*args, **kwargs).arguments
        except TypeError as err:
            raise self.error(f"warnings.warn(): {err}", e) from None
        if "source" in bound:
            raise self.error("warnings.warn(): 'source' is not supported in scripted code", e)
        category = bound.get("category", PyObj(None))
        cls = category.obj if isinstance(category, PyObj) else None
        if cls is None:
            cls = UserWarning
        if not (isinstance(cls, type) and issubclass(cls, Warning)
                and getattr(builtins, cls.__name__, None) is cls):
            raise self.error("warnings.warn(): the category must be one of Python's own "
                             "warning classes (UserWarning, DeprecationWarning, ...)", e)
        level = bound.get("stacklevel", PyObj(1))
        return self.py_call("warnings.warn", [bound["message"], level, PyObj(cls.__name__)],
                            {}, e)

    def call_library(self, name: str, e: ast.Call) -> Sugared:
        args, kwargs = self.args_of(e)
        short = name.rsplit(".", 1)[1]
        if short in UNARY_METHODS and len(args) == 1 and not kwargs and isinstance(
                args[0], Value) and isinstance(args[0].type, TensorType):
            return self.op(short, args[0], node=e)
        out = kwargs.pop("out", None)
        result = self.library_call(name, args, kwargs, e, _result_type(short, args[1:], kwargs))
        if out is None or (isinstance(out, Value) and out.node.kind == Prim.CONSTANT):
            return result
        return self.written_out(out, result, e)

    def written_out(self, out: Sugared, result: Value, e: ast.AST) -> Value:
        """``torch.f(..., out=b)``: ``b`` resized to the result and holding it, for every name
        of ``b`` (a tensor this function made; into an argument or a view, whose caller
        would see the resize, it is refused)."""
        if not (isinstance(out, Value) and isinstance(out.type, TensorType)):
            raise self.error("out= must be a tensor", e)
        if not self._unshared(out):
            raise self.error("out= into an argument, a view or a parameter is not supported in "
                             "scripted code; assign the result instead (b = torch.f(...))", e)
        return self.mutated(out, result, e)

    def _unshared(self, v: Value) -> bool:
        """Whether only ``v``'s names see its storage: a fresh tensor that is no view, or a
        conversion or reshape (``torch.empty(0).long()``, ``s = s.reshape(...)``) of one no
        name holds any more, which may share its storage but no one can see that."""
        if view_chain(v) is not None:
            return False
        if _storage(v, self.aliases) == "fresh":
            return True
        n = v.node
        if n.kind == Prim.CALL_FUNCTION and not n.attrs.get("method") and n.inputs and \
                n.attrs.get("args", [])[:1] == [["v", 0]]:
            base = n.inputs[0]
            return all(x is not base for x in self.env.values()) and self._unshared(base)
        return False

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

    def unused_call(self, fn: Any, name: str) -> Value:
        """A call of an ``@unused`` function or method: a raise where it runs (its body is
        never compiled, as TorchScript's), and a placeholder of its annotated return type
        (a tensor where it has none), which no path after the raise reads."""
        self.b.raise_(f"{name} was called, but it is marked @unused", "RuntimeError")
        try:
            hint = typing.get_type_hints(fn).get("return")
            t = TensorType() if hint is None else to_ir_type(hint)
        except Exception:                                   # noqa: BLE001
            t = TensorType()
        return self.b.node(Prim.UNINITIALIZED, [], [t]).output

    def call_module(self, ref: ModuleRef, method: str, e: ast.Call) -> Sugared:
        fn = getattr(type(ref.module), method, None)
        if getattr(fn, "_script_unused", False):
            self.args_of(e)                                 # (still checked)
            return self.unused_call(fn, f"{type(ref.module).__name__}.{method}")
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
            out = self.library_call(f"{type(ref.module).__name__}.{method}", [ref] + vals,
                                    kwargs or {}, e, _layer_result(ref.module, method),
                                    method=method)
            if method == "forward" and isinstance(out.type, TensorType):
                if not _returns_input(ref.module):
                    self.aliases[out] = None                   # a fresh tensor
                elif vals and isinstance(vals[0], Value):
                    self.aliases[out] = vals[0]                # may be its input
            return out
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
        kind, k = self.ctx.returns.get(id(g), ("shared", None))
        if kind == "fresh":
            self.aliases[out] = None
        elif kind == "argument" and k is not None and k >= 1:
            self.aliases[out] = vals[k - 1]            # (input 0 is the module)
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
                g = type(self)(fn, self.ctx).compile()     # a FunctionCompiler
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
        return self.inline_checked(key, g, vals, names, e)

    def inline_checked(self, key: str, g: Any, vals: list[Value], names: list[str],
                       e: ast.AST) -> Value:
        """``g`` inlined on ``vals``, each checked against its parameter's type."""
        for v, gi, nm in zip(vals, g.inputs, names):
            if not _fits(v.type, gi.type):
                raise self.error(f"{key}(): argument '{nm}' must be {gi.type!r}, got "
                                 f"{v.type!r}", e)
        return _inline(self.b, g, vals)

    def call_script_function(self, sf: Any, e: ast.Call) -> Sugared:
        """A call of an already compiled function (``@jit.script``-decorated, a
        ``ScriptFunction``): its graph inlined, the arguments bound by its parameter names and
        defaults as Python binds them."""
        from scriptmod.jit._script_module import ScriptFunction
        from scriptmod.jit._structure import bind_keywords
        assert isinstance(sf, ScriptFunction)
        args, kwargs = self.args_of(e)
        g, key = sf.graph, sf.name
        names = sf._module._arg_names.get("forward", [v.debug_name for v in g.inputs])
        defaults = {k: PyObj(v) for k, v in sf._module._defaults.get("forward", {}).items()}
        if len(args) > len(names):
            raise self.error(f"{key}() takes {len(names)} argument(s), got {len(args)}", e)
        try:
            bound = bind_keywords(f"{key}():", names, args, kwargs, defaults)
        except TypeError as err:
            raise self.error(str(err), e) from None
        return self.inline_checked(key, g, [self.value(a, e) for a in bound], names, e)


# the classes a value typed Any (a Union of scalars) is checked against at run time
_CLASS_NAMES = {IntType: "int", FloatType: "float", BoolType: "bool", StrType: "str",
                NoneType: "NoneType"}

# built-in layers whose forward may return its input itself or a view of it (a layer with
# ``inplace=True`` writes its input and returns it): their result shares the argument's memory
_INPUT_RETURNING = frozenset({"Identity", "Flatten", "Unflatten", "Dropout", "Dropout1d",
                              "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"})


def _returns_input(module: Any) -> bool:
    """Whether a built-in layer's forward may return (a view of) its input
    (``_INPUT_RETURNING``, or ``inplace=True``)."""
    return type(module).__name__ in _INPUT_RETURNING or bool(getattr(module, "inplace", False))
