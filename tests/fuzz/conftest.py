"""The fuzz suites: a CI-sized run by default (about a minute in all), ``pytest tests/fuzz
--long`` for the campaigns whose figures go into the README's "Reliability" section.

A suite asks for the ``fuzz_long`` fixture (a bool) and sizes itself from it; the seed of a
run is ``SCRIPTMOD_FUZZ_SEED`` (default 0), so a failure reproduces with the same seed."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def fuzz_long(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--long"))      # declared in tests/conftest.py


@pytest.fixture(scope="session")
def fuzz_seed() -> int:
    return int(os.environ.get("SCRIPTMOD_FUZZ_SEED", "0"))
