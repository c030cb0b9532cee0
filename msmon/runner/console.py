"""The training process's terminal output: one rule (``show_progress``), and the capture it needs.

The rule (docs/run.md, "The terminal"): when neither stdout nor stderr is a terminal, the output is a log: plain
progress lines on stdout, every framework line as written. On a terminal: the live panel (``--plain``: plain
progress lines); above it or between them only the framework's warnings, errors and tracebacks and msmon's own
lines (``--framework-logs``: every line); everything in ``logs/console.log``, which the first line names.
``NO_COLOR`` (set and not empty, no-color.org) removes colour and nothing else.

While the terminal shows progress the output is captured once, at the file descriptors.

File descriptors 1 and 2 (Python's prints and logging, mindformers' handlers, MindSpore's C++ output) each
go into a pipe of their own: writers on one descriptor never split the other's lines (a long multi-line log
record and a C++ warning from another thread would otherwise interleave). One reader thread per pipe
appends every complete line to a log file and hands it to that stream's ``show`` (the panel prints it above
itself). The panel draws on a duplicate of the original terminal descriptor. Nothing replaces
``sys.stdout`` or repoints logging handlers.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from msmon.runner.framework_output import QuietFilter
from msmon.runner.protocol import ViewOptions
from msmon.util import internal_errors
from msmon.view.live import LiveView, open_panel
from msmon.view.progress import PlainView

READ_SIZE = 65536
Show = Callable[[str], None]


class ConsoleCapture:
    """``terminal_stream()`` for the panel, ``start(make_show)`` redirects fds 1 and 2, ``stop()`` gives them back."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        self._log: BinaryIO | None = None
        self._log_lock = threading.Lock()
        self.terminal: TextIO | None = None

    def terminal_stream(self) -> TextIO:
        """A text stream on the terminal (stdout's, else stderr's) that stays there while the fds are captured."""
        if self.terminal is None:
            fd = os.dup(1 if os.isatty(1) else 2)
            self.terminal = io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0), encoding="utf-8", errors="replace",
                                             line_buffering=True)
        return self.terminal

    def start(self, make_show: Callable[[], Show]) -> None:
        """Redirect fds 1 and 2, each into its own pipe; each reader hands its complete lines to its own
        ``make_show()`` (a filter keeps its state per stream)."""
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        except OSError:  # a full disk: the terminal still gets the lines
            self._log = None
        self._saved = {fd: os.dup(fd) for fd in (1, 2)}
        for fd in (1, 2):
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, fd)
            os.close(write_fd)
            thread = threading.Thread(target=self._read, args=(read_fd, make_show()), name=f"msmon-console-{fd}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Flush, give fds 1 and 2 back, and wait for the readers to pass on what is still in the pipes."""
        if not self._saved:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                continue
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipes' last writers are gone: the readers see their end
            os.close(saved)
        self._saved = {}
        for thread in self._threads:
            thread.join(timeout_s)
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None
        if self.terminal is not None:
            self.terminal.close()
            self.terminal = None

    def _read(self, read_fd: int, show: Show) -> None:
        """Reader thread: never stops draining its pipe (a full pipe would block the training's writes)."""
        pending = b""
        while chunk := os.read(read_fd, READ_SIZE):
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                self._pass_on(pending[:cut], show)
                pending = pending[cut:]
        if pending:
            self._pass_on(pending + b"\n", show)
        os.close(read_fd)

    def _pass_on(self, lines: bytes, show: Show) -> None:
        """Complete lines: to the log file (whole, so the two streams never mix within a line), then shown."""
        with self._log_lock:
            if self._log is not None:
                try:
                    self._log.write(lines)
                    self._log.flush()
                except OSError:  # a full disk: the terminal still gets the lines
                    self._log = None
        try:
            show(lines.decode("utf-8", errors="replace"))
        except Exception as exc:  # noqa: BLE001 - a broken view must not stop the pipe from draining
            internal_errors.report("the terminal view", exc)


@dataclass(frozen=True)
class Progress:
    """What the writing rank shows: the session listener, and the capture behind it (None: not a terminal; then
    msmon's own warning lines stay on stderr, else they go to the view, a stream too)."""

    view: PlainView | LiveView
    capture: ConsoleCapture | None


def show_progress(options: ViewOptions, console_log: Path, *, on_terminal: bool, verbose: bool) -> Progress:
    """The one terminal rule of the module docstring, applied: the view, and the capture it needs, started."""
    if not on_terminal:
        return Progress(PlainView(options.total_steps, verbose=verbose), None)
    capture = ConsoleCapture(console_log)
    terminal = capture.terminal_stream()
    view: PlainView | LiveView
    if options.plain:
        view = PlainView(options.total_steps, stream=terminal, verbose=verbose)
    else:
        view = open_panel(options.total_steps, terminal)
    show = view.print_above
    if not options.framework_logs:
        show(f"msmon: the framework's info lines are in {console_log} (--framework-logs shows them here)\n")
    capture.start(lambda: show if options.framework_logs else QuietFilter().wrap(show))
    return Progress(view, capture)
