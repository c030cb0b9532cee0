"""The stall watchdog: a daemon thread that reads the session's step progress, never the training thread."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from msmon.health.monitor import HealthMonitor

logger = logging.getLogger("msmon")


class Watchdog:
    """Every ``poll_s``: idle time since the last step end -> ``monitor.check_stall``.

    Before the first step ends it measures from its own start (timeout ``first_step_timeout_s``);
    once the planned number of steps has ended it stays quiet (closing may take a while). The
    rank's heartbeat thread writes its liveness file; this thread only reads the progress.
    """

    def __init__(self, monitor: HealthMonitor, progress: Any, *, poll_s: float, log_interval: int = 1) -> None:
        self.monitor = monitor
        self.progress = progress
        self.poll_s = max(poll_s, 0.05)
        self.log_interval = log_interval
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msmon-watchdog", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - the watchdog must outlive its own bugs
                logger.warning("stall watchdog: %s: %s", type(exc).__name__, exc)

    def poll(self) -> None:
        p = self.progress
        last_step = p.last_step or None
        total = p.total_steps
        if last_step is not None and total and last_step >= total:
            return
        since = p.last_end_monotonic if last_step is not None else max(p.last_end_monotonic or 0.0, self._started)
        wall = p.last_end_wall if last_step is not None else None
        self.monitor.check_stall(time.monotonic() - since, last_step, wall,
                                 p.steady_step_seconds(self.log_interval), time.time())
