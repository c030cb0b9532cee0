"""``heartbeat.json``: rewritten atomically from the writer side whenever a step ended since the last write."""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

from msmon import layout
from msmon.engine.record import StepProgress
from msmon.errors import describe
from msmon.util.atomic import atomic_write_json

logger = logging.getLogger("msmon")


class Heartbeat:
    """Writes ``{"step", "time", "pid", "rank", "host"}`` at most once per ``min_interval_s``."""

    def __init__(self, run_dir: Path, progress: StepProgress, rank: int, min_interval_s: float = 1.0) -> None:
        self.path = Path(run_dir) / layout.HEARTBEAT
        self._progress = progress
        self._rank = rank
        self._min_interval = min_interval_s
        self._written_step: int | None = None
        self._written_at = -float("inf")
        self._warned = False

    def tick(self, force: bool = False) -> None:
        """Rewrite the file when a step ended since the last write (and the interval has passed)."""
        step = self._progress.last_step
        now = time.monotonic()
        if not step or step == self._written_step or (not force and now - self._written_at < self._min_interval):
            return
        data = {"step": step, "time": self._progress.last_end_wall, "pid": os.getpid(), "rank": self._rank,
                "host": socket.gethostname()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # back, if the run directory was removed
            atomic_write_json(self.path, data, fsync=False)
        except OSError as exc:  # a monitor never breaks training
            if not self._warned:
                self._warned = True
                logger.warning("msmon: cannot write %s: %s (training continues)", self.path, describe(exc))
            return
        self._written_step = step
        self._written_at = now
