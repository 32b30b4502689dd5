"""Seeded mutations of an archive that uses the newer archive features: the manifest's
``output_structure``, ``sm::guard``, ``sm::copy_`` on an argument, ``int_*`` ops on sizes and
``narrow``/``arange``/``index`` taking run-time ints as operands.

Every mutated archive must either raise ``ArchiveError`` when loaded, or load and then behave
like the original: the same numbers (or the same user-level error) for every input. A
mutation that changes what the program computes (another int op, another operand) may give
other numbers, but only through the ops' own checks: never an internal error (an
``InterpreterError``, ``ShapePropagationError``, ``KeyError``...), a crash or a hang. Runs in a
subprocess under a timeout, so that a hang or a crash fails the test instead of the run."""
from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir.errors import ArgumentValueError

SEEDS = 240
BATCHES = (4, 6, 2, 1)          # 1 fails the size guard
ENTRY = "graphs/m0/forward.ir"


class Features(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        n = x.shape[0]
        if n > 1:
            x = self.fc(x)
        a = x[: n // 2]
        b = x.narrow(0, 1, n - 1)
        r = sm.arange(n)
        y.relu_()
        return {"a": a, "b": (b, [r.float() * 2]), "y": y}


def archive() -> bytes:
    sm.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = jit.trace(Features().eval(), (sm.randn(4, 4), sm.randn(4, 4)), strict=False)
    buf = io.BytesIO()
    t.save(buf)
    return buf.getvalue()


def rezip(items: dict[str, bytes]) -> bytes:
    from scriptmod.jit.archive import _zip
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()])


# ---- mutations: each returns (new entries, whether the program's meaning may change) --------
def _structure(rng: random.Random, man: dict) -> None:
    spec = man["modules"][0]["methods"][0]["output_structure"]
    choice = rng.randrange(9)
    if choice == 0:
        spec[0] = rng.choice(["list", "tuple", "namedtuple", "set", 3, None, "dict "])
    elif choice == 1:
        spec[1] = rng.choice([["a", "b"], ["a", "b", "y", "z"], [1, 2, 3], ["a", "a", "y"], "abc", None])
    elif choice == 2:
        spec[2] = rng.choice([[None, None], [None] * 4, [["list", [], []]] * 3, [3, None, None], None])
    elif choice == 3:
        spec[2][rng.randrange(3)] = rng.choice([["dict", ["k"], [None]], ["tuple", [], [None, None]],
                                                ["namedtuple", ["P", ["a"]], [None]], ["x"], 7])
    elif choice == 4:
        spec.append(rng.choice([None, [], "extra"]))
    elif choice == 5:
        del spec[rng.randrange(len(spec))]
    elif choice == 6:
        man["modules"][0]["methods"][0]["output_structure"] = rng.choice([[], {}, "dict", 0, [None]])
    elif choice == 7:
        spec[1] = ["a" * rng.choice([1, 300, 5000]), "b", "y"]
    else:
        man["modules"][0]["methods"][0]["output_structure"] = ["dict", ["a", "b", "y"], [None, ["tuple", [], [None, ["dict", ["q"], [None]]]], None]]


def _manifest(rng: random.Random, items: dict[str, bytes]) -> bool:
    man = json.loads(items["manifest.json"])
    meth = man["modules"][0]["methods"][0]
    choice = rng.randrange(4)
    if choice < 2:
        _structure(rng, man)
    elif choice == 2:
        meth["outputs"] = [rng.choice(["(Float(*, 4), (Float(*, 4), Float(*)[]), Float(B, 4))".replace("Float(*)[]", t)
                                       for t in ("Float(*)", "Long(*)[]", "Float(B)[]")] + ["Float(B, 4)"])]
    else:
        meth["inputs"][rng.randrange(1, 3)] = rng.choice(["Float(B, 5)", "Long(B, 4)", "Float(4)", "int"])
    items["manifest.json"] = json.dumps(man).encode()
    return False


