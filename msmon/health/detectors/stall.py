"""Stalls: no step ended for a calibrated timeout (live, judged by ``msmon run``'s parent) or a time gap between
records (replay, and a library session)."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime

from msmon.config.health import StallSettings
from msmon.health.alert import Signal
from msmon.util.jsonfiles import JsonObject


def calibrate(step_seconds: Sequence[float], settings: StallSettings) -> float:
    """The stall timeout: the configured one, else max(factor x slowest recent step, floor)."""
    if settings.timeout_s is not None:
        return settings.timeout_s
    recent = [s for s in list(step_seconds)[-settings.recent :] if math.isfinite(s) and s >= 0]
    if not recent:
        return max(settings.first_step_timeout_s, settings.floor_s)
    return max(settings.factor * max(recent), settings.floor_s)


def stamp(unix: float | None) -> str:
    """ISO 8601 UTC time of a unix timestamp, to the second."""
    if unix is None:
        return "n/a"
    try:
        return datetime.fromtimestamp(unix, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # not a plausible unix time
        return f"t={unix:g}"


class StallDetector:
    """One timeout rule for both entry points.

    ``observe`` (every record, live and replay) learns per-step seconds from record times and reports
    a gap between two records whose slowest step must have exceeded the timeout. ``check`` (live: the
    watcher of ``msmon run`` over the ranks' heartbeats) reports a step that has not ended for the timeout while
    training is blocked. A stall reported live is not reported again by the gap check.
    """

    name = "stall"

    def __init__(self, settings: StallSettings, slow_every: tuple[int, ...] = ()) -> None:
        self.settings = settings
        self.slow_every = tuple(every for every in slow_every if every > 1)  # every step: calibration sees it
        self._seconds: deque[float] = deque(maxlen=max(settings.recent, 1))
        self._prev: tuple[int, float] | None = None
        self.reported_step: int | None = None
        # every timeout is at least this: the configured one, else the floor of the calibrated one
        self._least_timeout = settings.timeout_s if settings.timeout_s is not None else settings.floor_s

    def timeout(self, step_seconds: Sequence[float] | None = None, slow: bool = False, started: bool = True) -> float:
        """The calibrated timeout; at least ``slow_step_timeout_s`` where a save or an evaluation may run. Before
        the first step has ended (``started`` false: model build, graph compilation) only ``first_step_timeout_s``."""
        if not started:
            return self.settings.first_step_timeout_s
        timeout = calibrate(self._seconds if step_seconds is None else step_seconds, self.settings)
        return max(timeout, self.settings.slow_step_timeout_s) if slow else timeout

    def _slow(self, first: int, last: int) -> bool:
        """Whether a checkpoint save or an evaluation runs at a step end in ``first..last``."""
        return any(last // every > (first - 1) // every for every in self.slow_every)

    def observe(self, record: JsonObject) -> Signal | None:
        step, time = record.get("step"), record.get("time")
        if not isinstance(step, int) or isinstance(time, bool) or not isinstance(time, int | float):
            return None
        if not math.isfinite(time):
            return None
        prev, self._prev = self._prev, (step, float(time))
        if prev is None or step <= prev[0] or time < prev[1]:
            return None
        steps, gap = step - prev[0], time - prev[1]
        if not self._seconds or gap <= self._least_timeout:  # no step in the gap can have taken the timeout
            self._seconds.append(gap / steps)
            return None
        typical = statistics.median(self._seconds)
        slowest = gap - (steps - 1) * typical  # the longest single step inside the gap, at least
        timeout = self.timeout(slow=self._slow(prev[0], step))
        if slowest <= timeout:
            self._seconds.append(gap / steps)
            return None
        if self.reported_step is not None and prev[0] <= self.reported_step < step:
            return None
        return Signal(
            "critical",
            f"time gap: between step {prev[0]} ({stamp(prev[1])}) and step {step} ({stamp(time)}) one step took "
            f"about {slowest:.3g} s, over the stall timeout of {timeout:.3g} s",
            {"last_step": prev[0], "last_step_time": prev[1], "gap_s": gap, "stalled_s": slowest,
             "timeout_s": timeout, "check": "gap"},
        )

    def resumed(self) -> None:
        """A restart from a checkpoint: the time until its first record is no stalled step, and a stall at a step
        reported before the restart is a new one."""
        self._prev = None
        self.reported_step = None

    def due(self, idle_s: float, last_step: int | None, step_seconds: Sequence[float]) -> float | None:
        """The timeout when a stall is to be reported now (``idle_s`` over it and this stall not reported yet),
        else None. A save or an evaluation runs in a step-end callback before or after msmon's, so both the last
        step and the next one count."""
        slow = last_step is not None and self._slow(last_step, last_step + 1)
        timeout = self.timeout(step_seconds, slow, started=last_step is not None)
        marker = -1 if last_step is None else last_step
        return None if idle_s <= timeout or self.reported_step == marker else timeout

    def check(
        self, idle_s: float, last_step: int | None, last_end_wall: float | None, step_seconds: Sequence[float],
        detail: str | None = None, values: JsonObject | None = None,
    ) -> Signal | None:
        """Live: ``idle_s`` since the last step end (or since start); ``step_seconds`` excludes step 1.
        ``detail`` says where the run hangs (the ranks, their stacks), ``values`` what the alert adds for it."""
        timeout = self.due(idle_s, last_step, step_seconds)
        if timeout is None:
            return None
        self.reported_step = -1 if last_step is None else last_step
        where = "no step has ended yet"
        if last_step is not None:
            where = f"last step {last_step} ended at {stamp(last_end_wall)}"
        return Signal(
            "critical",
            f"stall: no training step has ended for {idle_s:.3g} s (timeout {timeout:.3g} s); {where}. "
            + (detail or "The run may be hung (data loader, collective, I/O)"),
            {"last_step": last_step, "last_step_time": last_end_wall, "last_step_time_iso": stamp(last_end_wall),
             "idle_s": idle_s, "timeout_s": timeout, "check": "live", **(values or {})},
        )
