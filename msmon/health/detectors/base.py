"""What every detector shares: the interface and reading one metric from a record."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from msmon.health.alert import Signal


class Detector(Protocol):
    """Sees every record in step order (live and in replay alike) and may report a Signal."""

    name: ClassVar[str]

    def observe(self, record: dict[str, Any]) -> Signal | None: ...


def metric(record: dict[str, Any], key: str) -> float | None:
    """The record's ``key`` as a float (NaN/Inf kept), or None when absent or not a number."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)

