"""``scriptmod bench --paired``: scriptmod's fused variant and torch eager alternating in one
process. The quick run pairs a training row and a forward row, checks that the two sides
agree, and reports per-round times; the ratio and the rounds won are what the rounds say."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scriptmod.bench.paired import Paired, format_table
from scriptmod.cli import main


def test_ratio_and_rounds_won_follow_the_rounds() -> None:
    p = Paired("T5", 3, scriptmod_ms=[10.0, 12.0, 30.0], torch_ms=[20.0, 11.0, 40.0])
    assert p.ratio == pytest.approx(20.0 / 12.0) and p.won == 2
    assert "2 of 3" in format_table([p]) and p.as_dict()["won"] == 2


def test_quick_paired_run_agrees_and_reports(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    rc = main(["bench", "--paired", "--quick", "--workload", "T3,W4", "--repeat", "2",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    data = json.loads(out.read_text())
    assert [d["workload"] for d in data] == ["T3", "W4"]
    for d in data:
        assert len(d["scriptmod_ms"]) == len(d["torch_ms"]) == 2 and d["ratio"] > 0
    assert "rounds won" in text and "T3" in text


def test_paired_without_torch_says_so(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "--paired", "--quick"]) == 2
    assert "needs torch" in capsys.readouterr().err


def test_paired_refuses_unknown_and_scripted_workloads(
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(["bench", "--paired", "--workload", "W6,XX"]) == 2
    assert "--workload" in capsys.readouterr().err
