"""What one logged step cost one rank: time inside and outside the step, host and device memory.

The callback builds one ``StepCost`` per logging step on every rank; the rank's heartbeat carries the recent ones
and appends each to ``heartbeats/rank_N.jsonl``; the ``msmon run`` parent (the slow-rank and memory-growth
detectors), ``msmon status`` and ``msmon replay`` read them back through ``from_json``.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path

from msmon import layout
from msmon.util.jsonfiles import JsonObject, JsonValue, read_jsonl
from msmon.util.numbers import as_number, fmt_number


@dataclass(frozen=True)
class StepCost:
    """One rank's logged step: the mean per step over the log interval (``steps`` steps) ending at ``step``.

    ``inside_ms``: the train step itself, from msmon's step begin (the last step-begin callback) to the end of the
    first step-end callback (MindSpore's own); ``outside_ms``: the rest, to the next step's begin (the step-end
    callbacks: mindformers' print, a checkpoint save; the next batch's data; the step-begin callbacks). Memory in MiB
    at the logging step: the process's resident host memory, and the device's allocated and peak memory where
    MindSpore reports them (None on CPU).
    """

    step: int
    time: float
    steps: int
    inside_ms: float
    outside_ms: float
    host_mb: float | None = None
    device_mb: float | None = None
    device_peak_mb: float | None = None

    @property
    def step_ms(self) -> float:
        return self.inside_ms + self.outside_ms

    def record_fields(self, metrics: Collection[str]) -> dict[str, float]:
        """What a metrics record carries of it: the split with ``step_time_ms`` tracked, the memory read with
        ``host_memory_mb`` (none on CPU of the device's)."""
        fields: dict[str, float] = {}
        if "step_time_ms" in metrics:
            fields.update(step_inside_ms=self.inside_ms, step_outside_ms=self.outside_ms)
        if "host_memory_mb" in metrics:
            memory = {"host_memory_mb": self.host_mb, "device_memory_mb": self.device_mb,
                      "device_memory_peak_mb": self.device_peak_mb}
            fields.update((key, value) for key, value in memory.items() if value is not None)
        return fields

    def to_json(self) -> JsonObject:
        return {key: round(value, 3) if isinstance(value, float) else value for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: JsonValue) -> StepCost | None:
        """The cost a JSON object describes, or None when it is not one (an older or damaged line)."""
        if not isinstance(data, dict):
            return None
        step, steps = data.get("step"), data.get("steps")
        numbers = [as_number(data.get(key)) for key in ("time", "inside_ms", "outside_ms")]
        if not isinstance(step, int) or not isinstance(steps, int) or any(n is None for n in numbers):
            return None
        optional = [as_number(data.get(key)) for key in ("host_mb", "device_mb", "device_peak_mb")]
        when, inside, outside = (float(n) for n in numbers if n is not None)
        return cls(step, when, steps, inside, outside, *optional)


def read_costs(run_dir: Path) -> dict[int, list[StepCost]]:
    """rank -> the step costs it appended to ``heartbeats/rank_N.jsonl`` in the order written (every attempt: a
    step lower than the one before starts a new attempt); unreadable lines are skipped."""
    found: dict[int, list[StepCost]] = {}
    for rank, path in layout.heartbeat_files(run_dir, ".jsonl").items():
        try:
            rows = read_jsonl(path).rows
        except OSError:
            continue
        costs = [cost for cost in map(StepCost.from_json, rows) if cost is not None]
        if costs:
            found[rank] = costs
    return found


@dataclass(frozen=True)
class TimeSplit:
    """One rank's typical step: the medians of its logged steps' time inside and outside the step (the first
    logged step of each attempt, which holds the graph compilation, left out) and its last host memory."""

    rank: int
    inside_ms: float
    outside_ms: float
    host_mb: float | None

    def text(self) -> str:
        memory = f", host {fmt_number(self.host_mb)} MiB" if self.host_mb is not None else ""
        return (f"rank {self.rank} {fmt_number(self.inside_ms)} ms in the step + {fmt_number(self.outside_ms)} ms "
                f"outside{memory}")


def time_split(rank: int, costs: list[StepCost]) -> TimeSplit | None:
    """The rank's ``TimeSplit``, None without a logged step after the first of an attempt."""
    steady = [cost for before, cost in zip([None, *costs], costs, strict=False)
              if before is not None and cost.step > before.step]
    if not steady:
        return None
    return TimeSplit(rank, statistics.median(c.inside_ms for c in steady),
                     statistics.median(c.outside_ms for c in steady), costs[-1].host_mb)
