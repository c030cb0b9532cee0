"""A series seen once, point by point, kept in bounded memory for drawing: the first, lowest, highest and last point
of each bucket of consecutive values (M4, so no spike or dip vanishes) and each bucket's first NaN/Inf of each kind.

Buckets hold a power-of-two count of values; when there are too many, neighbours merge pairwise (the merge of two
buckets' first/min/max/last is exactly the first/min/max/last of their union), so the memory of a series does not
grow with the run: a million values cost what four thousand do. Up to ``max_points`` values are kept as they are."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import nonfinite_kind

MAX_POINTS = 4000
CHUNK = 16384  # values gathered before they are folded into buckets
KEEP_MAX = 131072  # values kept for a median, 1 MiB

# a bucket: (first step, first value, min step, min value, max step, max value, last step, last value)
Bucket = tuple[int, float, int, float, int, float, int, float]


@dataclass
class DrawSeries:
    """A series ready to draw: finite points (min/max-preserving downsample) and non-finite markers."""

    x: list[int]
    y: list[float]
    nonfinite: list[tuple[int, str]]
    total: int

    def to_json(self) -> JsonObject:
        return {"x": self.x, "y": self.y, "nonfinite": [list(p) for p in self.nonfinite], "total": self.total}


class EvenSample:
    """A series' finite values for a median in bounded memory: every value up to ``KEEP_MAX`` of them, beyond that
    every 2nd, then every 4th, ... (an even sample of the whole series)."""

    def __init__(self) -> None:
        self.stride = 1
        self.seen = 0
        self._parts: list[np.ndarray] = []
        self._count = 0

    def add(self, values: np.ndarray) -> None:
        """The next values: those whose ordinal in the series is a multiple of the stride are kept."""
        taken = values[(-self.seen) % self.stride::self.stride]
        self.seen += len(values)
        self._keep(taken)

    def extend(self, other: EvenSample) -> None:
        """``other``'s values appended (they came after this sample's)."""
        while self.stride < other.stride:
            self._thin()
        theirs = other.values()
        ordinals = self.seen + other.stride * np.arange(len(theirs))
        self.seen += other.seen
        self._keep(theirs[ordinals % self.stride == 0])

    def values(self) -> np.ndarray:
        return np.concatenate(self._parts) if self._parts else np.empty(0)

    def _keep(self, taken: np.ndarray) -> None:
        if len(taken):
            self._parts.append(taken)
            self._count += len(taken)
        while self._count > KEEP_MAX:
            self._thin()

    def _thin(self) -> None:
        """Every other kept value (the ordinals kept are multiples of the doubled stride)."""
        kept = self.values()[::2]
        self._parts, self._count, self.stride = [kept], len(kept), self.stride * 2


def _merge(a: Bucket, b: Bucket) -> Bucket:
    """The bucket of ``a``'s values followed by ``b``'s."""
    low = a[2:4] if a[3] <= b[3] else b[2:4]
    high = a[4:6] if a[5] >= b[5] else b[4:6]
    return (a[0], a[1], low[0], low[1], high[0], high[1], b[6], b[7])


class SeriesSketch:
    """One metric's values in step order (``add``), drawn with ``draw``; ``keep_values`` also keeps an even sample of
    its finite values for a median (``kept``: all of them up to ``KEEP_MAX``)."""

    def __init__(self, max_points: int = MAX_POINTS, keep_values: bool = False) -> None:
        self.max_buckets = max(1, max_points // 4)
        self.max_points = max_points
        self.count = 0  # values seen, NaN/Inf included
        self.finite = 0
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None
        self._sample = EvenSample() if keep_values else None
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # finite (steps, values) not yet folded
        self._pending_count = 0
        self._width = 1  # values per bucket
        self._buckets: list[tuple[int, Bucket]] = []  # (bucket number, bucket)
        self._folded = False
        self._mark_width = 1
        self._marks: dict[tuple[int, str], int] = {}  # (bucket of the non-finite values, kind) -> first step
        self._nonfinite = 0

    def add(self, steps: np.ndarray, values: np.ndarray) -> None:
        """The next values (int64 steps, float64 values, in step order)."""
        if not len(values):
            return
        self.count += len(values)
        if self.first is None:
            self.first = (int(steps[0]), float(values[0]))
        self.last = (int(steps[-1]), float(values[-1]))
        finite = np.isfinite(values)
        if not finite.all():
            for index in np.flatnonzero(~finite).tolist():
                self._mark(int(steps[index]), float(values[index]))
            steps, values = steps[finite], values[finite]
        if self._sample is not None:
            self._sample.add(values)
        self.finite += len(values)
        self._pending.append((steps, values))
        self._pending_count += len(values)
        if self._pending_count >= CHUNK:
            self._fold()

    def extend(self, other: SeriesSketch) -> None:
        """``other``'s values appended (they came after this sketch's: the next part of a file)."""
        if not other.count:
            return
        self.count += other.count
        self.first = self.first or other.first
        self.last = other.last
        for (number, kind), step in sorted(other._marks.items()):
            self._mark_at(self._nonfinite + number * other._mark_width, kind, step)
        self._nonfinite += other._nonfinite
        if self._sample is not None and other._sample is not None:
            self._sample.extend(other._sample)
        if not self._folded and not other._folded:
            self._pending.extend(other._pending)
            self._pending_count += other._pending_count
            self.finite += other.finite
            if self._pending_count >= CHUNK:
                self._fold()
            return
        self._fold()
        other._fold()
        while self._width < other._width:
            self._widen()
        for number, bucket in other._buckets:
            at = (self.finite + number * other._width) // self._width
            if self._buckets and self._buckets[-1][0] >= at:
                self._buckets[-1] = (self._buckets[-1][0], _merge(self._buckets[-1][1], bucket))
            else:
                self._buckets.append((at, bucket))
        self.finite += other.finite
        while self._buckets and self._buckets[-1][0] >= self.max_buckets:
            self._widen()
        self._folded = True

    def compact(self) -> None:
        """Fold the gathered values now when they will be drawn as buckets anyway (before the sketch travels to
        another process: its pickle is then a few thousand buckets)."""
        if self.finite > self.max_points:
            self._fold()

    def _mark(self, step: int, value: float) -> None:
        self._nonfinite += 1
        self._mark_at(self._nonfinite - 1, nonfinite_kind(value) or "nan", step)

    def _mark_at(self, ordinal: int, kind: str, step: int) -> None:
        """The ``ordinal``-th non-finite value, of ``kind``, at ``step``."""
        key = (ordinal // self._mark_width, kind)
        self._marks.setdefault(key, step)
        if len(self._marks) > 3 * self.max_buckets:
            self._mark_width *= 2
            merged: dict[tuple[int, str], int] = {}
            for (number, kind), first in self._marks.items():
                merged.setdefault((number // 2, kind), first)
            self._marks = merged

    def kept(self) -> np.ndarray:
        """The finite values kept for a median (``EvenSample``; empty unless ``keep_values``)."""
        return self._sample.values() if self._sample is not None else np.empty(0)

    def _fold(self) -> None:
        """Fold the pending values into buckets, widening the buckets while there are too many."""
        count = self._pending_count
        if not count:
            return
        steps = np.concatenate([part[0] for part in self._pending])
        values = np.concatenate([part[1] for part in self._pending])
        self._pending, self._pending_count = [], 0
        start = self.finite - count  # the ordinal of the first pending value
        while (self.finite - 1) // self._width >= self.max_buckets:
            self._widen()
        numbers = (start + np.arange(count)) // self._width
        cuts = np.flatnonzero(np.diff(numbers)) + 1
        heads = np.concatenate(([0], cuts)).tolist()
        tails = (np.concatenate((cuts, [count])) - 1).tolist()
        step_list, value_list = steps.tolist(), values.tolist()
        for head, tail in zip(heads, tails, strict=True):
            part = values[head:tail + 1]
            low, high = head + int(np.argmin(part)), head + int(np.argmax(part))
            bucket: Bucket = (step_list[head], value_list[head], step_list[low], value_list[low],
                              step_list[high], value_list[high], step_list[tail], value_list[tail])
            number = int(numbers[head])
            if self._buckets and self._buckets[-1][0] == number:
                self._buckets[-1] = (number, _merge(self._buckets[-1][1], bucket))
            else:
                self._buckets.append((number, bucket))
        self._folded = True

    def _widen(self) -> None:
        """Twice as many values per bucket: neighbours merge."""
        self._width *= 2
        merged: list[tuple[int, Bucket]] = []
        for number, bucket in self._buckets:
            if merged and merged[-1][0] == number // 2:
                merged[-1] = (number // 2, _merge(merged[-1][1], bucket))
            else:
                merged.append((number // 2, bucket))
        self._buckets = merged

    def buckets(self) -> list[Bucket]:
        """The finite values as at most ``max_points // 4`` buckets (each a run of consecutive values)."""
        if not self._pending:
            return [bucket for _, bucket in self._buckets]
        whole = copy.copy(self)  # folds a copy: a short series is still drawn point by point
        whole._fold()
        return [bucket for _, bucket in whole._buckets]

    def marks(self) -> list[tuple[int, str]]:
        """(step, kind) of the first non-finite value of each kind in each bucket of them, in step order."""
        return sorted((step, kind) for (_, kind), step in self._marks.items())

    def low(self) -> tuple[int, float] | None:
        """(step, value) of the lowest finite value (the first of equals), None without one."""
        best = min(self.buckets(), key=lambda bucket: bucket[3], default=None)
        return (best[2], best[3]) if best is not None else None

    def draw(self) -> DrawSeries:
        """Every point when there are at most ``max_points`` finite values, else the first, min, max and last of
        each bucket; a marker per bucket and kind of the non-finite values."""
        if not self._folded and self.finite <= self.max_points:
            x = [step for part in self._pending for step in part[0].tolist()]
            y = [value for part in self._pending for value in part[1].tolist()]
            return DrawSeries(x, y, self.marks(), self.count)
        x, y = [], []
        for bucket in self.buckets():
            for step, value in sorted({bucket[0:2], bucket[2:4], bucket[4:6], bucket[6:8]}):
                x.append(step)
                y.append(value)
        return DrawSeries(x, y, self.marks(), self.count)


def downsample(steps: list[int], values: list[float], max_points: int = MAX_POINTS) -> DrawSeries:
    """``steps``/``values`` as ``SeriesSketch.draw`` draws them."""
    sketch = SeriesSketch(max_points)
    sketch.add(np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64))
    return sketch.draw()


def median(sketch: SeriesSketch, positive: bool = False) -> float | None:
    """The median of the sketch's kept finite values (``positive``: of those above 0), None without any."""
    kept = sketch.kept()
    if positive:
        kept = kept[kept > 0]
    return float(np.median(kept)) if kept.size else None
