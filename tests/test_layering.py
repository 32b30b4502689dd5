"""Imports flow one way: scriptmod -> runtime -> codegen -> ir (DESIGN.md §2). Every module
of the four packages is parsed (not imported) and each import, at any depth in the module,
is checked against the layer order. ``ir/``, ``codegen/`` and ``runtime/`` install as
``scriptmod.ir`` and so on, and those names count as their own layers, not as ``scriptmod``.
Inside ``scriptmod``, ``jit`` builds on ``nn``: no module of ``nn`` imports ``jit``, and no
subpackage ``jit`` imports leads back to it (issue 12)."""
from __future__ import annotations

import ast
import re
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


# ---- no module-level import cycle (issue 36) -------------------------------------------------
PACKAGE_OF = {"ir": "scriptmod.ir", "codegen": "scriptmod.codegen", "runtime": "scriptmod.runtime",
              "scriptmod": "scriptmod"}


def _dotted(path: Path, root: Path) -> str:
    """``ir/passes/fuse.py`` -> ``scriptmod.ir.passes.fuse`` (the installed name)."""
    parts = _module_name(path, root)
    return ".".join([PACKAGE_OF[parts[0]]] + parts[1:])


def _installed(name: str) -> str:
    """``ir.graph`` or ``scriptmod.ir.graph`` -> ``scriptmod.ir.graph``."""
    head = name.split(".")[0]
    return PACKAGE_OF[head] + name[len(head):] if head in PACKAGE_OF else name


def _import_time_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The import statements that run when the module is imported: not those inside functions
    (run when called) nor under ``if TYPE_CHECKING:`` (never run)."""
    out: list[ast.stmt] = []
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            out.append(st)
        elif isinstance(st, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(st.test):
                out += _import_time_statements(st.body)
            out += _import_time_statements(st.orelse)
        elif isinstance(st, (ast.Try, ast.With, ast.ClassDef)):
            for block in ("body", "orelse", "finalbody"):
                out += _import_time_statements(getattr(st, block, []))
            for handler in getattr(st, "handlers", []):
                out += _import_time_statements(handler.body)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Which project module imports which when it is imported. ``from a import b`` counts as
    an import of ``a.b`` when that is a module, else of ``a``; a module importing its own
    package's ``__init__`` is left out (Python has run that ``__init__`` first anyway)."""
    files = {_dotted(p, root): p for pkg in PACKAGE_OF for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        targets = set()
        for st in _import_time_statements(ast.parse(path.read_text(), filename=str(path)).body):
            if isinstance(st, ast.Import):
                targets |= {_installed(a.name) for a in st.names}
                continue
            pkg = ".".join(base[:len(base) - (st.level - 1)] + [st.module or ""]).strip(".") \
                if st.level else _installed(st.module or "")
            targets |= {f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in files else pkg for a in st.names}
        own_package = name.rsplit(".", 1)[0] if not is_pkg else None
        graph[name] = {t for t in targets if t in files and t != own_package and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_module_level_import_cycle() -> None:
    assert import_cycles(import_graph()) == []


def test_the_cycle_checker_catches_a_planted_cycle(tmp_path: Path) -> None:
    for folder in PACKAGE_OF:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "scriptmod" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom scriptmod import b\n"
        "if TYPE_CHECKING:\n    from scriptmod import c\n"
        "def f():\n    from scriptmod import d\n")
    (tmp_path / "scriptmod" / "b.py").write_text("import scriptmod.ir.x\nfrom . import a\n")
    (tmp_path / "scriptmod" / "c.py").write_text("from scriptmod.a import f\n")
    (tmp_path / "scriptmod" / "d.py").write_text("import scriptmod.a\n")
    (tmp_path / "ir" / "x.py").write_text("try:\n    from ..ir import y\nexcept ImportError:\n"
                                          "    pass\nfrom scriptmod.ir import X\n")
    (tmp_path / "ir" / "y.py").write_text("from ir import x\nfrom . import Y\n")
    graph = import_graph(tmp_path)
    assert graph["scriptmod.a"] == {"scriptmod.b"} and graph["scriptmod.ir.y"] == {"scriptmod.ir.x"}
    assert import_cycles(graph) == [["scriptmod.a", "scriptmod.b"],
                                    ["scriptmod.ir.x", "scriptmod.ir.y"]]


# ---- no source file over 900 lines (issue 36) ------------------------------------------------
MAX_LINES = 900


def long_files(root: Path = ROOT) -> list[str]:
    """``file: N lines`` for every module of the four packages longer than ``MAX_LINES``."""
    out = []
    for path in sorted(p for pkg in LAYERS for p in (root / pkg).rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_source_file_over_900_lines() -> None:
    assert long_files() == []


def test_the_length_checker_catches_a_long_file(tmp_path: Path) -> None:
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
    (tmp_path / "runtime" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "runtime" / "ok.py").write_text("x = 1\n" * MAX_LINES)
    assert long_files(tmp_path) == [f"runtime/long.py: {MAX_LINES + 1} lines"]


# ---- IR objects carry no runtime state (issue 36) --------------------------------------------
# Node, Block and Graph declare __slots__ (below), so nothing can hang state on them; this
# parse also names any ``__dict__`` read on a name that holds an IR object outside ``ir/``.
IR_NAME = re.compile(r"(^|_)(node|n|call|callee|graph|g|block|blk)$")


def _base_name(expr: ast.expr) -> str:
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) \
        else ""


def ir_dict_uses(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line name.__dict__`` for ``X.__dict__``, ``vars(X)`` and ``getattr(X, "__dict__")``
    where ``X`` names a node, block or graph."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        target = None
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            target = node.value
        elif isinstance(node, ast.Call) and node.args and (
                _base_name(node.func) == "vars" or _base_name(node.func) == "getattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "__dict__"):
            target = node.args[0]
        if target is not None and IR_NAME.search(_base_name(target)):
            out.append((node.lineno, f"{path.relative_to(root)}:{node.lineno} "
                                     f"{_base_name(target)}.__dict__"))
    return [use for _, use in sorted(out)]


def test_nothing_outside_ir_reads_an_ir_objects_dict() -> None:
    outside = [p for pkg in ("codegen", "runtime", "scriptmod")
               for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert [use for p in outside for use in ir_dict_uses(p)] == []


def test_the_dict_checker_catches_ir_state(tmp_path: Path) -> None:
    mod = tmp_path / "m.py"
    mod.write_text("callee = node.__dict__['callee']\nx = self.__dict__\nvars(graph)\n"
                   "getattr(call, '__dict__')\nn.__dict__.get('callee')\nvars(module)\n"
                   "sub_graph.__dict__\nop.node.__dict__\n")
    assert ir_dict_uses(mod, tmp_path) == ["m.py:1 node.__dict__", "m.py:3 graph.__dict__",
                                           "m.py:4 call.__dict__", "m.py:5 n.__dict__",
                                           "m.py:7 sub_graph.__dict__", "m.py:8 node.__dict__"]


def test_ir_objects_have_no_dict() -> None:
    """``__slots__`` on Value, Node, Block and Graph: an attribute the IR does not declare
    cannot be set on them, by any layer."""
    from scriptmod.ir.graph import Graph
    from scriptmod.ir.types import IntType
    g = Graph()
    x = g.add_input(IntType, "n")
    node = g.create("sm::neg", [x], [IntType])
    for obj in (g, g.block, node, x):
        assert not hasattr(obj, "__dict__"), type(obj).__name__
        with pytest.raises(AttributeError):
            obj.callee = g
