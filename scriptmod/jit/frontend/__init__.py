"""The script frontend: Python source -> IR graphs with control flow (``jit.script``).

- ``api``: ``script`` and the decorators (``export``, ``ignore``, ``unused``, ``annotate``,
  ``Final``, ``is_scripting``, ``is_tracing``);
- ``compiler``: one function's AST -> a graph (types, statements, expressions, the exit
  transform for break/continue/return); a package with one module per section of
  ``FunctionCompiler`` (``_statements``, ``_control_flow``, ``_expressions``, ``_calls``);
- ``library``: calls into scriptmod itself (ops where 1:1, else ``prim::CallFunction``
  expanded per specialization by tracing the eager function);
- ``annotations``: Python annotations -> IR types; ``errors``: ``FrontendError``.
"""
from .api import (Final, annotate, export, ignore, is_scripting, is_tracing,  # noqa: F401
                  jit_isinstance, script, unused)
from .errors import FrontendError, SourceRange  # noqa: F401


def _install_tensor_text() -> None:
    """Scripted ``print``/f-strings show a tensor as eager ``str(tensor)`` does."""
    from scriptmod.runtime.kernels.script import set_tensor_text
    from scriptmod.tensor import Tensor
    set_tensor_text(lambda a: str(Tensor._make(a)))


_install_tensor_text()
