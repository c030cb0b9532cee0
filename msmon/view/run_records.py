"""A run's metrics.jsonl read once as a stream into one ``SeriesSketch`` per metric: the memory of a report does not
grow with the run. One record per step is shown (the last one wins after a resume), of one rank (``shown_rank``);
when the file holds several ranks or a step logged twice, two more passes find and read only the records shown."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

import numpy as np

from msmon.config.metrics import GROUP_NORM_PREFIX, is_group_key, norm_group
from msmon.records import shown_rank
from msmon.util.jsonfiles import JsonObject, iter_jsonl
from msmon.util.numbers import as_number
from msmon.util.split_read import map_ranges, parts_for
from msmon.view.sketch import SeriesSketch

NOT_METRICS = frozenset({"step", "time", "rank"})
#: Metrics whose median a page shows (and the gradient norms by group: the heatmap's baseline): their sketches keep
#: an even sample of the values (every value up to 131,072, msmon.view.sketch.EvenSample).
MEDIAN_METRICS = frozenset({"throughput", "tflops_per_device", "mfu"})
NO_RANK = -(2**62)
NUMBER_TYPES = frozenset({int, float})
ROWS = 4096  # records gathered before they become columns


@dataclass
class RunSeries:
    """The shown records of a run as sketches (metric -> ``SeriesSketch``, in order of first appearance); records
    are gathered ``ROWS`` at a time and handed to the sketches as columns (``finish`` hands over the rest)."""

    columns: dict[str, SeriesSketch] = field(default_factory=dict)
    logged: int = 0  # records shown (one per step)
    first_step: int | None = None
    last_step: int | None = None
    notes: list[str] = field(default_factory=list)
    _rows: list[JsonObject] = field(default_factory=list)
    _steps: list[int] = field(default_factory=list)

    def add(self, step: int, row: JsonObject) -> None:
        """The next shown record (in step order)."""
        self._rows.append(row)
        self._steps.append(step)
        if len(self._rows) >= ROWS:
            self.finish()

    def finish(self) -> None:
        """Hand the gathered records to the sketches, one column per metric."""
        rows, steps = self._rows, self._steps
        if not rows:
            return
        self._rows, self._steps = [], []
        self.logged += len(rows)
        if self.first_step is None:
            self.first_step = steps[0]
        self.last_step = steps[-1]
        at = np.array(steps, dtype=np.int64)
        for key in _keys(rows):
            try:
                values = list(map(itemgetter(key), rows))
            except KeyError:
                values = [row.get(key) for row in rows]
            if set(map(type, values)) <= NUMBER_TYPES:
                column_steps, column = at, np.array(values, dtype=np.float64)
            else:  # absent in some records, a NaN/Inf spelled as text, or not a number
                numbers = [(step, as_number(value)) for step, value in zip(steps, values, strict=True)]
                kept = [(step, number) for step, number in numbers if number is not None]
                if not kept:
                    continue
                column_steps = np.array([step for step, _ in kept], dtype=np.int64)
                column = np.array([number for _, number in kept], dtype=np.float64)
            sketch = self.columns.get(key)
            if sketch is None:
                # the values a median is taken of: the ending's medians, every heatmap row's baseline
                sketch = self.columns[key] = SeriesSketch(keep_values=key in MEDIAN_METRICS or is_group_key(key))
            sketch.add(column_steps, column)


    def extend(self, other: RunSeries) -> None:
        """``other``'s records appended (they came after this one's: the next part of the file)."""
        self.finish()
        other.finish()
        self.logged += other.logged
        self.first_step = self.first_step if self.first_step is not None else other.first_step
        self.last_step = other.last_step if other.last_step is not None else self.last_step
        for key, sketch in other.columns.items():
            if key in self.columns:
                self.columns[key].extend(sketch)
            else:
                self.columns[key] = sketch


def _keys(rows: list[JsonObject]) -> list[str]:
    """The keys of the records that may be metrics, in order of first appearance."""
    keys = dict.fromkeys(rows[0])
    if len(set().union(*rows)) > len(keys):
        for row in rows:
            keys.update(dict.fromkeys(row))
    return [key for key in keys if key not in NOT_METRICS]


@dataclass
class _Scan:
    """What the first pass saw of the records (of a part of the file): their ranks, whether each step came after
    the one before, the lines it could not read."""

    first: int | None = None
    last: int | None = None
    ranks_seen: set[int] = field(default_factory=set)
    with_loss: set[int] = field(default_factory=set)
    in_order: bool = True  # each step after the one before
    bad: int = 0
    cut: bool = False

    def see(self, step: int, row: JsonObject) -> None:
        """One more record."""
        rank = row.get("rank")
        if type(rank) is int:
            self.ranks_seen.add(rank)
            if "loss" in row:
                self.with_loss.add(rank)
        if self.last is not None and step <= self.last:
            self.in_order = False
        self.first = step if self.first is None else self.first
        self.last = step

    def extend(self, other: _Scan) -> None:
        """``other``'s records appended (the next part of the file)."""
        if self.last is not None and other.first is not None and other.first <= self.last:
            self.in_order = False
        self.in_order = self.in_order and other.in_order
        self.first = self.first if self.first is not None else other.first
        self.last = other.last if other.last is not None else self.last
        self.ranks_seen |= other.ranks_seen
        self.with_loss |= other.with_loss
        self.bad += other.bad
        self.cut = self.cut or other.cut


