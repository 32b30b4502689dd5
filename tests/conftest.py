"""Shared test setup: the op table (``tests/scriptmod/op_cases.py``) is importable as
``op_cases`` from every suite; hypothesis runs few examples so the suites stay fast; every
module a test compiles is saved/loaded and its ``.code`` run (``module_checks``, off with
``SCRIPTMOD_SUITE_CHECKS=0``)."""
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent, _HERE / "scriptmod"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# Under pytest-xdist (``-n``) each worker keeps its own kernel cache folder, so a test that
# counts the kernels its process compiles (or loads from disk) sees what a serial run sees,
# never a kernel another worker compiled a moment before.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    from scriptmod.runtime.kernel_cache import cache_dir as _cache_dir
    os.environ["SCRIPTMOD_CACHE_DIR"] = str(_cache_dir() / f"xdist-{_WORKER}")

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


def pytest_configure(config: pytest.Config) -> None:
    from tests import module_checks
    config.addinivalue_line("markers", f"{module_checks.MARKER}(reason): the suite checks of "
                            "tests/module_checks.py do not apply to the modules it makes")
    if module_checks.enabled():
        config.pluginmanager.register(module_checks.SuiteChecks(), "scriptmod-suite-checks")


@pytest.fixture
def logs_off(monkeypatch: pytest.MonkeyPatch):
    """Every ``SCRIPTMOD_LOG`` topic off before and after the test (the variable unset too)."""
    from scriptmod.ir import log as irlog
    monkeypatch.delenv(irlog.ENV_VAR, raising=False)
    irlog.set_logs()
    yield
    monkeypatch.delenv(irlog.ENV_VAR, raising=False)
    irlog.set_logs()


@pytest.fixture(autouse=True)
def _torch_oracle_on_one_thread() -> None:
    """PyTorch, where a test has imported it as an oracle, runs on one thread: on the tiny
    tensors the oracle tests use, its thread pool only contends for the cores (a torch
    optimizer run: 0.7 s on its default threads, 0.02 s on one)."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "get_num_threads", None) and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
