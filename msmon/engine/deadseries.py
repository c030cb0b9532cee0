"""A simple dead-series check: a tracked metric exactly constant over many logged steps gets one warning."""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger("msmon")

#: Metrics that never stay exactly constant in a training that learns (a constant learning rate is normal).
WATCHED = ("loss", "grad_norm", "local_norm")
DEAD_AFTER = 20


class DeadSeriesWatch:
    """Counts identical consecutive values per metric; warns once per metric at ``after`` logged steps."""

    def __init__(self, metrics: set[str] | frozenset[str], after: int = DEAD_AFTER) -> None:
        self._names = [name for name in WATCHED if name in metrics]
        self._after = after
        self._last: dict[str, tuple[float, int, int]] = {}  # name -> (value, count, first step)
        self._warned: set[str] = set()

    def on_record(self, record: dict[str, Any]) -> None:
        for name in self._names:
            value = record.get(name)
            if not isinstance(value, float | int) or name in self._warned or not math.isfinite(value):
                continue
            last = self._last.get(name)
            if last is not None and last[0] == value:
                count, since = last[1] + 1, last[2]
            else:
                count, since = 1, record.get("step", 0)
            self._last[name] = (value, count, since)
            if count >= self._after:
                self._warned.add(name)
                logger.warning(
                    "msmon: '%s' has been exactly %r for %d logged steps (since step %s): this looks like a "
                    "dead or fake series (a diverged run, e.g. a far too high learning rate, or a metric "
                    "that is not really computed)",
                    name, value, count, since,
                )
