"""The board manager: start MindInsight or TensorBoard as a child, wait for its API, record, stop."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from msmon.compat import mindinsight_env, package_version
from msmon.errors import ExitCode, MsmonError
from msmon.ops import board_state
from msmon.ops.board_dir import resolve_board_dir
from msmon.ops.board_state import BoardRecord
from msmon.util import procs
from msmon.util.files import file_size, msmon_home, tail_lines
from msmon.util.net import free_port, is_loopback, port_in_use, probe_host

log = logging.getLogger("msmon")

DEFAULT_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class BoardBackend:
    name: str
    binary: str
    install: str
    health_path: str


BACKENDS = {
    "mindinsight": BoardBackend(
        "mindinsight", "mindinsight", "pip install mindinsight==2.3.1 protobuf==3.20.1",
        "/v1/mindinsight/datavisual/train-jobs",
    ),
    "tensorboard": BoardBackend("tensorboard", "tensorboard", "pip install tensorboard", "/data/logdir"),
}


class BoardError(MsmonError):
    """A board failure (exit code 5) that may carry the tail of the child's log."""

    def __init__(self, message: str, hint: str = "", log_tail: list[str] | None = None) -> None:
        super().__init__(message, hint, ExitCode.BOARD_FAILED)
        self.log_tail = log_tail or []


@dataclass
class BoardHandle:
    """A running board: ``.url``, ``.pid``, ``.port``; ``.stop()`` ends every process of it."""

    record: BoardRecord
    detached: bool = False
    reused: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.record.url

    @property
    def pid(self) -> int:
        return self.record.pid

    @property
    def port(self) -> int:
        return self.record.port

    def alive(self) -> bool:
        """Whether any process of the board is still running."""
        if self.process is not None:
            self.process.poll()
        return bool(_members(self.record))

    def healthy(self) -> bool:
        return is_healthy(self.record)

    def stop(self) -> None:
        """Stop the board's processes (no-op when already gone) and forget it; BoardError if one survives."""
        stop_record(self.record, forget=self.detached)
        if self.process is not None:
            self.process.poll()


def _members(record: BoardRecord) -> list:
    """The board's live processes. Once its server process is gone, the group id may have been reused
    by an unrelated group: then only processes that look like this backend count."""
    members = procs.group_members(record.pgid, _started_unix(record))
    if record.create_time and not procs.same_process(record.pid, record.create_time):
        markers = ("gunicorn", "mindinsight") if record.backend == "mindinsight" else ("tensorboard",)
        members = [p for p in members if any(m in " ".join(procs.cmdline(p)) for m in markers)]
    return members


def _started_unix(record: BoardRecord) -> float:
    try:
        return datetime.fromisoformat(record.started).timestamp()
    except ValueError:
        return 0.0


def _url(host: str, port: int) -> str:
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host  # noqa: S104 - a comparison, no bind
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


def is_healthy(record: BoardRecord, timeout_s: float = 2.0) -> bool:
    """Whether the board's HTTP API answers 200."""
    host = probe_host(record.host)
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{record.port}{BACKENDS[record.backend].health_path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http on a local port
            return response.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else beside the running Python (a venv that is not activated)."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def board_argv(
    backend: str, directory: Path, port: int, host: str = "127.0.0.1", binary: str | None = None
) -> list[str]:
    """The board's command line (``binary``: the program's path, default its name)."""
    program = binary or BACKENDS[backend].binary
    if backend == "mindinsight":
        workspace = str(msmon_home() / "mindinsight")
        return [program, "start", "--port", str(port), "--summary-base-dir", str(directory), "--workspace", workspace]
    return [program, "--logdir", str(directory), "--port", str(port), "--host", host]


def _gunicorn_log(port: int) -> Path:
    return msmon_home() / "mindinsight" / "log" / "gunicorn" / f"error.{port}.log"


def _log_tail(backend: BoardBackend, log_path: Path, port: int, gunicorn_start: int) -> list[str]:
    """The child's own output, plus what MindInsight's gunicorn error log got during this start."""
    tail = tail_lines(log_path, LOG_TAIL_LINES)
    if backend.name == "mindinsight":
        extra = _gunicorn_log(port)
        extra_tail = tail_lines(extra, 5, start=gunicorn_start)
        if extra_tail:
            tail += [f"[{extra}]", *extra_tail]
    return tail


def _check_host(backend: BoardBackend, host: str) -> None:
    if is_loopback(host):
        return
    if backend.name == "mindinsight":
        raise BoardError(
            f"MindInsight 2.3.1 always binds 127.0.0.1; it cannot serve on {host}",
            "use --backend tensorboard for another address, or keep 127.0.0.1 and tunnel: "
            "ssh -L 8080:127.0.0.1:8080 <this host>",
        )
    log.warning(
        "the board on %s has no authentication: anyone who can reach this address sees the runs "
        "(bind 127.0.0.1 and use an SSH tunnel instead)", host,
    )


def _reusable(port: int, directory: Path, backend: str) -> BoardRecord | None:
    for record in board_state.load_records():
        if record.port == port and record.directory == str(directory) and record.backend == backend:
            if _members(record) and is_healthy(record):
                return record
    return None


