"""``FrontendError``: what the script frontend cannot compile, shown at the user's code.

    >>> src = SourceRange("model.py", 12, "    y = x.unknown(3)", 8, 17)
    >>> print(FrontendError("Tensor has no method 'unknown'", src))
    Tensor has no method 'unknown':
      File "model.py", line 12
        y = x.unknown(3)
            ~~~~~~~~~ <--- HERE
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceRange:
    """Where a construct is: file, 1-based line, the line's text, and columns [start, end)."""

    filename: str
    line: int
    text: str
    start: int
    end: int

    def highlight(self) -> str:
        """The line, dedented, with ``~`` under the range (TorchScript's layout)."""
        stripped = self.text.lstrip()
        indent = len(self.text) - len(stripped)
        start = max(self.start - indent, 0)
        end = max(self.end - indent, start + 1)
        return (f'  File "{self.filename}", line {self.line}\n    {stripped.rstrip()}\n'
                f"    {' ' * start}{'~' * (end - start)} <--- HERE")


class FrontendError(RuntimeError):
    """Scripted code the frontend refuses: an unsupported construct, a type error, an
    undefined name. The message names the problem, then the user's file, line and a caret
    under the expression (``source``: a ``SourceRange`` or None)."""

    def __init__(self, message: str, source: SourceRange | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{message}:\n{source.highlight()}" if source is not None else message)
