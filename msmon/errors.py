"""Exit codes and the one error type the command layer turns into a one-line message."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented process exit codes (README and docs/cli.md list them)."""

    OK = 0
    INVALID = 1  # invalid input: a config with an error finding, a missing or unreadable file
    USAGE = 2  # command-line usage error (Typer/Click's own code)
    TRAINING_FAILED = 3  # the training raised or a rank exited non-zero
    STOPPED_BY_MONITOR = 4  # a health detector with action `stop` ended the run gracefully
    BOARD_FAILED = 5  # the board could not be started or stopped
    CURVES_PART = 6  # `msmon compare --assert`: the run leaves its reference (the first step and metric named)
    INTERRUPTED_SIGINT = 130
    INTERRUPTED_SIGTERM = 143


class MsmonError(Exception):
    """An expected failure: shown as one line plus a hint, never as a traceback."""

    def __init__(self, message: str, hint: str = "", exit_code: int = ExitCode.INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = int(exit_code)

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message that says something: separator lines and MindSpore's section
    titles (``- Kernel select failed:`` between two rules of dashes) are skipped, so a kernel failure reads
    ``Unsupported op [FlashAttentionScore] on CPU, ...``."""
    for line in str(exc).strip().splitlines():
        text = line.strip()
        if any(ch.isalnum() for ch in text) and not (text.startswith("- ") and text.endswith(":")):
            return text
    return type(exc).__name__


def describe(exc: BaseException) -> str:
    """An exception as one line: ``Type: first meaningful line of the message`` (an MsmonError is already
    written for the user: its message and hint)."""
    if isinstance(exc, MsmonError):
        return str(exc)
    line = first_line(exc)
    name = type(exc).__name__
    return name if line == name else f"{name}: {line}"
