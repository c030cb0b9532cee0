"""Shared console handling: colours, one-line errors, and the debug switch."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, TextIO, TypeVar

import typer

if TYPE_CHECKING:  # Rich only where something is drawn (not for --json: `msmon validate --json` stays fast)
    from rich.console import Console

from msmon.errors import ExitCode, MsmonError, describe

F = TypeVar("F", bound=Callable[..., object])

#: Said by every CONFIG argument that takes a shipped quickstart's name (msmon.config.loader.quickstart_names;
#: spelled out so that `msmon --help` imports no config code, and checked by a test).
QUICKSTART_NAMES = "quickstart, quickstart-moe, quickstart-qwen3"
CONFIG_HELP = f"mindformers training YAML with a monitor_config section, or a quickstart by name: {QUICKSTART_NAMES}."


def color_enabled(stream: TextIO | None = None) -> bool:
    """Colours only on a terminal and when NO_COLOR is unset or empty (no-color.org)."""
    stream = stream or sys.stdout
    return not os.environ.get("NO_COLOR") and bool(getattr(stream, "isatty", lambda: False)())


def stdout_console() -> Console:
    """Tables on a terminal; unwrapped lines when piped, so each finding stays one greppable line."""
    from rich.console import Console

    terminal = bool(getattr(sys.stdout, "isatty", lambda: False)())
    return Console(no_color=not color_enabled(sys.stdout), highlight=False, soft_wrap=not terminal)


def wide_console() -> Console:
    """The stdout console; when piped it is wide enough that tables are not cut."""
    console = stdout_console()
    if not console.is_terminal:
        console.width = 240
    return console


def fail(message: str, hint: str = "", exit_code: int = ExitCode.INVALID) -> typer.Exit:
    """Print ``error: message (hint)`` on one stderr line and return the Exit to raise."""
    line = f"error: {message}" + (f" ({hint})" if hint else "")
    print(line, file=sys.stderr)
    return typer.Exit(int(exit_code))


def handle_errors(func: F) -> F:
    """Turn MsmonError and unexpected exceptions into one stderr line and a documented exit code."""

    @wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except MsmonError as exc:
            if os.environ.get("MSMON_DEBUG"):
                traceback.print_exc()
            raise fail(exc.message, exc.hint, exc.exit_code) from None
        except KeyboardInterrupt:
            raise typer.Exit(ExitCode.INTERRUPTED_SIGINT) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
            if os.environ.get("MSMON_DEBUG"):
                traceback.print_exc()
            raise fail(
                f"internal error: {describe(exc)}",
                "set MSMON_DEBUG=1 for the traceback and report it",
            ) from None

    return wrapper  # type: ignore[return-value]