GUARD_RE = re.compile(r'sm::guard\[what="[^"]*", where="[^"]*"\]')
GUARD_ATTRS = ['sm::guard[what="x.shape[0] > 1"]', 'sm::guard[where="f.py:1"]', 'sm::guard',
               'sm::guard[what=3, where="f.py:1"]', 'sm::guard[what="other", where="g.py:9"]',
               'sm::guard[what="x.shape[0] > 1", where="f.py:1", extra=1]',
               'sm::guard[what="' + "w" * 3000 + '", where="f.py:1"]',
               'sm::guard[what="a\\"b", where="f.py:1"]']


def _ir(rng: random.Random, items: dict[str, bytes]) -> bool:
    text = items[ENTRY].decode()
    choice = rng.randrange(10)
    semantic = False
    if choice == 0:                                   # the guard's attributes
        text = GUARD_RE.sub(rng.choice(GUARD_ATTRS), text)
    elif choice == 1:                                 # the guard's operand
        text = text.replace('"](%2)', rng.choice(['"](%0)', '"](%5)', '"](%2, %2)', '"]()', '"](%1)']), 1)
        semantic = True                               # a constant operand disarms it
    elif choice == 2:                                 # int ops swap kinds
        ops = ["int_add", "int_sub", "int_mul", "int_floordiv", "int_gt", "int_lt", "int_mod", "int_eq"]
        text = re.sub(r"sm::int_(floordiv|sub|gt)", lambda m: "sm::" + rng.choice(ops), text, count=1)
        semantic = True
    elif choice == 3:                                 # an int op's operand: another value
        text = re.sub(r"(sm::int_\w+\()%(\d+)", lambda m: m.group(1) + "%" + str(rng.choice([1, 5, 6, 8, 13, 15, 99])), text, count=1)
        semantic = True
    elif choice == 4:                                 # narrow/arange/index operands
        target = rng.choice([r"sm::narrow\[dim=0\]\(%5, %9, %11\)", r"sm::arange\[[^\]]*\]\(%13, %0, %14\)",
                             r"sm::index\[[^\]]*\]\(%5, %7\)"])
        operand = rng.choice(["%5", "%7", "%0", "%2", "%15", "%3", "%1"])
        text = re.sub(target, lambda m: re.sub(r"%\d+\)$", operand + ")", m.group(0)), text, count=1)
        semantic = True
    elif choice == 5:                                 # the index spec's run-time operand
        text = text.replace('("input", 0)', rng.choice(['("input", 1)', '("input", -1)', '("input", "0")',
                                                        '("input", 0, 0)', '("inputs", 0)', '3']), 1)
        semantic = True
    elif choice == 6:                                 # a declared type
        types = re.findall(r": ([A-Z][a-z]+\([^)]*\)(?:\[\])?)", text)
        old = rng.choice(types)
        new = rng.choice(["Float(B, 5)", "Float(3, 4)", "Long(*)", "Float(*)", "Float(B)", "Bool(B, 4)",
                          "Float(*, *)", "Double(B, 4)", "Float(*, 4)"])
        text = text.replace(": " + old, ": " + new, 1)
    elif choice == 7:                                 # copy_ writes elsewhere
        text = re.sub(r"sm::copy_\(%y, %16\)", rng.choice(["sm::copy_(%x, %16)", "sm::copy_(%16, %y)",
                                                           "sm::copy_(%y, %12)", "sm::copy_(%y)",
                                                           "sm::copy_(%self, %16)", "sm::copy_(%y, %0)"]), text)
        semantic = True
    elif choice == 8:                                 # a line dropped or duplicated
        lines = text.splitlines()
        i = rng.randrange(1, len(lines) - 1)
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, lines[i])
        semantic = True                               # dropping the guard is a program too
        text = "\n".join(lines) + "\n"
    else:                                             # an integer attribute or constant
        nums = list(re.finditer(r"(value|dim)=(-?\d+)", text))
        m = rng.choice(nums)
        text = text[:m.start(2)] + str(rng.choice([-5, -1, 0, 2, 3, 1 << 40])) + text[m.end(2):]
        semantic = True
    items[ENTRY] = text.encode()
    _consistent(items, text)
    return semantic


