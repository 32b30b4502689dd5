"""Issue 44, item 6: every ``SCRIPTMOD_*`` variable that holds a number, a flag or a choice is
parsed by ``ir.env`` where it is first used, and a bad value is a ``ValueError`` of one
shape, ``NAME: expected <what>, got '<value>'`` (``SCRIPTMOD_CACHE_MAX_MB=inf`` was an
OverflowError, ``SCRIPTMOD_NUM_THREADS=abc`` a bare int() error, ``-2`` silently 1,
``SCRIPTMOD_DYNAMIC_THREADS=maybe`` silently on)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from scriptmod.ir import env
from scriptmod.runtime import gemm, kernel_cache

BAD = [("SCRIPTMOD_NUM_THREADS", v, "an integer >= 1") for v in ("abc", "-2", "0", "1.5")] + [
    ("SCRIPTMOD_POOL_MB", v, "a finite size in MiB >= 0") for v in ("inf", "x", "-1", "nan")] + [
    ("SCRIPTMOD_DYNAMIC_THREADS", v, "one of") for v in ("maybe", "2")]


@pytest.mark.parametrize("name, value, what", BAD)
def test_a_bad_value_at_first_use_names_the_variable(name: str, value: str, what: str) -> None:
    """Read at import (the pool size, the dynamic-threads flag) or at the first thread count:
    either fails with the variable's message."""
    code = "import scriptmod; scriptmod.get_num_threads()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env={**__import__("os").environ, name: value}, timeout=120)
    assert proc.returncode != 0
    assert f"ValueError: {name}: expected {what}" in proc.stderr and repr(value) in proc.stderr


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-1", "lots"])
def test_cache_size_cap(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", value)
    with pytest.raises(ValueError, match="SCRIPTMOD_CACHE_MAX_MB: expected a finite size in "
                                         "MiB >= 0, got '" + value):
        kernel_cache.max_bytes()


def test_choices_and_good_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_GEMM", "fast")
    with pytest.raises(ValueError, match=r"SCRIPTMOD_GEMM: expected one of \['auto', 'own', "
                                         r"'blas'\], got 'fast'"):
        gemm.choice()
    for raw, want in (("On", True), ("no", False), ("", True)):
        monkeypatch.setenv("SCRIPTMOD_X", raw)
        assert env.flag("SCRIPTMOD_X", True) is want
    monkeypatch.setenv("SCRIPTMOD_X", " 3 ")
    assert env.integer("SCRIPTMOD_X", 1) == 3
    monkeypatch.setenv("SCRIPTMOD_X", "2.5")
    assert env.size_mb("SCRIPTMOD_X", 1) == int(2.5 * (1 << 20))
