"""What every detector shares: the interface and reading one metric from a record."""

from __future__ import annotations

from typing import Protocol

from msmon.health.alert import Signal
from msmon.util.jsonfiles import JsonObject, JsonValue
from msmon.util.numbers import as_number


class Detector(Protocol):
    """Sees every record in step order (live and in replay alike) and may report a Signal."""

    @property
    def name(self) -> str: ...

    def observe(self, record: JsonObject) -> Signal | None: ...


def metric(record: JsonObject, key: str) -> float | None:
    """The record's ``key`` as a float (NaN/Inf kept), or None when absent or not a number."""
    value = record.get(key)
    return value if type(value) is float else as_number(value)



class Breaches:
    """Consecutive logs beyond a detector's limit: how many, and the step of the first (its onset)."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.count = 0
        self.since: int | None = None

    def update(self, beyond: bool, step: JsonValue) -> bool:
        """Count this log; True on the ``patience``-th consecutive breach only (once per excursion)."""
        if not beyond:
            self.count, self.since = 0, None
            return False
        self.count += 1
        if self.since is None and isinstance(step, int):
            self.since = step
        return self.count == self.patience
