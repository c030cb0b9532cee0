"""`msmon board start|status|stop`: run MindInsight or TensorBoard for the runs, and keep track of it."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, wide_console
from msmon.errors import ExitCode, MsmonError

if TYPE_CHECKING:
    from msmon.ops.board import BoardHandle

board_app = typer.Typer(help="Start, list and stop boards (MindInsight or TensorBoard).", no_args_is_help=True)


def _print_tail(exc: MsmonError) -> None:
    tail = getattr(exc, "log_tail", [])
    if tail:
        print("last lines of the board's log:", file=sys.stderr)
        for line in tail:
            print(f"  | {line}", file=sys.stderr)


@board_app.command("start")
@handle_errors
def start(
    path: Path = typer.Argument(None, help="A save_dir (default ./monitor_logs) or a training YAML (its save_dir)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port to serve on; 0 picks a free one."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; other than loopback, others can reach it."),
    backend: str = typer.Option("mindinsight", "--backend", help="mindinsight or tensorboard."),
    detach: bool = typer.Option(False, "--detach", help="Leave the board running and record it (msmon board stop)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the board's API to answer."),
) -> None:
    """Start a board on PATH, wait until its API answers and print its URL (Ctrl-C stops it)."""
    from msmon.ops.board import BoardError, start_board
    from msmon.util import logs

    if not logs.has_console_handler():
        logs.attach(logs.console_handler(logging.INFO))
    try:
        handle = start_board(path, port=port, host=host, backend=backend, detach=detach, timeout_s=timeout)
    except BoardError as exc:
        _print_tail(exc)
        raise
    record = handle.record
    print(f"{record.backend} serves {record.directory}")
    print(f"  {handle.url}")
    if handle.reused:
        print(f"  already running (pid {handle.pid}); stop it with: msmon board stop --port {handle.port}")
        return
    print(f"  pid {handle.pid}, log {record.log}")
    if detach:
        print(f"  detached; stop it with: msmon board stop --port {handle.port}")
        return
    _foreground(handle)


def _foreground(handle: BoardHandle) -> None:
    """Wait until Ctrl-C (exit 0) or SIGTERM (exit 143) and stop the board; exit 5 if it dies on its own.

    The signal handlers only note the signal: an exception raised from a handler could land anywhere, in the middle
    of the process table scan or of stopping the board itself, and leave the board running. Nor may a handler take
    a lock: ``threading.Event.set()`` from a handler that interrupts this thread inside ``Event.wait()`` waits for
    the lock the thread itself holds, forever (it hung a CI run). So the loop polls the list."""
    from msmon.ops.board import BoardError

    received: list[int] = []

    def note(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        print("  press Ctrl-C to stop", flush=True)
        while not received:
            time.sleep(0.25)
            if not received and not handle.alive():
                raise BoardError(f"the board on port {handle.port} exited on its own",
                                 f"see its log: {handle.record.log}")
    finally:
        handle.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(f"board on port {handle.port} stopped")
    raise typer.Exit(ExitCode.INTERRUPTED_SIGTERM if received[0] == signal.SIGTERM else ExitCode.OK)


@board_app.command("status")
@handle_errors
def status(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the boards msmon started with --detach: pid, port, directory, healthy or not."""
    from msmon.ops.board import board_status

    rows = board_status()
    if as_json:
        print(json.dumps([{**asdict(r), "state": state} for r, state in rows], indent=2))
        return
    if not rows:
        print("no board started by msmon is running (msmon board start PATH --detach starts one)")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("port", "backend", "pid", "state", "url", "directory", "started"):
        table.add_column(column)
    colours = {"healthy": "green", "not answering": "yellow", "gone": "red"}
    for record, state in rows:
        table.add_row(
            str(record.port), record.backend, str(record.pid), f"[{colours[state]}]{state}[/]",
            record.url, record.directory, record.started[:19].replace("T", " "),
        )
    wide_console().print(table)


@board_app.command("stop")
@handle_errors
def stop(
    port: int = typer.Option(None, "--port", min=1, max=65535, help="Stop the board on this port."),
    all_boards: bool = typer.Option(False, "--all", help="Stop every board msmon started."),
) -> None:
    """Stop a board msmon started (also when its process is already gone)."""
    from msmon.ops.board import stop_record
    from msmon.ops.board_state import load_records

    if port is not None and all_boards:
        raise MsmonError("--port and --all exclude each other", "pass one of them", ExitCode.USAGE)
    rows = load_records()
    if port is not None:
        rows = [r for r in rows if r.port == port]
        if not rows:
            raise MsmonError(
                f"no board started by msmon on port {port}",
                f"msmon board status lists them; one started by hand stops with: mindinsight stop --port {port}",
                ExitCode.BOARD_FAILED,
            )
    elif not rows:
        print("no board started by msmon is recorded")
        return
    elif len(rows) > 1 and not all_boards:
        ports = ", ".join(str(r.port) for r in rows)
        raise MsmonError(f"{len(rows)} boards are running (ports {ports})", "pass --port P or --all", ExitCode.USAGE)
    for record in rows:
        if stop_record(record):
            print(f"stopped the {record.backend} board on port {record.port} (pid {record.pid})")
        else:
            print(f"the board on port {record.port} was already gone; removed it from the list")


def register(app: typer.Typer) -> None:
    app.add_typer(board_app, name="board")
