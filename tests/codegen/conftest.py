"""Test setup for codegen: repository root on sys.path, a private kernel cache dir."""
from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("SCRIPTMOD_CACHE_DIR", tempfile.mkdtemp(prefix="sm-test-cache-"))
