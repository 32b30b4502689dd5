"""The warm call of one specialization as one generated function (a monomorphic inline
cache, as in a JavaScript engine): the checks that select the specialization, spelled out
for it, then its program, then the wrapping of its outputs.

``Executor.__call__`` tries the installed fast path first; it answers ``MISS`` when any
check fails, and the full path (``Executor._call``: signature, specialization cache, the
grad decision, the slow wrappers) runs instead and installs the fast path of the
specialization it used. What the checks cover, for a specialization whose arguments are
plain CPU tensors without grad, that writes no argument and returns fresh tensors:

- the arguments: count, ``type(a) is Tensor``, no ``requires_grad``, a NumPy array of the
  specialization's dtype and shape (strides are the program's own check: it copies an
  argument of another layout, as the full path does); for a symbolic specialization (a
  batch class) the shape's rank and sizes, except at its symbolic dims, which must be >= 2
  and agree where named alike;
- hooks: ``HOOK_VERSION`` unchanged since install (any hook registered or removed
  anywhere falls back to the full path, which looks again);
- grad: grad mode off, or no parameter or buffer of the tree requires grad;
- fusion: no ``fuser`` context or global setting, and ``SCRIPTMOD_DISABLE_FUSION`` unset
  (otherwise ``_fuser.variant()`` is asked and must match);
- module state: every submodule slot and every tensor slot of the tree holds the very same
  object as at install, and every tensor the very same array (``_StateSlots`` finds the
  same with C-level maps; spelled out, the check costs a third).

The function's text depends only on the structure (argument count, tree slots, outputs);
its code object is compiled once per structure and bound to a fresh globals dict on each
install, so re-installing after a parameter was replaced costs a few microseconds and swaps
atomically (a thread never sees half of one install and half of another).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.autograd import grad_mode
from scriptmod.jit import _fuser
from scriptmod.jit._boundary import HOOK_VERSION
from scriptmod.runtime import pycode
from scriptmod.tensor import Tensor, wrap_tree

MISS = object()          # the fast path's answer when a check fails: take the full path

_CODE: dict[tuple, tuple[Any, str]] = {}   # structure -> (code object, its source)


def build(spec: Any, args: Sequence[Any], slots: Any, owner: Any, has_self: bool,
          stats: dict, grad: tuple = ((), None)
          ) -> tuple[Callable[[Sequence[Any]], Any] | None, str | None]:
    """(the fast path, its source) of ``spec`` (a ``_specialization.Specialization``) for
    calls like ``args`` with the module tree read through ``slots``
    (``_executor._StateSlots`` or None), or (None, None) when the specialization needs the
    full path on every call. ``grad`` is (requires_grad of each module tensor, the call that
    runs the compiled forward and attaches the backward) for calls with grad enabled, or
    (pattern, None)."""
    structure = _structure(spec, args, slots, has_self)
    if structure is None:
        return None, None
    kinds = structure[0]
    fn, error = spec.executable.direct()
    env = _fuser._env_data
    found = _CODE.get(structure)
    if found is None:
        source = _source(*structure)
        found = _CODE[structure] = (pycode.code(source, "<scriptmod fast path>"), source)
    code, source = found
    ns: dict[str, Any] = {
        "MISS": MISS, "Tensor": Tensor, "ndarray": np.ndarray, "HV": HOOK_VERSION,
        "V0": HOOK_VERSION[0], "GS": grad_mode._state, "FST": _fuser._state,
        "FG": _fuser._global, "ENV": os.environ, "ENVD": env, "ENVK": getattr(_fuser, "_env_key", None),
        "VARIANT": _fuser.variant, "VAR": spec.variant, "STATS": stats, "FN": fn, "ERR": error,
        "OWNER": owner, "make": Tensor._make, "wrap_tree": wrap_tree,
        "STATE": slots.arrays if slots is not None else (), "GRAD": grad[1]}
    for i, a in enumerate(args):
        if kinds[i] == "tensor":
            ns[f"DT{i}"], ns[f"SH{i}"] = a._data.dtype, a._data.shape
        elif kinds[i] in ("int", "bool"):
            ns[f"K{i}"] = a                     # ints and bools specialize by value
    if slots is not None:
        for i, (reg, mod) in enumerate(zip(slots.m_regs, slots.mods)):
            ns[f"M{i}"], ns[f"MO{i}"] = reg, mod
        for i, (reg, name, arr) in enumerate(zip(slots.t_regs, slots.t_names, slots.arrays)):
            ns[f"R{i}"], ns[f"T{i}"], ns[f"A{i}"] = reg, reg[name], arr
            ns[f"RG{i}"] = grad[0][i] if i < len(grad[0]) else None   # the plan's pattern
    exec(code, ns)
    return ns["fast"], source


def source(spec: Any, args: Sequence[Any], slots: Any, has_self: bool) -> str | None:
    """The text of the fast path ``build`` would make for ``spec`` and ``args`` (None: the
    full path serves every call), without building it (``Specialization.explain``)."""
    structure = _structure(spec, args, slots, has_self)
    return None if structure is None else _source(*structure)


def _structure(spec: Any, args: Sequence[Any], slots: Any, has_self: bool) -> tuple | None:
    """What the fast path's text depends on (``_source``'s arguments), or None when the
    specialization needs the full path on every call."""
    if spec.written or spec.aliased or spec.hooked:
        return None
    kinds = tuple(_kind(a) for a in args)
    if None in kinds:
        return None
    m_names = tuple(slots.m_names) if slots is not None else ()
    t_names = tuple(slots.t_names) if slots is not None else ()
    dims = tuple(_symbolic(entry) if k == "tensor" else None
                 for k, entry in zip(kinds, spec.signature)) if spec.symbolic else ()
    return (kinds, has_self, m_names, t_names, len(spec.graph.outputs),
            _fuser._env_data is not None, dims, spec.first if spec.symbolic else ())


def _symbolic(entry: tuple) -> tuple | None:
    """A batch-class signature entry's shape as checked: its symbolic dims' names, its
    sizes elsewhere; None when it has no symbolic dim (its shape is checked whole)."""
    shape = entry[1]
    return tuple(shape) if any(isinstance(d, str) for d in shape) else None


def _shape_check(i: int, dims: tuple | None, first: dict[str, str]) -> str:
    """The condition that rejects argument ``i``'s array ``d{i}`` by shape; ``first``: where
    each symbolic dim was first read (the arguments are checked in order)."""
    if dims is None:
        return f"d{i}.shape != SH{i}"
    parts = [f"len(s{i}) != {len(dims)}"]
    for j, d in enumerate(dims):
        if isinstance(d, str):
            parts.append(f"s{i}[{j}] < 2")
            at = first.setdefault(d, f"s{i}[{j}]")
            if at != f"s{i}[{j}]":
                parts.append(f"s{i}[{j}] != {at}")
        else:
            parts.append(f"s{i}[{j}] != {int(d)}")
    return f"(s{i} := d{i}.shape) is None or " + " or ".join(parts)


def _kind(a: Any) -> str | None:
    """How the fast path checks an argument (None: it cannot, the full path runs)."""
    t = type(a)
    if t is Tensor:
        return "tensor" if type(a._data) is np.ndarray and not a._requires_grad else None
    if t in (int, bool, float):
        return t.__name__
    return "none" if a is None else None


def _source(kinds: tuple, has_self: bool, m_names: tuple, t_names: tuple, n_out: int,
            env_dict: bool, dims: tuple = (), first: tuple = ()) -> str:
    n_args = len(kinds)
    a = [f"a{i}" for i in range(n_args)]
    d = [f"d{i}" if k == "tensor" else f"a{i}" for i, k in enumerate(kinds)]
    lines = ["def fast(args):", f"    if len(args) != {n_args}:", "        return MISS"]
    at: dict[str, str] = {}
    if n_args:
        lines.append(f"    {', '.join(a)}{',' if n_args == 1 else ''} = args")
    for i, kind in enumerate(kinds):
        if kind == "tensor":
            lines += [f"    if type(a{i}) is not Tensor or a{i}._requires_grad:",
                      "        return MISS",
                      f"    d{i} = a{i}._data",
                      f"    if type(d{i}) is not ndarray or d{i}.dtype is not DT{i} or "
                      f"{_shape_check(i, dims[i] if dims else None, at)}:",
                      "        return MISS"]
        elif kind in ("int", "bool"):
            lines += [f"    if type(a{i}) is not {kind} or a{i} != K{i}:", "        return MISS"]
        elif kind == "float":
            lines += [f"    if type(a{i}) is not float:", "        return MISS"]
        else:
            lines += [f"    if a{i} is not None:", "        return MISS"]
    same_size = [f"{at[name]} == {int(n)}" for name, n in first if name in at]
    if same_size:      # the class's first size has its own (concrete) specialization
        lines += [f"    if {' and '.join(same_size)}:", "        return MISS"]
    lines += ["    if HV[0] != V0:", "        return MISS"]
    env = " or ENV._data is not ENVD or ENVD.get(ENVK) is not None" if env_dict else " or True"
    lines += [f"    if FST.stack or FG['fusion'] is not None{env}:",
              "        if VARIANT() != VAR:", "            return MISS"]
    same = [f"M{i}[{n!r}] is MO{i}" for i, n in enumerate(m_names)]
    same += [f"R{i}[{n!r}] is T{i} and T{i}._data is A{i}" for i, n in enumerate(t_names)]
    if same:
        lines += ["    try:", f"        if not ({' and '.join(same)}):", "            return MISS",
                  "    except KeyError:", "        return MISS"]
    if t_names:
        grads = " or ".join(f"T{i}._requires_grad" for i in range(len(t_names)))
        same = " and ".join(f"T{i}._requires_grad is RG{i}" for i in range(len(t_names)))
        lines += [f"    if GS.enabled and ({grads}):",
                  f"        if GRAD is None or not ({same}):", "            return MISS",
                  "        STATS['calls'] += 1", "        return GRAD(args)"]
    lines.append("    STATS['calls'] += 1")
    call_args = (["OWNER"] if has_self else []) + d + ["STATE"]
    lines += ["    try:", f"        outs = FN({', '.join(call_args)})",
              "    except Exception as e:", "        raise ERR(e)"]
    if n_out == 1:
        lines += ["    o = outs[0]", "    return make(o) if type(o) is ndarray else wrap_tree(o)"]
    else:
        lines.append("    return wrap_tree(tuple(outs))")
    return "\n".join(lines) + "\n"
