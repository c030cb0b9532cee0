"""Which lines of the training's console output a quiet terminal shows above the live panel.

mindformers logs two INFO lines per step (the step line and a progress bar) and prints pages of
``ParallelConfig`` attributes at start; MindSpore's C++ layer writes GLOG lines. Above the panel (which shows
the same numbers better) only warnings and errors are kept, with what belongs to them (a traceback, the
indented lines under a warning), plus msmon's own lines. Everything still goes to ``logs/console.log``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

WARNING = 30
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "EXCEPTION": 40, "CRITICAL": 50}
#: Python logging's usual format, mindformers' included: ``2026-11-30 17:23:06,343 - name[file:1] - INFO - ...``
_PYTHON_LOG = re.compile(r" - (DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|EXCEPTION) - ")
#: MindSpore's C++ (GLOG) lines: ``[WARNING] ME(11970:140153024560000,MainProcess):2026-11-30-17:23:06 ...``
_GLOG = re.compile(r"^\[(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|EXCEPTION)\]")
#: ``warnings.warn`` output: ``/path/file.py:12: UserWarning: ...``
_PY_WARNING = re.compile(r"^\S.*:\d+: \w*(Warning|Error): ")
TRACEBACK = "Traceback (most recent call last):"


def level_of(line: str) -> int | None:
    """The log level a line announces, or None for a line that announces none."""
    if match := _GLOG.match(line) or _PYTHON_LOG.search(line[:200]):
        return LEVELS[match.group(1)]
    if _PY_WARNING.match(line):
        return WARNING
    return None


class QuietFilter:
    """``keep(line)``: warnings and errors, their continuation lines, tracebacks and msmon's lines."""

    def __init__(self) -> None:
        self._showing = False  # whether the last line that announced a level was shown
        self._in_traceback = False

    def keep(self, line: str) -> bool:
        if line.startswith(TRACEBACK):
            self._in_traceback = self._showing = True
            return True
        if self._in_traceback:
            if line and not line[0].isspace():  # the exception line closes the traceback
                self._in_traceback = False
            return True
        if line.startswith("msmon:"):
            return True
        level = level_of(line)
        if level is not None:
            self._showing = level >= WARNING
            return self._showing
        return self._showing and line[:1].isspace()  # an indented line belongs to the message above it

    def filter(self, text: str) -> str:
        """The kept lines of ``text`` (complete lines, each ending with a newline)."""
        return "".join(line for line in text.splitlines(keepends=True) if self.keep(line.rstrip("\n")))

    def wrap(self, show: Callable[[str], None]) -> Callable[[str], None]:
        """``show``, given only the kept lines."""

        def quiet(text: str) -> None:
            if kept := self.filter(text):
                show(kept)

        return quiet
