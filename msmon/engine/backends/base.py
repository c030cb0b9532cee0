"""The small interface every backend implements; all calls happen on a writer thread.

The base owns what the backends that describe a run share: its facts (``facts``: the hyperparameters, read once,
and the results of every record the writer stored, added by the writer after each write) and the mapping of msmon's
final status to the backend's own words (``status_names``). ``close(status)`` gets the run's final ``RunStatus``,
or None when the writer stops the backend before the run ends (the disk guard, repeated failures): then the
backend releases what it holds and declares no end.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from msmon.config.schema import MonitorSettings
from msmon.engine.backends.runfacts import RunFacts
from msmon.foreign import ConfigValue
from msmon.status import Attempt, RunStatus
from msmon.util.jsonfiles import JsonObject

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
    #: writes only files in the run directory: such backends share one worker thread (msmon/engine/backend_thread.py)
    in_run_dir: ClassVar[bool] = False
    keeps_run_facts: ClassVar[bool] = False  # the writer adds every stored record to ``facts``
    #: msmon's final status -> the backend's word for it; a status not listed is ``other_status`` (else its value)
    status_names: ClassVar[Mapping[RunStatus, str]] = {}
    other_status: ClassVar[str | None] = None
    records_lost: int = 0  # records the backend knows it lost after writing them (the writer counts the rest)
    attempt: Attempt | None = None  # the run's attempt, set by the session before ``open`` (None: the first)

    def __init__(self, run_dir: Path, settings: MonitorSettings, config: dict[str, ConfigValue] | None) -> None:
        self.run_dir = Path(run_dir)
        self.settings = settings
        self.config = config
        self._facts: RunFacts | None = None

    @property
    def facts(self) -> RunFacts:
        """The run's hyperparameters and results so far (made at the first use, kept across a reopen)."""
        if self._facts is None:
            self._facts = RunFacts(self.config, self.run_dir, self.attempt)
        return self._facts

    @classmethod
    def status_name(cls, status: RunStatus) -> str:
        """The backend's word for msmon's final ``status``."""
        return cls.status_names.get(status, cls.other_status or status.value)

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

    def write(self, records: list[JsonObject]) -> None:
        """Write records (one dict per logged step, in step order)."""
        raise NotImplementedError

    def write_alert(self, alert: JsonObject) -> None:
        """Show an alert, when the backend can show text (default: nothing)."""

    def flush(self) -> None:
        """Make everything written so far durable or visible."""

    def close(self, status: RunStatus | None) -> None:
        """Flush and release resources; ``status``: the run's final status, None when the writer stops this backend
        before the run ends (then no end is declared)."""


def metric_items(record: JsonObject) -> list[tuple[str, float]]:
    """The numeric metric values of a record (coordinates and non-numbers left out)."""
    return [
        (key, float(value))
        for key, value in record.items()
        if key not in COORDINATE_KEYS and isinstance(value, int | float) and not isinstance(value, bool)
    ]
