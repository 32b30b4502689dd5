"""Statements: a block under the exit transform, assignments (plain, annotated,
augmented, unpacking, subscript stores), ``return``/``break``/``continue`` as exit
flags, ``assert`` and ``raise``.
"""
from __future__ import annotations

import ast
from typing import Any

from scriptmod.ir.graph import Prim, Value
from scriptmod.ir.types import (AnyType, BoolType, FloatType, IntType, ListType, NamedTupleType,
                                NumberType, OptionalType, StrType, TensorType, TupleType, Type)
from ..annotations import to_ir_type
from ..errors import FrontendError
from ._helpers import (BROKE, CONT, RET, RETVAL, _FLAGS, _OPS_TEXT, _UNSUPPORTED, _compatible,
                       _fits, _name_after, _refine_list, _storage)
from ._aliasing import view_chain
from ._sugared import Exits, ModuleRef, PyObj, Sugared


class StatementsMixin:
    """``FunctionCompiler``'s ``block``, ``stmt`` and ``stmt_*`` methods."""

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
            if isinstance(st, t) and not (isinstance(st, ast.With) and self._grad_modes(st)):
                raise self.error(f"{what} are not supported in scripted code", st)
        self.b.source = self.source(st)
        method = getattr(self, f"stmt_{type(st).__name__}", None)
        if method is None:
            raise self.error(f"'{type(st).__name__}' statements are not supported in "
                             f"scripted code", st)
        return method(st) or Exits.NEVER

    def stmt_With(self, st: ast.With) -> int:
        """``with torch.no_grad():`` (the tensors it binds come out detached: values
        computed without recording gradients) or ``torch.enable_grad()``; ``stmt`` refuses
        other context managers."""
        before = dict(self.env)
        exits = self.block(st.body)
        if "no_grad" in self._grad_modes(st):
            for name, v in list(self.env.items()):
                if isinstance(v, Value) and isinstance(v.type, TensorType) and \
                        before.get(name) is not v:
                    self.env[name] = self.library_call(   # type: ignore[attr-defined]
                        "Tensor.detach", [v], {}, st, v.type)
        return exits

    def _grad_modes(self, st: ast.With) -> list[str]:
        """The grad modes a ``with`` sets (``no_grad``, ``enable_grad``, ``inference_mode``
        counts as ``no_grad``), or [] where an item is another context manager."""
        import scriptmod
        modes = {scriptmod.no_grad: "no_grad", scriptmod.inference_mode: "no_grad",
                 scriptmod.enable_grad: "enable_grad"}
        out = []
        for item in st.items:
            e = item.context_expr
            if item.optional_vars is not None or not isinstance(e, ast.Call) or e.args \
                    or e.keywords:
                return []
            try:
                obj = self.static_type(e.func)            # type: ignore[attr-defined]
            except FrontendError:
                return []
            if obj not in modes:
                return []
            out.append(modes[obj])
        return out

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
            kind = _storage(cur, self.aliases)
            if kind == "argument":
                # an argument updated in place: the caller sees it, as with Python's ``+=``
                out = self.mutated(cur, self.op("copy_", cur, out, node=st), st)
            elif kind == "fresh" or view_chain(cur) is not None or \
                    self._unshared(cur):               # type: ignore[attr-defined]
                out = self.mutated(cur, out, st)   # every name of it, a view's base too
            else:
                sym = _OPS_TEXT.get(type(st.op), "?=")
                raise self.error(f"'{st.target.id} {sym} ...' updates in place a tensor that "
                                 f"may share memory with another (an element of a list, a "
                                 f"parameter, a library call's result), which scripted code "
                                 f"does not support yet; write {st.target.id} = "
                                 f"{st.target.id} {sym[:-1]} ...", st)
        self.assign(st.target, out, st)
        return Exits.NEVER

    def assign(self, target: ast.expr, v: Sugared, node: ast.AST,
               declared: Type | None = None) -> None:
        if isinstance(target, ast.Name):
            if isinstance(v, Value):
                if declared is not None and not _fits(v.type, declared):
                    raise self.error(f"'{target.id}' is declared {declared!r} but assigned "
                                     f"{v.type!r}", node)
                # each assignment binds a new SSA value, so straight-line code may rebind a
                # name to another type (TorchScript's rule): one type is required only
                # where control flow merges (``if_``, a loop's carried values)
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
            if view_chain(obj) is None and (not isinstance(target.value, ast.Name) or
                                            _storage(obj, self.aliases) == "shared") \
                    and not self._unshared(obj):        # type: ignore[attr-defined]
                raise self.error("a store into a tensor that may share memory with another (a "
                                 "parameter, an element of a list, a library call's result) "
                                 "is not supported in scripted code yet; index the base "
                                 "tensor itself (x[0, 1] = v)", target)
            spec, operands = self.index_spec(target.slice, obj)
            if not isinstance(val.type, TensorType):
                if val.type not in (IntType, FloatType, BoolType):
                    raise self.error(f"cannot store a {val.type!r} into a tensor", node)
                val = self.op("full", self.b.list_([], IntType), val, node=node)
            out = self.op("index_put", obj, val, *operands, spec=spec, node=node)
            self.mutated(obj, self.op("copy_", obj, out, node=node), node)
            return
        raise self.error(f"cannot assign into a {obj.type!r}", target)

    def stmt_Return(self, st: ast.Return) -> int:
        v = self.const(None) if st.value is None else self.value(self.expr(st.value), st.value)
        if self.return_type is not None and not _fits(v.type, self.return_type):
            hint = (" (Tensor.item() gives a Scalar, as in TorchScript: convert it with "
                    "int() or float())") if v.type == NumberType else ""
            raise self.error(f"function '{self.name}' is annotated to return "
                             f"{self.return_type!r} but returns {v.type!r}{hint}", st)
        if isinstance(self.return_type, NamedTupleType) and not isinstance(v.type, NamedTupleType):
            # a plain tuple returned as a NamedTuple: its callers read the fields by name
            items = [self.b.tuple_index(v, i) for i in range(len(v.type.elements))]
            v = self.b.node(Prim.TUPLE_CONSTRUCT, items, [self.return_type.plain(
                tuple(i.type for i in items))]).output
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
