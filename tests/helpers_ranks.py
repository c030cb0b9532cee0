"""Helpers for tests that run `msmon run --worker-num N` for real (msrun, real AllReduce on CPU): start a run in the
background, wait for a file, find the processes a run left (import, not a conftest).

    run = RankRun.start(tmp_path, steps=400, callbacks=[sleep_on_rank(1, 20)], timeout_s=5.0)
    run.wait_for(lambda: run.records() >= 2)
    run.proc.send_signal(signal.SIGINT); code = run.proc.wait(150)
    assert processes_of(run.run_dir) == []
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from helpers_training import write_quickstart_config

from msmon.util.net import free_port

HERE = Path(__file__).resolve().parent
DATA_PARALLEL = ["use_parallel=True", "parallel_config.data_parallel=2", "parallel.full_batch=False"]


def registered(name: str, **kwargs: Any) -> dict[str, Any]:
    """A callback entry of tests/rank_callbacks.py, registered as a user would (auto_register + REGISTER_PATH)."""
    return {"type": name, "auto_register": f"rank_callbacks.{name}", **kwargs}


def processes_of(run_dir: Path) -> list[str]:
    """Live processes started for this run (msmon run, msrun, its scheduler, the ranks, tail)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if str(run_dir) in line or str(run_dir) in proc.environ().get("MSMON_WORKER_SPEC", ""):
                found.append(line)
        except psutil.Error:
            continue
    return found


def env_for(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_DEFAULT_PATH", "MSMON_DEBUG")}
    env.update(MSMON_HOME=str(base / "home"), MSMON_CACHE_DIR=str(base / "cache"), NO_COLOR="1",
               REGISTER_PATH=str(HERE), OM_MODULES_CACHE=str(base / "modules"))
    return env


@dataclass
class RankRun:
    """One `msmon run --worker-num 2` in the background (``--plain``; stderr kept in ``<run_name>.stderr.txt``;
    ``flags=[]``: one process)."""

    proc: subprocess.Popen[str]
    run_dir: Path
    stderr_path: Path

    @classmethod
    def start(cls, base: Path, *, steps: int, run_name: str = "ranks", callbacks: list[dict] | None = None,
              health: dict | None = None, log_interval: int = 5, extra: list[str] | None = None,
              source: Path | None = None, flags: list[str] | None = None) -> RankRun:
        overrides = {"callbacks": [{"type": "MFLossMonitor"}, *(callbacks or [])]}
        kwargs = {"source": source} if source is not None else {}
        config = write_quickstart_config(base, steps=steps, run_name=run_name, log_interval=log_interval,
                                         monitor_type=["file"], overrides=overrides, health=health or {}, **kwargs)
        project = "quickstart_qwen3" if source is not None and "qwen3" in source.name else "quickstart"
        stderr_path = base / f"{run_name}.stderr.txt"
        if flags is None:
            flags = ["--worker-num", "2", "--master-port", str(free_port("127.0.0.1"))]
        parallel = DATA_PARALLEL if "--worker-num" in flags else []
        argv = [sys.executable, "-m", "msmon", "run", str(config), "--plain", *flags, *parallel, *(extra or [])]
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(argv, cwd=base, env=env_for(base), stdout=subprocess.DEVNULL, stderr=stderr,
                                    text=True)
        return cls(proc, base / "monitor_logs" / project / run_name, stderr_path)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def records(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def alerts(self) -> list[dict]:
        path = self.run_dir / "alerts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def heartbeat(self, rank: int) -> dict:
        return json.loads((self.run_dir / "heartbeats" / f"rank_{rank}.json").read_text())

    def wait_for(self, condition: Callable[[], bool], timeout_s: float = 300.0) -> float:
        """Wait until ``condition()`` while the run lives; the time.time() it became true."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return time.time()
            if self.proc.poll() is not None:
                raise AssertionError(f"msmon run exited with {self.proc.returncode}:\n{self.stderr[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout_s:.0f} s:\n{self.stderr[-3000:]}")

    def finish(self, timeout_s: float = 600.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
