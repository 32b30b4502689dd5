"""runtime.pycode: generated Python compiled once, reused from memory and from the disk cache;
a damaged or foreign entry is recompiled, never run."""
from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from scriptmod.runtime import pycode

SOURCE = "def f(x):\n    return x * 3\n"


@pytest.fixture()
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder and no code objects in memory."""
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pycode, "_memory", {})
    return tmp_path


def _run(c: object) -> int:
    ns: dict = {}
    exec(c, ns)                                            # noqa: S102 (our own source)
    return ns["f"](2)


def test_compiled_once_then_loaded_from_disk(fresh: Path) -> None:
    before = pycode.CACHE.stats()
    assert _run(pycode.code(SOURCE, "<t>")) == 6
    pycode._memory.clear()                                  # as a new process would be
    c = pycode.code(SOURCE, "<t>")
    after = pycode.CACHE.stats()
    assert _run(c) == 6 and c.co_filename == "<t>"
    assert after["compiles"] - before["compiles"] == 1
    assert after["disk_hits"] - before["disk_hits"] == 1
    assert len(list((fresh / "python").iterdir())) == 1


def test_file_name_and_source_are_part_of_the_key(fresh: Path) -> None:
    a = pycode.code(SOURCE, "<a>")
    b = pycode.code(SOURCE, "<b>")
    c = pycode.code(SOURCE.replace("3", "4"), "<a>")
    assert (a.co_filename, b.co_filename, _run(c)) == ("<a>", "<b>", 8)
    assert len(list((fresh / "python").iterdir())) == 3


@pytest.mark.parametrize("damage", ["truncate", "flip", "not_code"])
def test_a_damaged_entry_is_recompiled(fresh: Path, damage: str) -> None:
    pycode.code(SOURCE, "<t>")
    path, = (fresh / "python").iterdir()
    key = path.stem
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    elif damage == "flip":
        raw = bytearray(path.read_bytes())
        raw[-3] ^= 0xFF
        path.write_bytes(bytes(raw))
    else:                                 # a valid entry holding something else than code
        pycode.CACHE.store_object(key, marshal.dumps(("not", "code")))
    pycode._memory.clear()
    compiles = pycode.CACHE.stats()["compiles"]
    assert _run(pycode.code(SOURCE, "<t>")) == 6
    assert pycode.CACHE.stats()["compiles"] == compiles + 1


def test_memory_keeps_a_bounded_number_of_code_objects(fresh: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pycode, "MEMORY_ENTRIES", 4)
    for i in range(10):
        assert _run(pycode.code(SOURCE.replace("3", str(i)), "<t>")) == 2 * i
    assert len(pycode._memory) == 4
