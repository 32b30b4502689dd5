"""Control flow: ``if`` (a ``prim::If`` whose outputs are the variables both branches
define, Optional refinement) and loops (``for`` over ranges, sequences, ``enumerate``,
``zip`` and modules, ``while``; a ``prim::Loop`` carrying the variables the body
assigns, loops over modules or tuples unrolled).
"""
from __future__ import annotations

import ast
import builtins
from typing import Any, Callable

from scriptmod.ir.builder import join_types
from scriptmod.ir.graph import Prim, Value
from scriptmod.ir.types import (AnyType, BoolType, DictType, IntType, ListType, OptionalType,
                                TensorType, TupleType)
from ..annotations import to_ir_type
from ..errors import FrontendError
from ._helpers import (BROKE, CONT, RET, RETVAL, _FLAGS, _assigned_names, _compatible, _retyped,
                       _shown, _target_names, _walk_loop_level)
from ._sugared import Conflict, Exits, ModuleRef, PyObj, Sugared


class ControlFlowMixin:
    """``FunctionCompiler``'s ``if`` and loop methods."""

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
        names = [k for k in set(e0) | set(e1) if isinstance(e0.get(k), (Value, PyObj))
                 or isinstance(e1.get(k), (Value, PyObj))]
        yields: list[tuple[str, Value, Value]] = []
        for k in sorted(names):
            a, c = e0.get(k), e1.get(k)
            if a is c or (isinstance(a, PyObj) and isinstance(c, PyObj) and a.obj is c.obj):
                if a is not None:
                    merged[k] = a
                continue
            if isinstance(a, PyObj) or isinstance(c, PyObj):   # ``dt = torch.float64``
                a, c = (self.branch_value(x, blk, k, node) for x, blk in zip((a, c), n.blocks))
                if isinstance(a, Conflict) or isinstance(c, Conflict):
                    merged[k] = a if isinstance(a, Conflict) else c
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
            elif isinstance(a, Conflict) or isinstance(c, Conflict):
                merged[k] = a if isinstance(a, Conflict) else c   # still two types
                continue
            elif not (isinstance(a, Value) and isinstance(c, Value)):
                merged.pop(k, None)                          # defined on one path only
                continue
            if not _compatible(a.type, c.type):              # an error only where it is read
                merged[k] = Conflict(f"'{_shown(k)}' is {a.type!r} in one branch and "
                                     f"{c.type!r} in the other", node)
                continue
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

    def branch_value(self, x: Sugared | None, blk: Any, k: str,
                     node: ast.AST) -> Sugared | None:
        """A Python object a branch binds (a dtype, a constant) as a value of that branch,
        so that the If yields it; a Conflict, read as an error, where it has no value."""
        if not isinstance(x, PyObj):
            return x
        try:
            with self.b.insert_into(blk):
                return self.value(x, node)
        except FrontendError:
            return Conflict(f"'{_shown(k)}' is a {type(x.obj).__name__} in one branch; "
                            f"scripted code cannot merge it with the other branch's", node)

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
            if fname == "enumerate" and len(it.args) == 1 and _is_call(it.args[0], "zip") \
                    and not self._shadowed("zip"):
                return self.for_enumerate_zip(st, it)
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
        from scriptmod.nn import ModuleDict, ModuleList, Sequential
        if not isinstance(ref.module, (Sequential, ModuleList, ModuleDict)):   # subclasses too
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

    def for_enumerate_zip(self, st: ast.For, call: ast.Call) -> int:
        """``for i, (a, b) in enumerate(zip(xs, ys))`` (or ``for i, pair in ...``): the
        counter and the zipped items of one loop."""
        inner = call.args[0]
        assert isinstance(inner, ast.Call)
        if inner.keywords or not inner.args:
            raise self.error("zip() takes iterables here", inner)
        seqs = [self.value(self.expr(a), a) for a in inner.args]
        start = self.value(self.expr(call.keywords[0].value), call) if call.keywords else None
        if start is not None and start.type not in (IntType, BoolType):
            raise self.error(f"enumerate(start=...) must be an int, got {start.type!r}", call)
        if not (isinstance(st.target, ast.Tuple) and len(st.target.elts) == 2):
            raise self.error("for i, x in enumerate(...) needs two names", st.target)
        pair = st.target.elts[1]
        if isinstance(pair, ast.Tuple) and len(pair.elts) != len(seqs):
            raise self.error(f"for over zip() of {len(seqs)} needs {len(seqs)} names", pair)
        n = self.length(seqs[0], inner)
        for q in seqs[1:]:
            n = self.op("int_min", n, self.length(q, inner), node=inner)

        def bind(i: Value) -> None:
            k = i if start is None else self.op("int_add", i, start, node=call)
            self.assign(st.target.elts[0], k, st)
            items = [self.item(q, i, inner) for q in seqs]
            if isinstance(pair, ast.Tuple):
                for t, v in zip(pair.elts, items):
                    self.assign(t, v, st)
            else:
                self.assign(pair, self.b.tuple_(items), st)
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


def _is_call(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is a call of the bare name ``name``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == name