def record_step(row: JsonObject) -> int | None:
    """The record's step (``step``, else ``global_step``) as an int, None when it has no finite number."""
    step = row.get("step", row.get("global_step"))
    if type(step) is int:
        return step
    if isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step):
        return None
    return int(step)


def _rows(path: Path, scan: _Scan, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, JsonObject]]:
    """(step, record) of each line with a step (of the lines starting in bytes [start, stop) when given; undecodable
    bytes replaced); unreadable lines counted in ``scan``."""
    for line in iter_jsonl(path, start, stop):
        if line.row is None:
            scan.cut = scan.cut or line.cut
            scan.bad += not line.cut
            continue
        step = record_step(line.row)
        if step is not None:
            yield step, line.row


def read_run_series(path: Path) -> RunSeries:
    """The shown records of ``path`` (a metrics.jsonl) as sketches, a large file read in parts by one process per
    core; OSError when it cannot be read."""
    parts = map_ranges(_read_part, path, parts_for(path))
    series, scan = parts[0]
    for more, seen in parts[1:]:
        series.extend(more)
        scan.extend(seen)
    rank = shown_rank(scan.ranks_seen, scan.with_loss)
    if len(scan.ranks_seen) > 1:
        series.notes.append(f"records of ranks {sorted(scan.ranks_seen)} found; showing rank {rank}")
    if not scan.in_order or len(scan.ranks_seen) > 1:
        series = _reread(path, _shown(path, rank), series.notes)
    series.finish()
    if scan.cut:
        series.notes.append("the last line of metrics.jsonl is half-written (run still going or killed); "
                            "it was skipped")
    if scan.bad:
        series.notes.append(f"{scan.bad} unreadable line(s) of metrics.jsonl skipped")
    return series


def _read_part(path: Path, start: int, stop: int) -> tuple[RunSeries, _Scan]:
    """The records of the lines starting in bytes [start, stop) as sketches (while they come in step order, of one
    rank), and what the first pass saw of them."""
    scan = _Scan()
    series = RunSeries()
    for step, row in _rows(path, scan, start, stop):
        scan.see(step, row)
        if scan.in_order and len(scan.ranks_seen) <= 1:
            series.add(step, row)
    series.finish()
    for sketch in series.columns.values():
        sketch.compact()
    return series, scan


def _shown(path: Path, rank: int | None) -> tuple[np.ndarray, bool]:
    """Whether each record (file order) is shown (of the shown rank or naming none, the last of its step), and
    whether the shown records come in step order in the file: a pass over every record's step and rank."""
    at: array[int] = array("q")
    of: array[int] = array("q")
    for step, row in _rows(path, _Scan()):
        at.append(step)
        of.append(row["rank"] if type(row.get("rank")) is int else NO_RANK)
    steps = np.frombuffer(at, dtype=np.int64)
    ranks = np.frombuffer(of, dtype=np.int64)
    eligible = np.flatnonzero((ranks == NO_RANK) | (ranks == (NO_RANK if rank is None else rank)))
    _, last_from_end = np.unique(steps[eligible][::-1], return_index=True)
    keep = np.zeros(len(steps), dtype=bool)
    keep[eligible[len(eligible) - 1 - last_from_end]] = True
    in_order = bool(np.all(np.diff(steps[keep]) > 0))
    return keep, in_order


def _reread(path: Path, shown: tuple[np.ndarray, bool], notes: list[str]) -> RunSeries:
    """The second pass: the shown records only, in step order (held until the end only when the file has them out
    of order: an attempt that logged fewer steps than the one it resumed had logged past its checkpoint)."""
    keep, in_order = shown
    series = RunSeries(notes=notes)
    held: dict[int, JsonObject] = {}
    for number, (step, row) in enumerate(_rows(path, _Scan())):
        if number >= len(keep):  # a run still going logged more since the pass before: left for the next read
            break
        if not keep[number]:
            continue
        if in_order:
            series.add(step, row)
        else:
            held[step] = row
    for step in sorted(held):
        series.add(step, held[step])
    return series


def group_norms(series: RunSeries, prefix: str = GROUP_NORM_PREFIX) -> dict[str, SeriesSketch]:
    """group -> the sketch of its series of ``prefix`` (``grad_norm/<group>``, ``update_ratio/<group>``), in the
    order the records hold them."""
    found = {}
    for key, sketch in series.columns.items():
        group = norm_group(key, prefix)
        if group is not None:
            found[group] = sketch
    return found
