"""Helpers shared by the differential tables: each takes the library module ``L``."""
from __future__ import annotations

from typing import Any, Callable

def F(L: Any) -> Any:
    return L.nn.functional


def t(L: Any, *s: int, dtype: Any = None) -> Any:
    return L.ones(*s) if dtype is None else L.ones(*s, dtype=dtype)


def i64(L: Any, vals: Any) -> Any:
    return L.tensor(vals, dtype=L.int64)


def _raised(fn: Callable[[Any], Any], L: Any) -> BaseException | None:
    try:
        fn(L)
    except Exception as e:   # noqa: BLE001 - the exception is the result under test
        return e
    return None

