"""``import scriptmod`` loads only what running a model needs: heavy optional libraries
(networkx for graph views, scipy, matplotlib, torch, onnx) are imported on first use. Checked in a fresh
interpreter; no time is asserted (a timed assertion is a flaky test)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAZY = ("networkx", "scipy", "matplotlib", "torch", "onnx", "onnxruntime", "ray", "einops")


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after running ``code`` in a new interpreter, with each
    top-level package's name too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    script = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = json.loads(proc.stdout.splitlines()[-1])
    return set(names) | {name.split(".")[0] for name in names}


def test_import_scriptmod_leaves_heavy_libraries_unloaded() -> None:
    loaded = modules_after("import scriptmod")
    assert "scriptmod" in loaded
    assert not loaded & set(LAZY), sorted(loaded & set(LAZY))


def test_networkx_is_loaded_when_a_graph_view_is_first_built() -> None:
    code = ("import sys, scriptmod\n"
            "from scriptmod.ir import nxview, parse\n"
            "assert 'networkx' not in sys.modules\n"
            "g = parse('graph(%x : Float(4)):\\n  %y : Float(4) = sm::neg(%x)\\n  return (%y)\\n')\n"
            "assert nxview.to_networkx(g).number_of_nodes() == 1")
    assert "networkx" in modules_after(code)
