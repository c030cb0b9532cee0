"""``Listener``: the one interface of everything that follows a session's record stream (the console line, the disk
guard, each rank's heartbeat, the health monitor, the progress views), and ``SessionStatus``, what a listener is
told on every writer cycle.

The session's writer thread calls every listener, in the order they were added: ``on_record`` for each logged
record, ``on_alert`` for each alert, ``on_status`` once per cycle (about 5 times a second while records arrive, once
a second otherwise), ``close`` at the end. A listener overrides what it needs; the others do nothing. What a
listener raises is counted as an internal error (msmon.util.internal_errors), never seen by the training.
"""

from __future__ import annotations

from dataclasses import dataclass

from msmon.util.jsonfiles import JsonObject


@dataclass(frozen=True)
class SessionStatus:
    """Where the run is, on every writer cycle."""

    last_step: int
    last_end_wall: float | None  # unix time of the last step end (None before the first)
    total_steps: int | None
    dropped_records: int


class Listener:
    """Follows the record stream on the session's writer thread; override what you need."""

    def on_record(self, record: JsonObject) -> None:
        """A logged step's record (every backend has been handed it)."""

    def on_alert(self, alert: JsonObject) -> None:
        """An alert (one line of alerts.jsonl)."""

    def on_status(self, status: SessionStatus) -> None:
        """The session's status, once per writer cycle."""

    def close(self) -> None:
        """The session ends: release what the listener holds (each listener within the listeners' budget)."""
