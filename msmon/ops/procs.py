"""Find and stop the processes of a board: its process group, guarded against pid reuse."""

from __future__ import annotations

import os
import signal
import time

import psutil


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
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
        if (proc.info["create_time"] or 0) >= since - 1.0 and _alive(proc):
            members.append(proc)
    return members


def cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


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
        return abs(proc.create_time() - create_time) < 0.5 and _alive(proc)
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


def stop_processes(procs: list[psutil.Process], grace_s: float = 5.0) -> list[psutil.Process]:
    """SIGINT every process, SIGKILL those still alive after ``grace_s``; return any survivors."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 3.0)):
        procs = [p for p in procs if _alive(p)]
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                continue
        deadline = time.monotonic() + wait_s
        while procs and time.monotonic() < deadline:
            psutil.wait_procs(procs, timeout=0.2)
            procs = [p for p in procs if _alive(p)]
    return [p for p in procs if _alive(p)]
