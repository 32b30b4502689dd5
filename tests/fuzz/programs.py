"""Random elementwise/broadcast programs over the op registry, run eagerly and compiled.

A program is a short list of steps (at most ``MAX_OPS``) over a few input tensors with random
shapes (0-d, size-1 and size-0 dims, broadcasting), layouts (C, Fortran, transposed, flipped,
expanded, strided, unaligned), dtypes and special values (NaN, ±inf, ±0, subnormals, extremes).
The ops are every registry op flagged ``ELEMENTWISE`` (so a new op is fuzzed without touching
this file), with attributes drawn from their schema, plus the ``nn.functional`` activations
that decompose into them (``COMPOSITES``).

``check(program)`` traces the program (under ``no_grad``), calls the traced function once (the
first, compiling call) and compares with eager: equal within the dtype's tolerance (NaN equals
NaN), or both raise. A difference is then narrowed to one op (``triage``): each step alone,
traced and compiled on eager's own inputs of that step; the float64 reference (eager on inputs
cast to float64) says which side is off. ``KNOWN`` lists the classes being fixed elsewhere.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

import scriptmod as sm
from scriptmod._dispatch import dispatch
from scriptmod.ir import schema as S

MAX_OPS = 8
MAX_INPUTS = 3
SIZES = (1, 1, 2, 3, 4, 5, 7, 8, 17)

DTYPES: dict[str, Any] = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16, "int32": np.int32, "int64": np.int64, "int8": np.int8,
    "uint8": np.uint8, "bool": np.bool_,
}
DTYPE_WEIGHTS = {"float32": 6, "float64": 2, "float16": 1, "bfloat16": 1, "int32": 2,
                 "int64": 2, "int8": 1, "uint8": 1, "bool": 1}
FLOATS = ("float32", "float64", "float16", "bfloat16")
LAYOUTS = ("C", "C", "C", "F", "T", "flip", "expand", "strided", "unaligned")
# float tolerances (rtol, atol) by result dtype: a few ulps of the compiled vector math
TOLERANCE = {"float64": (1e-12, 1e-300), "float32": (2e-6, 1e-37), "float16": (2e-3, 1e-7),
             "bfloat16": (1.6e-2, 1e-37)}
ELEMENTWISE_OPS = tuple(sorted(S.ops_with(S.ELEMENTWISE, without=(S.IMPURE,))))
SCALARS = (2, -1, 0, 3, True, 0.5, -3.0, 1e30, float("inf"), float("nan"), -0.0)
FLOAT_ATTRS = (0.0, -1.0, 1.0, 0.5, -0.25, 3.0, 1e30, -1e30, float("inf"), float("nan"), 1e-3)


def _f(values: Sequence[float]) -> Callable[[random.Random], float]:
    return lambda r: r.choice(values)


F = sm.nn.functional
COMPOSITES: dict[str, Callable[[Any, random.Random], Any]] = {
    # nn.functional activations with attributes: decompositions into registry ops
    "leaky_relu": lambda x, r: F.leaky_relu(x, r.choice((0.01, 0.2, -1.5, 0.0))),
    "hardtanh": lambda x, r: F.hardtanh(x, *sorted((r.choice(FLOAT_ATTRS[:6]),
                                                     r.choice(FLOAT_ATTRS[:6])))),
    "gelu": lambda x, r: F.gelu(x, approximate=r.choice(("none", "tanh"))),
    "silu": lambda x, r: F.silu(x),
    "softplus": lambda x, r: F.softplus(x, beta=r.choice((1.0, 2.0, 0.5)),
                                        threshold=r.choice((20.0, 1.0))),
    "elu": lambda x, r: F.elu(x, alpha=r.choice((1.0, 0.5, 2.0))),
    "relu6": lambda x, r: F.relu6(x),
    "threshold": lambda x, r: F.threshold(x, r.choice((0.0, 0.5, -1.0)), r.choice((0.0, 2.0))),
    "logsigmoid": lambda x, r: F.logsigmoid(x),
}


# ---- one program -------------------------------------------------------------------------
@dataclass
class Step:
    op: str                      # a registry op, or a COMPOSITES key
    args: list[Any]              # ("v", index) for a program value, else a Python scalar
    attrs: dict[str, Any]
    seed: int = 0                # a composite's attribute choices

    def run(self, values: Sequence[Any]) -> Any:
        inputs = [values[a[1]] if isinstance(a, tuple) else a for a in self.args]
        if self.op in COMPOSITES:
            return COMPOSITES[self.op](inputs[0], random.Random(self.seed))
        return dispatch(self.op, inputs, self.attrs)

    def __str__(self) -> str:
        args = ", ".join(f"v{a[1]}" if isinstance(a, tuple) else repr(a) for a in self.args)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        seed = f"  # seed {self.seed}" if self.op in COMPOSITES else ""
        return f"{self.op}({args}{attrs}){seed}"


@dataclass
class Program:
    inputs: list[np.ndarray]
    layouts: list[str]
    steps: list[Step] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)   # value indices returned

    def __call__(self, *xs: Any) -> Any:
        values = list(xs)
        for s in self.steps:
            values.append(s.run(values))
        outs = tuple(values[i] for i in self.outputs)
        return outs if len(outs) > 1 else outs[0]

    def tensors(self) -> list[Any]:
        return [sm.from_numpy(a) for a in self.inputs]

    def __str__(self) -> str:
        lines = [f"v{i}: {a.dtype}{list(a.shape)} {lay} strides={a.strides}"
                 for i, (a, lay) in enumerate(zip(self.inputs, self.layouts))]
        n = len(self.inputs)
        lines += [f"v{n + k} = {s}" for k, s in enumerate(self.steps)]
        return "\n".join(lines + [f"return {', '.join(f'v{i}' for i in self.outputs)}"])


# ---- random inputs ---------------------------------------------------------------------
def _specials(dtype: Any) -> list[Any]:
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        fi = ml_dtypes.finfo(dtype) if dtype is ml_dtypes.bfloat16 else np.finfo(dtype)
        sub = float(fi.smallest_subnormal)
        return [math.nan, math.inf, -math.inf, 0.0, -0.0, sub, -sub, float(fi.max),
                -float(fi.max), float(fi.tiny), 2.0 ** 20 + 0.5, -(2.0 ** 24), 1e30, 0.5, -2.5]
    if dtype is np.bool_:
        return [True, False]
    ii = np.iinfo(dtype)
    return [ii.min, ii.max, 0, 1, -1 if ii.min < 0 else 2, ii.max - 1]


def random_values(r: random.Random, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    n = math.prod(shape)
    g = np.random.default_rng(r.getrandbits(32))
    kind = np.dtype(dtype).kind
    if dtype is np.bool_:
        v = g.random(n) < 0.5
    elif kind in "iu":
        lo, hi = (0, 100) if kind == "u" else (-100, 100)
        v = g.integers(lo, hi, n)
    else:
        v = g.standard_normal(n) * r.choice((1.0, 1.0, 10.0, 1e-3, 1e4))
        if r.random() < 0.3:
            v = np.round(v)
    v = v.astype(object)
    if r.random() < 0.6:                                  # sprinkle special values
        spec = _specials(dtype)
        for i in range(n):
            if r.random() < 0.15:
                v[i] = r.choice(spec)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(list(v), dtype=np.float64 if kind == "f" or dtype is ml_dtypes.bfloat16
                        else dtype).astype(dtype).reshape(shape)


def with_layout(r: random.Random, v: np.ndarray, layout: str) -> np.ndarray:
    """``v``'s values (``expand``: the values along one dim made equal) in ``layout``."""
    if layout == "F":
        return np.asfortranarray(v)
    if layout == "T" and v.ndim >= 2:
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(v, -1, -2)), -1, -2)
    if layout == "flip" and v.ndim >= 1:
        axis = r.randrange(v.ndim)
        return np.flip(np.flip(v, axis).copy(), axis)
    wide = [axis for axis, n in enumerate(v.shape) if n > 1]
    if layout == "expand" and wide:                  # a zero stride along one dim
        axis = r.choice(wide)
        return np.broadcast_to(np.take(v, [0], axis=axis), v.shape)
    if layout == "strided" and v.ndim >= 1:
        out = np.empty(v.shape[:-1] + (2 * v.shape[-1],), v.dtype)[..., ::2]
        out[...] = v
        return out
    if layout == "unaligned":
        buf = np.empty(v.nbytes + v.itemsize, np.uint8)[1:1 + v.nbytes]
        out = buf.view(v.dtype).reshape(v.shape)
        out[...] = v
        return out
    return np.ascontiguousarray(v)


