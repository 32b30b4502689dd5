"""Debug output on the standard ``logging`` module: one logger per topic under the
``scriptmod`` logger (``scriptmod.fusion``, ``scriptmod.codegen``, ...; ``cache`` is
``scriptmod.codegen.cache``, so ``codegen`` includes it).

Three ways to turn a topic on, all ending in ordinary logger levels:

- ``SCRIPTMOD_LOG=fusion,codegen`` (``all``: every topic; ``help``: the topics, listed on
  stderr). Read again whenever its value changes, so tests may set it with monkeypatch.
  An unknown topic raises ``ValueError`` naming it and the valid ones (at ``import
  scriptmod`` when the variable is set before).
- ``scriptmod.set_logs(fusion=True)`` (as ``torch._logging.set_logs``; replaces the setting).
- The standard API: ``logging.getLogger("scriptmod.fusion").setLevel(logging.DEBUG)`` and
  a handler of your own (or pytest's ``caplog``).

The first two print ``[scriptmod:<topic>] message`` lines to stderr through one handler
on the ``scriptmod`` logger, which then stops propagating to the root logger (so a
handler of the user's own there does not print every line twice); nothing is added to
the root logger and ``logging.basicConfig`` is never called.

    >>> if enabled("passes"):           # skip building the message when the topic is off
    ...     log("passes", "after fold_constants: 3 nodes")
"""
from __future__ import annotations

import difflib
import logging
import os
import sys

ENV_VAR = "SCRIPTMOD_LOG"
ROOT = "scriptmod"

# topic -> (logger name under ROOT, what it shows); ``SCRIPTMOD_LOG=help`` prints this table
TOPICS: dict[str, tuple[str, str]] = {
    "passes": ("passes", "the graph after each pass of a pipeline, and the pass's time"),
    "fusion": ("fusion", "each fusion group (its ops and the module paths they came from), "
                         "why a node or an edge was not fused, each kernel built"),
    "codegen": ("codegen", "what runs as native code and which node splits it, the generated "
                           "Python program and native segments, LLVM compile times"),
    "cache": ("codegen.cache", "kernel cache entries found unusable (rebuilt) or not writable"),
    "autograd": ("autograd", "whether a compiled module's backward is compiled (saved values, "
                             "bytes) or runs op by op, and why"),
    "script": ("script", "scripted calls left to run as Python calls (arguments known only at "
                         "run time)"),
    "recompiles": ("recompiles", "each new specialization of a compiled method and why (the "
                                 "argument, dim and sizes; dtype, hooks, fusion, module state; "
                                 "concrete or symbolic), and each one the LRU evicts"),
    "errors": ("errors", "the IR line of each node whose op failed during a compiled call (the "
                         "error's message names the op and your source line)"),
}
_SPECIAL = {"all": "every topic above", "help": "this list (printed to stderr; the program "
                                                "goes on)"}


def logger(topic: str) -> logging.Logger:
    """The logger of ``topic`` (``scriptmod.<topic>``)."""
    entry = TOPICS.get(topic)
    if entry is None:
        raise ValueError(_unknown(topic, "log topic"))
    return logging.getLogger(f"{ROOT}.{entry[0]}")


def enabled(topic: str) -> bool:
    """Whether ``topic``'s debug messages go anywhere; test it before building a costly one."""
    _sync_with_env()
    return logger(topic).isEnabledFor(logging.DEBUG)


def log(topic: str, message: str) -> None:
    """Log ``message`` at DEBUG level on ``topic``'s logger (when it is enabled)."""
    if enabled(topic):
        logger(topic).debug(message)


def set_logs(**topics: bool | int) -> None:
    """Turn topics on (``True``: DEBUG, or a ``logging`` level) or off, replacing the
    current setting (``SCRIPTMOD_LOG``'s or an earlier call's); ``set_logs()`` turns every
    topic off. ``all=True`` turns every topic on; ``help=True`` lists them on stderr.

        >>> set_logs(fusion=True)
        >>> enabled("fusion"), enabled("codegen")
        (True, False)
        >>> set_logs()
    """
    levels: dict[str, int] = {}
    for name, on in topics.items():
        if name not in TOPICS and name not in _SPECIAL:
            raise ValueError(_unknown(name, "set_logs(): argument"))
        if name == "help":
            if on:
                sys.stderr.write(help_text())
        elif on is True:
            levels[name] = logging.DEBUG
        elif on is not False and isinstance(on, int):
            levels[name] = on
        elif on is not False:
            raise TypeError(f"set_logs(): argument '{name}' must be a bool or a logging level "
                            f"(int), got {type(on).__name__}")
    _sync_with_env()                    # the variable's setting is replaced, not re-applied
    _apply(levels)


def help_text() -> str:
    """The topics of ``SCRIPTMOD_LOG``, one line each."""
    rows = {**{t: d for t, (_, d) in TOPICS.items()}, **_SPECIAL}
    width = max(map(len, rows))
    lines = [f"{ENV_VAR}=topic1,topic2 turns on scriptmod's debug output for these topics:"]
    lines += [f"  {t.ljust(width)}  {d}" for t, d in rows.items()]
    return "\n".join(lines) + "\n"


# ---- configuration --------------------------------------------------------------------------

class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a record arrives (pytest's capsys, a
    redirect made after import)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:               # noqa: BLE001  (logging's own convention)
            self.handleError(record)


class _TopicFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"[{ROOT}:{record.name.rpartition('.')[2]}] {record.getMessage()}"


_HANDLER = _StderrHandler()
_HANDLER.setFormatter(_TopicFormatter())
_ours: list[logging.Logger] = []       # loggers whose level this module set
_env_applied: list[str] = [""]         # the SCRIPTMOD_LOG value in effect


def _sync_with_env() -> None:
    raw = os.environ.get(ENV_VAR, "")
    if raw != _env_applied[0]:
        levels = _parse(raw)            # raises on an unknown topic, every time it is read
        _env_applied[0] = raw
        _apply(levels)


def _parse(raw: str) -> dict[str, int]:
    names = [t.strip().lower() for t in raw.split(",") if t.strip()]
    for name in names:
        if name not in TOPICS and name not in _SPECIAL:
            raise ValueError(_unknown(name, f"{ENV_VAR}: topic"))
    if "help" in names:
        sys.stderr.write(help_text())
    return {n: logging.DEBUG for n in names if n != "help"}


def _apply(levels: dict[str, int]) -> None:
    for lg in _ours:
        lg.setLevel(logging.NOTSET)
    _ours.clear()
    for name, level in levels.items():
        lg = logging.getLogger(ROOT) if name == "all" else logger(name)
        lg.setLevel(level)
        _ours.append(lg)
    root = logging.getLogger(ROOT)
    if levels:
        if _HANDLER not in root.handlers:
            root.addHandler(_HANDLER)
        root.propagate = False
    else:
        root.removeHandler(_HANDLER)
        root.propagate = True


def _unknown(name: str, what: str) -> str:
    valid = sorted(TOPICS) + sorted(_SPECIAL)
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{what} {name!r} is not a scriptmod log topic{hint}; valid topics: {', '.join(valid)}"


logging.getLogger(ROOT).addHandler(logging.NullHandler())   # a library's default: no output
_sync_with_env()                        # a bad SCRIPTMOD_LOG fails at import, help prints once
