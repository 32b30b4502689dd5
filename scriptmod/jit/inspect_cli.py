"""``scriptmod inspect FILE [--graph|--inlined|--code|--manifest|--explain [SHAPE ...]]``:
what a saved archive holds.

    $ scriptmod inspect block.smod            # module tree, attributes, methods, ops, extras
    $ scriptmod inspect block.smod --code     # each method's readable code
    $ scriptmod inspect block.smod --explain 32x128   # how forward runs for that input shape
    $ scriptmod inspect model.pt              # a torch.save or safetensors file: its tensors

The archive is fully validated first (as ``jit.load`` does); nothing in it is executed
(``--explain`` compiles forward for zero inputs, ``jit.explain``, without calling it). A
weights file is read as ``scriptmod.load`` reads it; any other file is named for what it is.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scriptmod.ir import dtypes as D
from scriptmod.ir.code import python_code
from scriptmod.ir.types import ModuleType, TensorType
from scriptmod import _formats
from scriptmod.jit.archive import ArchiveError, read


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a ScriptModule archive (jit.save), a torch.save checkpoint "
                        "or a safetensors file")
    show = parser.add_mutually_exclusive_group()
    show.add_argument("--graph", action="store_true", help="every method's IR graph")
    show.add_argument("--inlined", action="store_true", help="forward with calls inlined")
    show.add_argument("--code", action="store_true", help="every method's readable code")
    show.add_argument("--manifest", action="store_true", help="the JSON manifest")
    show.add_argument("--explain", nargs="*", metavar="SHAPE",
                      help="how forward runs (jit.explain) for zero inputs of these shapes, one "
                      "per tensor input (e.g. 32x128; default: the traced shapes, a symbolic "
                      "dim 2)")


def run(args: argparse.Namespace) -> int:
    try:
        kind = _formats.sniff(args.file)
        if kind in (_formats.TORCH_ZIP, _formats.SAFETENSORS):
            print("\n".join(weights_summary(args.file, kind)))
            return 0
        if kind in (_formats.TORCHSCRIPT, _formats.TORCH_LEGACY, _formats.PICKLE):
            raise ArchiveError(_formats.describe(kind))
        module, manifest = read(args.file)
    except (ArchiveError, _formats.SerializationError, OSError) as e:
        print(f"scriptmod inspect: {args.file}: {e}", file=sys.stderr)
        return 1
    if args.manifest:
        print(json.dumps(manifest, indent=1, sort_keys=True))
    elif args.explain is not None:
        try:
            text = explain(module, args.explain)
        except ValueError as e:
            print(f"scriptmod inspect: {args.file}: {e}", file=sys.stderr)
            return 1
        print(text, end="")
    elif args.inlined:
        print(module.inlined_graph, end="")
    elif args.graph or args.code:
        for path, mod, _ in _tree(manifest, module):
            for name, g in mod._methods.items():
                print(f"# {path or '<root>'}.{name}  ({mod.original_name})")
                print(g if args.graph else python_code(g, name))
    else:
        print("\n".join(summary(manifest, args.file)))
    return 0


def explain(module: Any, shapes: list[str]) -> str:
    """``jit.explain`` of the archive's forward for zero inputs of ``shapes`` ("32x128", one
    per tensor input; none given: the traced shapes, with each symbolic dim 2)."""
    import scriptmod as sm
    from scriptmod.jit import explain as jit_explain
    g = module._method_graph("forward")
    declared = [v.type for v in g.inputs if not isinstance(v.type, ModuleType)]
    if shapes and len(shapes) != len(declared):
        raise ValueError(f"--explain: forward takes {len(declared)} input(s), got "
                         f"{len(shapes)} shape(s)")
    inputs = []
    for i, t in enumerate(declared):
        if not isinstance(t, TensorType):
            raise ValueError(f"--explain: input {i} of forward is a {t}, not a tensor")
        shape = _shape(shapes[i]) if shapes else _traced_shape(t, i)
        inputs.append(sm.zeros(*shape, dtype=t.dtype or D.float32))
    return jit_explain(module, *inputs)


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.lower().split("x")) if text else ()
    except ValueError:
        raise ValueError(f"--explain: a shape is sizes joined by 'x' (32x128), got "
                         f"{text!r}") from None


def _traced_shape(t: TensorType, i: int) -> tuple[int, ...]:
    if t.shape is None:
        raise ValueError(f"--explain: input {i} of forward has no traced shape (scripted): "
                         f"give one per input, e.g. --explain 4x32x16")
    return tuple(d if isinstance(d, int) else 2 for d in t.shape)


def weights_summary(path: str, kind: str) -> list[str]:
    """One line per tensor (dotted path in the saved object, dtype, shape) of a weights file."""
    from scriptmod.serialization import load
    what = "PyTorch checkpoint (torch.save)" if kind == _formats.TORCH_ZIP else "safetensors file"
    rows = list(_tensors(load(path, map_location="cpu"), ""))
    nbytes = sum(t.numel() * t.dtype.itemsize for _, t in rows)
    lines = [f"{path}: {what}; load it with scriptmod.load", "tensors:"]
    lines += [f"  {name or '<root>'}: {t.dtype.name}{list(t.shape)}" for name, t in rows]
    return lines + [f"{len(rows)} tensors, {nbytes} bytes"]


def _tensors(obj: Any, path: str) -> Any:
    from scriptmod.tensor import Tensor
    if isinstance(obj, Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, _join(path, str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, _join(path, str(i)))


def _tree(manifest: dict[str, Any], root: Any) -> list[tuple[str, Any, str | None]]:
    """(path, module, first path if it is a shared module seen before) in manifest order."""
    out: list[tuple[str, Any, str | None]] = []
    seen: dict[int, str] = {}
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        path, mod = stack.pop()
        if id(mod) in seen:
            out.append((path, mod, seen[id(mod)]))
            continue
        seen[id(mod)] = path
        out.append((path, mod, None))
        kids = [(f"{path}.{k}" if path else k, c) for k, c in mod._modules.items() if c is not None]
        stack.extend(reversed(kids))
    return out


def _ttype(entry: dict[str, Any]) -> str:
    text = repr(TensorType(D.BY_NAME[entry["dtype"]], tuple(entry["shape"]), entry["device"]))
    return text + ("" if entry["requires_grad"] or not entry["parameter"] else " frozen")


def summary(manifest: dict[str, Any], name: str) -> list[str]:
    tensors = {t["key"]: t for t in manifest["tensors"]}
    nbytes = sum(D.BY_NAME[t["dtype"]].itemsize * _prod(t["shape"]) for t in tensors.values())
    lines = [f"{name}: scriptmod archive, format version {manifest['format_version']}, written "
             f"by {manifest['producer']}", "modules:"]
    mods, done = manifest["modules"], dict[int, str]()
    for path, i in _paths(manifest):
        lines += _module_lines(mods[i], path, done.get(i), tensors)
        done.setdefault(i, path or "<root>")
    lines.append(f"tensors: {len(tensors)}, {nbytes} bytes")
    lines.append(f"ops: {', '.join(manifest['ops'])}")
    if manifest["extra_files"]:
        lines.append(f"extra files: {', '.join(manifest['extra_files'])}")
    return lines


def _paths(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    out, stack, seen = [], [("", manifest["root"])], set()
    while stack:
        path, i = stack.pop()
        out.append((path, i))
        if i in seen:
            continue
        seen.add(i)
        kids = [(f"{path}.{c['name']}" if path else c["name"], c["module"])
                for c in manifest["modules"][i]["submodules"] if c["module"] is not None]
        stack.extend(reversed(kids))
    return out


def _module_lines(mod: dict[str, Any], path: str, shared: str | None,
                  tensors: dict[str, dict[str, Any]]) -> list[str]:
    pad = "  " * (path.count(".") + 2 if path else 1)
    head = path.rsplit(".", 1)[-1] if path else "<root>"
    if shared is not None:
        return [f"{pad}{head} -> {shared}  (shared)"]
    lines = [f"{pad}{head}: {mod['original_name']} ({mod['qualified_name']}), "
             f"{'train' if mod['training'] else 'eval'}"]
    for p in mod["parameters"]:
        t = p["tensor"]
        lines.append(f"{pad}  param  {p['name']}: {_ttype(tensors[t]) if t else 'None'}"
                     + (f"  = {t}" if t and t != _join(path, p["name"]) else ""))
    for b in mod["buffers"]:
        t = b["tensor"]
        lines.append(f"{pad}  buffer {b['name']}: {_ttype(tensors[t]) if t else 'None'}"
                     + ("" if b["persistent"] else "  (non-persistent)"))
    lines += [f"{pad}  def {_signature(m)}" for m in mod["methods"]]
    return lines


def _signature(meth: dict[str, Any]) -> str:
    ins = meth["inputs"]
    if ins and ins[0].startswith("__module__."):
        ins = ins[1:]
    names = meth["arg_names"] if len(meth["arg_names"]) == len(ins) else [""] * len(ins)
    args = ", ".join(f"{n}: {t}" if n else t for n, t in zip(names, ins))
    shape = meth.get("output_structure")
    returns = f"  # returns {_structure(shape)[:200]}" if shape is not None else ""
    return f"{meth['name']}({args}) -> ({', '.join(meth['outputs'])}){returns}"


def _structure(spec: Any) -> str:
    """A validated ``output_structure`` in Python's words, ``_`` for a part the graph's output
    type already says (a tensor, a plain tuple or list): ``{'h': _, 'p': P(a=_, b=_)}``."""
    if spec is None:
        return "_"
    kind, children = spec[0], [_structure(c) for c in spec[-1]]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(spec[1], children)) + "}"
    if kind == "namedtuple":
        return f"{spec[1]}(" + ", ".join(f"{f}={c}" for f, c in zip(spec[2], children)) + ")"
    if kind == "list":
        return "[" + ", ".join(children) + "]"
    return "(" + ", ".join(children) + (",)" if len(children) == 1 else ")")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _prod(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out
