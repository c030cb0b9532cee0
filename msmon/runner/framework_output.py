"""The training's console output read line by line: the level a line announces, the framework's warnings and
errors counted, and the quiet rule (only msmon's own lines on the screen).

mindformers logs two INFO lines per step and a progress bar, prints pages of ``ParallelConfig`` attributes and
deprecation warnings at start; MindSpore's C++ layer writes GLOG lines. The screen shows the same numbers better
(the live panel, the plain lines): by default none of it is shown, all of it is in ``logs/console.log``, and the
ending says how many warnings and errors it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

WARNING, ERROR = 30, 40
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


MSMON_PREFIX = "msmon:"


@dataclass
class FrameworkCount:
    """How many warnings and errors the captured lines announce (a traceback is one error, also under an error
    line that introduces it: counted once)."""

    warnings: int = 0
    errors: int = 0
    _last_error: bool = False

    def add(self, text: str) -> None:
        """Count the complete lines of ``text``."""
        for line in text.splitlines():
            if line.startswith(TRACEBACK):
                self.errors += not self._last_error
                self._last_error = True
                continue
            level = level_of(line)
            if level is None:
                continue  # continuation lines belong to the message above them
            self._last_error = level >= ERROR
            self.errors += level >= ERROR
            self.warnings += WARNING <= level < ERROR


def msmon_lines_only(show: Callable[[str], None]) -> Callable[[str], None]:
    """``show``, given only msmon's own lines of complete ``text`` (the quiet rule)."""

    def quiet(text: str) -> None:
        if kept := "".join(line for line in text.splitlines(keepends=True) if line.startswith(MSMON_PREFIX)):
            show(kept)

    return quiet
