"""Graph passes: plain functions named by verbs that mutate the graph in place, return it,
and leave ``ir.verify.verify`` passing. ``run_pipeline`` runs a list of them.

    >>> from scriptmod.ir import parse
    >>> g = parse('''graph(%x : Float(4)):
    ...   %a : Float(4) = sm::neg(%x)
    ...   %b : Float(4) = sm::neg(%x)
    ...   %c : Float(4) = sm::neg(%b)
    ...   %d : Float(4) = sm::add(%a, %b)
    ...   return (%d)
    ... ''')
    >>> print(run_pipeline(g, ["canonicalize", "eliminate_common_subexpressions",
    ...                        "eliminate_dead_code"], verify=True))
    graph(%x : Float(4)):
      %a : Float(4) = sm::neg(%x)
      %d : Float(4) = sm::add(%a, %a)
      return (%d)
"""
from .canonicalize import canonicalize
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .expand_losses import expand_losses
from .effects import has_side_effects, is_pure
from .fold import fold_constants
from .fold_batchnorm import fold_batchnorm
from .freeze import freeze_attributes
from .fuse import fuse_elementwise
from .fuse_attention import fuse_attention
from .fuse_rows import fuse_rows
from .inline import inline_calls
from .licm import hoist_loop_invariants
from .remove_dropout import remove_dropout
from .pipeline import PASSES, register_pass, run_pipeline
from .shapes import ShapePropagationError, propagate_shapes
from .split_reductions import split_reductions

__all__ = ["canonicalize", "eliminate_common_subexpressions", "eliminate_dead_code",
           "fold_constants", "inline_calls", "propagate_shapes", "run_pipeline", "register_pass",
           "PASSES", "ShapePropagationError", "has_side_effects", "is_pure"]
__all__ += ["fuse_attention", "fuse_elementwise", "fuse_rows", "hoist_loop_invariants", "split_reductions"]
__all__ += ["expand_losses", "fold_batchnorm", "freeze_attributes", "remove_dropout"]
