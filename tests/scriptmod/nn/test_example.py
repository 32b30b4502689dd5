"""``examples/train_mlp.py`` runs as a script (shortened through its environment variable)
and reaches the accuracy it states."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_mlp.py"


def test_train_mlp_example_reaches_its_stated_accuracy() -> None:
    env = dict(os.environ, SCRIPTMOD_EXAMPLE_EPOCHS="25")
    done = subprocess.run([sys.executable, str(EXAMPLE), "--no-progress"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"final test accuracy: ([\d.]+)%", done.stdout)
    assert match, done.stdout
    assert float(match.group(1)) >= 95.0