def start_board(
    path: str | os.PathLike[str] | None = None,
    port: int = 8080,
    host: str = "127.0.0.1",
    backend: str = "mindinsight",
    detach: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> BoardHandle:
    """Start a board on ``path`` (a save_dir, a run tree or a training YAML) and wait until it answers."""
    if backend not in BACKENDS:
        raise MsmonError(f"unknown board backend '{backend}'", f"choose one of: {', '.join(BACKENDS)}", ExitCode.USAGE)
    if not 0 <= port <= 65535:
        raise MsmonError(f"port {port} is out of range", "pass 1-65535, or 0 for a free port", ExitCode.USAGE)
    spec = BACKENDS[backend]
    directory = resolve_board_dir(path, backend)
    _check_host(spec, host)
    if backend == "mindinsight":
        host = "127.0.0.1"  # MindInsight binds it whatever loopback name was given
    binary = find_binary(spec.binary)
    if binary is None:
        raise BoardError(f"{spec.binary} is not installed (not on PATH)", f"install it: {spec.install}")
    if port == 0:
        port = free_port(host)
    elif port_in_use(host, port):
        if detach and (record := _reusable(port, directory, backend)) is not None:
            return BoardHandle(record, detached=True, reused=True)
        raise BoardError(
            f"port {port} on {host} is busy",
            "choose another with --port N, or --port 0 for a free one (msmon board status lists msmon's boards)",
        )
    return _launch(spec, binary, directory, host, port, detach, timeout_s)


def _launch(
    spec: BoardBackend, binary: str, directory: Path, host: str, port: int, detach: bool, timeout_s: float
) -> BoardHandle:
    home = msmon_home()
    (home / "logs").mkdir(parents=True, exist_ok=True)
    started = datetime.now().astimezone()
    log_path = home / "logs" / f"board-{spec.name}-{port}-{started:%Y%m%d_%H%M%S}.log"
    env = dict(os.environ)
    # MindInsight runs `gunicorn` by name: the venv's bin must be on PATH even when it is not activated.
    env["PATH"] = os.pathsep.join([str(Path(binary).parent), str(Path(sys.executable).parent), env.get("PATH", "")])
    if spec.name == "mindinsight":  # its *_pb2 modules load under protobuf 4+ only with the pure-Python protobuf
        env.update(mindinsight_env(package_version("protobuf")))
    argv = board_argv(spec.name, directory, port, host, binary)
    gunicorn_start = file_size(_gunicorn_log(port))
    with open(log_path, "ab") as out:
        process = subprocess.Popen(  # noqa: S603 - an argv list, never a shell string
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, cwd=str(home),
        )
    record = BoardRecord(
        backend=spec.name, pid=process.pid, pgid=process.pid, create_time=0.0, port=port, host=host,
        directory=str(directory), url=_url(host, port), log=str(log_path), started=started.isoformat(),
    )
    try:  # until the board is recorded, any failure stops every process of it: no orphan board
        _wait_healthy(spec, record, process, timeout_s, lambda: _log_tail(spec, log_path, port, gunicorn_start))
        record.pid = procs.listener_pid(_members(record), port) or process.pid
        record.create_time = procs.create_time(record.pid)
        if detach:
            board_state.add_record(record)
    except BaseException:
        procs.stop_processes(lambda: _members(record))
        process.poll()
        raise
    return BoardHandle(record, detached=detach, process=process)


def _wait_healthy(
    spec: BoardBackend, record: BoardRecord, process: subprocess.Popen[bytes], timeout_s: float,
    log_tail: Callable[[], list[str]],
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if is_healthy(record, timeout_s=1.0):
            return
        code = process.poll()
        if code is not None and (code != 0 or not _members(record)):
            procs.stop_processes(lambda: _members(record))
            tail = log_tail()
            last = f": {tail[-1].strip()}" if tail else ""
            raise BoardError(f"{spec.binary} exited early with code {code}{last}", f"see its log: {record.log}", tail)
        if time.monotonic() >= deadline:
            procs.stop_processes(lambda: _members(record))
            process.poll()
            raise BoardError(
                f"{spec.binary} did not answer on port {record.port} within {timeout_s:g} s; it was stopped",
                f"see its log: {record.log}; on a slow machine raise --timeout",
                log_tail(),
            )
        time.sleep(0.25)


def stop_record(record: BoardRecord, forget: bool = True) -> bool:
    """Stop a board's processes (and forget its record); True when something was running."""
    members = _members(record)
    survivors = procs.stop_processes(lambda: _members(record)) if members else []
    if survivors:
        pids = ", ".join(str(p.pid) for p in survivors)
        raise BoardError(f"could not stop the board on port {record.port} (pids {pids} survive)", "kill them by hand")
    if forget:
        board_state.remove_record(record.port)
    return bool(members)


def board_status() -> list[tuple[BoardRecord, str]]:
    """Each recorded board with its state: ``healthy``, ``not answering`` or ``gone``."""
    result = []
    for record in board_state.load_records():
        if not _members(record):
            state = "gone"
        else:
            state = "healthy" if is_healthy(record) else "not answering"
        result.append((record, state))
    return result
