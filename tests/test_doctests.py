"""Every docstring example in the installed packages runs as a pytest doctest item.

``pytest --doctest-modules ir/`` would import ``ir/graph.py`` a second time as a top-level
``ir.graph`` (a second op registry, distinct classes), so the examples are collected by their
real names instead: every module of the packages that ``pyproject.toml`` lists under
``[tool.setuptools] packages`` is mapped to its folder through ``package-dir``, imported as
``scriptmod.*``, and its examples become ``DoctestItem``s under this file (the hook is
``pytest_pycollect_makeitem`` in ``tests/conftest.py``)::

    python -m pytest tests/test_doctests.py -q                          # all examples
    python -m pytest "tests/test_doctests.py::scriptmod.ir.graph" -q    # one module's

Examples see the globals in ``doctest_namespace`` below, run with ELLIPSIS and
NORMALIZE_WHITESPACE (``doctest_optionflags`` in ``pyproject.toml``) and run in a fresh
temporary working directory.
"""
from __future__ import annotations

import doctest
import importlib
import os
import subprocess
import sys
import tempfile
import tomllib
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _pytest.doctest import DoctestItem, DoctestModule

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL_EXTRAS = {"onnx", "onnxruntime", "cupy"}   # pyproject.toml's extras
MIN_EXAMPLES = 40   # fewer collected means the collection broke, not that the docs got shorter


