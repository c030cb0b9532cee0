"""The disk guard: when free space or the run directory's size crosses a limit, heavy outputs stop."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from msmon.config.schema import DiskGuardOptions
from msmon.listener import Listener, SessionStatus
from msmon.util.files import tree_size


class DiskGuard(Listener):
    """Checks the limits at most every ``interval_s`` (on the writer's cycles); the first crossing, or a backend's
    ENOSPC, trips it once: ``reason`` says why and ``on_trip`` stops the heavy outputs."""

    def __init__(self, run_dir: Path, options: DiskGuardOptions, on_trip: Callable[[str], None],
                 interval_s: float = 5.0) -> None:
        self.run_dir = Path(run_dir)
        self.options = options
        self.interval_s = interval_s
        self.reason: str | None = None
        self._on_trip = on_trip
        self._next = 0.0

    def on_status(self, status: SessionStatus) -> None:
        if self.reason is None:
            reason = self.check()
            if reason:
                self.trip(reason)

    def trip(self, reason: str) -> None:
        """Stop the heavy outputs for ``reason`` (the first reason only)."""
        if self.reason is None:
            self.reason = reason
            self._on_trip(reason)

    def check(self) -> str | None:
        """Why a limit is crossed now, or None (also None between checks)."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        limits = self.options
        if limits.min_free_mb is not None:
            probe = self.run_dir if self.run_dir.exists() else self.run_dir.parent
            try:
                free_mb = shutil.disk_usage(probe).free / 2**20
            except OSError:
                free_mb = None
            if free_mb is not None and free_mb < limits.min_free_mb:
                return f"free disk space {free_mb:.0f} MB is below monitor_config.disk.min_free_mb {limits.min_free_mb}"
        if limits.max_run_mb is not None:
            size_mb = tree_size(self.run_dir) / 2**20
            if size_mb > limits.max_run_mb:
                limit = limits.max_run_mb
                return f"the run directory holds {size_mb:.0f} MB, above monitor_config.disk.max_run_mb {limit}"
        return None
