"""Entry and helpers: ``compile`` (parameters, annotations, defaults, the final return)
and the small methods every section uses (source locations, errors, constants, ops,
a sugared value as an IR value).
"""
from __future__ import annotations

import ast
import typing
from typing import Any

from scriptmod._device import device as Device
from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Graph, Value
from scriptmod.ir.types import ModuleType, NoneType, TensorType, Type
from ..annotations import AnnotationError, to_ir_type
from ..errors import FrontendError, SourceRange
from ._helpers import RET, RETVAL, _storage
from ._sugared import Exits, ModuleRef, PyObj, Sugared


class EntryMixin:
    """``FunctionCompiler``'s entry point and shared helper methods."""

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
        ret = self._final_return(f, exits)
        self.b.ret(ret)
        kind = _storage(ret, self.aliases) if isinstance(ret.type, TensorType) else "shared"
        self.ctx.returns[id(self.graph)] = (
            kind, self.graph.inputs.index(ret) if kind == "argument" and ret in
            self.graph.inputs else None)
        return self.graph

    def _defaults(self, params: list[ast.arg]) -> dict[str, Any]:
        """Parameter defaults (None, int, float, bool, str, a dtype or device, or a tuple of
        them)."""
        values = getattr(self.fn, "__defaults__", None) or ()
        names = [p.arg for p in params][len(params) - len(values):] if values else []
        out = {}
        plain = lambda i: type(i) in (int, float, bool, str, DType, Device)  # noqa: E731
        for name, v in zip(names, values):
            if not (v is None or plain(v) or (isinstance(v, tuple) and all(map(plain, v)))):
                raise self.error(f"the default of '{name}' must be None, an int, float, bool, "
                                 f"str, dtype, device or a tuple of them, got "
                                 f"{type(v).__name__}", self.fdef)
            # a device as scripted code holds one (``tensor.device``): its str, "cpu"
            out[name] = str(v) if isinstance(v, Device) else v
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
            if isinstance(obj, (tuple, list)):        # of constants: dtypes, devices too
                vals = [self.value(PyObj(o), node) for o in obj]
                return self.b.tuple_(vals) if isinstance(obj, tuple) else self.b.list_(vals)
            raise self.error(f"a {type(obj).__name__} cannot be used as a value in scripted "
                             f"code", node)
        if isinstance(x, ModuleRef):
            raise self.error("a module cannot be used as a value here (call it, or read one "
                             "of its attributes)", node)
        raise self.error("this cannot be used as a value in scripted code", node)