def random_shapes(r: random.Random, n: int) -> list[tuple[int, ...]]:
    """``n`` shapes that broadcast together: suffixes of one shape, some dims set to 1."""
    rank = r.choice((0, 1, 1, 2, 2, 2, 3, 3, 4))
    full = [r.choice(SIZES) for _ in range(rank)]
    if rank and r.random() < 0.05:
        full[r.randrange(rank)] = 0
    shapes = []
    for _ in range(n):
        keep = r.randint(0, rank) if r.random() < 0.4 else rank
        shapes.append(tuple(1 if r.random() < 0.25 else d for d in full[rank - keep:]))
    return shapes


def random_inputs(r: random.Random) -> tuple[list[np.ndarray], list[str]]:
    n = r.randint(1, MAX_INPUTS)
    names = list(DTYPE_WEIGHTS)
    arrays, layouts = [], []
    for shape in random_shapes(r, n):
        dtype = DTYPES[r.choices(names, weights=list(DTYPE_WEIGHTS.values()))[0]]
        layout = r.choice(LAYOUTS)
        arrays.append(with_layout(r, random_values(r, shape, dtype), layout))
        layouts.append(layout)
    return arrays, layouts


# ---- random steps ------------------------------------------------------------------------
def _attr(r: random.Random, arg: S.Arg) -> Any:
    base = arg.type_text.rstrip("?")
    if arg.type_text.endswith("?") and r.random() < 0.25:
        return None
    if base == "ScalarType":
        return getattr(sm, r.choice(list(DTYPES)))
    if base == "bool":
        return r.random() < 0.5
    if base in ("float", "Scalar"):
        return r.choice(FLOAT_ATTRS)
    if base == "int":
        return r.choice((0, 1, -1, 2))
    raise NotImplementedError(f"fuzz: no generator for attribute type {arg.type_text!r}")


