"""Progress without a panel: the step clock (rate, ETA) and one plain line per logged step."""

from __future__ import annotations

import sys
import threading
from collections import deque
from typing import TextIO

from msmon.listener import Listener, SessionStatus
from msmon.util.durations import format_duration
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import as_number, fmt_number

#: (record key, label) of the metrics a progress line or the panel shows.
METRICS: tuple[tuple[str, str], ...] = (
    ("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("throughput", "tokens/s"),
)


class StepClock:
    """Step rate and ETA from the (step, time) pairs of recent records."""

    def __init__(self, total_steps: int | None) -> None:
        self.total_steps = total_steps if total_steps and total_steps > 0 else None
        self.points: deque[tuple[int, float]] = deque(maxlen=20)

    def add(self, step: int, when: float) -> None:
        self.points.append((step, when))

    def add_record(self, record: JsonObject) -> None:
        """Add a record's (step, time) when it has both."""
        step, when = record.get("step"), as_number(record.get("time"))
        if isinstance(step, int) and when is not None:
            self.add(step, when)

    def learn_total(self, total: object) -> None:
        """Take the planned step count when the config did not state it (the training knows it)."""
        if self.total_steps is None and isinstance(total, int) and total > 0:
            self.total_steps = total

    def steps_per_s(self) -> float | None:
        if len(self.points) < 2:
            return None
        (s0, t0), (s1, t1) = self.points[0], self.points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def eta(self, step: int | None = None) -> float | None:
        rate = self.steps_per_s()
        if step is None and self.points:
            step = self.points[-1][0]
        if rate is None or self.total_steps is None or step is None:
            return None
        return max(0.0, (self.total_steps - step) / rate)


def plain_line(record: JsonObject, clock: StepClock) -> str:
    """One line per logged step: step/total, the main metrics, ETA."""
    total = f"/{clock.total_steps}" if clock.total_steps else ""
    parts = [f"step {record.get('step')}{total}"]
    for key, label in METRICS:
        value = as_number(record.get(key))
        if value is not None:
            parts.append(f"{label} {fmt_number(value)}")
    eta = clock.eta()
    if eta is not None:
        parts.append(f"eta {format_duration(eta, fine=True)}")
    return "msmon: " + "  ".join(parts)


class PlainView(Listener):
    """Plain progress (not a terminal, or ``--plain``): one line per logged step on ``stream`` (stdout by default;
    none in verbose mode, whose session already prints a line per logged step). Also a stream itself, so the
    framework's kept lines and msmon's own warnings print between the progress lines, never inside one."""

    def __init__(self, total_steps: int | None, stream: TextIO | None = None, verbose: bool = False) -> None:
        self.clock = StepClock(total_steps)
        self.stream = stream
        self.verbose = verbose
        self._lock = threading.Lock()

    def print_above(self, text: str) -> None:
        """Text from another writer (complete lines), printed whole."""
        stream = self.stream or sys.stdout
        with self._lock:
            stream.write(text)
            stream.flush()

    def write(self, text: str) -> int:
        """As a stream (for a logging handler)."""
        self.print_above(text)
        return len(text)

    def flush(self) -> None:
        """Every write is flushed."""

    def on_record(self, record: JsonObject) -> None:
        self.clock.add_record(record)
        if not self.verbose:
            self.print_above(plain_line(record, self.clock) + "\n")

    def on_alert(self, alert: JsonObject) -> None:
        """Alerts are already logged by the health monitor; nothing to add on a plain stream."""

    def on_status(self, status: SessionStatus) -> None:
        self.clock.learn_total(status.total_steps)

    def close(self) -> None:
        """Nothing to release."""
