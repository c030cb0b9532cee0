"""The sliding window of (step, value) points a trend detector fits, kept up to date as points enter and leave: running
sums for the least-squares slope and the values in sorted order for the median, so a record costs O(1) sums and one
sorted insert instead of a refit of the whole window (a million-record replay, #47)."""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

EXACT_FIT = 1e-9  # residual below this share of the spread: the sums' rounding would decide the t statistic; refit


def median_of_sorted(values: Sequence[float]) -> float:
    """The median of ascending ``values`` (as ``statistics.median``: the mean of the middle two for an even count)."""
    n = len(values)
    middle = n // 2
    return values[middle] if n % 2 else (values[middle - 1] + values[middle]) / 2


def fit_slope(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (slope, t statistic) of y over x, computed from the points; t is inf for an exact fit."""
    n = len(points)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum([(x - mx) ** 2 for x in xs])
    if sxx <= 0:
        return 0.0, 0.0
    slope = sum([(x - mx) * (y - my) for x, y in points]) / sxx
    residual = sum([(y - my - slope * (x - mx)) ** 2 for x, y in points])
    return slope, _t_stat(slope, residual, n, sxx)


def _t_stat(slope: float, residual: float, n: int, sxx: float) -> float:
    se = math.sqrt(residual / max(n - 2, 1) / sxx)
    if se <= 1e-15:
        return math.inf if slope > 0 else 0.0
    return slope / se


class LogWindow:
    """Points in arrival order (``points``) with their sums about an anchor point (rebuilt from the points once as many
    have left as the window holds: rounding cannot pile up) and their values sorted."""

    def __init__(self) -> None:
        self.points: deque[tuple[int, float]] = deque()
        self._sorted: list[float] = []
        self._anchor = (0, 0.0)
        self._left = 0  # points removed since the sums were rebuilt
        self._sx = self._sxx = 0  # integer steps: exact
        self._sy = self._syy = self._sxy = 0.0

    def __len__(self) -> int:
        return len(self.points)

    def append(self, x: int, y: float) -> None:
        """Add the newest point."""
        self.points.append((x, y))
        bisect.insort(self._sorted, y)
        if len(self.points) == 1:
            self._rebuild()  # anchored at the first point
        else:
            self._add(x, y, 1)

    def popleft(self) -> tuple[int, float]:
        """Remove the oldest point."""
        x, y = self.points.popleft()
        del self._sorted[bisect.bisect_left(self._sorted, y)]
        self._left += 1
        if self._left >= len(self.points):
            self._rebuild()
        else:
            self._add(x, y, -1)
        return x, y

    def median(self) -> float:
        """The median of the values in the window."""
        return median_of_sorted(self._sorted)

    def fit(self) -> tuple[float, float]:
        """``fit_slope`` of the points from the running sums (to about 1e-9; an almost exact fit is refitted from the
        points, where the sums' rounding would decide its t statistic)."""
        n = len(self.points)
        sxx = (n * self._sxx - self._sx * self._sx) / n
        if sxx <= 0:
            return 0.0, 0.0
        sxy = self._sxy - self._sx * self._sy / n
        syy = self._syy - self._sy * self._sy / n
        slope = sxy / sxx
        residual = syy - slope * sxy
        if residual <= EXACT_FIT * abs(syy):  # a negative residual too: rounding
            return fit_slope(self.points)
        return slope, _t_stat(slope, residual, n, sxx)

    def _add(self, x: int, y: float, sign: int) -> None:
        dx, dy = x - self._anchor[0], y - self._anchor[1]
        self._sx += sign * dx
        self._sxx += sign * dx * dx
        self._sy += sign * dy
        self._syy += sign * dy * dy
        self._sxy += sign * dx * dy

    def _rebuild(self) -> None:
        self._anchor = self.points[0] if self.points else (0, 0.0)
        self._left = 0
        self._sx = self._sxx = 0
        self._sy = self._syy = self._sxy = 0.0
        for x, y in self.points:
            self._add(x, y, 1)


class MedianWindow:
    """The last ``maxlen`` values (``values``, a bounded deque) and the same values sorted (``ordered``): the median
    at O(log n) a value (finite values only: a NaN has no place in a sorted list)."""

    def __init__(self, maxlen: int) -> None:
        self.values: deque[float] = deque(maxlen=maxlen)
        self.ordered: list[float] = []

    def __len__(self) -> int:
        return len(self.values)

    def append(self, value: float) -> None:
        """Add the newest value (the oldest leaves a full window)."""
        if len(self.values) == self.values.maxlen:
            del self.ordered[bisect.bisect_left(self.ordered, self.values[0])]
        self.values.append(value)
        bisect.insort(self.ordered, value)

    def median(self) -> float:
        """The median of the values (``statistics.median``'s)."""
        return median_of_sorted(self.ordered)
