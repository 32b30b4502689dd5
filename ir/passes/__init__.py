"""Graph passes: plain functions named by verbs that mutate the graph in place, return it,
and leave ``ir.verify.verify`` passing. ``run_pipeline`` runs a list of them.

    >>> run_pipeline(g, ["canonicalize", "eliminate_common_subexpressions",
    ...                  "eliminate_dead_code"], verify=True)      # doctest: +SKIP
"""
from ir.passes.canonicalize import canonicalize
from ir.passes.cse import eliminate_common_subexpressions
from ir.passes.dce import eliminate_dead_code
from ir.passes.effects import has_side_effects, is_pure
from ir.passes.fold import fold_constants
from ir.passes.fuse import fuse_elementwise
from ir.passes.inline import inline_calls
from ir.passes.pipeline import PASSES, register_pass, run_pipeline
from ir.passes.shapes import ShapePropagationError, propagate_shapes

__all__ = ["canonicalize", "eliminate_common_subexpressions", "eliminate_dead_code",
           "fold_constants", "inline_calls", "propagate_shapes", "run_pipeline", "register_pass",
           "PASSES", "ShapePropagationError", "has_side_effects", "is_pure"]
__all__.append("fuse_elementwise")
