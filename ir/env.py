"""The ``SCRIPTMOD_*`` environment variables whose values are numbers, flags or choices, parsed
in one place, each where it is first used, with one message shape for a bad value:
``NAME: expected <what>, got '<value>'`` (a ``ValueError``). An unset or empty variable
gives the default.

    >>> import os
    >>> os.environ["SCRIPTMOD_EXAMPLE"] = "inf"
    >>> size_mb("SCRIPTMOD_EXAMPLE", 1024)
    Traceback (most recent call last):
    ...
    ValueError: SCRIPTMOD_EXAMPLE: expected a finite size in MiB >= 0, got 'inf'
    >>> del os.environ["SCRIPTMOD_EXAMPLE"]; size_mb("SCRIPTMOD_EXAMPLE", 2)
    2097152
"""
from __future__ import annotations

import math
import os
from typing import Sequence

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def _bad(name: str, what: str, raw: str) -> ValueError:
    return ValueError(f"{name}: expected {what}, got {raw!r}")


def integer(name: str, default: int, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (``SCRIPTMOD_NUM_THREADS``)."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, f"an integer >= {minimum}", raw) from None
    if value < minimum:
        raise _bad(name, f"an integer >= {minimum}", raw)
    return value


def size_mb(name: str, default_mb: int) -> int:
    """A size in MiB (a finite number >= 0, fractions allowed), in bytes."""
    raw = _raw(name)
    if not raw:
        return default_mb << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not 0 <= mb < math.inf:                # nan and inf too: int(inf) overflows
        raise _bad(name, "a finite size in MiB >= 0", raw)
    return int(mb * (1 << 20))


def flag(name: str, default: bool) -> bool:
    """On or off: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case)."""
    raw = _raw(name).lower()
    if not raw:
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    raise _bad(name, f"one of {list(_TRUE + _FALSE)}", _raw(name))


def choice(name: str, choices: Sequence[str], default: str) -> str:
    """One of ``choices`` (``SCRIPTMOD_GEMM=own``)."""
    raw = _raw(name)
    if not raw:
        return default
    if raw not in choices:
        raise _bad(name, f"one of {list(choices)}", raw)
    return raw
