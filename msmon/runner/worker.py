"""The training process of ``msmon run`` (one per rank): train with msmon's callback, leave a result file.

Started by the parent ``msmon run`` (directly, or through msrun for ``--worker-num``) as
``python -m msmon.runner.worker`` with ``MSMON_WORKER_SPEC`` in the environment.
SIGTERM/SIGINT: stop at the next step end; a second one: flush and exit now.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import psutil

from msmon.runner.launcher import SPEC_ENV, result_path
from msmon.util.atomic import atomic_write_json

CHILD_GRACE_S = 15.0
EXIT_GUARD_S = 30.0

logger = logging.getLogger("msmon")


class Worker:
    """One training process: session, health, live view, the Trainer, and its result file."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.world_size = int(spec["worker_num"])
        # msrun exports RANK_ID; a single process is rank 0 whatever the environment says
        self.rank = int(os.environ.get("RANK_ID", "0")) if self.world_size > 1 else 0
        # msrun's scheduler runs the same command; MindSpore serves the cluster inside init(): no monitoring there
        self.scheduler = os.environ.get("MS_ROLE") == "MS_SCHED"
        self.run_dir = Path(spec["run_dir"])
        self.session: Any = None
        self.health: Any = None
        self.signalled: str | None = None
        self._written = False

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signalled is None:
            self.signalled = name
            if self.session is not None:
                self.session.request_stop(f"signal {name}")
                return
            raise KeyboardInterrupt
        self.finish("interrupted", f"forced by a second {name}")
        os._exit(0)

    def run(self) -> int:
        from msmon.config.loader import load_config
        from msmon.config.split import split_monitor_config
        from msmon.runner.trainer import import_framework, train
        from msmon.validate.validator import validate

        logs = self.run_dir / "logs"
        self._logging(logs)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        status, error = "completed", None
        try:
            result = validate(load_config(self.spec["config"], self.spec["overrides"]), resume=True)
            settings = dataclasses.replace(result.settings, run_name=self.spec["run_name"])
            self.stderr.setLevel(logging.INFO if settings.verbose else logging.WARNING)
            training, _ = split_monitor_config(result.training)
            import_framework(logs)
            self._open_session(settings, training)
            callbacks = [self.session.callback()] if self.session is not None else []
            train(training, callbacks, logs)
        except KeyboardInterrupt:
            status = "interrupted"
        except Exception as exc:
            if self.signalled is None:
                from msmon.runner.launch import error_summary

                status, error = "failed", error_summary(exc)
                logger.error("training failed on rank %d:\n%s", self.rank, traceback.format_exc(),
                             extra={"file_only": True})
            else:
                status = "interrupted"
        if status == "completed" and self.signalled is not None:
            status = "interrupted"
        elif status == "completed" and self.session is not None and self.session.stop_reason:
            status, error = "stopped_by_monitor", self.session.stop_reason
        self.finish(status, error)
        return 3 if status == "failed" else 0

    def _logging(self, logs: Path) -> None:
        self.stderr = logging.StreamHandler(sys.stderr)
        prefix = f"[rank {self.rank}] " if self.world_size > 1 else ""
        self.stderr.setFormatter(logging.Formatter(f"{prefix}%(message)s"))
        self.stderr.addFilter(lambda record: not getattr(record, "file_only", False))
        name = "msmon.log" if self.rank == 0 else f"msmon.rank_{self.rank}.log"
        file = logging.FileHandler(logs / name, encoding="utf-8")
        file.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [rank {self.rank}] %(message)s"))
        logger.addHandler(self.stderr)
        logger.addHandler(file)
        logger.setLevel(logging.INFO)

    def _add_view(self) -> None:
        if self.rank != 0 or not self.spec.get("live_view"):
            return
        try:
            from msmon.view.live import make_live_view

            view = make_live_view(sys.stderr.isatty(), bool(self.spec.get("plain")), self.spec.get("total_steps"),
                                  session=self.session, run_dir=self.run_dir)
            self.session.add_listener(view)
        except Exception as exc:  # a view is a convenience: training goes on without it
            logger.warning("live view not started: %s", exc)

    def _open_session(self, settings: Any, training: dict[str, Any]) -> None:
        if self.scheduler or not (settings.enable_monitor and settings.use_callback):
            return
        try:
            from msmon.engine.session import MonitorSession
        except ImportError as exc:
            logger.warning("monitoring engine not available (%s): training without msmon's callback", exc)
            return
        self.session = MonitorSession(
            settings, self.run_dir, config=training, rank=self.rank, world_size=self.world_size
        ).start()
        self._add_view()
        if self.rank != 0:
            return
        try:
            from msmon.health import attach

            self.health = attach(self.session, settings, self.run_dir, training)
        except ImportError:
            logger.info("health monitor not available in this build")
        except Exception as exc:
            logger.warning("health monitor not started: %s", exc)

    def finish(self, status: str, error: str | None) -> None:
        if self._written or self.scheduler:
            return
        self._written = True
        last_step, dropped, alerts = None, 0, 0
        if self.session is not None:
            summary = self.session.close(status)
            last_step, dropped = summary.last_step, summary.dropped_records
        if self.health is not None:
            try:
                self.health.close()
            except Exception as exc:
                logger.warning("health monitor close failed: %s", exc)
            alerts = int(getattr(self.health, "alert_count", 0) or 0)
        atomic_write_json(result_path(self.run_dir, self.rank), {
            "rank": self.rank, "status": status, "error": error, "last_step": last_step,
            "dropped_records": dropped, "alert_count": alerts, "pid": os.getpid(),
        })
        reap_children(CHILD_GRACE_S)


def reap_children(grace_s: float) -> None:
    """Wait a little for this process's children (MindSpore's summary writer pool), then kill what is left."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for proc in alive:
        logger.warning("child process %d did not exit within %.0f s: killed", proc.pid, grace_s)
        try:
            proc.kill()
        except psutil.Error:
            continue


def main() -> int:
    spec = os.environ.get(SPEC_ENV)
    if not spec:
        print(f"msmon worker: {SPEC_ENV} is not set (this module is started by `msmon run`)",
              file=sys.stderr)
        return 2
    code = Worker(json.loads(spec)).run()
    # A normal exit lets MindSpore leave its cluster cleanly; if its exit handlers hang, end anyway.
    guard = threading.Timer(EXIT_GUARD_S, os._exit, args=(code,))
    guard.daemon = True
    guard.start()
    return code


if __name__ == "__main__":
    sys.exit(main())
