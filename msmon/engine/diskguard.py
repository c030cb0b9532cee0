"""The disk guard: when free space or the run directory's size crosses a limit, heavy outputs stop."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from msmon.config.schema import DiskGuardOptions
from msmon.util.files import tree_size


class DiskGuard:
    """Checks the limits at most every ``interval_s``; ``check`` returns the reason once crossed."""

    def __init__(self, run_dir: Path, options: DiskGuardOptions, interval_s: float = 5.0) -> None:
        self.run_dir = Path(run_dir)
        self.options = options
        self.interval_s = interval_s
        self._next = 0.0

    def check(self) -> str | None:
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
