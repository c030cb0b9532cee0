"""Memory growth: one rank's host or device memory rises along a straight line over a window of steps (a leak, or
fragmentation), not in one jump. Names the rank, the growth per step and per minute and, where the limit is known,
the time left to it (the host's: its cgroup's or the machine's memory; the device's: ``device_capacity_gb``).

Fed in the ``msmon run`` parent with each rank's step costs (``msmon.step_cost.StepCost``, from its heartbeat), and
by ``msmon replay`` from ``heartbeats/rank_N.jsonl``; one detector per rank.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from msmon.config.health import MemoryGrowthSettings
from msmon.health.alert import Signal
from msmon.step_cost import StepCost
from msmon.util.durations import format_duration
from msmon.util.numbers import fmt_number

MIN_POINTS = 5  # logged steps a fit needs


@dataclass(frozen=True)
class Growth:
    """A fitted straight line: MiB per step and per second, how well it fits (R squared), over how many steps."""

    per_step: float
    per_s: float
    fit: float
    steps: int
    now_mb: float


def fit_growth(points: list[tuple[int, float, float]]) -> Growth | None:
    """The straight line through (step, time, MiB) points, or None when they cannot be fitted (too few, flat)."""
    if len(points) < MIN_POINTS:
        return None
    steps, times, values = ([float(p[i]) for p in points] for i in range(3))
    if len(set(steps)) < 2 or len(set(values)) < 2 or len(set(times)) < 2:
        return None
    per_step = statistics.linear_regression(steps, values).slope
    per_s = statistics.linear_regression(times, values).slope
    fit = statistics.correlation(steps, values) ** 2
    return Growth(per_step, per_s, fit, int(steps[-1] - steps[0]), values[-1])


class MemoryGrowthDetector:
    """One rank: ``observe(cost, host_left_mb)`` at every logged step it reports; one alert per episode and kind."""

    name = "memory_growth"

    def __init__(self, settings: MemoryGrowthSettings, rank: int, host: str | None = None) -> None:
        self.settings = settings
        self.rank = rank
        self.host = host
        self._points: dict[str, deque[tuple[int, float, float]]] = {"host": deque(), "device": deque()}
        self._first: int | None = None
        self._active: set[str] = set()

    def resumed(self) -> None:
        """A new attempt: a new process, whose memory starts again."""
        for points in self._points.values():
            points.clear()
        self._first = None
        self._active.clear()

    def observe(self, cost: StepCost, host_left_mb: float | None = None) -> Signal | None:
        s = self.settings
        if self._first is None:
            self._first = cost.step
        if cost.step - self._first < s.skip_steps:
            return None
        capacity = s.device_capacity_gb * 1024 if s.device_capacity_gb is not None else None
        device_left = capacity - cost.device_mb if capacity is not None and cost.device_mb is not None else None
        found = None
        for kind, value, left in (("host", cost.host_mb, host_left_mb), ("device", cost.device_mb, device_left)):
            if value is None:
                continue
            points = self._points[kind]
            points.append((cost.step, cost.time, value))
            while points and cost.step - points[0][0] > s.window_steps:
                points.popleft()
            signal = self._judge(kind, list(points), left)
            found = found or signal
        return found

    def _judge(self, kind: str, points: list[tuple[int, float, float]], left_mb: float | None) -> Signal | None:
        s = self.settings
        growth = fit_growth(points)
        growing = (growth is not None and growth.steps >= s.window_steps * 0.8 and growth.per_step > 0
                   and growth.per_step * s.window_steps >= s.min_growth_mb and growth.fit >= s.min_fit)
        if not growing or growth is None:
            self._active.discard(kind)
            return None
        if kind in self._active:
            return None
        self._active.add(kind)
        where = f"rank {self.rank}" + (f" on {self.host}" if self.host else "")
        message = (f"{where}: {kind} memory grows steadily, {fmt_number(growth.per_step)} MiB a step "
                   f"({fmt_number(growth.per_s * 60)} MiB a minute) over {growth.steps} steps (R² {growth.fit:.2f}), "
                   f"now {fmt_number(growth.now_mb)} MiB")
        values = {"rank": self.rank, "host": self.host, "kind": kind, "mb_per_step": growth.per_step,
                  "mb_per_s": growth.per_s, "fit": growth.fit, "steps": growth.steps, "memory_mb": growth.now_mb}
        if left_mb is not None and growth.per_s > 0:
            seconds = max(0.0, left_mb) / growth.per_s
            limit = "the host's memory limit" if kind == "host" else "the device's capacity"
            message += f"; {limit} is reached in about {format_duration(seconds)} ({fmt_number(left_mb)} MiB left)"
            values.update(left_mb=left_mb, seconds_left=seconds)
        return Signal("warning", message + ": a leak or fragmentation (a callback, a cache, a growing list)", values)
