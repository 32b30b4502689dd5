"""``scriptmod inspect FILE [--graph|--inlined|--code|--manifest]``: what a saved archive holds.

    $ scriptmod inspect block.smod            # module tree, attributes, methods, ops, extras
    $ scriptmod inspect block.smod --code     # each method's readable code
    $ scriptmod inspect model.pt              # a torch.save or safetensors file: its tensors

The archive is fully validated first (as ``jit.load`` does); nothing in it is executed. A
weights file is read as ``scriptmod.load`` reads it; any other file is named for what it is.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scriptmod.ir import dtypes as D
from scriptmod.ir.code import python_code
from scriptmod.ir.types import TensorType
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
