"""The training process's terminal output: one rule (``capture_console`` + ``show_progress``), and the capture.

The rule (docs/run.md, "The terminal"): the writing rank of msmon's own training process captures its file
descriptors 1 and 2 from its first line, before mindformers or MindSpore is imported. Every line the framework
writes goes to ``logs/console.log`` and is counted (warnings, errors); on the screen (a terminal, or the pipe
or file the output goes to) only msmon's own lines and the progress: the live panel on a terminal, one plain line
per logged step otherwise (``--plain`` on a terminal too). ``--framework-logs`` shows every line as well. The
first line names the log. ``NO_COLOR`` (set and not empty, no-color.org) removes colour and nothing else.

File descriptors 1 and 2 (Python's prints and logging, mindformers' handlers, MindSpore's C++ output) each
go into a pipe of their own: writers on one descriptor never split the other's lines (a long multi-line log
record and a C++ warning from another thread would otherwise interleave). One reader thread per pipe
appends every complete line to a log file and hands it to that stream's ``show`` (the panel prints it above
itself). The progress draws on a duplicate of the original output descriptor. Nothing replaces
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

from msmon.runner.framework_output import FrameworkCount, msmon_lines_only
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
        self.counts = FrameworkCount()  # the framework's warnings and errors among the captured lines
        self._unlogged: Show | None = None

    def terminal_stream(self) -> TextIO:
        """A text stream on the original output (stdout, or stderr when only stderr is a terminal) that stays there
        while the fds are captured."""
        if self.terminal is None:
            fd = os.dup(1 if os.isatty(1) or not os.isatty(2) else 2)
            self.terminal = io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0), encoding="utf-8", errors="replace",
                                             line_buffering=True)
        return self.terminal

    def start(self, make_show: Callable[[], Show], unlogged: Show | None = None) -> None:
        """Redirect fds 1 and 2, each into its own pipe; each reader hands its complete lines to its own
        ``make_show()`` (a filter keeps its state per stream), or, once the log cannot be written (a full disk),
        to ``unlogged`` (nothing is lost)."""
        self._unlogged = unlogged
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        except OSError:  # a full disk: the screen gets every line
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
        """Complete lines: counted and to the log file (whole, so the two streams never mix within a line), then
        shown."""
        text = lines.decode("utf-8", errors="replace")
        with self._log_lock:
            self.counts.add(text)
            if self._log is not None:
                try:
                    self._log.write(lines)
                    self._log.flush()
                except OSError:  # a full disk: the screen gets every line from now on
                    self._log = None
            logged = self._log is not None
        try:
            (show if logged or self._unlogged is None else self._unlogged)(text)
        except Exception as exc:  # noqa: BLE001 - a broken view must not stop the pipe from draining
            internal_errors.report("the terminal view", exc)


class Screen:
    """What the screen gets of the captured output and of msmon's log lines: the original output until the progress
    view opens, then the view (which prints them above its panel or between its lines). A stream itself."""

    def __init__(self, terminal: TextIO) -> None:
        self._terminal = terminal
        self._view: PlainView | LiveView | None = None
        self._lock = threading.Lock()

    def show(self, view: PlainView | LiveView) -> None:
        """From now on, everything goes to ``view``."""
        self._view = view

    def print_above(self, text: str) -> None:
        """Complete lines, printed whole."""
        if self._view is not None:
            self._view.print_above(text)
            return
        with self._lock:
            self._terminal.write(text)
            self._terminal.flush()

    def write(self, text: str) -> int:
        """As a stream (for msmon's logging handler)."""
        self.print_above(text)
        return len(text)

    def flush(self) -> None:
        """Every write is flushed."""


@dataclass(frozen=True)
class Console:
    """The writing rank's captured output: the capture, what the screen gets, and whether it is a terminal."""

    capture: ConsoleCapture
    screen: Screen
    on_terminal: bool


def capture_console(options: ViewOptions, console_log: Path) -> Console:
    """The rule of the module docstring, started: the framework's lines to ``console_log`` (and, with
    ``--framework-logs``, to the screen), msmon's lines to the screen, the first one naming the log."""
    on_terminal = sys.stdout.isatty() or sys.stderr.isatty()
    capture = ConsoleCapture(console_log)
    screen = Screen(capture.terminal_stream())
    if not options.framework_logs:
        screen.print_above(f"msmon: the framework's output is in {console_log} (--framework-logs shows it here)\n")
    capture.start(lambda: screen.print_above if options.framework_logs else msmon_lines_only(screen.print_above),
                  screen.print_above)
    return Console(capture, screen, on_terminal)


def show_progress(options: ViewOptions, console: Console, *, verbose: bool) -> PlainView | LiveView:
    """The progress view on the captured output: the live panel on a terminal (unless ``--plain``), else one plain
    line per logged step; the screen's lines go to it from now on."""
    terminal = console.capture.terminal_stream()
    view: PlainView | LiveView
    if console.on_terminal and not options.plain:
        view = open_panel(options.total_steps, terminal)
    else:
        view = PlainView(options.total_steps, stream=terminal, verbose=verbose)
    console.screen.show(view)
    return view
