"""The small interface every backend implements; all calls happen on a writer thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from msmon.config.schema import MonitorSettings

#: Record keys that are coordinates, not metric values.
COORDINATE_KEYS: frozenset[str] = frozenset({"step", "time", "rank"})


class PartialWrite(OSError):
    """A write that failed after its first ``written`` records were stored: the writer counts only the rest lost
    (and retries only the rest)."""

    def __init__(self, written: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.written = written


class Backend:
    """One output of the monitor (a file, summary files, a tracking server)."""

    name: ClassVar[str] = ""
    network: ClassVar[bool] = False  # failures are retried with backoff instead of disabling the backend
    heavy: ClassVar[bool] = False  # stopped by the disk guard (large files)
    records_lost: int = 0  # records the backend knows it lost after writing them (the writer counts the rest)

    def __init__(self, run_dir: Path, settings: MonitorSettings, config: dict[str, Any] | None) -> None:
        self.run_dir = Path(run_dir)
        self.settings = settings
        self.config = config

    @property
    def flush_interval_s(self) -> float:
        """How often the writer calls ``flush`` while records keep coming."""
        return 1.0

    @property
    def close_budget_s(self) -> float:
        """How long closing may take (write what is queued, flush, close) before msmon gives up on it."""
        return 10.0

    @property
    def write_interval_s(self) -> float:
        """The least time between two ``write`` calls (records wait and go out together)."""
        return 0.0

    def prepare(self) -> None:
        """Import heavy packages; called on the thread that starts the session (imports racing across
        threads break mindspore's package initialisation)."""

    def open(self) -> None:
        """Create files or connections (may raise; the writer retries or disables the backend)."""

    def write(self, records: list[dict[str, Any]]) -> None:
        """Write records (one dict per logged step, in step order)."""
        raise NotImplementedError

    def write_alert(self, alert: dict[str, Any]) -> None:
        """Show an alert, when the backend can show text (default: nothing)."""

    def flush(self) -> None:
        """Make everything written so far durable or visible."""

    def close(self, status: str) -> None:
        """Flush and release resources; ``status`` is the run's final status."""


def metric_items(record: dict[str, Any]) -> list[tuple[str, float]]:
    """The numeric metric values of a record (coordinates and non-numbers left out)."""
    return [
        (key, float(value))
        for key, value in record.items()
        if key not in COORDINATE_KEYS and isinstance(value, int | float) and not isinstance(value, bool)
    ]