def _consistent(items: dict[str, bytes], text: str) -> None:
    """Rewrite what a careful attacker would: the readable code and the op list, so the
    mutation reaches the graph checks instead of stopping at those two."""
    from scriptmod.ir import parse
    from scriptmod.ir.code import python_code
    man = json.loads(items["manifest.json"])
    man["ops"] = sorted(set(man["ops"]) | set(re.findall(r"\b(?:sm|prim)::\w+", text)))
    items["manifest.json"] = json.dumps(man).encode()
    try:
        items["code/m0/forward.py"] = python_code(parse(text), "forward").encode()
    except Exception:
        pass


def mutate(good: bytes, seed: int) -> tuple[bytes, bool]:
    rng = random.Random(seed)
    zf = zipfile.ZipFile(io.BytesIO(good))
    items = {n: zf.read(n) for n in zf.namelist()}
    semantic = (_manifest if rng.random() < 0.35 else _ir)(rng, items)
    return rezip(items), semantic


# ---- running one archive -----------------------------------------------------------------
def inputs(batch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(batch)
    return (rng.standard_normal((batch, 4)).astype(np.float32),
            rng.standard_normal((batch, 4)).astype(np.float32))


def _flat(x) -> list:
    if isinstance(x, dict):
        return [v for k in x for v in _flat(x[k])]
    if isinstance(x, (tuple, list)):
        return [v for i in x for v in _flat(i)]
    return [x]


def outcome(module, batch: int) -> tuple[str, object]:
    x, y = (sm.tensor(a) for a in inputs(batch))
    try:
        with sm.no_grad():
            out = module(x, y)
    except Exception as e:        # classified by the caller
        return "error", e
    leaves = _flat(out)
    return "ok", [(tuple(v.shape), np.asarray(v.numpy()).tobytes()) if isinstance(v, sm.Tensor) else v
                  for v in leaves] + [("y", y.numpy().tobytes())]


USER_ERRORS = (sm.ShapeError, sm.DTypeError, jit.TraceGuardError, ArgumentValueError)


def _internal(e: BaseException, semantic: bool) -> bool:
    """A program the mutation changed may fail the ops' own checks (a ``ShapeError``, also
    while specializing); one it did not change must fail only as the original does."""
    from scriptmod.ir.passes.shapes import ShapePropagationError
    if isinstance(e, (ShapePropagationError, ZeroDivisionError)):   # x.shape[0] // (n - 4)
        return not semantic
    return not isinstance(e, USER_ERRORS)


def judge(good: bytes, seeds: range) -> list[str]:
    """The findings over ``seeds``: each a line naming the seed and what went wrong."""
    original = jit.load(io.BytesIO(good))
    want = {b: outcome(original, b) for b in BATCHES}
    problems = []
    for seed in seeds:
        data, semantic = mutate(good, seed)
        try:
            module = jit.load(io.BytesIO(data))
        except jit.ArchiveError:
            continue
        except Exception as e:
            problems.append(f"seed {seed}: load raised {type(e).__name__}: {str(e)[:200]}")
            continue
        for b in BATCHES:
            kind, got = outcome(module, b)
            wkind, wgot = want[b]
            if kind == "error" and _internal(got, semantic):
                problems.append(f"seed {seed} batch {b}: internal {type(got).__name__}: {str(got)[:200]}")
            elif semantic:
                continue
            elif kind != wkind or (kind == "ok" and got != wgot) or \
                    (kind == "error" and type(got) is not type(wgot)):
                problems.append(f"seed {seed} batch {b}: differs from the original "
                                f"({kind}: {str(got)[:120]} vs {wkind}: {str(wgot)[:120]})")
    return problems


def test_original_archive_uses_the_features_under_fuzz():
    good = archive()
    zf = zipfile.ZipFile(io.BytesIO(good))
    man = json.loads(zf.read("manifest.json"))
    for op in ("sm::guard", "sm::copy_", "sm::int_floordiv", "sm::int_sub", "sm::int_gt",
               "sm::narrow", "sm::arange", "sm::index"):
        assert op in man["ops"]
    assert man["modules"][0]["methods"][0]["output_structure"][0] == "dict"
    module = jit.load(io.BytesIO(good))
    kind, _ = outcome(module, 6)
    assert kind == "ok"
    kind, err = outcome(module, 1)
    assert kind == "error" and isinstance(err, jit.TraceGuardError)


def test_mutated_archives_fail_at_load_or_behave(tmp_path: Path):
    script = ("import sys, json; sys.path.insert(0, sys.argv[1]);"
              "from tests.scriptmod.jit.test_archive_fuzz import archive, judge;"
              f"print(json.dumps(judge(archive(), range({SEEDS}))))")
    root = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    problems = json.loads(run.stdout.strip().splitlines()[-1])
    assert problems == [], "\n".join(problems[:40])


# ---- the specific holes the fuzzing found, each pinned ---------------------------------------
def _with_ir(good: bytes, old: str, new: str) -> bytes:
    zf = zipfile.ZipFile(io.BytesIO(good))
    items = {n: zf.read(n) for n in zf.namelist()}
    text = items[ENTRY].decode()
    assert re.search(old, text), old
    text = re.sub(old, new, text, count=1)
    items[ENTRY] = text.encode()
    _consistent(items, text)
    return rezip(items)


import pytest  # noqa: E402


@pytest.mark.parametrize("old, new, words", [
    (r"sm::copy_\(%y, %16\)", "sm::copy_(%self, %16)", "input 'self' must be Tensor"),
    (r"sm::narrow\[dim=0\]\(%5, %9, %11\)", "sm::narrow[dim=0](%5, %9, %5)", "input 'length' must be int"),
    (r"(sm::arange\[[^\]]*\])\(%13, %0, %14\)", r"\1(%13, %5, %14)", "input 'end' must be Scalar"),
    (r"sm::size\[dim=0\]", "sm::size[dim=2]", "dim expected to be in range"),
    (r"\(\"input\", 0\)", "(\"input\", 1)", "does not name an int operand"),
    (r"(%6 : int = prim::Constant\[value=)2", r"\g<1>0", "constant zero"),
])
def test_inconsistent_graphs_are_refused_at_load(old, new, words):
    data = _with_ir(archive(), old, new)
    try:
        jit.load(io.BytesIO(data))
    except jit.ArchiveError as e:
        assert words in str(e), str(e)
    else:
        raise AssertionError("loaded")


def test_output_structure_with_unhashable_parts_is_an_archive_error():
    zf = zipfile.ZipFile(io.BytesIO(archive()))
    items = {n: zf.read(n) for n in zf.namelist()}
    for bad in ([["a"], ["x"], [None] * 3], ["dict", [["a"], "b", "y"], [None] * 3],
                ["namedtuple", "P", [["a"], "b", "y"], [None] * 3]):
        man = json.loads(items["manifest.json"])
        man["modules"][0]["methods"][0]["output_structure"] = bad
        items["manifest.json"] = json.dumps(man).encode()
        try:
            jit.load(io.BytesIO(rezip(items)))
        except jit.ArchiveError as e:
            assert "output_structure" in str(e)
        else:
            raise AssertionError(f"loaded {bad}")


def test_copy_into_a_smaller_argument_is_a_shape_error():
    data = _with_ir(archive(), r"sm::copy_\(%y, %16\)", "sm::copy_(%y, %12)")
    module = jit.load(io.BytesIO(data))          # the shapes agree only where B - 1 == B
    kind, err = outcome(module, 4)
    assert kind == "error" and isinstance(err, sm.ShapeError) and "copy_" in str(err)


def test_run_time_op_failures_keep_their_class():
    class Sizes(nn.Module):
        def forward(self, x):
            return x.narrow(0, 1, 3), sm.arange(x.shape[0] - 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = jit.trace(Sizes(), sm.ones(8, 2))
    for fused in (True, False):
        with jit.fuser(fused):
            with pytest.raises(sm.ShapeError, match="narrow"):
                t(sm.ones(2, 2))
            with pytest.raises(RuntimeError, match="step sign") as info:
                t(sm.ones(4, 2))
            assert isinstance(info.value, ValueError)
