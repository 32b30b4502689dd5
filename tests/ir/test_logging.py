"""Debug output on the standard ``logging`` module: ``SCRIPTMOD_LOG`` topics (``all``,
``help``, an unknown topic's error), ``set_logs``, the standard API (``caplog``), and fusion
messages that name values by module path and the user's variable."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from scriptmod.ir import log as irlog
from scriptmod.ir import parse
from scriptmod.ir.passes.fuse import fuse_elementwise

# an exp whose row sum feeds a div: the sum sits between them, so exp and div stay apart
_TEXT = '''graph(%x : Float(2, 3)):
  %e : Float(2, 3) = sm::exp(%x)  # model.py:7, scope: encoder.layers.0
  %s : Float(2, 1) = sm::sum[dim=[1], keepdim=1](%e)  # model.py:8, scope: head
  %y : Float(2, 3) = sm::div(%e, %s)  # model.py:8, scope: head
  %0 : Float(2, 3) = sm::neg(%y)  # model.py:9
  return (%0)
'''


pytestmark = pytest.mark.usefixtures("logs_off")     # tests/conftest.py


def _run(code: str, setting: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, irlog.ENV_VAR: setting}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_topics_are_child_loggers_of_scriptmod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(irlog.ENV_VAR, "Fusion, cache")
    assert irlog.enabled("fusion") and irlog.enabled("cache")
    assert not irlog.enabled("codegen") and not irlog.enabled("passes")
    assert irlog.logger("fusion").name == "scriptmod.fusion"
    monkeypatch.setenv(irlog.ENV_VAR, "codegen")          # cache is codegen's child
    assert irlog.logger("cache").name == "scriptmod.codegen.cache"
    assert irlog.enabled("cache") and not irlog.enabled("fusion")
    monkeypatch.setenv(irlog.ENV_VAR, "all")
    assert all(irlog.enabled(t) for t in irlog.TOPICS)
    monkeypatch.delenv(irlog.ENV_VAR)
    assert not any(irlog.enabled(t) for t in irlog.TOPICS)


def test_every_topic_used_in_the_tree_is_declared() -> None:
    """The topics the code logs on (``autograd`` from the compiled-grad path among them)."""
    assert {"passes", "fusion", "codegen", "cache", "autograd", "script"} <= set(irlog.TOPICS)
    with pytest.raises(ValueError, match="'fusoin' is not a scriptmod log topic"):
        irlog.log("fusoin", "a typo at a call site fails loudly")


def test_output_goes_to_stderr_through_one_handler(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    monkeypatch.setenv(irlog.ENV_VAR, "codegen")
    irlog.log("codegen", "shown")
    irlog.log("passes", "hidden")
    assert capsys.readouterr().err == "[scriptmod:codegen] shown\n"
    assert root.handlers == before                       # nothing added to the root logger
    assert not logging.getLogger("scriptmod").propagate  # no second copy through the root
    monkeypatch.delenv(irlog.ENV_VAR)
    irlog.log("codegen", "hidden again")
    assert capsys.readouterr().err == ""
    assert logging.getLogger("scriptmod").propagate


def test_help_lists_each_topic_and_the_program_goes_on() -> None:
    r = _run("import scriptmod; print('imported')", "help")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "imported\n"
    lines = r.stderr.splitlines()
    for topic in list(irlog.TOPICS) + ["all", "help"]:
        assert any(line.split()[:1] == [topic] for line in lines), (topic, r.stderr)
    assert "SCRIPTMOD_LOG" in lines[0]


def test_unknown_topic_fails_at_import_naming_it_and_the_valid_ones() -> None:
    r = _run("import scriptmod", "fusion,fusoin")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: SCRIPTMOD_LOG: topic 'fusoin' is not a scriptmod log topic")
    assert "did you mean 'fusion'?" in last
    assert ("valid topics: autograd, cache, codegen, errors, fusion, passes, recompiles, script, "
            "all, help") in last


def test_unknown_topic_set_after_import_fails_at_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(irlog.ENV_VAR, "passes,nope")
    with pytest.raises(ValueError, match="topic 'nope'.*valid topics: autograd"):
        irlog.enabled("passes")
    with pytest.raises(ValueError):                       # every time, until it is fixed
        irlog.enabled("passes")
    monkeypatch.setenv(irlog.ENV_VAR, "passes")
    assert irlog.enabled("passes")


def test_set_logs(capsys: pytest.CaptureFixture[str]) -> None:
    irlog.set_logs(fusion=True)
    assert irlog.enabled("fusion") and not irlog.enabled("codegen")
    irlog.log("fusion", "on")
    assert capsys.readouterr().err == "[scriptmod:fusion] on\n"
    irlog.set_logs(codegen=logging.INFO)                  # replaces: fusion is off again
    assert not irlog.enabled("fusion") and not irlog.enabled("codegen")
    assert irlog.logger("codegen").isEnabledFor(logging.INFO)
    irlog.set_logs(all=True)
    assert irlog.enabled("autograd")
    irlog.set_logs(help=True)
    assert "autograd    whether a compiled module's backward" in capsys.readouterr().err
    with pytest.raises(ValueError, match="set_logs\\(\\): argument 'fuse' .*did you mean 'fusion'"):
        irlog.set_logs(fuse=True)
    with pytest.raises(TypeError, match="argument 'fusion' must be a bool or a logging level"):
        irlog.set_logs(fusion="yes")  # type: ignore[arg-type]
    import scriptmod
    assert scriptmod.set_logs is irlog.set_logs


def test_a_handler_of_the_users_own_gets_the_records(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="scriptmod.fusion"):
        fuse_elementwise(parse(_TEXT), min_size=1)
    records = [r for r in caplog.records if r.name == "scriptmod.fusion"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert any(r.getMessage().startswith("fused ") for r in records)
    caplog.clear()
    fuse_elementwise(parse(_TEXT), min_size=1)            # level back to default: silent
    assert not [r for r in caplog.records if r.name.startswith("scriptmod")]


def test_fusion_log_names_values_by_module_path_and_variable(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="scriptmod.fusion"):
        fuse_elementwise(parse(_TEXT), min_size=1)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "kept apart: encoder.layers.0.exp (%e) -> head.div (%y): would create a cycle" in text
    assert "fused 1 op(s) over Float(2, 3) (sm::exp) from encoder.layers.0: " \
           "encoder.layers.0.exp (%e) at model.py:7" in text
    assert "(sm::div, sm::neg) from head, (top level): neg (%0) at model.py:8" in text
