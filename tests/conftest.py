"""Shared test setup: the op table (``tests/scriptmod/op_cases.py``) is importable as
``op_cases`` from every suite; hypothesis runs few examples so the suites stay fast."""
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent, _HERE / "scriptmod"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

settings.register_profile("scriptmod", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("scriptmod")


def pytest_pycollect_makeitem(collector, name, obj):
    """tests/test_doctests.py's DOCSTRING_EXAMPLES becomes one doctest collector per module of
    the installed packages, imported by its real ``scriptmod.*`` name."""
    if name == "DOCSTRING_EXAMPLES" and collector.path.name == "test_doctests.py":
        return obj(collector)
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    # here, not in tests/fuzz/conftest.py: ``pytest tests --long`` must know the option too
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long fuzz campaigns (tests/fuzz) and print their figures")
