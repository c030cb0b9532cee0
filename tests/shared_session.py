"""What the pytest-xdist workers of one test session share: a root directory, file locks, work done once per
session (``once``), the count of real trainings, and the processes the session must stop at its end.

The root is the controller's base temporary directory (each worker's own ``popen-gwN`` lies inside it); the
controller exports it as ``MSMON_TEST_SESSION`` before the workers start, so every process the session starts
(workers, trainings, boards, servers) carries it in its environment: that is how the end of the session finds
whatever is still running (``leftovers``).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

SESSION_ENV = "MSMON_TEST_SESSION"
LOCK_TIMEOUT_S = 1800.0  # the longest a worker waits for the other to finish building something
_built_here_cpu_s = 0.0  # the CPU time this process spent in ``once`` builds (``built_here_cpu_s``)


def root() -> Path:
    """The session's shared directory (``MSMON_TEST_SESSION``, set by tests/conftest.py)."""
    value = os.environ.get(SESSION_ENV)
    if not value:
        raise RuntimeError(f"{SESSION_ENV} is not set: run the tests with pytest (tests/conftest.py sets it)")
    return Path(value)


@contextmanager
def locked(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created), held by one process of the session at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout_s:.0f} s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def once(name: str, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``build(directory)`` run once per session, by whichever process asks first (the others wait for it); its
    JSON result, or the error it raised (``{"error": ...}``), kept in ``<root>/once/<name>/result.json``."""
    directory = root() / "once" / name
    result = directory / "result.json"
    global _built_here_cpu_s
    asked = time.monotonic()
    built = 0.0
    with locked(root() / "once" / f"{name}.lock"):
        waited = time.monotonic() - asked
        if not result.exists():
            directory.mkdir(parents=True, exist_ok=True)
            cpu = cpu_seconds()
            try:
                value = build(directory)
            except BaseException as exc:  # every waiting worker must see the failure, not build again
                value = {"error": f"{type(exc).__name__}: {exc}"}
                result.write_text(json.dumps(value))
                raise
            finally:
                built, cpu = time.monotonic() - asked - waited, cpu_seconds() - cpu
                _built_here_cpu_s += cpu
                _note("once.jsonl", {"name": name, "built_s": round(built, 1), "waited_s": round(waited, 1),
                                     "built_cpu_s": round(cpu, 1)})
            result.write_text(json.dumps(value))
        elif waited > 1.0:
            _note("once.jsonl", {"name": name, "built_s": 0.0, "waited_s": round(waited, 1)})
    return json.loads(result.read_text())


def _note(name: str, entry: dict[str, Any]) -> None:
    with (root() / name).open("a") as handle:
        handle.write(json.dumps({**entry, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}) + "\n")


def once_times(at: Path) -> tuple[float, float, float]:
    """(seconds spent building what ``once`` built, seconds workers waited for a build of another, CPU-seconds of
    the builds)."""
    path = at / "once.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return (sum(e["built_s"] for e in entries), sum(e["waited_s"] for e in entries),
            sum(e.get("built_cpu_s", 0.0) for e in entries))


def cpu_seconds() -> float:
    """The CPU time of this process and of the children it waited for (a training: ``msmon run`` and the ranks it
    waited for). A server left running for the session is in none of them."""
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def built_here_cpu_s() -> float:
    """The CPU time this process has spent building what ``once`` built (a test's own cost leaves it out)."""
    return _built_here_cpu_s


def count_training(kind: str, what: str) -> None:
    """Note one plain MindSpore training started (``kind``) for the session's summary (the mindformers Trainer's
    trainings are counted from its own logs: tests/conftest.py)."""
    _note("trainings.jsonl", {"kind": kind, "what": what, "test": os.environ.get("PYTEST_CURRENT_TEST")})


def trainings(at: Path) -> list[dict[str, Any]]:
    path = at / "trainings.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


STARTING_TRAINING = ".........Starting Training Model"  # mindformers' info.log, once per attempt of a run


def started_trainings(log: Path) -> int:
    """The trainings a mindformers rank log says were started (its ``Starting Training`` lines)."""
    try:
        return log.read_text(encoding="utf-8", errors="replace").count(STARTING_TRAINING)
    except OSError:
        return 0


def note_copied_logs(directory: Path) -> None:
    """``directory`` is a copy of a run (a canonical run's): the trainings its rank-0 logs hold so far were not
    started by the test that copied them, and are not counted for it."""
    for log in directory.rglob("rank_0/info.log"):
        _note("copied_logs.jsonl", {"log": str(log), "trainings": started_trainings(log)})


def copied_trainings(at: Path) -> dict[str, int]:
    """Rank-0 log -> the trainings it held when it was copied (``note_copied_logs``)."""
    path = at / "copied_logs.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {entry["log"]: entry["trainings"] for entry in entries}


def register_group(name: str, pgid: int) -> None:
    """A process group the session started for all its tests (a server): the controller stops it at the end."""
    with (root() / "groups.jsonl").open("a") as handle:
        handle.write(json.dumps({"name": name, "pgid": pgid}) + "\n")


def stop_registered_groups(at: Path) -> None:
    path = at / "groups.jsonl"
    stop_groups([json.loads(line)["pgid"] for line in path.read_text().splitlines()] if path.exists() else [])


def stop_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM a process group, SIGKILL what is left after ``grace_s`` (never the caller's own group)."""
    stop_groups([pgid], grace_s)


def stop_groups(pgids: list[int], grace_s: float = 10.0) -> None:
    """SIGTERM every group at once, then SIGKILL what is left of them after ``grace_s``: the session's servers end
    side by side (MLflow 1.5 s, MindInsight 2.4 s), not one after the other."""
    if os.getpgrp() in pgids:
        raise RuntimeError(f"process group {os.getpgrp()} is the test session's own: start servers in a session of "
                           "their own")
    left = list(pgids)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        left = [pgid for pgid in left if _signal_group(pgid, sig)]
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pgid for pgid in left if _signal_group(pgid, 0)]


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group: False once the group has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def leftovers(at: Path, exclude: set[int]) -> list[psutil.Process]:
    """Live processes started by this session (``MSMON_TEST_SESSION`` = ``at`` in their environment)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE or proc.environ().get(SESSION_ENV) != str(at):
                continue
        except psutil.Error:
            continue
        found.append(proc)
    return found
