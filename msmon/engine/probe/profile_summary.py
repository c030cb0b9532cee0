"""msmon's summary of one rank's profile: time per operator type, the top operators and the operators' time in each
step, parsed from the CPU tables MindSpore's profiler writes (``<worker>_ascend_ms/FRAMEWORK/``):

- ``cpu_op_type_info_<N>.csv``: ``op_type, type_occurrences, execution_frequency(per-step), total_compute_time,
  avg_time(ms), percent`` (times in ms, percent a fraction);
- ``cpu_op_detail_info_<N>.csv``: ``op_side, op_type, op_name, full_op_name, op_occurrences, op_total_time(ms),
  op_avg_time(ms), total_proportion, subgraph, pid``;
- ``cpu_op_execute_timestamp_<N>.txt``: ``full_op_name;HostCpuOps;start_ns,duration_ms,0 start_ns,...`` per line
  (start in Unix nanoseconds), which the window's own step boundaries split into steps.

A profile without these tables (an Ascend device's operators are in ASCEND_PROFILER_OUTPUT, read by MindStudio
Insight and msprof-analyze) gets a summary that says so, with the steps' wall times alone.
"""

from __future__ import annotations

import bisect
import csv
from functools import partial
from pathlib import Path

from msmon.probe.summary import OpTime, OpTypeTime, ProfileSummary, StepBounds, StepTime

TOP_OPERATORS = 20
FRAMEWORK = "FRAMEWORK"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def op_types(path: Path) -> list[OpTypeTime]:
    """``cpu_op_type_info_N.csv``, the most time first; ValueError on a row that is not one."""
    types = [OpTypeTime(row["op_type"], int(row["type_occurrences"]), float(row["total_compute_time"]),
                        float(row["avg_time(ms)"]), float(row["percent"])) for row in _rows(path)]
    return sorted(types, key=lambda t: -t.total_ms)


def operators(path: Path) -> list[OpTime]:
    """``cpu_op_detail_info_N.csv``, the most time first."""
    ops = [OpTime(row["full_op_name"], row["op_type"], int(row["op_occurrences"]), float(row["op_total_time(ms)"]),
                  float(row["op_avg_time(ms)"])) for row in _rows(path)]
    return sorted(ops, key=lambda o: -o.total_ms)


def op_calls(path: Path) -> list[tuple[int, float]]:
    """(start in Unix ns, duration in ms) of every operator call in ``cpu_op_execute_timestamp_N.txt``."""
    calls = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split(";")
        if len(parts) < 3:
            continue
        for call in parts[2].split():
            start, duration, *_ = call.split(",")
            calls.append((int(start), float(duration)))
    return calls


def per_step(bounds: list[StepBounds], calls: list[tuple[int, float]] | None) -> list[StepTime]:
    """Each step's wall time and the operator calls that started between its begin and the next step's begin
    (the last step: its end)."""
    begins = [b.begin_ns for b in bounds]
    sums = [0.0] * len(bounds)
    counts = [0] * len(bounds)
    for start, duration in calls or []:
        index = bisect.bisect_right(begins, start) - 1
        if index < 0 or (index == len(bounds) - 1 and start > bounds[-1].end_ns):
            continue
        sums[index] += duration
        counts[index] += 1
    return [StepTime(b.step, (b.end_ns - b.begin_ns) / 1e6, round(sums[i], 6) if calls is not None else None,
                     counts[i] if calls is not None else None) for i, b in enumerate(bounds)]


def _table(directory: Path, stem: str, suffix: str) -> Path | None:
    found = sorted((directory / FRAMEWORK).glob(f"{stem}_*{suffix}"))
    return found[0] if found else None


def summarize(rank_dir: Path, rank: int, bounds: list[StepBounds], complete: bool) -> ProfileSummary:
    """The summary of the profile below ``rank_dir`` (``bounds``: the profiled steps, in order); OSError or
    ValueError when a table is there but unreadable."""
    outputs = sorted(p for p in rank_dir.glob("*_ascend_ms") if p.is_dir())
    first = bounds[0].step if bounds else 0
    last = bounds[-1].step if bounds else first - 1
    base = partial(ProfileSummary, rank, first, last, complete, [p.name for p in outputs])
    for output in outputs:
        types_path = _table(output, "cpu_op_type_info", ".csv")
        detail_path = _table(output, "cpu_op_detail_info", ".csv")
        if types_path is not None and detail_path is not None:
            break
    else:
        note = ("the profiler wrote no CPU operator tables (FRAMEWORK/cpu_op_*): open the output in MindStudio "
                "Insight or msprof-analyze" if outputs else "the profiler wrote nothing")
        return base(op_total_ms=0.0, steps=per_step(bounds, None), note=note)
    times_path = _table(output, "cpu_op_execute_timestamp", ".txt")
    types = op_types(types_path)
    calls = op_calls(times_path) if times_path is not None else None
    return base(op_total_ms=round(sum(t.total_ms for t in types), 6), op_types=types,
                          top_operators=operators(detail_path)[:TOP_OPERATORS], steps=per_step(bounds, calls))
