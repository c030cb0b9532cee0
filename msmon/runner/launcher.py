"""Start the training processes and stop them gracefully: one worker child, or the ranks through ``msrun``.

The training always runs in a child (``python -m msmon.runner.worker``) in its own session, so the
``msmon run`` process never imports MindSpore: it sees the user's real signal (MindSpore turns SIGINT into
SIGTERM inside a training process), forwards exactly one stop request per signal, and can always clean up.
With ``--worker-num N`` the child is MindSpore's ``msrun``, which starts every rank (msmon's callback in
each; rank 0 writes the metrics unless ``writer.per_rank``) and writes each rank's log to
``<run dir>/logs/ranks/``. Every rank leaves ``logs/rank_<r>.result.json``; the parent writes ``run.json``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from msmon.errors import ExitCode, MsmonError

logger = logging.getLogger("msmon")

SPEC_ENV = "MSMON_WORKER_SPEC"
WORKER_MODULE = "msmon.runner.worker"
STOP_GRACE_S = 60.0
FORCE_GRACE_S = 15.0
POLL_S = 0.2


@dataclass
class LaunchResult:
    status: str
    error: str | None = None


def check_flags(request: Any) -> None:
    """Usage errors of the distributed flags (exit 2)."""
    if request.worker_num is None:
        extra = [flag for flag, value in (("--local-worker-num", request.local_worker_num),
                                          ("--node-rank", request.node_rank)) if value is not None]
        if extra:
            raise MsmonError(f"{', '.join(extra)} needs --worker-num", "add --worker-num N", ExitCode.USAGE)
        return
    if request.worker_num < 1:
        raise MsmonError("--worker-num must be at least 1", "e.g. --worker-num 2", ExitCode.USAGE)
    local = request.local_worker_num or request.worker_num
    if not 1 <= local <= request.worker_num:
        raise MsmonError(
            f"--local-worker-num {local} must be between 1 and --worker-num {request.worker_num}",
            "ranks on this machine <= ranks in total", ExitCode.USAGE,
        )
    if local < request.worker_num and request.node_rank is None:
        raise MsmonError(
            "a multi-machine run (--local-worker-num < --worker-num) needs --node-rank",
            "give each machine its index: --node-rank 0 on the master, 1, 2, ... on the others", ExitCode.USAGE,
        )


def check_config(training: dict[str, Any], request: Any) -> None:
    """The config must be a parallel one when it runs on more than one rank."""
    n = request.worker_num
    if n and n > 1 and training.get("use_parallel") is not True:
        raise MsmonError(
            f"--worker-num {n} needs a parallel config, but use_parallel is not True",
            f"for data parallelism add: use_parallel=True parallel_config.data_parallel={n} parallel.full_batch=False",
        )


def _msrun() -> list[str]:
    here = Path(sys.executable).parent / "msrun"
    found = str(here) if here.exists() else shutil.which("msrun")
    return [found] if found else [sys.executable, "-m", "mindspore.parallel.cluster.run"]


def worker_argv(request: Any, run_dir: Path) -> list[str]:
    """The command that starts the training on this machine."""
    if not request.worker_num:
        return [sys.executable, "-m", WORKER_MODULE]
    argv = _msrun() + [
        f"--worker_num={request.worker_num}",
        f"--local_worker_num={request.local_worker_num or request.worker_num}",
        f"--master_addr={request.master_addr}",
        f"--master_port={request.master_port}",
        f"--log_dir={run_dir / 'logs' / 'ranks'}",
        "--join=True",
        "--tail_worker_log=0",
    ]
    if request.node_rank is not None:
        argv.append(f"--node_rank={request.node_rank}")
    return argv + ["python", "-m", WORKER_MODULE]


def result_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"rank_{rank}.result.json"


def read_results(run_dir: Path) -> dict[int, dict[str, Any]]:
    results = {}
    for path in (run_dir / "logs").glob("rank_*.result.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            results[int(data["rank"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return results


class Launcher:
    """Runs the training child in its own session; forwards stop requests to the worker processes."""

    def __init__(self, request: Any, run_dir: Path, run_name: str, view: dict[str, Any] | None = None) -> None:
        self.request = request
        self.run_dir = run_dir
        self.run_name = run_name
        self.view = view or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.known: dict[int, psutil.Process] = {}
        self.stop_requested_at: float | None = None

    @property
    def ranks_here(self) -> int:
        return self.request.local_worker_num or self.request.worker_num or 1

    def _env(self) -> dict[str, str]:
        spec = {
            "config": str(Path(self.request.config).absolute()),
            "overrides": list(self.request.overrides),
            "run_name": self.run_name,
            "run_dir": str(self.run_dir),
            "worker_num": self.request.worker_num or 1,
            **self.view,
        }
        env = dict(os.environ)
        env[SPEC_ENV] = json.dumps(spec)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["LOCAL_DEFAULT_PATH"] = str(self.run_dir / "logs" / "output")
        return env

    def run(self) -> LaunchResult:
        argv = worker_argv(self.request, self.run_dir)
        if self.request.node_rank in (None, 0):  # results left by the run being resumed
            for old in (self.run_dir / "logs").glob("rank_*.result.json"):
                old.unlink()
        logger.info("msmon: launching %s", " ".join(argv))
        self.process = subprocess.Popen(argv, env=self._env(), start_new_session=True)  # noqa: S603
        try:
            self._wait()
        finally:
            self._kill_leftovers()
        return self._result(self.process.returncode)

    def _wait(self) -> None:
        while self.process is not None and self.process.poll() is None:
            self._remember_children()
            if self.request.worker_num and self.stop_requested_at is None and self._monitor_stopped():
                logger.warning("msmon: a rank was stopped by the monitor: stopping the other ranks")
                self.request_stop()
            if self.stop_requested_at is not None and time.monotonic() - self.stop_requested_at > STOP_GRACE_S:
                logger.warning("msmon: the training did not stop within %.0f s: killing it", STOP_GRACE_S)
                break
            time.sleep(POLL_S)

    def _monitor_stopped(self) -> bool:
        return any(r.get("status") == "stopped_by_monitor" for r in read_results(self.run_dir).values())

    def _remember_children(self) -> None:
        if self.process is None:
            return
        try:
            top = psutil.Process(self.process.pid)
            family = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for proc in family:
            self.known.setdefault(proc.pid, proc)

    def workers(self) -> list[psutil.Process]:
        """The live training processes: the worker child, or msrun's ranks (not msrun, not its scheduler)."""
        self._remember_children()
        if not self.request.worker_num:
            return [p for p in self.known.values() if self.process and p.pid == self.process.pid and _alive(p)]
        alive = []
        for proc in self.known.values():
            try:
                if _alive(proc) and WORKER_MODULE in proc.cmdline() and proc.environ().get("MS_ROLE") == "MS_WORKER":
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive

    def _signal_workers(self) -> None:
        for proc in self.workers():
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error:
                continue

    def request_stop(self) -> None:
        """Ask every rank to stop at its next step end (one SIGTERM each)."""
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        self._signal_workers()

    def force_stop(self) -> None:
        """Second signal: the ranks flush and exit now; whatever remains after a grace period is killed."""
        self._signal_workers()
        psutil.wait_procs(self.workers(), timeout=FORCE_GRACE_S)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """Kill the child's process group and every descendant seen (msrun's ranks run in their own sessions)."""
        self._remember_children()
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                pass
        procs = [p for p in self.known.values() if _alive(p)]
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(procs, timeout=5)
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def _result(self, returncode: int | None) -> LaunchResult:
        results = read_results(self.run_dir)
        failed = [r for r in results.values() if r.get("status") == "failed"]
        if failed:
            first = min(failed, key=lambda r: r["rank"])
            prefix = f"rank {first['rank']}: " if self.request.worker_num else ""
            return LaunchResult("failed", f"{prefix}{first.get('error')}")
        stopped = [r for r in results.values() if r.get("status") == "stopped_by_monitor"]
        if stopped:
            return LaunchResult("stopped_by_monitor", stopped[0].get("error"))
        if self.stop_requested_at is not None or any(r.get("status") == "interrupted" for r in results.values()):
            return LaunchResult("interrupted")
        if returncode != 0 or len(results) < self.ranks_here:
            where = self.run_dir / "logs" / ("ranks" if self.request.worker_num else "msmon.log")
            return LaunchResult("failed", f"the training process exited with code {returncode} without a result "
                                          f"(see {where})")
        return LaunchResult("completed")

    def totals(self) -> tuple[int | None, int, int]:
        """(last step, dropped records, alert count) over the ranks' results."""
        results = read_results(self.run_dir).values()
        steps = [r["last_step"] for r in results if r.get("last_step") is not None]
        return (
            max(steps) if steps else None,
            sum(int(r.get("dropped_records") or 0) for r in results),
            sum(int(r.get("alert_count") or 0) for r in results),
        )


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
