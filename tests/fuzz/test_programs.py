"""Program fuzzing: random elementwise/broadcast programs (``tests.fuzz.programs``) over every
registry op flagged elementwise, compiled against eager from the first call on.

Each program is run eagerly, traced under ``no_grad`` and called once: the first, compiling
call must equal eager within the dtype's tolerance (NaN equal to NaN), or raise where eager
raises. A compiled-only exception, a result where eager raises, or a difference is a failure,
unless a row of ``programs.KNOWN`` (op + condition + reason) explains it; those are counted in
the figures, and a row goes when its fix lands.

CI size: ``CI_PROGRAMS``; ``pytest tests/fuzz --long`` runs ``LONG_PROGRAMS`` and prints the
figures for the README. ``SCRIPTMOD_FUZZ_SEED`` picks the run.
"""
from __future__ import annotations

import collections
import random
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.fuzz import programs as P

CI_PROGRAMS = 600
LONG_PROGRAMS = 10_000
FAILING = {"mismatch", "compiled-only", "missing-raise"}


@dataclass
class Campaign:
    seed: int
    results: list[tuple[int, P.Program, P.Outcome]] = field(default_factory=list)
    refused: int = 0                # step choices eager refused by type, redrawn
    seconds: float = 0.0

    def run(self, n: int) -> "Campaign":
        t0 = time.perf_counter()
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # NaN, inf: wanted here
            for i in range(n):
                program, refused = P.random_program(random.Random(f"{self.seed}/{i}"))
                self.refused += refused
                self.results.append((i, program, P.check(program)))
        self.seconds = time.perf_counter() - t0
        return self

    def failures(self) -> list[tuple[int, P.Program, P.Outcome]]:
        return [r for r in self.results if r[2].kind in FAILING and not r[2].known]

    def figures(self) -> str:
        kinds = collections.Counter(o.kind + (" (known)" if o.known else "")
                                    for _, _, o in self.results)
        by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for _, _, o in self.results:
            if o.kind in FAILING:
                by_op[o.op or "(chain only)"][o.kind + (" known" if o.known else " NEW")] += 1
        _, slow_p, slow = max(self.results, key=lambda r: r[2].seconds)
        steps = sum(len(p.steps) for _, p, _ in self.results)
        lines = [f"{len(self.results)} programs ({steps} steps, {self.refused} step choices "
                 f"refused by eager and redrawn) in {self.seconds:.0f} s",
                 "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))]
        lines += [f"  {op:14}" + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                  for op, c in sorted(by_op.items())]
        reasons = collections.Counter(o.known for _, _, o in self.results if o.known)
        lines += ["known classes:"] + [f"  {v:5} {k}" for k, v in reasons.most_common()]
        lines.append(f"slowest first call: {slow.seconds:.2f} s ({len(slow_p.steps)} steps)")
        return "\n".join(lines)


@pytest.fixture(scope="module")
def campaign(fuzz_long: bool, fuzz_seed: int) -> Campaign:
    return Campaign(fuzz_seed).run(LONG_PROGRAMS if fuzz_long else CI_PROGRAMS)


@pytest.mark.timeout(7200)
def test_compiled_programs_equal_eager(campaign: Campaign,
                                       capsys: pytest.CaptureFixture) -> None:
    report = campaign.figures()
    with capsys.disabled():                       # the figures, also without -s
        print(f"\nprogram fuzzing (seed {campaign.seed}):\n{report}")
    bad = campaign.failures()
    assert not bad, report + "\n\n" + "\n\n".join(
        f"program {i} (seed {campaign.seed}): {o.kind} in {o.op or 'the fused chain'}\n{p}\n"
        f"{o.detail[:1200]}" for i, p, o in bad[:8])


def test_campaign_reaches_every_op_dtype_and_layout(campaign: Campaign) -> None:
    ops = {s.op for _, p, _ in campaign.results for s in p.steps}
    assert set(P.ELEMENTWISE_OPS) | set(P.COMPOSITES) <= ops
    dtypes = {str(a.dtype) for _, p, _ in campaign.results for a in p.inputs}
    assert set(P.DTYPES) <= dtypes
    layouts = {lay for _, p, _ in campaign.results for lay in p.layouts}
    assert set(P.LAYOUTS) <= layouts
    ranks = {a.ndim for _, p, _ in campaign.results for a in p.inputs}
    assert {0, 1, 2, 3, 4} <= ranks
    assert any(a.size == 0 for _, p, _ in campaign.results for a in p.inputs)
    # most programs run: the generator is not mostly refused or skipped
    ran = sum(o.kind != "skipped" for _, _, o in campaign.results)
    assert ran >= 0.9 * len(campaign.results)


def test_every_elementwise_registry_op_is_in_the_fuzzed_set() -> None:
    from scriptmod.ir import schema as S
    for name, s in S.REGISTRY.items():
        assert (name in P.ELEMENTWISE_OPS) == (S.ELEMENTWISE in s.flags
                                                and S.IMPURE not in s.flags)


def test_layouts_keep_values_and_give_their_strides() -> None:
    r = random.Random(0)
    v = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert P.with_layout(r, v, "F").flags.f_contiguous
    assert P.with_layout(r, v, "T").strides[-2:] == (4, 12)
    flipped = P.with_layout(r, v, "flip")
    assert min(flipped.strides) < 0 and np.array_equal(flipped, v)
    assert 0 in P.with_layout(r, v, "expand").strides
    assert P.with_layout(r, v, "unaligned").ctypes.data % 4 != 0
    for layout in ("C", "F", "T", "strided", "unaligned"):
        assert np.array_equal(P.with_layout(r, v, layout), v)


def test_difference_is_nan_equal_and_dtype_tolerant() -> None:
    nan = np.float32("nan")
    assert P.difference(np.array([nan, 1.0], np.float32), np.array([nan, 1.0], np.float32)) is None
    assert P.difference(np.float32(1.0), np.float32(1.0 + 2 ** -22)) is None
    assert P.difference(np.float32(1.0), np.float32(1.001)) is not None
    assert P.difference(np.array([np.inf]), np.array([-np.inf])) is not None
    assert P.difference(np.array([1.0]), np.array([nan])) is not None
    assert P.difference(np.int32(3), np.int64(3)) is not None        # dtype must agree
    assert P.difference(np.array([2 ** 62], np.int64), np.array([2 ** 62 + 1], np.int64))


def _one_step_program() -> P.Program:
    x = np.array([[1.5, -2.0, np.nan]], np.float32)
    return P.Program([x], ["C"], [P.Step("add", [("v", 0), 1.0], {})], [1])


def test_check_catches_a_wrong_compiled_result(monkeypatch: pytest.MonkeyPatch) -> None:
    real = P.traced_call
    monkeypatch.setattr(P, "traced_call", lambda *a: real(*a) * 1.001)
    out = P.check(_one_step_program())
    assert (out.kind, out.op) == ("mismatch", "add") and "alone" in out.detail


def test_check_catches_a_compiled_only_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*args: object) -> None:
        raise RuntimeError("native code refused")
    monkeypatch.setattr(P, "traced_call", fails)
    out = P.check(_one_step_program())
    assert (out.kind, out.op) == ("compiled-only", "add") and "refused" in out.detail


def test_a_correct_program_checks_equal() -> None:
    assert P.check(_one_step_program()).kind == "equal"


def test_a_known_row_needs_its_op_and_condition() -> None:
    out = P.Outcome("mismatch", op="an-op-that-no-row-names")
    assert P._classify(out).known == ""
