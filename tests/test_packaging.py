"""``ir/``, ``codegen/`` and ``runtime/`` install as ``scriptmod.ir``, ``scriptmod.codegen`` and
``scriptmod.runtime``: no generic top-level names in a user's site-packages, and a user's own
``runtime.py`` can never shadow them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"scriptmod": "scriptmod", "ir": "scriptmod.ir", "codegen": "scriptmod.codegen",
           "runtime": "scriptmod.runtime"}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_under_the_scriptmod_namespace() -> None:
    cfg = _config()
    assert cfg["package-dir"] == {v: k for k, v in FOLDERS.items()}
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert sorted(found) == sorted(cfg["packages"])
    assert all(p.split(".")[0] == "scriptmod" for p in cfg["packages"])


HOSTILE = 'raise ImportError("the user\'s own {name}.py was imported by scriptmod")\n'


def test_a_users_runtime_ir_and_codegen_modules_do_not_shadow_ours(tmp_path: Path) -> None:
    for name in ("runtime", "ir", "codegen"):
        (tmp_path / f"{name}.py").write_text(HOSTILE.format(name=name))
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import scriptmod as sm
        from scriptmod import nn
        m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)).eval()
        x = sm.randn(3, 4)
        with sm.no_grad():
            tr = sm.jit.trace(m, x)
            assert np.allclose(tr(x).numpy(), m(x).numpy(), atol=1e-5)
        leaked = sorted(n for n in sys.modules if n.split(".")[0] in ("ir", "codegen", "runtime"))
        assert not leaked, leaked
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
