"""The catalogue's own checks, against torch where it is installed:

- every layer's functional exists: each public ``F.<name>`` that torch's ``forward`` of a layer
  scriptmod has calls is in ``scriptmod.nn.functional``;
- every functional scriptmod has takes torch's arguments, by name and in order;
- ONNX covers every registry op that has a standard ONNX node (by name, or by the aliases
  below), not only the rows that exist: a missing emitter is listed with its reason.
"""
from __future__ import annotations

import inspect
import re

import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.ir.schema import REGISTRY


def _torch():
    return pytest.importorskip("torch")


def _torch_layers() -> list[str]:
    torch = _torch()
    return sorted(n for n in dir(sm.nn) if isinstance(getattr(torch.nn, n, None), type)
                  and issubclass(getattr(torch.nn, n), torch.nn.Module))


def test_every_layer_has_the_functionals_its_torch_forward_calls() -> None:
    torch = _torch()
    missing = {}
    for name in _torch_layers():
        try:
            src = inspect.getsource(getattr(torch.nn, name).forward)
        except (OSError, TypeError):
            continue
        calls = set(re.findall(r"\bF\.([a-z][a-z_0-9]*)\(", src))
        if absent := sorted(c for c in calls if not hasattr(F, c)):
            missing[name] = absent
    assert missing == {}


def _positional(fn: object) -> list[str] | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names or None     # torch's boolean-dispatch wrappers take (*args, **kwargs)


def test_functionals_take_torchs_arguments_in_order() -> None:
    torch = _torch()
    differ = {}
    for name in F.__all__:
        theirs = getattr(torch.nn.functional, name, None)
        want = None if theirs is None else _positional(theirs)
        if want is not None and _positional(getattr(F, name)) != want:
            differ[name] = (want, _positional(getattr(F, name)))
    assert differ == {}


# ---- ONNX ----------------------------------------------------------------------------------
# registry op -> its standard ONNX node where the names differ
ONNX_ALIASES = {
    "avg_pool2d": "AveragePool", "embedding": "Gather", "eq": "Equal", "ne": "Equal",
    "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual",
    "logical_not": "Not", "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
    "clamp": "Clip", "maximum": "Max", "minimum": "Min", "amax": "ReduceMax",
    "amin": "ReduceMin", "prod": "ReduceProd", "permute": "Transpose", "cat": "Concat",
    "index_select": "Gather", "remainder": "Mod", "rsqrt": "Sqrt", "conv2d_grad_input":
    "ConvTranspose",
}
# standard nodes scriptmod does not emit yet, each with its reason
ONNX_NOT_YET = {
    "attention": "ONNX Attention needs opset 23; the exporter's opsets end below it",
}


def _onnx_name(op: str) -> str:
    n = re.sub(r"(1d|2d|3d|nd)$", "", op.lower().replace("_", ""))
    return re.sub(r"norm$", "normalization", n)


def test_onnx_emits_every_op_with_a_standard_node() -> None:
    defs = pytest.importorskip("onnx.defs")
    from scriptmod.onnx import _export  # noqa: F401  (fills the table)
    from scriptmod.onnx._table import EMITTERS
    standard = {_onnx_name(s.name): s.name for s in defs.get_all_schemas() if s.domain == ""}
    has_node = {op: ONNX_ALIASES.get(op) or standard.get(_onnx_name(op)) for op in REGISTRY}
    has_node = {op: node for op, node in has_node.items() if node}
    import importlib
    from scriptmod.onnx import _export
    not_yet = dict(ONNX_NOT_YET)   # plus each family's own ``NOT_EMITTED`` (op -> reason)
    for fam in ("_fft", "_indexing", "_linalg", "_math", "_products", "_scans", "_special",
                "_views"):
        not_yet.update(getattr(importlib.import_module(f"scriptmod.onnx.{fam}"),
                               "NOT_EMITTED", {}))
    assert _export is not None
    missing = sorted(op for op in has_node if op not in EMITTERS and op not in not_yet)
    assert missing == [], {op: has_node[op] for op in missing}
    stale = sorted(op for op in not_yet if op in EMITTERS or op not in REGISTRY)
    assert stale == [], "ONNX_NOT_YET lists ops that are emitted now or no longer exist"
