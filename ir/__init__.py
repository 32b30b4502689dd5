"""scriptmod's IR: types, op schemas, graphs, text forms, verifier and passes.

Knows nothing about devices, LLVM or CuPy; a tensor constant is an opaque payload here.
"""
from . import dtypes, ops, schema, types  # noqa: F401
from .builder import Builder
from .code import code_with_constants, python_code
from .graph import Block, Graph, IRError, Node, Prim, Use, Value
from .parser import IRParseError, parse
from .printer import print_graph
from .verify import IRVerifyError, verify

__all__ = ["dtypes", "ops", "schema", "types", "Builder", "Graph", "Block", "Node", "Value",
           "Use", "Prim", "IRError", "IRParseError", "IRVerifyError", "parse", "print_graph",
           "python_code", "code_with_constants", "verify"]