def random_step(r: random.Random, n_values: int) -> Step:
    names = ELEMENTWISE_OPS + tuple(COMPOSITES)
    op = r.choice(names)
    recent = lambda: ("v", max(0, n_values - 1 - int(r.expovariate(0.7))))  # noqa: E731
    if op in COMPOSITES:
        return Step(op, [recent()], {}, r.getrandbits(32))
    schema = S.REGISTRY[op]
    args: list[Any] = []
    for a in schema.inputs:
        scalar_ok = a.type_text == "Tensor|Scalar" or a.type.__class__.__name__ == "AnyType"
        if scalar_ok and args and r.random() < 0.3:
            args.append(r.choice(SCALARS))
        else:
            args.append(recent() if not args or r.random() < 0.6
                        else ("v", r.randrange(n_values)))
    attrs = {a.name: _attr(r, a) for a in schema.attrs}
    return Step(op, args, attrs)


def _benign(values: Sequence[Any]) -> list[Any]:
    """Ones of the same dtypes and shapes: values on which an op that eager accepts by
    type does not raise."""
    out = []
    for v in values:
        a = v.numpy()
        b = np.ones_like(a) if a.flags.writeable else np.ones(a.shape, a.dtype)
        out.append(sm.from_numpy(b))
    return out


def random_program(r: random.Random) -> tuple[Program, int]:
    """A program that eager runs (or whose last step raises on these values only), and the
    number of step choices eager refused by type (discarded)."""
    arrays, layouts = random_inputs(r)
    p = Program(arrays, layouts)
    values = p.tensors()
    refused = 0
    with sm.no_grad():
        for _ in range(r.randint(1, MAX_OPS)):
            for _attempt in range(20):
                step = random_step(r, len(values))
                try:
                    values.append(step.run(values))
                    p.steps.append(step)
                    break
                except Exception:                                     # noqa: BLE001
                    try:                      # raises on these values only: keep it, last
                        step.run(_benign(values))
                    except Exception:                                 # noqa: BLE001
                        refused += 1
                        continue
                    p.steps.append(step)
                    p.outputs = [len(values)]
                    return p, refused
    n = len(values)
    p.outputs = sorted({n - 1} | {i for i in range(len(arrays), n - 1) if r.random() < 0.15})
    if not p.steps:
        p.outputs = [0]
    return p, refused