def package_modules(root: Path = ROOT) -> list[tuple[str, Path]]:
    """(real module name, file) for every module of the packages pyproject.toml installs."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = cfg.get("package-dir", {})
    found = []
    for package in cfg["packages"]:
        folder = _package_folder(root, package, mapping)
        for file in sorted(folder.glob("*.py")):
            if file.name == "__main__.py":      # importing it would run the program
                continue
            name = package if file.stem == "__init__" else f"{package}.{file.stem}"
            found.append((name, file))
    return found


def _package_folder(root: Path, package: str, mapping: dict[str, str]) -> Path:
    """Where setuptools finds ``package``: the longest package-dir prefix, then the dotted rest."""
    prefixes = [p for p in mapping if package == p or package.startswith(p + ".")]
    if not prefixes:
        return root.joinpath(*package.split("."))
    best = max(prefixes, key=len)
    rest = package[len(best):].lstrip(".")
    return root.joinpath(mapping[best], *(rest.split(".") if rest else ()))


@pytest.fixture(scope="session")
def doctest_namespace() -> dict[str, Any]:
    """The globals every docstring example may assume; anything else it imports itself."""
    import numpy as np

    import scriptmod
    import scriptmod.nn.functional as F
    from scriptmod import nn
    return {"scriptmod": scriptmod, "sm": scriptmod, "nn": nn, "F": F, "np": np}


class ModuleExamples(DoctestModule):
    """pytest's doctest collector for one module, imported by its real ``scriptmod.*`` name."""

    def __init__(self, *, module_name: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.module_name = module_name

    def _getobj(self) -> ModuleType:
        return importlib.import_module(self.module_name)

    def collect(self) -> Iterable[pytest.Item]:
        try:
            items = list(super().collect())
        except ModuleNotFoundError as e:
            if e.name not in OPTIONAL_EXTRAS:
                return [ModuleFailure.from_parent(self, name="collect",
                                                  report=traceback.format_exc())]
            return []       # a module of an optional extra (``scriptmod.onnx``) not installed
        except Exception:   # an import or docstring-parse error fails this module's item only
            return [ModuleFailure.from_parent(self, name="collect",
                                              report=traceback.format_exc())]
        return [ExampleItem.from_parent(self, name=i.name, runner=i.runner, dtest=i.dtest)
                for i in items if isinstance(i, DoctestItem)]


class ExampleItem(DoctestItem):
    """A doctest item run in a fresh temporary directory, which also holds the kernel cache
    (``SCRIPTMOD_CACHE_DIR``): examples write nowhere else."""

    def runtest(self) -> None:
        cwd, cache = os.getcwd(), os.environ.get("SCRIPTMOD_CACHE_DIR")
        with tempfile.TemporaryDirectory(prefix="scriptmod-doctest-") as tmp:
            os.chdir(tmp)
            os.environ["SCRIPTMOD_CACHE_DIR"] = os.path.join(tmp, "kernel-cache")
            try:
                super().runtest()
            finally:
                os.chdir(cwd)
                if cache is None:
                    del os.environ["SCRIPTMOD_CACHE_DIR"]
                else:
                    os.environ["SCRIPTMOD_CACHE_DIR"] = cache


class ModuleFailure(pytest.Item):
    """Stands for a module whose examples could not be collected (import or parse error)."""

    def __init__(self, *, report: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.report = report

    def runtest(self) -> None:
        pytest.fail(f"cannot collect the docstring examples of {self.parent.module_name}:\n"
                    f"{self.report}", pytrace=False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"[examples] {self.parent.module_name}"


class _DocstringExamples:
    """Placeholder that the conftest hook replaces by one ModuleExamples per package module."""

    def __call__(self, parent: pytest.Collector) -> list[pytest.Collector]:
        return [ModuleExamples.from_parent(parent, name=name, path=file, module_name=name)
                for name, file in package_modules()]


DOCSTRING_EXAMPLES = _DocstringExamples()


def _count_examples(names: Iterable[str]) -> Iterator[int]:
    """Examples per docstring; a module that cannot be imported or parsed fails its own item."""
    finder = doctest.DocTestFinder()
    for name in names:
        try:
            tests = finder.find(importlib.import_module(name), name)
        except Exception:
            continue
        yield from (len(test.examples) for test in tests)


def test_enough_docstring_examples_are_collected() -> None:
    names = [name for name, _ in package_modules()]
    total = sum(_count_examples(names))
    assert total >= MIN_EXAMPLES, (
        f"only {total} docstring examples found in {len(names)} modules; expected at least "
        f"{MIN_EXAMPLES}: is the collection in tests/test_doctests.py broken?")


def test_modules_map_to_the_installed_folders() -> None:
    modules = dict(package_modules())
    assert modules["scriptmod.ir.graph"] == ROOT / "ir" / "graph.py"
    assert modules["scriptmod.runtime"] == ROOT / "runtime" / "__init__.py"
    for name, file in modules.items():
        assert Path(importlib.import_module(name).__file__).resolve() == file.resolve(), name
    every_file = {f for folder in ("scriptmod", "ir", "codegen", "runtime")
                  for f in (ROOT / folder).rglob("*.py") if f.name != "__main__.py"}
    assert every_file == set(modules.values())


DEMO_PYPROJECT = """
[tool.setuptools]
packages = ["demo", "demo.sub"]
[tool.pytest.ini_options]
doctest_optionflags = "ELLIPSIS NORMALIZE_WHITESPACE"
markers = ["slow: takes more than a few seconds"]
"""
DEMO_FILES = {
    "demo/__init__.py": '"""\n>>> sm.__name__, nn.__name__, F.__name__, np.__name__\n'
                        "('scriptmod', 'scriptmod.nn', 'scriptmod.nn.functional', 'numpy')\n"
                        '>>> open("written.txt", "w").write("x")\n1\n"""\n',
    "demo/good.py": 'def f():\n    """\n    >>> [1,   2, 3, 4]\n    [1, ..., 4]\n    """\n',
    "demo/bad.py": 'def g():\n    """\n    >>> 1 + 1\n    3\n    """\n',
    "demo/sub/__init__.py": "",
    "demo/sub/broken.py": 'raise RuntimeError("boom at import")\n',
}


@pytest.mark.slow
def test_failing_examples_and_broken_modules_fail_with_their_output(tmp_path: Path) -> None:
    """Runs this collection on a small project: real names, namespace, flags, failures."""
    (tmp_path / "pyproject.toml").write_text(DEMO_PYPROJECT)
    for rel, text in DEMO_FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py", "module_checks.py", "test_doctests.py"):
        (tmp_path / "tests" / name).write_text((ROOT / "tests" / name).read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_doctests.py", "-q", "-rA",
         "-p", "no:cacheprovider", "-k", "demo or enough"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "PASSED demo/__init__.py::demo\n" in out, out
    assert "PASSED demo/good.py::demo.good.f\n" in out, out
    assert "FAILED demo/bad.py::demo.bad.g\n" in out, out
    assert "Expected:\n    3\nGot:\n    2" in out, out
    assert "FAILED demo/sub/broken.py::collect" in out and "boom at import" in out, out
    assert "only 4 docstring examples found" in out, out
    assert not (tmp_path / "written.txt").exists()
