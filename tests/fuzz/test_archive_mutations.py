"""Archive fuzzing: structured mutations of four real saved models (``archive_models``), each
loaded and called in a worker subprocess under a time limit and an address-space cap.

Every tampered archive (``archive_mutations.TAMPER``: manifest, IR text, safetensors header,
zip container fields, byte flips, truncation, decompression bombs, many entries, deep
nesting, huge text) is refused with ``ArchiveError`` at load, or loads and gives the
original's outputs exactly. A resealed one (``RESEAL``: the same edits with every digest
recomputed, a consistent hostile archive) is refused, or loads and runs: other numbers are
allowed then, an internal error (``InterpreterError``, ``ShapePropagationError``, ...) at
call time is not. Never a hang, a crash or another exception at load.

CI size: ``CI_PER_KIND`` archives per kind and model; ``pytest tests/fuzz --long`` runs
``LONG_PER_KIND`` (over 1,000 archives) and prints the figures for the README.
"""
from __future__ import annotations

import collections
import json
import random
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz import archive_models
from tests.fuzz.archive_mutations import RESEAL, TAMPER

CI_PER_KIND = 16             # x 4 models x 10 kinds = 640 archives
LONG_PER_KIND = 32           # x 4 x 10 = 1,280 archives
TIME_LIMIT_S = 10.0          # one load and its calls
MEM_MIB = 2048               # above the worker's address space after start-up
WORKERS = 2
ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"refused", "equal"}
ALLOWED_RESEALED = {"refused", "equal", "different", "call-error"}


class Worker:
    """One ``archive_worker`` subprocess; restarted after a hang or a crash."""

    def __init__(self, originals: dict[str, tuple[bytes, list]]) -> None:
        self.originals = originals
        self.proc: subprocess.Popen | None = None
        self.base_kib = 0            # peak RSS after loading the originals
        self.peak_kib = 0            # the most any process rose above its base

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.archive_worker",
                                      str(MEM_MIB)], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.base_kib = 2**62
        for name, (data, shapes) in self.originals.items():
            answer = self.ask({"op": "original", "model": name, "shapes": shapes}, data, 120)
            assert answer and answer["outcome"] == "ok", (name, answer)
            self.base_kib = answer["maxrss_kib"]

    def ask(self, header: dict, data: bytes, timeout: float) -> dict[str, Any] | None:
        """The worker's answer, or None after a timeout or a crash (the worker is gone)."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        h = json.dumps(header).encode()
        try:
            self.proc.stdin.write(struct.pack("<I", len(h)) + h + struct.pack("<Q", len(data))
                                  + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self.stop(None)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            return self.stop(None)
        answer = json.loads(line)
        self.peak_kib = max(self.peak_kib, answer["maxrss_kib"] - self.base_kib)
        return answer

    def stop(self, answer: Any = None) -> Any:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        return answer

    def attempt(self, model: str, data: bytes) -> dict[str, Any]:
        t0 = time.perf_counter()
        answer = self.ask({"op": "try", "model": model}, data, TIME_LIMIT_S)
        if answer is None:
            rc = "hang" if time.perf_counter() - t0 >= TIME_LIMIT_S else "crash"
            answer = {"outcome": rc, "detail": ""}
        answer["seconds"] = time.perf_counter() - t0
        return answer


def campaign(per_kind: int, seed: int) -> tuple[list[dict[str, Any]], int]:
    """Every (kind, model, k) once, spread over ``WORKERS`` subprocesses."""
    originals = {name: (data, shapes) for name, (data, shapes) in archive_models.saved().items()}
    jobs = [(kind, model, k) for kind in list(TAMPER) + list(RESEAL) for model in originals
            for k in range(per_kind)]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    workers = [Worker(originals) for _ in range(WORKERS)]

    errors: list[BaseException] = []

    def drive(w: Worker, share: list[tuple[str, str, int]]) -> None:
        try:
            run_share(w, share)
        except BaseException as e:   # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)
        finally:
            w.stop()

    def run_share(w: Worker, share: list[tuple[str, str, int]]) -> None:
        w.start()
        for kind, model, k in share:
            rng = random.Random(f"{seed}/{kind}/{model}/{k}")
            mutate = TAMPER.get(kind) or RESEAL[kind]
            data = mutate(rng, originals[model][0])
            answer = w.attempt(model, data)
            answer.update(kind=kind, model=model, k=k, size=len(data))
            with lock:
                results.append(answer)

    threads = [threading.Thread(target=drive, args=(w, jobs[i::WORKERS]))
               for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    peak = max(w.peak_kib for w in workers)
    return results, peak


def figures(results: list[dict[str, Any]], peak_kib: int) -> str:
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]][r["outcome"]] += 1
    outcomes = sorted({r["outcome"] for r in results})
    lines = [f"{'kind':18}{'tried':>7}" + "".join(f"{o:>15}" for o in outcomes)]
    total: collections.Counter = collections.Counter()
    for kind in list(TAMPER) + list(RESEAL):
        c = by_kind[kind]
        total += c
        lines.append(f"{kind:18}{sum(c.values()):>7}" + "".join(f"{c[o]:>15}" for o in outcomes))
    lines.append(f"{'all':18}{sum(total.values()):>7}" + "".join(f"{total[o]:>15}"
                                                              for o in outcomes))
    slowest = max(results, key=lambda r: r["seconds"])
    lines.append(f"slowest: {slowest['seconds']:.2f} s ({slowest['kind']}, {slowest['model']}); "
                 f"worker peak RSS above its start-up size: {peak_kib / 1024:.0f} MiB "
                 f"(address-space cap {MEM_MIB} MiB above it)")
    return "\n".join(lines)


def failures(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if r["outcome"] not in
            (ALLOWED if r["kind"] in TAMPER else ALLOWED_RESEALED)]


@pytest.mark.timeout(900)
def test_archive_mutations_are_refused_or_load_equal(fuzz_long: bool, fuzz_seed: int,
                                                    capsys: pytest.CaptureFixture) -> None:
    per_kind = LONG_PER_KIND if fuzz_long else CI_PER_KIND
    t0 = time.perf_counter()
    results, peak = campaign(per_kind, fuzz_seed)
    report = figures(results, peak) + f"\n{len(results)} archives in {time.perf_counter() - t0:.0f} s"
    with capsys.disabled():                       # the figures, also without -s
        print(f"\narchive fuzzing (seed {fuzz_seed}):\n{report}")
    assert len(results) == per_kind * 4 * (len(TAMPER) + len(RESEAL))
    bad = failures(results)
    assert not bad, report + "\n" + "\n".join(
        f"{r['kind']} {r['model']} #{r['k']}: {r['outcome']} {r['detail'][:800]}" for r in bad[:10])
    # the campaign reaches both sides: refusals, and archives that load and run equal
    assert all(any(r["outcome"] == "refused" for r in results if r["kind"] == k) for k in TAMPER)
    assert any(r["outcome"] == "equal" for r in results)
