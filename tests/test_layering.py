"""Imports flow one way: scriptmod -> runtime -> codegen -> ir (DESIGN.md §2). Every module
of the four packages is parsed (not imported) and each import, at any depth in the module,
is checked against the layer order. ``ir/``, ``codegen/`` and ``runtime/`` install as
``scriptmod.ir`` and so on, and those names count as their own layers, not as ``scriptmod``."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"ir": 0, "codegen": 1, "runtime": 2, "scriptmod": 3}


def _modules() -> list[Path]:
    return sorted(p for pkg in LAYERS for p in (ROOT / pkg).rglob("*.py"))


def _module_name(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _layer_of(module: str) -> str:
    """``scriptmod.runtime.fusion`` -> ``runtime``; ``scriptmod.nn`` -> ``scriptmod``."""
    parts = module.split(".")
    if parts[0] == "scriptmod" and len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return parts[0]


def imported_packages(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path, root)
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, _layer_of(a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[:len(base) - (node.level - 1)]
                out.append((node.lineno, base[0] if base else ""))
            elif node.module:
                out.append((node.lineno, _layer_of(node.module)))
    return out


def violations(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root)
    layer = LAYERS[rel.parts[0]]
    return [f"{rel}:{line} imports {pkg}" for line, pkg in imported_packages(path, root)
            if pkg in LAYERS and LAYERS[pkg] > layer]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layer_order(path: Path) -> None:
    assert violations(path) == []


def test_the_checker_catches_wrong_way_imports(tmp_path: Path) -> None:
    fake = tmp_path / "codegen" / "sub"
    fake.mkdir(parents=True)
    mod = fake / "bad.py"
    mod.write_text("import scriptmod.ir.types\ndef f():\n    from scriptmod.runtime import backend\n"
                   "    from . import ok\n    import scriptmod.nn as nn\n"
                   "    from scriptmod import jit\n    from scriptmod.codegen import x\n")
    assert violations(mod, tmp_path) == ["codegen/sub/bad.py:3 imports runtime",
                                         "codegen/sub/bad.py:5 imports scriptmod",
                                         "codegen/sub/bad.py:6 imports scriptmod"]


def test_there_are_modules_to_check() -> None:
    assert len(_modules()) > 20
