"""Helpers for tests that run `msmon run --worker-num N` for real (msrun, real AllReduce on CPU): start a run in the
background, wait for a file, find the processes a run left (import, not a conftest).

    run = RankRun.start(tmp_path, steps=400, callbacks=[registered("SleepOnRank", rank=1, step=20)])
    run.wait_for(lambda: run.records() >= 2)
    run.proc.send_signal(signal.SIGINT); code = run.finish(150)
    assert processes_of(run.run_dir) == []
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from helpers_training import write_quickstart_config
from launch import Launched

from msmon.util.net import free_port

DATA_PARALLEL = ["use_parallel=True", "parallel_config.data_parallel=2", "parallel.full_batch=False"]


def rank_heartbeat(path: Path, beat: dict) -> None:
    """``heartbeats/rank_N.json`` in run directory ``path`` as a rank writes it, from ``{"step", "time", "pid",
    "rank", "host"}``."""
    (path / "heartbeats").mkdir(parents=True, exist_ok=True)
    data = {"rank": beat.get("rank", 0), "pid": beat.get("pid"), "host": beat.get("host"), "state": "training",
            "alive": beat.get("time"), "ended": beat.get("step"), "ended_time": beat.get("time"),
            "begun": beat.get("step"), "begun_time": beat.get("time")}
    (path / "heartbeats" / f"rank_{data['rank']}.json").write_text(json.dumps(data))


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


class RankRun:
    """One `msmon run --worker-num 2` in the background (``--plain``; its output in files; ``flags=[]``: one
    process)."""

    def __init__(self, launched: Launched, run_dir: Path) -> None:
        self.launched = launched
        self.proc = launched.proc
        self.run_dir = run_dir

    @classmethod
    def start(cls, base: Path, *, steps: int, run_name: str = "ranks", callbacks: list[dict] | None = None,
              health: dict | None = None, log_interval: int = 5, extra: list[str] | None = None,
              source: Path | None = None, flags: list[str] | None = None, **monitor: Any) -> RankRun:
        """``monitor``: other monitor_config keys (``track_metrics``, ...)."""
        overrides = {"callbacks": [{"type": "MFLossMonitor"}, *(callbacks or [])]}
        kwargs: dict[str, Any] = {"source": source} if source is not None else {}
        config = write_quickstart_config(base, steps=steps, run_name=run_name, log_interval=log_interval,
                                         monitor_type=["file"], overrides=overrides, health=health or {}, **kwargs,
                                         **monitor)
        project = "quickstart_qwen3" if source is not None and "qwen3" in source.name else "quickstart"
        if flags is None:
            flags = ["--worker-num", "2", "--master-port", str(free_port("127.0.0.1"))]
        parallel = DATA_PARALLEL if "--worker-num" in flags else []
        launched = Launched.start(base, "run", str(config), "--plain", *flags, *parallel, *(extra or []),
                                  name=run_name)
        return cls(launched, base / "monitor_logs" / project / run_name)

    @property
    def stderr(self) -> str:
        return self.launched.output

    def records(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def alerts(self) -> list[dict]:
        path = self.run_dir / "alerts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def heartbeat(self, rank: int) -> dict:
        return json.loads((self.run_dir / "heartbeats" / f"rank_{rank}.json").read_text())

    def wait_for(self, condition: Callable[[], Any], timeout_s: float = 600.0) -> float:
        """Wait until ``condition()`` while the run lives; the time.time() it became true."""
        self.launched.wait_for(condition, timeout_s)
        return time.time()

    def finish(self, timeout_s: float = 900.0) -> int:
        """Its exit code; whatever it left running is killed, pass or fail."""
        return self.launched.finish(timeout_s)
