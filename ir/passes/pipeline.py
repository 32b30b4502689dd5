"""One runner for pass lists: verify after each pass (debug) and log the graph after each
pass when ``SCRIPTMOD_LOG`` contains ``passes``."""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence, Union

from .. import log as irlog
from ..graph import Graph
from .canonicalize import canonicalize
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold import fold_constants
from .fold_batchnorm import fold_batchnorm
from .inline import inline_calls
from .remove_dropout import remove_dropout
from .shapes import propagate_shapes
from ..verify import IRVerifyError, verify as verify_graph

Pass = Callable[..., Graph]
PassEntry = Union[str, Pass, tuple]

PASSES: dict[str, Pass] = {
    "inline_calls": inline_calls,
    "fold_constants": fold_constants,
    "eliminate_dead_code": eliminate_dead_code,
    "eliminate_common_subexpressions": eliminate_common_subexpressions,
    "canonicalize": canonicalize,
    "propagate_shapes": propagate_shapes,
    "fold_batchnorm": fold_batchnorm,
    "remove_dropout": remove_dropout,
}


def register_pass(name: str, fn: Pass) -> None:
    """Make ``fn(graph, **options) -> graph`` runnable by name (e.g. fusion, from its layer)."""
    PASSES[name] = fn


def _resolve(entry: PassEntry, options: dict[str, dict[str, Any]]) -> tuple[str, Pass, dict]:
    if isinstance(entry, tuple):
        target, kwargs = entry
        name, fn, _ = _resolve(target, {})
        return name, fn, dict(kwargs)
    if callable(entry):
        name = getattr(entry, "__name__", repr(entry))
        return name, entry, dict(options.get(name, {}))
    if entry not in PASSES:
        raise KeyError(f"run_pipeline: unknown pass {entry!r}; known: {sorted(PASSES)}")
    return entry, PASSES[entry], dict(options.get(entry, {}))


def run_pipeline(graph: Graph, passes: Sequence[PassEntry], verify: bool = False,
                 log: Callable[[str], None] | None = None,
                 options: dict[str, dict[str, Any]] | None = None) -> Graph:
    """Run ``passes`` in order on ``graph`` (in place) and return it.

    An entry is a pass name, a function ``f(graph, **kw)``, or ``(name_or_function, kwargs)``;
    ``options`` maps pass names to keyword arguments. ``verify=True`` checks the graph after
    every pass and names the pass that broke it.

        >>> from scriptmod.ir import parse
        >>> g = parse('''graph(%self : __module__.Net, %x : Float(4)):
        ...   %act : __module__.Act = prim::GetAttr[name="act"](%self)
        ...   %y : Float(4) = prim::CallMethod[name="forward"](%act, %x)
        ...   return (%y)
        ... ''')
        >>> act = parse('''graph(%self : __module__.Act, %x : Float(4)):
        ...   %y : Float(4) = sm::relu(%x)
        ...   return (%y)
        ... ''')
        >>> r = lambda call: act
        >>> print(run_pipeline(g, ["inline_calls", "canonicalize", "eliminate_dead_code"],
        ...                    verify=True, options={"inline_calls": {"resolve": r}}))
        graph(%self : __module__.Net, %x : Float(4)):
          %y : Float(4) = sm::relu(%x)  # scope: act
          return (%y)
    """
    for entry in passes:
        name, fn, kwargs = _resolve(entry, options or {})
        start = time.perf_counter()
        fn(graph, **kwargs)
        ms = (time.perf_counter() - start) * 1e3
        if verify:
            try:
                verify_graph(graph)
            except IRVerifyError as e:
                raise IRVerifyError(f"after pass {name}: {e}") from None
        _report(name, ms, graph, log)
    return graph


def _report(name: str, ms: float, graph: Graph, log: Callable[[str], None] | None) -> None:
    """Format the graph only for a listener: printing a big graph costs more than a pass."""
    if log is not None:
        log(f"after {name} ({ms:.2f} ms):\n{graph}")
    elif irlog.enabled("passes"):
        irlog.log("passes", f"after {name} ({ms:.2f} ms):\n{graph}")
