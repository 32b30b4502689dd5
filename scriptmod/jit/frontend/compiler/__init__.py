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

The package follows the compiler's sections, one module each (``FunctionCompiler`` mixes
in one class per section; the section modules import only ``_sugared`` and ``_helpers``):

- ``_sugared``: what a name can be besides an IR value (``PyObj``, ``ModuleRef``,
  ``Method``), ``Exits`` and the per-``script`` ``Context``;
- ``_entry``: ``compile`` and the helpers every section uses (``error``, ``const``, ``op``,
  ``value``);
- ``_statements``: ``block``, ``stmt_*`` (assignments, return/break/continue, assert, raise);
- ``_control_flow``: ``if`` (``prim::If``, Optional refinement) and loops (``prim::Loop``,
  unrolled loops over modules and tuples);
- ``_expressions``: ``expr_*`` (names, attributes, operators, comparisons, subscripts);
- ``_calls``: ``expr_Call`` and ``call_*`` (builtins, methods, library calls, modules,
  user functions);
- ``_aliasing``: in-place writes (``mutated``): names that share the written tensor, and
  writes through views to their base;
- ``_helpers``: the operator tables, exit-flag names and typing helpers (``_fits``,
  ``_compatible``, ``_storage``, ``_result_type``).
"""
# ruff: noqa: F401  (the package re-exports the names of the module it replaced)
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Value
from scriptmod.ir.types import Type
from ..errors import FrontendError, SourceRange
from ._aliasing import AliasingMixin
from ._calls import CallsMixin
from ._control_flow import ControlFlowMixin
from ._entry import EntryMixin
from ._expressions import ExpressionsMixin
from ._statements import StatementsMixin
from ._sugared import Context, Exits, Method, ModuleRef, PyObj, Sugared
# the module's names from before it became a package (``api`` reads ``_layer_result``)
from ._helpers import (UNARY_METHODS, _BIN_TENSOR, _BIN_INT, _BIN_PY, _CMP_TENSOR, _CMP_INT,
                       _CMP_PY, _UNSUPPORTED, _OPS_TEXT, RET, RETVAL, BROKE, CONT, _FLAGS,
                       _inline, _retyped, _FRESH, _name_after, _storage, _VIEWS, _refine_list,
                       _assigned_names, _walk_loop_level, _target_names, _holds_tensor, _fits,
                       _compatible, _static_is, _is_none, _shown, _pyname, _PY_KEYWORDS,
                       _PY_DEFAULTS, _PAIR_RESULTS, _PAIR_WITH_DIM, _PAIR_FIELDS, _LIST_RESULTS,
                       _INT_RESULTS, _BOOL_RESULTS, _layer_result, _result_type)


class FunctionCompiler(EntryMixin, StatementsMixin, ControlFlowMixin, ExpressionsMixin,
                       CallsMixin, AliasingMixin):
    """Compiles one function (or one method of ``module``) to a graph.

    Its methods come from one mixin per section of the compiler (see the package's
    docstring); the state they share is set here."""

    def __init__(self, fn: Any, ctx: Context, module: Any = None, name: str | None = None) -> None:
        if getattr(fn, "__script_if_tracing_wrapper", False):
            fn = getattr(fn, "__original_fn")  # noqa: B009  (its own globals, not the wrapper's)
        self.fn = fn
        self.ctx = ctx
        self.module = module
        self.name = name or fn.__name__
        if getattr(fn, "__name__", None) == "<lambda>":
            raise FrontendError(f"cannot script a lambda ({_where(fn)}): lambdas are not "
                                f"supported in scripted code; define it with 'def'")
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise FrontendError(f"cannot script {self.name!r}: its source is not available "
                                f"({e})") from None
        self.lines = lines
        self.first = first
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        try:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError as e:        # source lines that are not a whole statement
            raise FrontendError(f"cannot script {self.name!r}: its source lines at "
                                f"{_where(fn)} do not parse on their own ({e.msg})") from None
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
        self.aliases: dict[Value, Value | None] = {}   # call results: what each may share
        # memory with (an argument of the call), None for a fresh tensor (``_storage``)


def _where(fn: Any) -> str:
    """``file:line`` of a function's code, for errors about its source."""
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"


__all__ = ["FunctionCompiler", "Context", "FrontendError"]
