"""Imports flow one way: scriptmod -> runtime -> codegen -> ir (DESIGN.md §2). Every module
of the four packages is parsed (not imported) and each import, at any depth in the module,
is checked against the layer order. ``ir/``, ``codegen/`` and ``runtime/`` install as
``scriptmod.ir`` and so on, and those names count as their own layers, not as ``scriptmod``.
Inside ``scriptmod``, ``jit`` builds on ``nn``: no module of ``nn`` imports ``jit``, and no
subpackage ``jit`` imports leads back to it (issue 12)."""
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
    mod.write_text("import scriptmod.ir.types\ndef f():\n    from scriptmod.runtime import arrays\n"
                   "    from . import ok\n    import scriptmod.nn as nn\n"
                   "    from scriptmod import jit\n    from scriptmod.codegen import x\n")
    assert violations(mod, tmp_path) == ["codegen/sub/bad.py:3 imports runtime",
                                         "codegen/sub/bad.py:5 imports scriptmod",
                                         "codegen/sub/bad.py:6 imports scriptmod"]


def test_there_are_modules_to_check() -> None:
    assert len(_modules()) > 20


# ---- jit builds on nn, never the other way round ---------------------------------------------
def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted name) of everything the file imports, at any depth: ``from a import b``
    gives ``a.b``, relative imports are resolved, and ``import_module("...")`` /
    ``__import__("...")`` with a literal name count too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path, root)
    base = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            pkg = base[:len(base) - (node.level - 1)] if node.level else []
            mod = ".".join(pkg + ([node.module] if node.module else []))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                    "import_module", "__import__"):
            out.append((node.lineno, node.args[0].value))
    return sorted(out)


def jit_imports(package: Path, root: Path = ROOT) -> list[str]:
    """``file:line imports name`` for every import of ``scriptmod.jit`` under ``package``."""
    return [f"{p.relative_to(root)}:{line} imports {name}" for p in sorted(package.rglob("*.py"))
            for line, name in imported_modules(p, root)
            if name == "scriptmod.jit" or name.startswith("scriptmod.jit.")]


def test_nn_never_imports_jit() -> None:
    assert jit_imports(ROOT / "scriptmod" / "nn") == []


def test_the_jit_checker_catches_nested_and_relative_imports(tmp_path: Path) -> None:
    nn = tmp_path / "scriptmod" / "nn"
    nn.mkdir(parents=True)
    (nn / "m.py").write_text(
        "import scriptmod.nn.init\nclass A:\n    def f(self):\n        from scriptmod import jit\n"
        "def g():\n    if True:\n        from ..jit._trace import trace\n"
        "    from . import jitter\n    import scriptmod.jit._fuser as f\n"
        "    importlib.import_module('scriptmod.jit')\n    from scriptmod import jitter\n")
    assert jit_imports(nn, tmp_path) == ["scriptmod/nn/m.py:4 imports scriptmod.jit",
                                         "scriptmod/nn/m.py:7 imports scriptmod.jit._trace.trace",
                                         "scriptmod/nn/m.py:9 imports scriptmod.jit._fuser",
                                         "scriptmod/nn/m.py:10 imports scriptmod.jit"]


def subpackage_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Which top-level parts of ``scriptmod`` (``nn``, ``jit``, ``tensor``, ...; not the layers
    ``ir``/``codegen``/``runtime`` nor ``scriptmod/__init__``) import which, at any depth."""
    top = root / "scriptmod"
    parts = {p.stem for p in top.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    parts -= set(LAYERS)
    graph: dict[str, set[str]] = {p: set() for p in parts}
    for path in top.rglob("*.py"):
        src = path.relative_to(top).with_suffix("").parts[0]
        for _, name in (imported_modules(path, root) if src in parts else []):
            dst = name.split(".")[1] if name.startswith("scriptmod.") else None
            if dst in parts and dst != src:
                graph[src].add(dst)
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return False


def test_jit_is_on_no_import_cycle() -> None:
    graph = subpackage_graph()
    assert "jit" in graph and "nn" in graph["jit"]
    assert sorted(d for d in graph["jit"] if _reaches(graph, d, "jit")) == []


def test_the_cycle_walk_finds_indirect_cycles() -> None:
    graph = {"jit": {"nn"}, "nn": {"func"}, "func": {"jit"}, "optim": {"nn"}}
    assert _reaches(graph, "nn", "jit") and not _reaches(graph, "optim", "tensor")
