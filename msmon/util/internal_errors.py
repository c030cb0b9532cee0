"""msmon's own failures: never fatal to the training, never silent.

A part of msmon that breaks (a TypeError in the disk guard, a listener, the rank watcher) calls ``report``: one
warning per place on the console and in the process's log, its traceback in the log only, and a count that the
rank result and run.json carry (``internal_errors``) and the ending names.
"""

from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass

from msmon.errors import describe

logger = logging.getLogger("msmon")


@dataclass(frozen=True)
class InternalErrors:
    """How many of msmon's own failures a process saw, and the first one (``where: Type: message``)."""

    count: int = 0
    first: str | None = None

    def __add__(self, other: InternalErrors) -> InternalErrors:
        return InternalErrors(self.count + other.count, self.first or other.first)


_lock = threading.Lock()
_seen: dict[str, int] = {}
_first: str | None = None


def report(where: str, exc: BaseException) -> None:
    """Count one failure of msmon's ``where``; the first at each place is logged at warning with its traceback."""
    global _first
    with _lock:
        first_here = where not in _seen
        _seen[where] = _seen.get(where, 0) + 1
        if _first is None:
            _first = f"{where}: {describe(exc)}"
    if first_here:
        logger.warning("msmon: internal error in %s: %s (training continues; traceback in the log)", where,
                       describe(exc))
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        logger.warning("msmon: traceback of the internal error in %s:\n%s", where, text.rstrip(),
                       extra={"file_only": True})


def seen() -> InternalErrors:
    """This process's internal errors so far."""
    with _lock:
        return InternalErrors(sum(_seen.values()), _first)


def forget() -> None:
    """Start counting again (a test, or a new run in the same process)."""
    global _first
    with _lock:
        _seen.clear()
        _first = None