# ---- eager against compiled ---------------------------------------------------------------
def to_numpy(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(to_numpy(y) for y in x)
    return x.numpy() if isinstance(x, sm.Tensor) else np.asarray(x)


def difference(eager: Any, compiled: Any, slack: float = 1.0,
               inputs: Sequence[np.ndarray] = ()) -> str | None:
    """Why ``compiled`` is not ``eager`` (None when equal within the dtype's tolerance,
    ``slack`` times looser: rounding drifts along a chain of ops), with the ``inputs``
    (broadcast to the output) at the first differing element."""
    if isinstance(eager, tuple) or isinstance(compiled, tuple):
        if not (isinstance(eager, tuple) and isinstance(compiled, tuple)) \
                or len(eager) != len(compiled):
            return f"outputs: {type(eager).__name__} against {type(compiled).__name__}"
        return next((f"output {i}: {d}" for i, (e, c) in enumerate(zip(eager, compiled))
                     if (d := difference(e, c, slack))), None)
    if eager.dtype != compiled.dtype or eager.shape != compiled.shape:
        return f"{compiled.dtype}{list(compiled.shape)}, eager {eager.dtype}{list(eager.shape)}"
    name = str(eager.dtype)
    if name not in TOLERANCE:
        bad = eager != compiled
    else:
        e, c = eager.astype(np.float64), compiled.astype(np.float64)
        rtol, atol = (slack * t for t in TOLERANCE[name])
        with np.errstate(invalid="ignore", over="ignore"):
            close = (e == c) | (np.isnan(e) & np.isnan(c)) | \
                (np.isfinite(e) & np.isfinite(c) & (np.abs(e - c) <= atol + rtol * np.abs(e)))
        bad = ~close
    if not np.any(bad):
        return None
    i = np.argwhere(bad)[0] if eager.ndim else ()
    where = tuple(int(k) for k in i)
    there = [np.broadcast_to(a, eager.shape)[where].item() for a in inputs]
    return (f"{int(np.sum(bad))} of {eager.size} differ, at {list(where)}: "
            f"compiled {compiled[where]!r}, eager {eager[where]!r}"
            + (f", inputs there {there}" if inputs else ""))


def traced_call(fn: Callable, example: Sequence[Any], args: Sequence[Any]) -> Any:
    """The first (compiling) call of ``fn`` traced on ``example``, on ``args``."""
    with sm.no_grad():
        traced = sm.jit.trace(fn, tuple(example), check_trace=False)
        return traced(*args)


@dataclass
class Outcome:
    kind: str     # equal | raised-both | skipped | drift | mismatch | compiled-only | missing-raise
    seconds: float = 0.0                  # the first compiled call
    op: str = ""                          # the step found to differ alone ("" : the chain)
    detail: str = ""
    known: str = ""                       # the KNOWN row's reason, when one matches
    case: dict = field(default_factory=dict)     # what KNOWN rows match on


def check(p: Program) -> Outcome:
    """Eager against the first compiled call of ``p``; a difference narrowed to one step."""
    xs = p.tensors()
    with sm.no_grad():
        try:
            eager: Any = to_numpy(p(*xs))
            example = xs
        except Exception as e:                                       # noqa: BLE001
            eager, example = e, _benign(xs)
            try:
                p(*example)
            except Exception:                                        # noqa: BLE001
                return Outcome("skipped", detail=f"{type(e).__name__}: {e}")
    t0 = time.perf_counter()
    try:
        compiled: Any = to_numpy(traced_call(p, example, xs))
    except Exception as e:                                           # noqa: BLE001
        compiled = e
    seconds = time.perf_counter() - t0
    if isinstance(eager, Exception):
        kind = "raised-both" if isinstance(compiled, Exception) else "missing-raise"
        out = Outcome(kind, seconds, p.steps[-1].op, f"eager: {type(eager).__name__}: {eager}")
        out.case = _case(p.steps[-1], [v for v in _step_inputs(p, xs, len(p.steps) - 1)])
        return _classify(out)
    if isinstance(compiled, Exception):
        return _classify(triage(p, xs, Outcome("compiled-only", seconds,
                                               detail=f"{type(compiled).__name__}: {compiled}")))
    why = difference(eager, compiled, slack=_slack(p, xs))
    if why is None:
        return Outcome("equal", seconds)
    return _classify(triage(p, xs, Outcome("mismatch", seconds, detail=why)))


def _slack(p: Program, xs: Sequence[Any]) -> float:
    """Tolerance scale of a chain: its length, and the ratio of its least precise computed
    float dtype (an intermediate rounded to float16 limits what follows) to the output's."""
    values = _values_of(p, xs)[len(xs):]
    computed = {str(v.dtype).removeprefix("scriptmod.") for v in values} & set(TOLERANCE)
    outs = {str(values[i - len(xs)].dtype).removeprefix("scriptmod.")
            for i in p.outputs if i >= len(xs)} & set(TOLERANCE)
    if not outs:
        return 1.0
    loosest = max(TOLERANCE[d][0] for d in computed)
    return (1 + 4 * len(p.steps)) * loosest / min(TOLERANCE[d][0] for d in outs)


def _values_of(p: Program, xs: Sequence[Any]) -> list[Any]:
    """Every value of ``p`` computed eagerly: the inputs, then one per step."""
    values = list(xs)
    with sm.no_grad():
        for s in p.steps:
            values.append(s.run(values))
    return values


def _step_inputs(p: Program, xs: Sequence[Any], k: int) -> list[Any]:
    values = _values_of(Program(p.inputs, p.layouts, p.steps[:k]), xs)
    return [values[a[1]] if isinstance(a, tuple) else a for a in p.steps[k].args]


def alone(step: Step, inputs: Sequence[Any]) -> tuple[Step, list[Any]]:
    """``step`` as a one-step program over its own tensor inputs."""
    tensors = [x for x in inputs if isinstance(x, sm.Tensor)]
    args, k = [], 0
    for x in inputs:
        args.append(("v", k) if isinstance(x, sm.Tensor) else x)
        k += isinstance(x, sm.Tensor)
    return Step(step.op, args, step.attrs, step.seed), tensors


def triage(p: Program, xs: Sequence[Any], out: Outcome) -> Outcome:
    """The first step that differs, or raises, compiled alone on eager's inputs of it."""
    for k, step in enumerate(p.steps):
        inputs = _step_inputs(p, xs, k)
        one, tensors = alone(step, inputs)
        single = Program([t.numpy() for t in tensors], [""] * len(tensors), [one],
                         [len(tensors)])
        with sm.no_grad():
            want = to_numpy(single(*tensors))
        got = None
        try:
            got = to_numpy(traced_call(single, tensors, tensors))
        except Exception as e:                                       # noqa: BLE001
            why: str | None = f"{type(e).__name__}: {e}"
        else:
            why = difference(want, got, inputs=single.inputs)
        if why is not None:
            out.op, out.case = step.op, _case(one, inputs)
            out.detail += f"\n  alone: {single}\n  -> {why}{_reference(single, tensors, got)}"
            return out
    out.case = {"op": "", "ops": {s.op for s in p.steps},
                "dtypes": {str(a.dtype) for a in p.inputs} | {
                    str(v).removeprefix("scriptmod.") for s in p.steps
                    for v in s.attrs.values() if isinstance(v, sm.dtype)}}
    return _locate_in_chain(p, xs, out)


def _locate_in_chain(p: Program, xs: Sequence[Any], out: Outcome) -> Outcome:
    """No step differs alone: compile ``p`` returning every value, and check each step's
    compiled value against eager run on the compiled values of its inputs. All agree: the
    difference is rounding amplified along the chain (``drift``, not a failure)."""
    n = len(xs)
    every = Program(p.inputs, p.layouts, p.steps, list(range(n, n + len(p.steps))))
    try:
        got = to_numpy(traced_call(every, xs, xs))
    except Exception as e:                                           # noqa: BLE001
        out.detail += f"\n  returning every value: {type(e).__name__}: {e}"
        return out
    got = got if isinstance(got, tuple) else (got,)
    final = tuple(got[i - n] if i >= n else p.inputs[i] for i in p.outputs)
    with sm.no_grad():
        eager = to_numpy(p(*xs))
    if difference(eager, final if len(final) > 1 else final[0], _slack(p, xs)) is None:
        out.detail += "\n  returning every value, compiled equals eager: the fusion differs"
        return out
    values = list(xs) + [sm.from_numpy(np.array(g)) for g in got]
    for k, step in enumerate(p.steps):
        with sm.no_grad():
            want = to_numpy(step.run(values[:n + k]))
        why = difference(want, got[k])
        if why is not None:
            out.op = ""
            out.detail += f"\n  in the chain, step v{n + k} = {step}: {why}"
            return out
    out.kind = "drift"
    return out


def _reference(single: Program, tensors: Sequence[Any], got: Any) -> str:
    """Which side the float64 reference (eager on float inputs made float64) is nearer."""
    if any(str(t.dtype) not in ("scriptmod.float32", "scriptmod.float16", "scriptmod.bfloat16")
           for t in tensors) or not isinstance(got, np.ndarray):
        return ""
    with sm.no_grad():
        eager = to_numpy(single(*tensors)).astype(np.float64)
        ref = to_numpy(single(*[dispatch("cast", [t], {"dtype": sm.float64}) for t in tensors]))
    c = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ce, cc = np.nansum(np.abs(eager - ref)), np.nansum(np.abs(c - ref))
    return f" (float64 reference nearer {'eager' if ce <= cc else 'compiled'})"


def _case(step: Step, inputs: Sequence[Any]) -> dict:
    tensors = [x for x in inputs if isinstance(x, sm.Tensor)]
    return {"op": step.op, "attrs": step.attrs,
            "dtypes": {str(t.dtype).removeprefix("scriptmod.") for t in tensors},
            "scalars": [x for x in inputs if not isinstance(x, sm.Tensor)],
            "shapes": [tuple(t.shape) for t in tensors],
            "values": [t.numpy() for t in tensors]}


def _classify(out: Outcome) -> Outcome:
    for row in KNOWN:
        if row.matches(out):
            out.known = row.reason
            break
    return out


# ---- the known classes, being fixed elsewhere: delete a row when its fix lands ------------
@dataclass(frozen=True)
class Known:
    op: str                  # the step found alone ("": only in a fused chain, "*": any)
    kinds: frozenset[str]                # outcome kinds it explains
    when: Callable[[Outcome], bool]      # the condition
    reason: str

    def matches(self, out: Outcome) -> bool:
        return out.kind in self.kinds and self.op in ("*", out.op) and self.when(out)


KNOWN: tuple[Known, ...] = ()     # no class open now
