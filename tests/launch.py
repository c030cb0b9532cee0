"""One way for tests to start a real `msmon` child: its environment, its output in files (or on a
pseudo-terminal), waiting for an event with a deadline, and every process it started stopped afterwards.

    run = Launched.start(base, "run", str(config), "--plain")
    run.wait_for(lambda: len(records(run_dir)) >= 2)
    run.proc.send_signal(signal.SIGINT)
    code = run.finish(120)             # kills what is left, pass or fail
    assert run.left_behind() == []

``msmon_env(base)`` is the environment every msmon child of the suite gets: msmon's home in ``base``, the
session's dataset cache, ``REGISTER_PATH`` for tests/rank_callbacks.py, none of the variables that change what
msmon prints or where mindformers writes (``MSMON_DEBUG``, ``LOCAL_DEFAULT_PATH``, ``COLUMNS``, ``LINES``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from msmon.util.procs import alive, cmdline

HERE = Path(__file__).resolve().parent
#: Variables of the developer's shell that would change what a child msmon does or prints.
DROPPED_ENV = ("MSMON_DEBUG", "LOCAL_DEFAULT_PATH", "COLUMNS", "LINES", "NO_COLOR", "TERM")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
DEADLINE_S = 600.0  # the default wait for an event: a training on a machine four times slower still fits


def msmon_env(base: Path | None = None, *, terminal: bool = False, **extra: str) -> dict[str, str]:
    """The environment of an msmon child started for a test: msmon's home in ``base`` (else the test's own,
    which tests/conftest.py set), a terminal's ``TERM`` or ``NO_COLOR``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and not k.startswith("MLFLOW_")}
    env.update(REGISTER_PATH=str(HERE))
    if base is not None:
        env.update(MSMON_HOME=str(base / "home"), OM_MODULES_CACHE=str(base / "modules"))
    env.update({"TERM": "xterm-256color"} if terminal else {"NO_COLOR": "1"})
    env.update(extra)
    return env


def wait_for(condition: Callable[[], Any], timeout_s: float = DEADLINE_S, interval_s: float = 0.1,
             alive: Callable[[], bool] = lambda: True, why: Callable[[], str] = lambda: "") -> Any:
    """Poll ``condition`` until it returns a truthy value (an OSError or ValueError counts as not yet), while
    ``alive()``; that value, or AssertionError naming ``why()``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except (OSError, ValueError, KeyError):
            value = None
        if value:
            return value
        if not alive():
            raise AssertionError(f"the process ended before the event: {why()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no event within {timeout_s:.0f} s: {why()}")
        time.sleep(interval_s)


def pty_chunks(master: int, idle_timeout_s: float | None = None) -> Iterator[bytes]:
    """What a child writes to its pseudo-terminal, chunk by chunk, until it closes the terminal (or writes nothing
    for ``idle_timeout_s``)."""
    import select

    while True:
        if idle_timeout_s is not None and not select.select([master], [], [], idle_timeout_s)[0]:
            return
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child's side is closed
            return
        if not chunk:
            return
        yield chunk


def records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    """The complete JSON lines of a run file (a line still being written is left out)."""
    path = run_dir / name
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    return [json.loads(line) for line in lines[:-1] if line]


class Launched:
    """``python -m msmon ARGS`` in the background, in its own session, its output in files."""

    def __init__(self, proc: subprocess.Popen[bytes], out: Path, err: Path, reader: threading.Thread | None) -> None:
        self.proc = proc
        self.out_path, self.err_path = out, err
        self._reader = reader
        self.seen: dict[int, psutil.Process] = {}

    @classmethod
    def start(cls, base: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
              terminal: bool = False, columns: int = 140, name: str = "msmon") -> Launched:
        """Start it; on a pseudo-terminal of ``columns`` x 40 with ``terminal`` (stdout and stderr both there)."""
        base.mkdir(parents=True, exist_ok=True)
        out, err = base / f"{name}.stdout.txt", base / f"{name}.stderr.txt"
        argv = [sys.executable, "-m", "msmon", *args]
        env = env if env is not None else msmon_env(base, terminal=terminal)
        if not terminal:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(argv, cwd=cwd or base, env=env, stdout=stdout, stderr=stderr,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            return cls(proc, out, err, None)
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        proc = subprocess.Popen(argv, cwd=cwd or base, env=env, stdin=slave, stdout=slave, stderr=slave,
                                start_new_session=True)
        os.close(slave)
        err.write_bytes(b"")

        def copy() -> None:
            with out.open("wb") as sink:
                for chunk in pty_chunks(master):
                    sink.write(chunk)
                    sink.flush()
            os.close(master)

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        return cls(proc, out, err, reader)

    @property
    def stdout(self) -> str:
        if self._reader is not None and self.proc.poll() is not None:
            self._reader.join(30)  # a terminal's last output, once the child has ended
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    @property
    def output(self) -> str:
        """Everything it printed (a terminal's text without its escape sequences)."""
        return ANSI.sub("", self.stdout + self.stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def remember(self) -> None:
        """Note its descendants now (a killed parent leaves them unknown otherwise)."""
        try:
            self.seen.update({p.pid: p for p in psutil.Process(self.proc.pid).children(recursive=True)})
        except psutil.Error:
            pass

    def wait_for(self, condition: Callable[[], Any], timeout_s: float = DEADLINE_S) -> Any:
        """Until ``condition()`` is truthy while msmon runs (its descendants remembered meanwhile)."""

        def check() -> Any:
            self.remember()
            return condition()

        return wait_for(check, timeout_s, alive=self.alive, why=lambda: self.output[-3000:])

    def finish(self, timeout_s: float = DEADLINE_S, kill: bool = True) -> int:
        """Its exit code; whatever it left running (its process group, its descendants) is killed, pass or fail
        (``kill=False``: by the caller's own ``kill()`` later, when the test reads what it left first)."""
        deadline = time.monotonic() + timeout_s
        try:
            while self.proc.poll() is None and time.monotonic() < deadline:
                self.remember()
                time.sleep(0.1)
            if self.proc.poll() is None:
                raise AssertionError(f"msmon did not end within {timeout_s:.0f} s: {self.output[-3000:]}")
            return self.proc.returncode
        finally:
            if kill or self.proc.poll() is None:
                self.kill()

    def kill(self) -> None:
        """Kill its process group and every descendant seen (msrun's ranks and boards start sessions of their own)."""
        self.remember()
        for pgid in {self._pgid(p) for p in [*self.seen.values()] if alive(p)} | {self.proc.pid}:
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except OSError:
                    pass
        for proc in self.seen.values():
            try:
                proc.kill()
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        if self._reader is not None:
            self._reader.join(30)

    @staticmethod
    def _pgid(proc: psutil.Process) -> int | None:
        try:
            return os.getpgid(proc.pid)
        except OSError:
            return None

    def left_behind(self) -> list[str]:
        """Command lines of its descendants still alive."""
        return [" ".join(cmdline(p)) for p in self.seen.values() if alive(p)]
