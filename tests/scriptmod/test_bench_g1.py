"""``scriptmod bench --workload G1,W5T --quick``: the rows of a varying sequence length
(``scriptmod.bench.dynamic``) run through the CLI, check ok and count specializations.
Structure and correctness only: no timing is asserted."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scriptmod.bench.cli import options
from scriptmod.bench.dynamic import DYNAMIC
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import build_parser, main


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, dict]]:
    path = tmp_path_factory.mktemp("bench") / "g1.json"
    rc = main(["bench", "--quick", "--workload", "G1,W5T", "--no-progress",
               "--no-compile-time", "--budget", "0.05", "--json", str(path)])
    return rc, {w["id"]: w for w in json.loads(Path(path).read_text())["workloads"]}


def test_g1_traced_generation_matches_eager_and_counts_specializations(rows) -> None:
    rc, by_id = rows
    g1 = by_id["G1"]
    assert rc == 0 and g1["ok"], g1["match"]
    assert g1["match"]["fused"]["ok"]
    assert g1["compile"]["calls"] == 4 and 1 <= g1["compile"]["specializations"] <= 4
    assert g1["times"]["eager"]["median_s"] > 0 and g1["times"]["fused"]["median_s"] > 0
    assert any("specialization" in n for n in g1["notes"])


def test_w5t_reports_every_length(rows) -> None:
    _, by_id = rows
    w5t = by_id["W5T"]
    assert w5t["ok"], w5t["match"]
    lengths = w5t["compile"]["lengths"]
    assert list(lengths) == ["16", "8", "24"]
    for r in lengths.values():
        assert r["ok"] and r["one_trace_s"] > 0 and r["own_trace_s"] > 0
        assert isinstance(r["new_specialization"], bool) and r["specializations"] >= 1
    assert w5t["compile"]["specializations"] == lengths["24"]["specializations"]


def test_dynamic_rows_run_only_when_named() -> None:
    args = build_parser().parse_args(["bench"])
    assert options(args).workloads == list(WORKLOADS)
    assert not set(DYNAMIC) & set(WORKLOADS)
    args = build_parser().parse_args(["bench", "--workload", "g1,w5t"])
    assert options(args).workloads == ["G1", "W5T"]
