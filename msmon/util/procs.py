"""Processes: liveness, process groups guarded against pid reuse, stopping them, ending this one."""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

import psutil


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def on_this_host(host: object) -> bool:
    """Whether ``host`` (a recorded host name) is this machine."""
    return isinstance(host, str) and host in (socket.gethostname(), platform.node())


def is_stopped(pid: object) -> bool:
    """Whether process ``pid`` of this machine is stopped (SIGSTOP, a debugger)."""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def group_members(pgid: int, since: float) -> list[psutil.Process]:
    """Live processes of this user in process group ``pgid`` created at or after ``since`` (unix s)."""
    uid = os.getuid()
    members = []
    for proc in psutil.process_iter(["uids", "create_time"]):
        try:
            if os.getpgid(proc.pid) != pgid or proc.info["uids"].real != uid:
                continue
        except (OSError, psutil.Error, AttributeError):
            continue
        if (proc.info["create_time"] or 0) >= since - 1.0 and alive(proc):
            members.append(proc)
    return members


def cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def pid_running(pid: object, started_by: float | None = None) -> bool:
    """Whether process ``pid`` runs and, with ``started_by`` (unix s), was started by then (not a reused pid)."""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
    except psutil.Error:
        return False
    return alive(proc) and (started_by is None or created <= started_by)


def create_time(pid: int) -> float:
    """The start time of ``pid`` (unix s), 0.0 when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def same_process(pid: int, create_time: float) -> bool:
    """Whether ``pid`` is still the process created at ``create_time`` (not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.5 and alive(proc)
    except psutil.Error:
        return False


def listener_pid(members: list[psutil.Process], port: int) -> int | None:
    """The top process among ``members`` holding a listening socket on ``port``."""
    listeners = set()
    for proc in members:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            listeners.add(proc.pid)
    for proc in members:
        if proc.pid in listeners:
            try:
                if proc.ppid() not in listeners:
                    return proc.pid
            except psutil.Error:
                continue
    return None


def stop_processes(members: Callable[[], list[psutil.Process]], grace_s: float = 5.0) -> list[psutil.Process]:
    """SIGINT every process ``members()`` lists, SIGKILL those alive after ``grace_s``; return any survivors. The
    list is taken again at each stage: a server whose master restarts a worker it saw die (gunicorn does, before
    it handles its own SIGINT) leaves that new worker behind otherwise."""
    procs: list[psutil.Process] = []
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 3.0)):
        procs = [p for p in members() if alive(p)]
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                continue
        deadline = time.monotonic() + wait_s
        while procs and time.monotonic() < deadline:
            psutil.wait_procs(procs, timeout=0.2)
            procs = [p for p in procs if alive(p)]
    return [p for p in members() if alive(p)]


def exit_now(code: int) -> NoReturn:
    """End this process as Python's own exit does up to its module teardown: every non-daemon thread ended, every
    atexit handler run (MindSpore's resource cleanup, its summary writers' and asynchronous saves' close among
    them), the output flushed. The teardown after that frees nothing the end of the process does not, and costs
    about 1 s of CPU once mindspore and mindformers are imported: every attempt of every rank paid it."""
    # what the interpreter's exit does first: its thread-exit hooks (an idle thread pool's workers are told to end),
    # then every non-daemon thread joined (joined alone, an idle pool's workers would wait forever)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing left to flush
            stream.flush()
    os._exit(code)
