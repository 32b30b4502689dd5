"""Pass logs format the graph only when someone reads them (``SCRIPTMOD_LOG=passes`` or a
``log`` callback): with logging off, running a pipeline never prints a graph."""
from __future__ import annotations

from typing import Any

import pytest

from scriptmod.ir import log as irlog
from scriptmod.ir import parse
from scriptmod.ir.graph import Graph
from scriptmod.ir.passes.pipeline import run_pipeline

_TEXT = '''graph(%x : Float(4)):
  %a : Float(4) = sm::relu(%x)
  %b : Float(4) = sm::relu(%x)
  %c : Float(4) = sm::add(%a, %b)
  return (%c)
'''
_PASSES = ["canonicalize", "eliminate_common_subexpressions", "eliminate_dead_code"]


@pytest.fixture
def formats(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of ``Graph.__str__`` (the graph printout)."""
    calls: list[int] = []
    inner = Graph.__str__

    def counting(self: Graph) -> str:
        calls.append(1)
        return inner(self)
    monkeypatch.setattr(Graph, "__str__", counting)
    return calls


def test_no_graph_is_formatted_with_logging_off(monkeypatch: pytest.MonkeyPatch,
                                                formats: list[int]) -> None:
    monkeypatch.setenv(irlog.ENV_VAR, "fusion,codegen")
    run_pipeline(parse(_TEXT), _PASSES, verify=True)
    assert len(formats) == 0
    monkeypatch.delenv(irlog.ENV_VAR)
    run_pipeline(parse(_TEXT), _PASSES)
    assert len(formats) == 0


@pytest.mark.parametrize("setting", ["passes", "all", "fusion, Passes"])
def test_each_pass_logs_its_graph_when_passes_is_on(setting: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: Any, formats: list[int]) -> None:
    monkeypatch.setenv(irlog.ENV_VAR, setting)
    run_pipeline(parse(_TEXT), _PASSES)
    err = capsys.readouterr().err
    assert len(formats) == len(_PASSES)
    assert err.count("[scriptmod:passes] after ") == len(_PASSES)
    assert "after eliminate_dead_code" in err and "sm::add" in err


def test_a_log_callback_gets_every_graph_whatever_the_setting(monkeypatch: pytest.MonkeyPatch,
                                                              formats: list[int]) -> None:
    monkeypatch.delenv(irlog.ENV_VAR, raising=False)
    seen: list[str] = []
    run_pipeline(parse(_TEXT), _PASSES, log=seen.append)
    assert [m.split(" ")[1] for m in seen] == _PASSES and len(formats) == len(_PASSES)
