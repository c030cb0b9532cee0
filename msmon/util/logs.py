"""msmon's log lines: one logger ("msmon"), one console format, one file format.

Library code only logs (``logging.getLogger("msmon")``); the command layer and the training process
attach the handlers with these functions.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TextIO, TypeVar

logger = logging.getLogger("msmon")

FILE_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "file_only", False)


def console_handler(
    level: int = logging.WARNING, prefix: str = "", stream: TextIO | None = None
) -> logging.StreamHandler[TextIO]:
    """A stderr handler printing ``<prefix><message>``; records logged with ``extra={"file_only": True}``
    (tracebacks) stay out of the terminal."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}%(message)s"))
    handler.setLevel(level)
    handler.addFilter(_not_file_only)
    return handler


def file_handler(path: Path, prefix: str = "") -> logging.Handler:
    """A handler appending ``<time> <LEVEL> <prefix><message>`` lines to ``path``."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FILE_FORMAT.replace("%(message)s", f"{prefix}%(message)s")))
    handler.setLevel(logging.INFO)
    return handler


H = TypeVar("H", bound=logging.Handler)


def attach(handler: H) -> H:
    """Add ``handler`` to msmon's logger, which then passes INFO and above to its handlers."""
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def detach(handler: logging.Handler) -> None:
    """Remove and close ``handler``."""
    logger.removeHandler(handler)
    handler.close()


def has_console_handler() -> bool:
    """Whether msmon's logger already prints to a stream (a second one would double every line)."""
    return any(type(h) is logging.StreamHandler for h in logger.handlers)


def tolerate_unwritable_log_files() -> None:
    """A log file that cannot be written (a full disk, its directory removed) stops with one line on stderr
    instead of a "--- Logging error ---" traceback for every later record. It applies to every FileHandler of
    this process, msmon's and mindformers' (the runner calls it once, at start)."""
    logging.FileHandler.handleError = _stop_on_write_error  # type: ignore[method-assign, assignment]


def _stop_on_write_error(handler: logging.Handler, record: logging.LogRecord) -> None:
    error = sys.exc_info()[1]
    if not isinstance(error, OSError):
        logging.Handler.handleError(handler, record)
        return
    handler.setLevel(logging.CRITICAL + 1)  # no further attempts
    name = getattr(handler, "baseFilename", "a log file")
    try:
        sys.stderr.write(f"msmon: cannot write {name} ({error.strerror or error}); its later lines are not kept\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
