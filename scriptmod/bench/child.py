"""Running a measurement in a child Python process and reading back its one JSON line.

Cold compiles, warm starts and the PyTorch columns are measured in child processes: a
fresh process holds no in-memory kernels, no warmed-up imports and no PyTorch worker
threads that would spin on a core the parent's next timing needs. The child prints one
JSON object as its last line of standard output; anything else it prints is ignored.

    >>> run_child(["-c", "print('noise'); print('{\\"x\\": 1}')"], timeout=60)
    {'x': 1}
    >>> run_child(["-c", "raise SystemExit(3)"], timeout=60)["error"]
    'child exited with 3: no output'
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, with this checkout first on ``PYTHONPATH`` (so that the
    child imports the same scriptmod) and ``extra`` on top."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def run_child(args: list[str], timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python *args`` in its own session, killed with everything it started after
    ``timeout`` seconds; its last stdout line parsed as JSON, or ``{"error": why}``."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(env),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)      # the child's session: its workers too
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child exited with {proc.returncode}: {tail[:200]}"}
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"child printed no JSON result: {lines[-1][:200]}"}
    return result if isinstance(result, dict) else {"error": "child printed no JSON object"}
